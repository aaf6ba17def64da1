"""A loopback TLS proxy in front of the REAL registry (components/registry.py), for faults.

The annotator is pointed at the proxy (`https://127.0.0.1:PORT`, a serving
certificate of the cluster CA, so TLS is verified as against the registry);
every request is forwarded to the real registry with its own Host header (the
registry builds upload `Location`s from it, so uploads come back through the
proxy) and the answer streamed back. The test can, at any moment:

- `refuse(status, retry_after=None, only=None)`: answer `status` (with an OCI
  error body, and `Retry-After` when given) to every request, or only to those
  whose method and path match `only` (e.g. `("PUT", "/blobs/uploads/")`: a
  registry whose storage is full refuses uploads and still serves reads);
- `delay(seconds)`: hold every answer that long (a slow registry);
- `restore()`: forward everything again.

It counts what it answered (`counts["refused"]`, `counts["forwarded"]`) and
records each forwarded request's method and path (`seen`), so a test can
check that nothing was pushed twice. Nothing here answers for the registry
except the injected refusals.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

from tests.controlplane import ControlPlane
from tests.controlplane.process import free_ports

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class RegistryProxy:
    def __init__(self, cp: ControlPlane, upstream: str) -> None:
        self.cp = cp
        self.upstream = upstream  # https://127.0.0.1:PORT of the real registry
        self.status: int | None = None
        self.retry_after: int | None = None
        self.only: tuple[str, str] | None = None
        self.latency = 0.0
        self.counts: Counter[str] = Counter()
        self.seen: list[tuple[str, str, int]] = []
        self.answered = threading.Event()  # set on every refusal or slow answer
        self._serving = cp.issue_serving_cert("registry-proxy")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- control (from the test's thread) --

    def refuse(
        self, status: int, *, retry_after: int | None = None, only: tuple[str, str] | None = None
    ) -> None:
        self.retry_after, self.only, self.status = retry_after, only, status
        self.answered.clear()

    def delay(self, seconds: float) -> None:
        self.latency = seconds
        self.answered.clear()

    def restore(self) -> None:
        self.status, self.retry_after, self.only, self.latency = None, None, None, 0.0

    def pushes(self, kind: str = "/manifests/") -> list[str]:
        """Paths of the PUTs forwarded (manifests by default) that the registry accepted."""
        return [p for m, p, s in self.seen if m == "PUT" and kind in p and s < 300]

    # -- lifecycle --

    def __enter__(self) -> RegistryProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        client = ssl.create_default_context(cafile=str(self.cp.ca_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client), auto_decompress=False
        )
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(str(self._serving.cert_file), str(self._serving.key_file))
        (self.port,) = free_ports(1)
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=server).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _matches(self, request: web.Request) -> bool:
        if self.only is None:
            return True
        method, fragment = self.only
        return request.method == method and fragment in request.path

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
            self.answered.set()
        status = self.status
        if status is not None and self._matches(request):
            self.counts["refused"] += 1
            self.answered.set()
            headers = {"Content-Type": "application/json"}
            if self.retry_after is not None:
                headers["Retry-After"] = str(self.retry_after)
            if status == 401:
                headers["Www-Authenticate"] = 'Basic realm="aibom-test"'
            code = {401: "UNAUTHORIZED", 403: "DENIED", 429: "TOOMANYREQUESTS"}.get(
                status, "UNKNOWN"
            )
            error = {"errors": [{"code": code, "message": f"injected {status}"}]}
            return web.Response(status=status, text=json.dumps(error), headers=headers)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        data = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=data if data else None,
            allow_redirects=False,
        ) as up:
            body = await up.read()
            self.counts["forwarded"] += 1
            self.seen.append((request.method, request.path, up.status))
            out_headers: dict[str, Any] = {
                k: v for k, v in up.headers.items() if k.lower() not in _HOP
            }
            return web.Response(status=up.status, body=body, headers=out_headers)
