"""Connection limits of the HTTPS edge: read timeouts and a connection cap.

aiohttp has no header or body read timeout of its own (its keep-alive timer
only closes connections idle between requests, and only after an hour by
default), so a client that sends half a request holds a connection, a task
and a file descriptor for as long as it likes (slowloris). The API server's
call to us has a timeout (`timeoutSeconds`, 2 s shipped, at most 30 s); a
request that takes longer to arrive than the API server would wait for its
answer is not the API server's.

- **Header timeout**: the TLS handshake, and then each request's head (from
  its first byte, or from the connection's start), must complete within
  `header_timeout` seconds, or the connection is closed.
- **Body timeout**: the body must be read within `body_timeout` seconds of
  the handler starting to read it (`webhook.app`), or the answer is 408 and
  the connection is closed (at most `LINGER` = 1 s later: aiohttp drains an
  unread body for a moment so the client can read the answer).
- **Connection cap**: at most `max_connections` open at once. A connection
  arriving at the cap evicts one that is waiting for request data (idle, or
  still sending its head or body); one whose review is being answered is
  never evicted. With nothing to evict it is closed. So slow clients cannot
  hold every slot: a real review always gets in by evicting one of them.
- **Who goes first**: the API server's connections last. An idle keep-alive
  connection of the API server has often waited longest of all, so "the one
  waiting longest" alone would evict it first under a flood. Connections are
  ranked by what they have shown (`Rank`): nothing yet (a slowloris never
  completes a request); a review answered; the caller authenticated (a
  client certificate of `--client-ca-file` at the handshake, or a request
  that passed `--client-token-file`). The victim is the lowest rank, and
  within it the one waiting longest. When the client certificate is
  required, the API server presents it on every connection: a newcomer
  without one is not the API server and is closed rather than evict an
  authenticated connection. Without either flag the API server cannot be
  told from a client that sends valid reviews (anyone may): both rank as
  "answered", ahead of connections that never completed a request.

The defaults (5 s, 5 s, 1000) are well below the API server's 10 s webhook
timeout ceiling for our shipped `timeoutSeconds: 2` (its call is over by then
anyway) and far above what a 7 MiB body needs on any real network.

This hooks into aiohttp's `RequestHandler` (pinned in constraints.txt); the
slowloris tests in tests/unit/test_webhook_guard.py fail if an aiohttp
upgrade breaks the hooks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("webhook.guard")

DEFAULT_HEADER_TIMEOUT = 5.0
DEFAULT_BODY_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 1000
LINGER = 1.0  # seconds an unread body is still drained after the answer


class Rank(IntEnum):
    """What a connection has shown; the cap evicts the lowest first (module doc)."""

    UNKNOWN = 0  # no request completed yet
    ANSWERED = 1  # a review was answered on it
    AUTHENTICATED = 2  # the caller proved it is the API server


class ConnectionGuard:
    """The open connections, which of them are answering a review, and the limits."""

    def __init__(
        self,
        *,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        on_cut: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        certified_callers: bool = False,
    ) -> None:
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.on_cut = on_cut
        self._clock = clock
        # True when the API server presents a client certificate on every
        # connection (--client-ca-file): a newcomer without one is a stranger.
        self.certified_callers = certified_callers
        # Insertion order is the order of last activity: the first evictable
        # entry of a rank has waited longest.
        self._open: dict[GuardedHandler, Rank] = {}
        self._answering: set[GuardedHandler] = set()

    def __len__(self) -> int:
        return len(self._open)

    def cut(self, why: str) -> None:
        if self.on_cut is not None:
            self.on_cut(why)

    def opened(self, conn: GuardedHandler, rank: Rank = Rank.UNKNOWN) -> bool:
        """Register a new connection (`rank`: what its handshake showed); False when it
        must be closed (at the cap with nothing it may evict)."""
        if len(self._open) >= self.max_connections:
            victim = self._victim()
            if victim is not None and (
                self.certified_callers
                and rank < Rank.AUTHENTICATED
                and self._open[victim] is Rank.AUTHENTICATED
            ):
                victim = None  # a stranger never displaces the API server
            if victim is None:
                self.cut("cap")
                return False
            self.forget(victim)
            self.cut("evicted")
            victim.force_close()
        self._open[conn] = rank
        return True

    def _victim(self) -> GuardedHandler | None:
        """The lowest-ranked connection not answering a review, waiting longest within it."""
        best: GuardedHandler | None = None
        for c, rank in self._open.items():
            if c in self._answering:
                continue
            if best is None or rank < self._open[best]:
                best = c
                if rank is Rank.UNKNOWN:
                    break  # the lowest rank, and the first of it: waited longest
        return best

    def active(self, conn: GuardedHandler) -> None:
        """The connection made progress (a request head arrived): it goes to the back."""
        rank = self._open.pop(conn, None)
        if rank is not None:
            self._open[conn] = rank

    def ranked(self, conn: Any, rank: Rank) -> None:
        """`conn` showed `rank` (a rank is never lowered)."""
        if isinstance(conn, GuardedHandler) and conn in self._open:
            self._open[conn] = max(self._open[conn], rank)

    def answering(self, conn: Any, busy: bool) -> None:
        """A review on `conn` is being answered (never evicted meanwhile), or no longer."""
        if not isinstance(conn, GuardedHandler):
            return  # a test client's connection, not ours
        if busy:
            self._answering.add(conn)
        else:
            self._answering.discard(conn)
            self.ranked(conn, Rank.ANSWERED)
            self.active(conn)

    def forget(self, conn: GuardedHandler) -> None:
        self._open.pop(conn, None)
        self._answering.discard(conn)


class GuardedHandler(RequestHandler):
    """aiohttp's connection protocol, plus the header timeout and the cap."""

    __slots__ = ("_guard", "_head_timer", "_in_request")

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        # aiohttp reads an unread body for up to 10 s after the answer
        # ("lingering close") so the client can read it; a slow client would
        # get those 10 s on top of the body timeout. LINGER bounds it.
        kwargs["lingering_time"] = min(float(kwargs.get("lingering_time", LINGER)), LINGER)
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_request = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # Called once the TLS handshake is done: a certificate here passed the
        # client CA (with none configured, none is asked for).
        rank = Rank.AUTHENTICATED if transport.get_extra_info("peercert") else Rank.UNKNOWN
        if not self._guard.opened(self, rank):
            self.force_close()
            return
        self._arm()  # the first request's head must arrive in time too

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            # A complete request head: the body has its own timeout (the handler's).
            self._disarm()
            self._in_request = True
            self._guard.active(self)
        elif data and not self._in_request and self._head_timer is None:
            self._arm()  # the first bytes of the next request's head

    async def _handle_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._handle_request(*args, **kwargs)
        finally:
            self._in_request = False

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self._loop.call_later(self._guard.header_timeout, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_request:
            return
        self._guard.cut("header-timeout")
        log.debug("request head not complete in time; connection closed")
        self.force_close()


class GuardedSite(web.TCPSite):
    """`web.TCPSite` whose connections are `GuardedHandler`s of one `ConnectionGuard`."""

    def __init__(self, runner: web.AppRunner, *args: Any, guard: ConnectionGuard, **kw: Any):
        super().__init__(runner, *args, **kw)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self._guard
        options: dict[str, Any] = getattr(server, "_kwargs", {})

        def protocol() -> GuardedHandler:
            return GuardedHandler(server, guard=guard, loop=loop, **options)

        self._server = await loop.create_server(
            protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            # The handshake is part of the head: bounded by the same timeout.
            ssl_handshake_timeout=guard.header_timeout if self._ssl_context else None,
        )
