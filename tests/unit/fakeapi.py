"""A scripted HTTP endpoint on loopback, for the client's side of list/watch.

Not a mock API server: it answers a fixed script (status, headers, body, or a
watch stream that may hang), so a unit test can put a 429 with Retry-After,
a 503, an expired continue token or a silent stream in front of the real
`aibom_edge.kube.Kube` and the real informer. The real API server's
behaviour is tested in tests/integration/.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from aibom_edge.kube import Credentials, Kube


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # watch: sent, then...
    hang: bool = False  # ...the stream stays open and silent (a half-open connection)


class ScriptedApi:
    def __init__(self, lists: list[Reply], watches: list[Reply]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_queries: list[dict[str, str]] = []
        self.watch_queries: list[dict[str, str]] = []
        self.exhausted = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if query.pop("watch", None):
            self.watch_queries.append(query)
            script = self.watches
        else:
            self.list_queries.append(query)
            script = self.lists
        if not script:
            self.exhausted.set()
            await asyncio.Event().wait()
        reply = script.pop(0)
        if reply.status != 200 or not (reply.events or reply.hang):
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for event in reply.events:
            await resp.write(json.dumps(event).encode() + b"\n")
        if reply.hang:
            await asyncio.Event().wait()
        return resp

    async def __aenter__(self) -> ScriptedApi:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kube(self, **kwargs: Any) -> Kube:
        return Kube(Credentials(server=self.url, verify=False), **kwargs)
