"""A de-duplicating work queue with per-item backoff, and a token bucket.

The semantics are client-go's workqueue, which controllers are built on:

- a key is queued at most once, however often it is added (events coalesce:
  ten Pod events of one root make one reconcile of it);
- a key being processed is never handed to a second worker; added again
  meanwhile, it is queued once more when the first worker calls `done`, so
  the state it saw last is always reconciled (level-based);
- `add_rate_limited` (after a failure) delays the key by a per-item
  exponential backoff, and by the overall token bucket, whichever is
  longer; `forget` resets the item's backoff after a success.

Everything but `get` is synchronous and the clock is injected, so the rules
are unit-tested without waiting; `get` only adds the waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from annotator.keys import DocKey

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]


class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up (golang.org/x/time/rate).

    `reserve()` takes a token and says how long to wait before using it, so
    callers that must not block can schedule instead of sleeping.
    """

    def __init__(self, rate: float, burst: int, *, now: Clock = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"token bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._now = now
        self._tokens = float(burst)
        self._last = now()

    def reserve(self) -> float:
        """Take one token; the delay in seconds until it may be used (0: now)."""
        now = self._now()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self) -> None:
        """Wait until a token is ours."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Per-item exponential backoff: `base * 2**failures`, capped (client-go: 5 ms .. 1000 s)."""

    base: float = 0.005
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        # Shift, not pow: an int exponent keeps the type float, and 60 is plenty.
        return min(self.cap, self.base * float(1 << min(failures, 60)))


class WorkQueue(Generic[K]):
    """Keys to reconcile; see the module docstring for the rules."""

    def __init__(
        self,
        name: str,
        *,
        now: Clock = time.monotonic,
        backoff: Backoff | None = None,
        limiter: TokenBucket | None = None,
    ) -> None:
        self.name = name
        self._now = now
        self._backoff = backoff or Backoff()
        self._limiter = limiter
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []
        self._ready_at: dict[K, float] = {}
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._wakeup: asyncio.Event | None = None
        self._idle_event: asyncio.Event | None = None
        self._shut_down = False

    # -- adding ----------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue `key` now, unless it already is."""
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._wake()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` in `delay` seconds (the earliest of several such calls wins)."""
        if self._shut_down:
            return
        if delay <= 0:
            self.add(key)
            return
        at = self._now() + delay
        current = self._ready_at.get(key)
        if current is not None and current <= at:
            return
        self._ready_at[key] = at
        heapq.heappush(self._waiting, (at, next(self._seq), key))
        self._wake()

    def add_rate_limited(self, key: K) -> float:
        """Queue `key` after its backoff (it failed); returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = self._backoff.delay(failures)
        if self._limiter is not None:
            delay = max(delay, self._limiter.reserve())
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    # -- taking ----------------------------------------------------------------

    def poll(self) -> K | None:
        """The next ready key (now marked processing), or None."""
        self._promote()
        if not self._queue:
            return None
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """The worker finished `key`; if it was added meanwhile, it is queued again."""
        self._processing.discard(key)
        if key in self._dirty and not self._shut_down:
            self._queue.append(key)
            self._wake()
        elif self._idle_event is not None and self.idle():
            self._idle_event.set()

    async def wait_idle(self) -> None:
        """Wait until nothing is queued, delayed or in progress (or the queue shut down)."""
        while not self.idle() and not self._shut_down:
            event = self._idle_event = self._idle_event or asyncio.Event()
            event.clear()
            await event.wait()

    def next_ready_in(self) -> float | None:
        """Seconds until the earliest delayed key is due (None: nothing delayed)."""
        self._drop_stale()
        if not self._waiting:
            return None
        return max(0.0, self._waiting[0][0] - self._now())

    async def get(self) -> K:
        """Wait for the next ready key. Raises `QueueShutDown` once shut down."""
        while True:
            if self._shut_down:
                raise QueueShutDown(self.name)
            key = self.poll()
            if key is not None:
                return key
            wakeup = self._wakeup = self._wakeup or asyncio.Event()
            wakeup.clear()
            timeout = self.next_ready_in()
            try:
                async with asyncio.timeout(timeout):
                    await wakeup.wait()
            except TimeoutError:
                pass

    def shut_down(self) -> None:
        """Stop handing out keys; waiting `get` calls raise `QueueShutDown`."""
        self._shut_down = True
        self._wake()
        if self._idle_event is not None:
            self._idle_event.set()

    # -- introspection -----------------------------------------------------------

    def __len__(self) -> int:
        """Queued plus delayed keys (the depth a metric reports)."""
        self._drop_stale()
        return len(self._queue) + len(self._ready_at)

    def idle(self) -> bool:
        """Nothing queued, delayed or in progress."""
        return not self._queue and not self._processing and len(self) == 0

    # -- internals ---------------------------------------------------------------

    def _promote(self) -> None:
        now = self._now()
        while self._waiting and self._waiting[0][0] <= now:
            at, _, key = heapq.heappop(self._waiting)
            if self._ready_at.get(key) == at:
                del self._ready_at[key]
                self.add(key)

    def _drop_stale(self) -> None:
        # Entries superseded by an earlier add_after for the same key.
        while self._waiting and self._ready_at.get(self._waiting[0][2]) != self._waiting[0][0]:
            heapq.heappop(self._waiting)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()


class QueueShutDown(Exception):
    """The queue was shut down; the worker should exit."""


class Queues:
    """The annotator's two queues, shared by whoever adds to or takes from them:
    documents (roots and namespace sweeps) and stamps (object keys). A leader
    gets fresh ones (`renew`): a queue shut down when it last stepped down
    takes nothing more."""

    def __init__(self) -> None:
        self.docs: WorkQueue[DocKey] = self._docs()
        self.stamps: WorkQueue[str] = WorkQueue("stamps")

    @staticmethod
    def _docs() -> WorkQueue[DocKey]:
        return WorkQueue("documents", limiter=TokenBucket(10.0, 100))

    def renew(self) -> None:
        self.docs = self._docs()
        self.stamps = WorkQueue("stamps")

    def shut_down(self) -> None:
        self.docs.shut_down()
        self.stamps.shut_down()
