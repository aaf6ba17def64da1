"""The listening webhook: the app on its TLS site, certificate and token watches,
the owner index, readiness and a graceful stop (`Server`, started by webhook.main).

It is built from `Settings` (webhook.flags) and what it talks to: where
owners come from, who reviews controller edges, the serving certificate and
the callers' credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from webhook.app import Admitter, Readiness, make_app
from webhook.auth import CallerAuth
from webhook.flags import Settings
from webhook.guard import ConnectionGuard, GuardedSite
from webhook.metrics import Metrics
from webhook.ownerwatch import KindWatch, OwnerWatch
from webhook.provenance import AccessReviewer, EdgeChecker, Provenance, SarCache, TemplateOwners
from webhook.resolver import OwnerCache, OwnerSource, Resolver
from webhook.tls import CertReloader

log = logging.getLogger("webhook")


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
