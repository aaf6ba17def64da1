"""Slowloris and connection floods against the real listening server.

Raw TLS sockets on loopback: a half-sent head or body is cut off within the
bound; a plain TCP client that never starts TLS too; and a flood of slow
clients cannot keep a real review from being answered.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from aibom_core.kinds import default_registry
from aibom_core.stamp import Keys
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, body, review, serving_files
from webhook.main import Server
from webhook.resolver import OwnerCache
from webhook.tls import CertReloader


@dataclass
class Live:
    server: Server
    ctx: ssl.SSLContext

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    async def tls(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx)

    async def review(self) -> int:
        connector = aiohttp.TCPConnector(ssl=self.ctx)
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.post(
                f"https://127.0.0.1:{self.port}/mutate",
                data=body(review(mk("Pod", "p"), uid="real")),
                headers={"Content-Type": "application/json"},
            ) as resp,
        ):
            doc = await resp.json()
            assert doc["response"]["uid"] == "real"
            return resp.status


async def _start(tmp_path: Path, **kw: object) -> AsyncIterator[Live]:
    serving_files(tmp_path)
    server = Server(
        source=MemorySource(),
        registry=default_registry(),
        keys=Keys(),
        reloader=CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")),
        host="127.0.0.1",
        port=0,
        cache=OwnerCache(ttl=0),
        shutdown_grace=1.0,
        **kw,  # type: ignore[arg-type]
    )
    await server.start()
    serving = asyncio.create_task(server.serve_until_stopped())
    try:
        yield Live(server, ssl.create_default_context(cafile=str(tmp_path / "ca.crt")))
    finally:
        server.request_stop("test")
        await asyncio.wait_for(serving, 10)


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    """The server with its default limits (what `aibom-rollup webhook` runs with)."""
    async for x in _start(tmp_path):
        yield x


async def _closed_within(reader: asyncio.StreamReader, bound: float) -> float:
    """Seconds until the server closed the connection (EOF); fails past `bound`."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(bound):
            while await reader.read(65536):
                pass
    except TimeoutError:
        pytest.fail(f"connection still open after {bound} s")
    except (ConnectionError, ssl.SSLError):
        pass
    return time.monotonic() - began


HEAD = (
    b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100000\r\n\r\n"
)


async def test_half_a_body_is_cut_off_by_the_default_body_timeout(live: Live) -> None:
    reader, writer = await live.tls()
    writer.write(HEAD + b'{"apiVersion": "admission.k8s.io/v1", ' + b" " * 40_000)
    await writer.drain()
    took = await _closed_within(reader, 5.0 + 5.0)  # default --body-timeout 5 s
    assert took >= 4.0  # not before the timeout either
    writer.close()


async def test_half_a_head_is_cut_off_by_the_default_header_timeout(live: Live) -> None:
    reader, writer = await live.tls()
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    await writer.drain()
    await _closed_within(reader, 5.0 + 5.0)
    writer.close()


async def test_limits_are_configurable_and_a_no_tls_client_is_cut_too(tmp_path: Path) -> None:
    from webhook.guard import ConnectionGuard

    guard = ConnectionGuard(header_timeout=0.5, body_timeout=0.5)
    async for live in _start(tmp_path, guard=guard):
        reader, writer = await live.tls()
        writer.write(HEAD + b"{")
        await writer.drain()
        head = await reader.read(65536)  # the 408, then the close
        assert head.startswith(b"HTTP/1.1 408"), head
        assert await _closed_within(reader, 3.0) < 3.0
        # A plain TCP client that never starts the TLS handshake.
        raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", live.port)
        await _closed_within(raw_reader, 3.0)
        raw_writer.close()
        # Idle after connecting (no byte of a head): cut as well.
        idle_reader, idle_writer = await live.tls()
        await _closed_within(idle_reader, 3.0)
        idle_writer.close()
        cut = live.server.metrics.connections_cut
        assert cut.labels("body-timeout")._value.get() == 1
        assert cut.labels("header-timeout")._value.get() >= 1
        # A real review is still answered.
        assert await live.review() == 200


async def test_slow_clients_cannot_starve_a_real_review(tmp_path: Path) -> None:
    from webhook.guard import ConnectionGuard

    # Long timeouts: only the cap's eviction can make room.
    guard = ConnectionGuard(header_timeout=30, body_timeout=30, max_connections=20)
    async for live in _start(tmp_path, guard=guard):
        slow = []
        for i in range(60):
            reader, writer = await live.tls()
            writer.write(HEAD if i % 2 else b"POST /mutate HTTP/1.1\r\n")
            await writer.drain()
            slow.append((reader, writer))
        assert len(guard) <= 20
        for _ in range(5):
            async with asyncio.timeout(5):
                assert await live.review() == 200
        assert live.server.metrics.connections_cut.labels("evicted")._value.get() >= 40
        for _, writer in slow:
            writer.close()
