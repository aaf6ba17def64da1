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
from collections.abc import Awaitable, Callable

from aiohttp import web

from aibom_edge import logs, options
from aibom_edge.heap import pin_malloc_thresholds
from webhook.app import Admitter, Readiness, make_app
from webhook.auth import AuthError, CallerAuth
from webhook.flags import Settings, configure_parser, settings_of
from webhook.guard import ConnectionGuard, GuardedSite
from webhook.metrics import Metrics
from webhook.ownerwatch import KindWatch, OwnerWatch
from webhook.provenance import (
    AccessReviewer,
    ApiReviewer,
    EdgeChecker,
    Provenance,
    SarCache,
    TemplateOwners,
)
from webhook.resolver import MetadataOwners, OwnerCache, OwnerSource, Resolver
from webhook.tls import CertError, CertReloader

# What the command line loads from here (aibom_rollup.cli): the flags, the run.
__all__ = ["Server", "configure_parser", "run"]

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


class Server:
    """The listening webhook: app, TLS site, certificate watch, readiness, stop."""

    def __init__(
        self,
        settings: Settings,
        *,
        source: OwnerSource,
        reloader: CertReloader,
        auth: CallerAuth | None = None,
        reviewer: AccessReviewer | None = None,
        template_owners: TemplateOwners | None = None,
        owner_watch: OwnerWatch | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """`settings`: what the flags say (webhook.flags). The rest is what the webhook
        talks to: owners (`source`, `owner_watch`), verdicts and templates for the
        provenance check (none: every controller edge is taken as written, for tests
        and benchmarks of the walk alone), the certificate and the callers' credentials."""
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.owner_watch = owner_watch
        self.guard = ConnectionGuard(
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            max_connections=settings.max_connections,
        )
        self.guard.on_cut = lambda why: self.metrics.connections_cut.labels(why).inc()
        # The API server presents its client certificate on every connection.
        self.guard.certified_callers = auth is not None and auth.require_client_cert
        self.reloader = reloader
        self.readiness = Readiness(cert_loaded=True, owners_settled=owner_watch is None)
        self.resolver = Resolver(
            source,
            registry=settings.registry,
            max_depth=settings.max_depth,
            deadline=settings.walk_deadline,
            cache=OwnerCache(ttl=settings.owner_cache_ttl, size=settings.owner_cache_size),
            index=owner_watch,
        )
        # No reviewer: every controller edge is taken as written (tests and
        # benchmarks of the walk alone); the command always has one.
        self.provenance: Provenance | None = None
        if reviewer is not None:
            self.provenance = Provenance(
                EdgeChecker(
                    reviewer,
                    cache=SarCache(ttl=settings.sar_cache_ttl, size=settings.sar_cache_size),
                ),
                owners=template_owners,
                key=settings.provenance_key,
                keys=settings.keys,
                check_budget=settings.walk_deadline / 2,
            )
        admitter = Admitter(
            resolver=self.resolver,
            registry=settings.registry,
            keys=settings.keys,
            metrics=self.metrics,
            provenance=self.provenance,
        )
        self.app = make_app(
            admitter=admitter,
            metrics=self.metrics,
            readiness=self.readiness,
            guard=self.guard,
            auth=auth if auth is not None and auth.enabled else None,
        )
        self.auth = auth
        if auth is not None and auth.token_file is not None:
            auth.token_file.on_reload = lambda ok: self.metrics.token_reloads.labels(
                "ok" if ok else "failed"
            ).inc()
        self._host, self._port = settings.host, settings.port
        self._grace = settings.shutdown_grace
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.port: int | None = None

        def counted(ok: bool) -> None:
            self.metrics.cert_reloads.labels("ok" if ok else "failed").inc()
            if ok and reloader.not_after is not None:
                self.metrics.cert_expiry.set(reloader.not_after)

        reloader.on_reload = counted
        counted(True)

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=self._grace
        )
        await self._runner.setup()
        site = GuardedSite(
            self._runner,
            self._host,
            self._port,
            ssl_context=self.reloader.context,
            guard=self.guard,
        )
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._port
        self._tasks.append(asyncio.create_task(self.reloader.watch(), name="cert-watch"))
        if self.auth is not None and self.auth.token_file is not None:
            # The token file rotates like the certificate: looked at as often.
            watch = self.auth.token_file.watch(self.reloader.interval)
            self._tasks.append(asyncio.create_task(watch, name="token-watch"))
        if self.owner_watch is not None:
            self._tasks.append(asyncio.create_task(self._owners(), name="owner-watch"))
        log.info(
            "webhook listening",
            extra={
                "host": self._host,
                "port": self.port,
                "cert_file": self.reloader.cert_file,
                "client_cert_required": self.reloader.client_ca_file is not None,
            },
        )

    async def _owners(self) -> None:
        """Run the owner index; ready once it settled (webhook.ownerwatch)."""
        watch = self.owner_watch
        assert watch is not None
        m = self.metrics
        m.owner_index_objects.set_function(lambda: len(watch.store))
        for gk, kind_watch in watch.watches.items():
            m.owner_watch_synced.labels(str(gk)).set_function(_trusted(kind_watch))
        runner = asyncio.create_task(watch.run(), name="owner-watches")
        try:
            await watch.wait_settled()
            self.readiness.owners_settled = True
            self.readiness.detail["owner-index"] = watch.summary()
            self.metrics.ready.set(1 if self.readiness.ready else 0)
            log.info(
                "owner index settled",
                extra={"kinds": watch.summary(), "owners": len(watch.store)},
            )
            await runner
        except Exception:
            # A bug in the index must not take admission down: its kinds stop
            # being trusted (after the grace) and GETs answer.
            m.errors.labels("owner-watch").inc()
            log.exception("owner index stopped; owners are fetched with GETs")
            self.readiness.owners_settled = True
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner

    def request_stop(self, why: str = "stop") -> None:
        if not self._stop.is_set():
            log.info("stopping: finishing reviews in flight", extra={"signal": why})
        self.readiness.shutting_down = True
        self.metrics.ready.set(0)
        self._stop.set()

    async def serve_until_stopped(
        self, api_probe: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        """Probe the API until it answers (then ready), serve until `request_stop`."""
        if api_probe is not None:
            self._tasks.append(asyncio.create_task(self._probe(api_probe), name="api-probe"))
        else:
            self._mark_api_ok()
        await self._stop.wait()
        await self.stop()

    def _mark_api_ok(self) -> None:
        self.readiness.api_ok = True
        self.metrics.ready.set(1 if self.readiness.ready else 0)

    async def _probe(self, api_probe: Callable[[], Awaitable[bool]]) -> None:
        delay = 0.5
        while not await api_probe():
            log.warning(
                "API server not usable yet; not ready",
                extra={"detail": self.readiness.detail.get("api")},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        self._mark_api_ok()
        log.info("ready", extra={"api": self.readiness.detail.get("api")})

    async def stop(self) -> None:
        """Stop listening, let reviews in flight finish (up to the grace), close."""
        self.readiness.shutting_down = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        log.info("stopped")


def _trusted(watch: KindWatch) -> Callable[[], float]:
    return lambda: 1.0 if watch.trusted else 0.0
