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
from pydantic import BaseModel, ConfigDict, Field

from aibom_core.kinds import KindRegistry
from aibom_core.stamp import Keys
from aibom_core.walk import MAX_DEPTH_LIMIT
from aibom_edge import logs, options
from aibom_edge.heap import pin_malloc_thresholds
from aibom_edge.reflector import MAX_WATCH_TIMEOUT
from webhook.app import Admitter, Readiness, make_app
from webhook.auth import AuthError, CallerAuth
from webhook.guard import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    ConnectionGuard,
    GuardedSite,
)
from webhook.metrics import Metrics
from webhook.ownerwatch import (
    DEFAULT_SYNC_TIMEOUT,
    DEFAULT_WATCH_TIMEOUT,
    KindWatch,
    OwnerWatch,
)
from webhook.provenance import (
    DEFAULT_SAR_SIZE,
    DEFAULT_SAR_TTL,
    AccessReviewer,
    ApiReviewer,
    EdgeChecker,
    Provenance,
    SarCache,
    TemplateOwners,
)
from webhook.resolver import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_CACHE_TTL,
    DEFAULT_DEADLINE,
    MetadataOwners,
    OwnerCache,
    OwnerSource,
    Resolver,
)
from webhook.tls import DEFAULT_CHECK_INTERVAL, CertError, CertReloader

log = logging.getLogger("webhook")


def configure_parser(p: argparse.ArgumentParser) -> None:
    tls = p.add_argument_group("serving")
    tls.add_argument("--cert-file", required=True, metavar="PEM", help="serving certificate")
    tls.add_argument("--key-file", required=True, metavar="PEM", help="its private key")
    tls.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    tls.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    tls.add_argument(
        "--client-ca-file",
        metavar="PEM",
        help="authenticate the caller: /mutate answers only TLS clients presenting a "
        "certificate signed by this CA (the API server's, from its AdmissionConfiguration "
        "kubeconfig); probes and /metrics stay open",
    )
    tls.add_argument(
        "--client-token-file",
        metavar="FILE",
        help="authenticate the caller: /mutate answers only requests with "
        "`Authorization: Bearer <a token of this file>` (the API server's kubeconfig token; one "
        "per line, any accepted); re-read when it changes, every --cert-check-interval",
    )
    options.add_seconds(
        tls,
        "--cert-check-interval",
        DEFAULT_CHECK_INTERVAL,
        "how often to look for rotated certificate (and client token) files, used without a "
        "restart",
    )
    options.add_seconds(
        tls, "--shutdown-grace", 20.0, "on SIGTERM, how long reviews in flight may take to finish"
    )
    limits = p.add_argument_group("connection limits (slow or too many clients)")
    options.add_seconds(
        limits,
        "--header-timeout",
        DEFAULT_HEADER_TIMEOUT,
        "the TLS handshake and each request's head must arrive within this, or the connection is "
        "closed",
    )
    options.add_seconds(
        limits,
        "--body-timeout",
        DEFAULT_BODY_TIMEOUT,
        "a request body must arrive within this, or the answer is 408 and the connection is closed",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; a new one evicts one waiting for request data, the "
        "API server's (authenticated by --client-ca-file or --client-token-file) last "
        f"(default {DEFAULT_MAX_CONNECTIONS})",
    )
    options.add_cluster_options(p.add_argument_group("Kubernetes API"))
    walk = p.add_argument_group("walk")
    options.add_seconds(
        walk,
        "--walk-deadline",
        DEFAULT_DEADLINE,
        "the whole owner walk's budget; keep it below the webhook configuration's timeoutSeconds "
        "(hops still waiting then stamp `unresolved` / Timeout)",
    )
    options.add_seconds(
        walk,
        "--owner-cache-ttl",
        DEFAULT_CACHE_TTL,
        "how long a fetched owner may answer later walks (keyed by UID; 0 disables)",
    )
    walk.add_argument(
        "--owner-watch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="list and watch the controller-owning kinds of the registry (metadata only, "
        "slimmed; every kind but Pod) and answer owner hops from that index, UID-checked, "
        "before the TTL cache and GETs; /readyz waits until it has synced. Needs "
        "list/watch on those kinds (manifests/webhook/rbac.yaml). Default: on",
    )
    options.add_seconds(
        walk,
        "--owner-watch-timeout",
        DEFAULT_WATCH_TIMEOUT,
        "the API server ends each owner watch after this long and it is resumed from where it was",
        whole=True,
    )
    options.add_seconds(
        walk,
        "--owner-watch-sync-timeout",
        DEFAULT_SYNC_TIMEOUT,
        "readiness waits at most this long for a kind that fails to list; its owners are fetched "
        "with GETs meanwhile",
    )
    walk.add_argument(
        "--owner-cache-size",
        type=int,
        default=DEFAULT_CACHE_SIZE,
        metavar="N",
        help=f"owners kept at most, least recently used go first (default {DEFAULT_CACHE_SIZE})",
    )
    prov = p.add_argument_group("provenance (who may set a controller reference)")
    options.add_provenance_key_option(
        prov,
        help_text="key of the aibom.dev/edge-proof annotation (base64 text of 32 random bytes, "
        "as `aibom-rollup certs` writes provenance.key; the annotator needs the same "
        "file). Without it edges are still checked and stamped, but no proof is written",
    )
    options.add_seconds(
        prov,
        "--sar-cache-ttl",
        DEFAULT_SAR_TTL,
        "how long a SubjectAccessReview verdict (per identity and owner) is reused (0 disables)",
    )
    prov.add_argument(
        "--sar-cache-size",
        type=int,
        default=DEFAULT_SAR_SIZE,
        metavar="N",
        help=f"verdicts kept at most (default {DEFAULT_SAR_SIZE})",
    )
    options.add_core_options(p)
    options.add_log_options(
        p.add_argument_group("logging"),
        formats=("json", "logfmt"),
        level_help="default info: one line per unresolved (kind, reason), debug: one per review",
    )


class Limits(BaseModel):
    """The bounds of the webhook's numeric flags (field `walk_deadline` is `--walk-deadline`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    port: int = Field(gt=0, lt=65536)
    walk_deadline: float = Field(gt=0, le=30)
    owner_cache_ttl: float = Field(ge=0)
    owner_cache_size: int = Field(ge=1)
    cert_check_interval: float = Field(gt=0)
    shutdown_grace: float = Field(ge=0)
    max_depth: int = Field(ge=1, le=MAX_DEPTH_LIMIT)
    header_timeout: float = Field(gt=0, le=60)
    body_timeout: float = Field(gt=0, le=60)
    max_connections: int = Field(ge=1)
    sar_cache_ttl: float = Field(ge=0)
    sar_cache_size: int = Field(ge=1)
    owner_watch_timeout: int = Field(ge=1, le=MAX_WATCH_TIMEOUT)
    owner_watch_sync_timeout: float = Field(gt=0, le=600)


def run(args: argparse.Namespace) -> int:
    options.flags_in_bounds(Limits, args)
    registry = options.registry_of(args)
    keys = options.keys_of(args)
    key = options.provenance_key_of(args)
    logs.configure(level=args.log_level, fmt=args.log_format)
    if pin_malloc_thresholds():
        log.debug("malloc thresholds pinned: large request bodies are unmapped when freed")
    try:
        reloader = CertReloader(
            args.cert_file,
            args.key_file,
            interval=args.cert_check_interval,
            client_ca_file=args.client_ca_file,
        )
        auth = CallerAuth.from_files(
            client_ca_file=args.client_ca_file, token_file=args.client_token_file
        )
    except (CertError, AuthError) as exc:
        raise options.UsageError(str(exc)) from None
    return asyncio.run(
        _main(
            args,
            registry=registry,
            keys=keys,
            reloader=reloader,
            auth=auth,
            key=key,
        )
    )


async def _main(
    args: argparse.Namespace,
    *,
    registry: KindRegistry,
    keys: Keys,
    reloader: CertReloader,
    key: bytes | None,
    auth: CallerAuth | None = None,
) -> int:
    from aibom_edge.kube import Kube, KubeError

    async with contextlib.AsyncExitStack() as stack:
        try:
            kube = await stack.enter_async_context(
                Kube.from_kubeconfig(args.kubeconfig, context=args.context)
            )
        except KubeError as exc:
            raise options.UsageError(str(exc)) from None
        metrics = Metrics()
        owner_watch = None
        if args.owner_watch:
            owner_watch = OwnerWatch(
                kube,
                registry,
                keys,
                watch_timeout=args.owner_watch_timeout,
                sync_timeout=args.owner_watch_sync_timeout,
                on_restart=lambda gk, why: metrics.owner_watch_restarts.labels(str(gk), why).inc(),
            )
        server = Server(
            # Owners' metadata only: the walk reads nothing else (the owner index).
            source=MetadataOwners(kube),
            metrics=metrics,
            owner_watch=owner_watch,
            registry=registry,
            keys=keys,
            reloader=reloader,
            host=args.host,
            port=args.port,
            walk_deadline=args.walk_deadline,
            cache=OwnerCache(ttl=args.owner_cache_ttl, size=args.owner_cache_size),
            max_depth=args.max_depth,
            shutdown_grace=args.shutdown_grace,
            guard=ConnectionGuard(
                header_timeout=args.header_timeout,
                body_timeout=args.body_timeout,
                max_connections=args.max_connections,
            ),
            auth=auth,
            provenance_source=ApiReviewer(kube),
            template_owners=kube,
            provenance_key=key,
            sar_cache=SarCache(ttl=args.sar_cache_ttl, size=args.sar_cache_size),
        )
        if key is None:
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
        *,
        source: OwnerSource,
        registry: KindRegistry,
        keys: Keys,
        reloader: CertReloader,
        host: str,
        port: int,
        walk_deadline: float = DEFAULT_DEADLINE,
        cache: OwnerCache | None = None,
        max_depth: int = 6,
        shutdown_grace: float = 20.0,
        metrics: Metrics | None = None,
        guard: ConnectionGuard | None = None,
        auth: CallerAuth | None = None,
        provenance_source: AccessReviewer | None = None,
        template_owners: TemplateOwners | None = None,
        provenance_key: bytes | None = None,
        sar_cache: SarCache | None = None,
        owner_watch: OwnerWatch | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.owner_watch = owner_watch
        self.guard = guard if guard is not None else ConnectionGuard()
        self.guard.on_cut = lambda why: self.metrics.connections_cut.labels(why).inc()
        # The API server presents its client certificate on every connection.
        self.guard.certified_callers = auth is not None and auth.require_client_cert
        self.reloader = reloader
        self.readiness = Readiness(cert_loaded=True, owners_settled=owner_watch is None)
        self.resolver = Resolver(
            source,
            registry=registry,
            max_depth=max_depth,
            deadline=walk_deadline,
            cache=cache,
            index=owner_watch,
        )
        # No provenance source: every controller edge is taken as written (tests
        # and benchmarks of the walk alone); the command always has one.
        self.provenance: Provenance | None = None
        if provenance_source is not None:
            self.provenance = Provenance(
                EdgeChecker(provenance_source, cache=sar_cache),
                owners=template_owners,
                key=provenance_key,
                keys=keys,
                check_budget=walk_deadline / 2,
            )
        admitter = Admitter(
            resolver=self.resolver,
            registry=registry,
            keys=keys,
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
        self._host, self._port = host, port
        self._grace = shutdown_grace
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
