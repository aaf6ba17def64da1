"""A loopback HTTP proxy in front of the REAL API server, for fault injection.

The annotator talks plain HTTP to the proxy (a kubeconfig with
`server: http://127.0.0.1:PORT` and no credentials); the proxy forwards each
request over TLS to the real kube-apiserver with the client certificate of
the identity it was given, and streams the answer back (watches included).
The test can then, at any moment:

- `throttle(retry_after)`: close the open streams and answer every request
  429 with `Retry-After` (a Status body), as API Priority and Fairness does;
- `cut()` / `restore()`: close every open stream and answer 503 (no
  Retry-After) to everything until restored: a network partition, a watch gap;
- `freeze()`: stop relaying bytes on the streams open now (they stay open and
  silent: a half-open connection); new requests pass;
- `blackhole(fragment)`: requests whose path contains `fragment` get no
  answer at all (the client times out): e.g. a leader whose Lease renewals
  hang while its other writes still go through;
- `expire(fragment)`: the next watch whose path contains `fragment` is
  answered `410 Gone` (its resourceVersion too old, as after an etcd
  compaction), so the client must relist;
- `hold_continue(path)`: hold the next paged-list request of `path` that
  carries a `continue` token (`held` is set) until `release()`: the test
  changes the cluster in the middle of a paginated list.

Nothing here answers for the API server except those injected refusals.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.controlplane import ClientIdentity, ControlPlane

_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}


class ApiProxy:
    def __init__(self, cp: ControlPlane, identity: ClientIdentity) -> None:
        self.cp = cp
        self.identity = identity
        self.upstream = cp.server
        self.retry_after: int | None = None
        self.down = False
        self.frozen_generation = -1
        self._generation = 0
        self.counts: Counter[str] = Counter()  # "429", "503", "list", "watch", ...
        self.lists_ok: Counter[str] = Counter()  # collection path -> 200 lists
        self._streams: set[asyncio.Task[Any]] = set()
        self._hold_path: str | None = None
        self._blackhole: str | None = None
        self._expire: str | None = None
        self.held = threading.Event()
        self._released = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    # -- control (from the test's thread) --

    def throttle(self, retry_after: int | None) -> None:
        """429 to everything from now on (None: stop); the open streams are closed, so
        every watch must come back, into the 429s."""
        self.retry_after = retry_after
        if retry_after is not None:
            self._call(self._close_streams)

    def cut(self) -> None:
        self.down = True
        self._call(self._close_streams)

    def restore(self) -> None:
        self.down = False

    def freeze(self) -> None:
        self.frozen_generation = self._generation

    def blackhole(self, fragment: str | None) -> None:
        self._blackhole = fragment

    def expire(self, fragment: str) -> None:
        self._expire = fragment

    def hold_continue(self, path: str) -> None:
        self._released.clear()
        self.held.clear()
        self._hold_path = path

    def release(self) -> None:
        self._hold_path = None
        self._released.set()

    def kubeconfig(self, path: Path) -> Path:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "proxied", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxied"}}],
            "current-context": "proxy",
        }
        path.write_text(json.dumps(cfg))
        return path

    # -- lifecycle --

    def __enter__(self) -> ApiProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _call(self, fn: Any) -> None:
        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _start(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.cp.ca_file))
        ctx.load_cert_chain(str(self.identity.cert_file), str(self.identity.key_file))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
        app = web.Application(client_max_size=16 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        self._close_streams()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _close_streams(self) -> None:
        for task in list(self._streams):
            task.cancel()

    # -- the proxy --

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("1", "true")
        self.counts["watch" if watch else request.method.lower()] += 1
        if self.down:
            self.counts["503"] += 1
            return _status(503, "ServiceUnavailable", "proxy: cut off (test)")
        if self.retry_after is not None:
            self.counts["429"] += 1
            resp = _status(429, "TooManyRequests", "proxy: throttled (test)")
            resp.headers["Retry-After"] = str(self.retry_after)
            return resp
        if watch and self._expire is not None and self._expire in request.path:
            self._expire = None
            self.counts["410"] += 1
            return _status(410, "Expired", "proxy: too old resource version (test)")
        if self._blackhole is not None and self._blackhole in request.path:
            self.counts["blackholed"] += 1
            await asyncio.Event().wait()  # until the client gives up and disconnects
        if (
            self._hold_path is not None
            and request.path == self._hold_path
            and "continue" in request.query
        ):
            self.held.set()
            await asyncio.to_thread(self._released.wait, 120)
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        generation = self._generation
        self._generation += 1
        try:
            return await self._forward(request, watch, generation)
        except aiohttp.ClientConnectionError as exc:
            # The API server is restarting: what a load balancer in front of it says.
            self.counts["502"] += 1
            return _status(502, "BadGateway", f"proxy: upstream unreachable: {exc}")
        finally:
            self._streams.discard(task)

    async def _forward(
        self, request: web.Request, watch: bool, generation: int
    ) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        ) as up:
            out = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in _HOP},
            )
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                if generation <= self.frozen_generation:
                    await asyncio.Event().wait()  # silent from now on, never closed
                await out.write(chunk)
            if request.method == "GET" and not watch and up.status == 200:
                self.lists_ok[request.path] += 1
            await out.write_eof()
            return out


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)
