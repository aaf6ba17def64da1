"""`/metrics`, `/healthz` and `/readyz` over aiohttp.

- `/healthz`: the process is alive and its event loop answers (a wedged loop
  cannot answer, which is the failure a liveness probe exists for).
- `/readyz`: every kind's first list has synced, or the kind is known to be
  unreadable (not served, or forbidden); 503 with the kinds still waited on
  otherwise. A standby replica with warm caches is ready: it can take over.
- `/metrics`: the Prometheus text format of the annotator's own registry.

`Readiness` says whether the caches are synced (and, the moment they are,
ends the bulk load and starts the first full resync); `Probes` serves it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from aibom_edge.metrics import exposition
from annotator.cache import ClusterState
from annotator.metrics import Metrics

log = logging.getLogger("annotator")


class Readiness:
    def __init__(
        self,
        *,
        kinds_synced: Callable[[], bool],
        waiting: Callable[[], list[str]],
        state: ClusterState,
        metrics: Metrics,
        synced: asyncio.Event,
        leading: Callable[[], bool],
        on_synced: Callable[[], None],
    ) -> None:
        self._kinds_synced = kinds_synced  # every kind's first list settled (or not served)
        self._waiting = waiting  # the kinds still waited on
        self.state = state
        self.metrics = metrics
        self.synced = synced
        self._leading = leading
        self._on_synced = on_synced  # the first full resync

    def check(self) -> None:
        """Set `synced` once every kind's first list has settled."""
        if self.synced.is_set():
            return
        if not self._kinds_synced():
            return
        self.state.bulk = False
        self.synced.set()
        self.metrics.ready.set(1)
        log.info(
            "caches synced",
            extra={"objects": len(self.state.graph), "configmaps": len(self.state.configmaps)},
        )
        self._on_synced()

    def report(self) -> tuple[bool, dict[str, Any]]:
        """What `/readyz` answers: synced, and the detail."""
        return self.synced.is_set(), {
            "waiting": self._waiting(),
            "leader": self._leading(),
            "unavailable": {
                str(k): v.value for k, v in sorted(self.state.graph.unavailable.items())
            },
        }


class Probes:
    def __init__(
        self,
        *,
        metrics: Metrics,
        readiness: Callable[[], tuple[bool, dict[str, Any]]],
        host: str,
        metrics_port: int,
        health_port: int,
    ) -> None:
        self.metrics = metrics
        self.readiness = readiness
        self.host = host
        self.metrics_port = metrics_port
        self.health_port = health_port
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def _metrics(self, request: web.Request) -> web.Response:
        return exposition(self.metrics.registry)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        ready, detail = self.readiness()
        return web.Response(
            status=200 if ready else 503,
            text=json.dumps({"ready": ready, **detail}, sort_keys=True) + "\n",
            content_type="application/json",
        )

    def _app(self, *, metrics: bool, health: bool) -> web.Application:
        app = web.Application()
        if metrics:
            app.router.add_get("/metrics", self._metrics)
        if health:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self) -> None:
        same = self.metrics_port == self.health_port
        plan = (
            [("metrics+health", self.metrics_port, True, True)]
            if same
            else [
                ("metrics", self.metrics_port, True, False),
                ("health", self.health_port, False, True),
            ]
        )
        for name, port, metrics, health in plan:
            runner = web.AppRunner(self._app(metrics=metrics, health=health), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, self.host, port)
            await site.start()
            self._runners.append(runner)
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            bound = sockets[0].getsockname()[1] if sockets else port
            for part in name.split("+"):
                self.ports[part] = int(bound)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
