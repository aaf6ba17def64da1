"""Run the mutating admission webhook: HTTPS, admission.k8s.io/v1 AdmissionReview.

On CREATE and UPDATE of the workloads, their intermediates, ReplicaSets and
Pods, it walks the object's UID-checked controller ownerReferences with live
GETs and answers with a JSONPatch stamping aibom.dev/root, root-uid, rollup
and rollup-reason. It never denies: failures become `rollup: unresolved`
with a reason, a metric and a log line.

Endpoints: POST /mutate, GET /healthz, /readyz, /metrics (all on the one
HTTPS port). SIGTERM or SIGINT: stop accepting, finish reviews in flight
(up to --shutdown-grace seconds), exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from aibom_edge import logs, options
from aibom_edge.heap import pin_malloc_thresholds
from webhook.auth import AuthError, CallerAuth
from webhook.flags import Settings, configure_parser, settings_of
from webhook.metrics import Metrics
from webhook.ownerwatch import OwnerWatch
from webhook.provenance import ApiReviewer
from webhook.resolver import MetadataOwners
from webhook.server import Server
from webhook.tls import CertError, CertReloader

# What the command line loads from here (aibom_rollup.cli): the flags, the run.
__all__ = ["configure_parser", "run"]

log = logging.getLogger("webhook")


def run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    logs.configure(level=settings.log_level, fmt=settings.log_format)
    if pin_malloc_thresholds():
        log.debug("malloc thresholds pinned: large request bodies are unmapped when freed")
    try:
        reloader = CertReloader(
            settings.cert_file,
            settings.key_file,
            interval=settings.cert_check_interval,
            client_ca_file=settings.client_ca_file,
        )
        auth = CallerAuth.from_files(
            client_ca_file=settings.client_ca_file, token_file=settings.client_token_file
        )
    except (CertError, AuthError) as exc:
        raise options.UsageError(str(exc)) from None
    return asyncio.run(_main(settings, reloader=reloader, auth=auth))


async def _main(
    settings: Settings, *, reloader: CertReloader, auth: CallerAuth | None = None
) -> int:
    from aibom_edge.kube import Kube, KubeError

    async with contextlib.AsyncExitStack() as stack:
        try:
            kube = await stack.enter_async_context(
                Kube.from_kubeconfig(settings.kubeconfig, context=settings.context)
            )
        except KubeError as exc:
            raise options.UsageError(str(exc)) from None
        metrics = Metrics()
        owner_watch = None
        if settings.owner_watch:
            owner_watch = OwnerWatch(
                kube,
                settings.registry,
                settings.keys,
                watch_timeout=settings.owner_watch_timeout,
                sync_timeout=settings.owner_watch_sync_timeout,
                on_restart=lambda gk, why: metrics.owner_watch_restarts.labels(str(gk), why).inc(),
            )
        server = Server(
            settings,
            # Owners' metadata only: the walk reads nothing else (the owner index).
            source=MetadataOwners(kube),
            reloader=reloader,
            auth=auth,
            reviewer=ApiReviewer(kube),
            template_owners=kube,
            owner_watch=owner_watch,
            metrics=metrics,
        )
        if settings.provenance_key is None:
            log.warning(
                "no --provenance-key: controller edges are checked and stamped, but no "
                "edge-proof is written (the annotator then cannot tell proven edges)"
            )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, server.request_stop, sig.name)
        await server.start()

        async def api_probe() -> bool:
            try:
                resp = await kube.request("GET", "/version", timeout=5)
            except (KubeError, TimeoutError) as exc:
                server.readiness.detail["api"] = str(exc) or type(exc).__name__
                return False
            server.readiness.detail["api"] = f"GET /version: {resp.status}"
            return resp.ok

        await server.serve_until_stopped(api_probe)
    return 0
