"""Run the annotator: keep one CycloneDX AIBOM ConfigMap per root in every opted-in namespace.

It lists and watches the tracked kinds, the walk-only intermediates,
ReplicaSets, Pods, Namespaces and its own ConfigMaps, keeps the ownership
graph in memory, and for every root (a tracked workload with no tracked
owner) in a namespace labelled for it writes ConfigMap
aibom-<kind>-<name> (key aibom.json; gzip-compressed into aibom.json.gz
when over 1 MiB) with server-side apply. Documents of workloads rolled up
into another's are deleted once the owner's document that lists them is
written. Stale aibom.dev/ stamp annotations are repaired. Only the replica
holding the Lease writes; the others keep warm caches and take over.

Endpoints: /metrics on --metrics-port; /healthz and /readyz on
--health-port. Exit codes: 0 after a graceful stop (SIGTERM/SIGINT), 1 on
a runtime failure, 2 on bad flags or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from aibom_edge import logs, options
from aibom_edge.kube import Kube, KubeError
from annotator.controller import Controller
from annotator.flags import Options, configure_parser, options_of
from annotator.metrics import Metrics
from annotator.probes import Probes

__all__ = ["configure_parser", "run"]  # what the command line uses (aibom_rollup.cli)

log = logging.getLogger("annotator")


def run(args: argparse.Namespace) -> int:
    opts = options_of(args)
    logs.configure(level=opts.log_level, fmt=opts.log_format)
    try:
        return asyncio.run(_main(opts))
    except KubeError as exc:
        raise options.UsageError(str(exc)) from None


async def _main(opts: Options) -> int:
    settings, election = opts.settings, opts.election
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = Metrics()
    async with Kube.from_kubeconfig(
        opts.kubeconfig, context=opts.context, max_retries=opts.api_retries
    ) as kube:
        controller = Controller(kube, settings, election=election, metrics=metrics)
        probes = Probes(
            metrics=metrics,
            readiness=controller.readiness.report,
            host=opts.bind_address,
            metrics_port=opts.metrics_port,
            health_port=opts.health_port,
        )
        try:
            await probes.start()
        except OSError as exc:
            log.error("cannot serve the metrics/health endpoints", extra={"error": str(exc)})
            return 1
        log.info(
            "annotator starting",
            extra={
                "version": settings.tool_version,
                "server": kube.server,
                "identity": election.identity if election else None,
                "lease": f"{election.namespace}/{election.name}" if election else None,
                "namespace_label": "=".join(settings.namespace_label),
                "ports": probes.ports,
            },
        )
        try:
            await controller.start()
            await stop.wait()
            log.info("stopping")
        finally:
            with contextlib.suppress(Exception):
                await controller.stop()
            await probes.stop()
    log.info("stopped")
    return 0
