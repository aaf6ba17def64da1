"""Slowloris and connection floods against the real listening server.

Raw TLS sockets on loopback: a half-sent head or body is cut off within the
bound; a plain TCP client that never starts TLS too; a flood of slow
clients cannot keep a real review from being answered; and at the cap the
connection waiting longest is evicted, never one whose review is in flight.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aibom_core.objects import Obj, OwnerRef
from aibom_core.walk import Fetched
from tests.controlplane import WebhookCaller, webhook_caller
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, body, review, serving_files
from webhook.auth import CallerAuth
from webhook.flags import Settings
from webhook.server import Server
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

    async def review(self, obj: Obj | None = None, uid: str = "real") -> int:
        connector = aiohttp.TCPConnector(ssl=self.ctx)
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.post(
                f"https://127.0.0.1:{self.port}/mutate",
                data=body(review(obj or mk("Pod", "p"), uid=uid)),
                headers={"Content-Type": "application/json"},
            ) as resp,
        ):
            doc = await resp.json()
            assert doc["response"]["uid"] == uid
            return resp.status


class GatedSource(MemorySource):
    """Owner GETs that wait for `gate`: a review stays in flight until the test opens it."""

    def __init__(self, objs: list[Obj]) -> None:
        super().__init__(objs)
        self.gate = asyncio.Event()
        self._waiting = asyncio.Condition()
        self.waiting = 0  # GETs waiting on the gate

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched:
        fetched = await super().get_owner(namespace, owner, timeout=timeout)
        async with self._waiting:
            self.waiting += 1
            self._waiting.notify_all()
        await self.gate.wait()
        return fetched

    async def wait_for(self, n: int) -> None:
        """Until `n` GETs wait on the gate (at most 5 s)."""
        async with asyncio.timeout(5), self._waiting:
            await self._waiting.wait_for(lambda: self.waiting >= n)


async def _start(
    tmp_path: Path,
    *,
    source: MemorySource | None = None,
    client_ca: str | None = None,
    auth: CallerAuth | None = None,
    **settings: Any,
) -> AsyncIterator[Live]:
    """The server on loopback; `settings`: the flags' values other than their defaults."""
    serving_files(tmp_path)
    server = Server(
        Settings(host="127.0.0.1", port=0, owner_cache_ttl=0, shutdown_grace=1.0, **settings),
        source=source if source is not None else MemorySource(),
        reloader=CertReloader(
            str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), client_ca_file=client_ca
        ),
        auth=auth,
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


CLOSE_SLACK = 0.5  # seconds of scheduling delay allowed past a documented close bound

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
    async for live in _start(tmp_path, header_timeout=0.5, body_timeout=0.5):
        reader, writer = await live.tls()
        writer.write(HEAD + b"{")
        await writer.drain()
        head = await reader.read(65536)  # the 408, then the close
        assert head.startswith(b"HTTP/1.1 408"), head
        # docs/webhook.md: "408, connection closed at most 1 s later" (plus slack
        # for a loaded machine), counted from reading the 408.
        await _closed_within(reader, 1.0 + CLOSE_SLACK)
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
    # Long timeouts: only the cap's eviction can make room.
    async for live in _start(tmp_path, header_timeout=30, body_timeout=30, max_connections=20):
        guard = live.server.guard
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


async def _answer(reader: asyncio.StreamReader, *, within: float) -> int:
    """The status of the next answer on an open connection, read whole (the next one
    then starts clean)."""
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def _healthy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether this open connection still answers a request (GET /healthz: 200)."""
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        await writer.drain()
        return await _answer(reader, within=5) == 200
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        return False


async def test_at_the_cap_the_longest_waiting_is_evicted_never_a_review_in_flight(
    tmp_path: Path,
) -> None:
    rs = mk("ReplicaSet", "rs")
    source = GatedSource([rs])
    async for live in _start(
        tmp_path,
        header_timeout=30,
        body_timeout=30,
        max_connections=3,
        source=source,
        walk_deadline=30,
    ):
        guard = live.server.guard
        # A review whose walk waits on the owner GET: it is being answered.
        answer = asyncio.create_task(live.review(mk("Pod", "p", rs), uid="in-flight"))
        await source.wait_for(1)
        # Two idle connections, each answered once (so the server has registered
        # it), then `first` once more: `second` has waited longest for request data.
        first = await live.tls()
        assert await _healthy(*first)
        second = await live.tls()
        assert await _healthy(*second)
        assert await _healthy(*first)
        assert len(guard) == 3
        # At the cap: the next connection evicts `second`; neither the review
        # (opened first of all) nor `first` (opened before `second`).
        newest = await live.tls()
        await _closed_within(second[0], 5.0)
        assert await _healthy(*first) and await _healthy(*newest)
        assert not answer.done()
        source.gate.set()
        async with asyncio.timeout(10):
            assert await answer == 200  # the right uid (Live.review checks it)
        cut = live.server.metrics.connections_cut
        assert (cut.labels("evicted")._value.get(), cut.labels("cap")._value.get()) == (1, 0)
        for _, writer in (first, second, newest):
            writer.close()


async def test_at_the_cap_with_every_review_in_flight_a_new_connection_is_closed(
    tmp_path: Path,
) -> None:
    owners = [mk("ReplicaSet", "rs1"), mk("ReplicaSet", "rs2")]
    source = GatedSource(owners)
    async for live in _start(
        tmp_path,
        header_timeout=30,
        body_timeout=30,
        max_connections=2,
        source=source,
        walk_deadline=30,
    ):
        guard = live.server.guard
        answers = [
            asyncio.create_task(live.review(mk("Pod", f"p{i}", rs), uid=f"u{i}"))
            for i, rs in enumerate(owners)
        ]
        await source.wait_for(2)  # both reviews are being answered
        assert len(guard) == 2
        # Nothing to evict: the new connection is closed, the reviews are kept.
        try:
            reader, writer = await live.tls()
        except (ConnectionError, ssl.SSLError):
            pass  # closed before the client saw the end of its handshake: closed too
        else:
            await _closed_within(reader, 5.0)
            writer.close()
        cut = live.server.metrics.connections_cut
        assert (cut.labels("cap")._value.get(), cut.labels("evicted")._value.get()) == (1, 0)
        source.gate.set()
        async with asyncio.timeout(10):
            assert await asyncio.gather(*answers) == [200, 200]


# -- at the cap, the API server's connections go last -------------------------------------

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _review_on(conn: Conn, token: str | None = None) -> int:
    """A review sent on an open connection (kept alive after), as the API server sends
    it; the status of the answer, read whole."""
    reader, writer = conn
    data = body(review(mk("Pod", "p"), uid="kept-alive"))
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    writer.write(
        b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + auth
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    return await _answer(reader, within=10)


async def _flood(live: Live, n: int) -> list[Conn]:
    """`n` connections that send half a request head and wait, registered by the server
    (a TLS 1.3 client may finish its handshake before the server has)."""
    guard = live.server.guard
    before = len(guard)
    conns = []
    for _ in range(n):
        conn = await live.tls()
        conn[1].write(b"POST /mutate HTTP/1.1\r\n")
        await conn[1].drain()
        conns.append(conn)
    for _ in range(500):  # bounded, for failures
        if len(guard) >= before + n:
            return conns
        await asyncio.sleep(0.01)
    pytest.fail(f"{len(guard) - before} of {n} flood connections registered")


async def _api_server(tmp_path: Path, live: Live, caller: WebhookCaller) -> Conn:
    """A connection that presents the API server's client certificate."""
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    ctx.load_cert_chain(str(caller.cert_file), str(caller.key_file))
    return await asyncio.open_connection("127.0.0.1", live.port, ssl=ctx)


@pytest.mark.parametrize("how", ["client-certificate", "token"])
async def test_at_the_cap_a_flood_never_evicts_the_api_servers_idle_connection(
    tmp_path: Path, how: str
) -> None:
    """The API server's idle keep-alive connection has waited longest of all; the
    flood's connections (never a complete request) go first."""
    caller = webhook_caller(tmp_path / "caller", webhook_host="127.0.0.1", token=True)
    assert caller.token_file is not None
    by_cert = how == "client-certificate"
    client_ca = str(caller.client_ca_file) if by_cert else None
    token = None if by_cert else caller.token_file.read_text().strip()
    auth = CallerAuth.from_files(
        client_ca_file=client_ca, token_file=None if by_cert else str(caller.token_file)
    )
    async for live in _start(
        tmp_path,
        header_timeout=30,
        body_timeout=30,
        max_connections=3,
        auth=auth,
        client_ca=client_ca,
    ):
        api = await (_api_server(tmp_path, live, caller) if by_cert else live.tls())
        assert await _review_on(api, token) == 200
        flood = await _flood(live, 2)
        newcomer = await live.tls()  # at the cap
        await _closed_within(flood[0][0], 5.0)
        assert await _review_on(api, token) == 200
        cut = live.server.metrics.connections_cut
        assert (cut.labels("evicted")._value.get(), cut.labels("cap")._value.get()) == (1, 0)
        for _, writer in (api, newcomer, *flood):
            writer.close()


async def test_with_client_certificates_a_stranger_never_displaces_the_api_server(
    tmp_path: Path,
) -> None:
    """Every open connection is the API server's, idle: a newcomer without its client
    certificate cannot be the API server (it presents one on every connection) and is
    closed; the API server's connections stay."""
    caller = webhook_caller(tmp_path / "caller", webhook_host="127.0.0.1", token=False)
    client_ca = str(caller.client_ca_file)
    auth = CallerAuth.from_files(client_ca_file=client_ca, token_file=None)
    async for live in _start(
        tmp_path,
        header_timeout=30,
        body_timeout=30,
        max_connections=2,
        auth=auth,
        client_ca=client_ca,
    ):
        api = [await _api_server(tmp_path, live, caller) for _ in range(2)]
        for conn in api:
            assert await _review_on(conn) == 200
        stranger = await live.tls()
        await _closed_within(stranger[0], 5.0)
        for conn in api:
            assert await _review_on(conn) == 200
        cut = live.server.metrics.connections_cut
        assert (cut.labels("cap")._value.get(), cut.labels("evicted")._value.get()) == (1, 0)
        for _, writer in (*api, stranger):
            writer.close()


async def test_without_caller_authentication_answered_connections_outlast_a_slowloris(
    tmp_path: Path,
) -> None:
    """No --client-ca-file, no --client-token-file: the API server cannot be told from
    anyone who sends valid reviews (docs/webhook.md), but a connection that had a review
    answered still outlasts the ones that never completed a request."""
    async for live in _start(tmp_path, header_timeout=30, body_timeout=30, max_connections=3):
        answered = await live.tls()
        assert await _review_on(answered) == 200
        flood = await _flood(live, 2)
        newcomer = await live.tls()  # at the cap
        await _closed_within(flood[0][0], 5.0)
        assert await _review_on(answered) == 200
        for _, writer in (answered, newcomer, *flood):
            writer.close()
