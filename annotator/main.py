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
import os
import signal
import socket

from aibom_edge import logs
from aibom_edge.kube import Kube, KubeError
from aibom_edge.options import (
    UsageError,
    add_cluster_options,
    add_core_options,
    add_log_options,
    keys_of,
    positive_float,
    positive_int,
    provenance_key_of,
    registry_of,
    tool_version,
)
from annotator.cache import DEFAULT_OPT_IN_LABEL, parse_label
from annotator.configmap import MAX_DATA_BYTES
from annotator.controller import STAMP_MODES, Controller, Settings
from annotator.lease import ElectionConfig
from annotator.metrics import Metrics
from annotator.probes import Probes
from annotator.signing import configure_parser as configure_signing
from annotator.signing import signing_of

log = logging.getLogger("annotator")


def _default_identity() -> str:
    # In a Deployment, POD_NAME comes from the downward API (manifests/annotator).
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    pos_int, pos_float = positive_int, positive_float

    api = p.add_argument_group("cluster")
    add_cluster_options(api)
    api.add_argument(
        "--namespace-label",
        default=f"{DEFAULT_OPT_IN_LABEL}=true",
        metavar="KEY=VALUE",
        help="namespaces carrying this label get documents (default: %(default)s)",
    )

    lead = p.add_argument_group("leader election (coordination.k8s.io/v1 Lease)")
    lead.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader among replicas; only the leader writes (default: on)",
    )
    lead.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "aibom-system"),
        metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE or %(default)s)",
    )
    lead.add_argument(
        "--lease-name",
        default="aibom-rollup-annotator",
        metavar="NAME",
        help="name of the Lease (default: %(default)s)",
    )
    lead.add_argument(
        "--identity",
        default=None,
        metavar="ID",
        help="this replica's holder identity (default: $POD_NAME, else host-pid)",
    )
    lead.add_argument(
        "--lease-duration",
        type=pos_float,
        default=15.0,
        metavar="S",
        help="seconds a standby waits on a silent leader (default: 15)",
    )
    lead.add_argument(
        "--renew-deadline",
        type=pos_float,
        default=10.0,
        metavar="S",
        help="the leader steps down after failing to renew this long (default: 10)",
    )
    lead.add_argument(
        "--retry-period",
        type=pos_float,
        default=2.0,
        metavar="S",
        help="seconds between Lease reads/renewals (default: 2)",
    )

    work = p.add_argument_group("work")
    work.add_argument(
        "--workers",
        type=pos_int,
        default=8,
        metavar="N",
        help="concurrent document reconciles (default: 8)",
    )
    work.add_argument(
        "--write-qps",
        type=pos_float,
        default=200.0,
        metavar="QPS",
        help="API writes per second, all kinds together (default: 200)",
    )
    work.add_argument(
        "--write-burst",
        type=pos_int,
        default=400,
        metavar="N",
        help="burst of --write-qps (default: 400)",
    )
    work.add_argument(
        "--stamp-repair",
        choices=STAMP_MODES,
        default="opted-in",
        help="where stale aibom.dev/ stamps are patched: opted-in namespaces, all, or off "
        "(default: %(default)s)",
    )
    work.add_argument(
        "--stamp-qps",
        type=pos_float,
        default=10.0,
        metavar="QPS",
        help="stamp repair patches per second (default: 10)",
    )
    work.add_argument(
        "--stamp-burst",
        type=pos_int,
        default=50,
        metavar="N",
        help="burst of --stamp-qps (default: 50)",
    )
    work.add_argument(
        "--stamp-settle",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds from an object's change to the judging of its stamp, so the "
        "cache can catch up with what the webhook saw live (default: 2)",
    )
    work.add_argument(
        "--rediscovery-interval",
        type=pos_float,
        default=30.0,
        metavar="S",
        help="seconds between API discovery runs: CRDs installed later are "
        "watched without a restart (default: 30)",
    )
    work.add_argument(
        "--sync-timeout",
        type=pos_float,
        default=30.0,
        metavar="S",
        help="a kind whose first list still fails after this long stops holding up the "
        "others: walks through it end unresolved (Timeout) until it lists (default: 30)",
    )
    work.add_argument(
        "--page-size",
        type=pos_int,
        default=500,
        metavar="N",
        help="objects per LIST page (default: 500)",
    )
    work.add_argument(
        "--max-document-bytes",
        type=pos_int,
        default=MAX_DATA_BYTES,
        metavar="N",
        help="ConfigMap data budget: larger documents are gzip-compressed, and cut (with "
        "aibom.truncated properties and an Event) if even that does not fit (default: "
        "%(default)s, the API server's 1 MiB limit; lower it to test or to leave room)",
    )
    work.add_argument(
        "--watch-timeout",
        type=pos_int,
        default=300,
        metavar="S",
        help="server-side watch timeout before a resume (default: 300)",
    )
    work.add_argument(
        "--watch-idle-timeout",
        type=pos_float,
        default=90.0,
        metavar="S",
        help="a watch that sends nothing (no event, no bookmark) for this long is taken "
        "for a dead connection and restarted from its last resourceVersion; the API "
        "server sends a bookmark about once a minute (default: 90)",
    )
    work.add_argument(
        "--api-retries",
        type=int,
        default=10,
        metavar="N",
        help="times a request answered 429 (or 5xx) with Retry-After is retried after "
        "the time the server asked for, within the request's timeout (default: 10, as "
        "client-go; 0: never)",
    )

    ops = p.add_argument_group("operations")
    ops.add_argument(
        "--bind-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="address of the metrics and health servers (default: %(default)s)",
    )
    ops.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="port of /metrics (default: 8080; 0 picks a free one)",
    )
    ops.add_argument(
        "--health-port",
        type=int,
        default=8081,
        metavar="PORT",
        help="port of /healthz and /readyz (default: 8081; may equal --metrics-port)",
    )
    add_log_options(ops)
    prov = p.add_argument_group("provenance (which controller references count)")
    prov.add_argument(
        "--provenance-key",
        metavar="FILE",
        help="the webhook's edge-proof key (the same file; base64 text as `aibom-rollup "
        "certs` writes provenance.key). Outside guarded namespaces only edges whose "
        "aibom.dev/edge-proof verifies with it are followed; without it, none are",
    )
    prov.add_argument(
        "--trust-owner-references",
        action="store_true",
        help="follow every controller reference as written, proven or not (the behaviour "
        "before provenance; only for clusters that enforce the rule another way). "
        "Documents then carry no aibom.provenance.guarded property (nothing was checked)",
    )
    configure_signing(p)
    add_core_options(p)


def settings_of(args: argparse.Namespace) -> tuple[Settings, ElectionConfig | None]:
    try:
        label = parse_label(args.namespace_label)
    except ValueError as exc:
        raise UsageError(f"--namespace-label: {exc}") from None
    if not 1 <= int(args.max_depth) <= 64:
        raise UsageError(f"--max-depth must be between 1 and 64, got {args.max_depth}")
    try:
        signing = signing_of(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    settings = Settings(
        registry=registry_of(args),
        tool_version=tool_version(),
        keys=keys_of(args),
        namespace_label=label,
        max_depth=int(args.max_depth),
        workers=args.workers,
        page_size=args.page_size,
        watch_timeout=args.watch_timeout,
        rediscovery_interval=args.rediscovery_interval,
        stamp_mode=args.stamp_repair,
        stamp_settle=max(0.0, args.stamp_settle),
        write_qps=args.write_qps,
        write_burst=args.write_burst,
        stamp_qps=args.stamp_qps,
        stamp_burst=args.stamp_burst,
        size_limit=args.max_document_bytes,
        sync_timeout=args.sync_timeout,
        watch_idle_timeout=args.watch_idle_timeout,
        provenance_key=provenance_key_of(args),
        trust_owner_references=args.trust_owner_references,
        signing=signing,
    )
    if args.api_retries < 0:
        raise UsageError(f"--api-retries must be >= 0, got {args.api_retries}")
    election = None
    if args.leader_elect:
        try:
            election = ElectionConfig(
                identity=args.identity or _default_identity(),
                namespace=args.lease_namespace,
                name=args.lease_name,
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return settings, election


def run(args: argparse.Namespace) -> int:
    settings, election = settings_of(args)
    logs.configure(level=args.log_level, fmt=args.log_format)
    try:
        return asyncio.run(_main(args, settings, election))
    except KubeError as exc:
        raise UsageError(str(exc)) from None


async def _main(
    args: argparse.Namespace, settings: Settings, election: ElectionConfig | None
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = Metrics()
    async with Kube.from_kubeconfig(
        args.kubeconfig, context=args.context, max_retries=args.api_retries
    ) as kube:
        controller = Controller(kube, settings, election=election, metrics=metrics)
        probes = Probes(
            metrics=metrics,
            readiness=controller.readiness,
            host=args.bind_address,
            metrics_port=args.metrics_port,
            health_port=args.health_port,
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
