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
  arriving at the cap evicts the connection that has waited longest for
  request data (idle, or still sending its head or body); one whose review
  is being answered is never evicted. With nothing to evict it is closed.
  So slow clients cannot hold every slot: a real review always gets in by
  evicting one of them.

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
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("webhook.guard")

DEFAULT_HEADER_TIMEOUT = 5.0
DEFAULT_BODY_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 1000
LINGER = 1.0  # seconds an unread body is still drained after the answer


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
    ) -> None:
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.on_cut = on_cut
        self._clock = clock
        # Insertion order is the order of last activity: the first evictable
        # entry has waited longest.
        self._open: dict[GuardedHandler, None] = {}
        self._answering: set[GuardedHandler] = set()

    def __len__(self) -> int:
        return len(self._open)

    def cut(self, why: str) -> None:
        if self.on_cut is not None:
            self.on_cut(why)

    def opened(self, conn: GuardedHandler) -> bool:
        """Register a new connection; False when it must be closed (cap, nothing to evict)."""
        if len(self._open) >= self.max_connections:
            victim = next((c for c in self._open if c not in self._answering), None)
            if victim is None:
                self.cut("cap")
                return False
            self.forget(victim)
            self.cut("evicted")
            victim.force_close()
        self._open[conn] = None
        return True

    def active(self, conn: GuardedHandler) -> None:
        """The connection made progress (a request head arrived): it goes to the back."""
        if conn in self._open:
            del self._open[conn]
            self._open[conn] = None

    def answering(self, conn: Any, busy: bool) -> None:
        """A review on `conn` is being answered (never evicted meanwhile), or no longer."""
        if not isinstance(conn, GuardedHandler):
            return  # a test client's connection, not ours
        if busy:
            self._answering.add(conn)
        else:
            self._answering.discard(conn)
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
        if not self._guard.opened(self):
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
