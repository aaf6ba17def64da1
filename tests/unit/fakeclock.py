"""A fake monotonic clock whose `sleep` waits for the test to advance time.

Like k8s.io/utils/clock/testing's FakeClock: `now()` is what the code under
test reads; `sleep(d)` returns once `advance` has moved the clock past
`now + d`; `advance` gives the event loop turns so woken tasks run.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep(self, delay: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (self.t + max(0.0, delay), next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._waiters if not f.done())

    async def settle(self, turns: int = 20) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)

    async def advance(self, seconds: float, *, step: float = 0.1) -> None:
        """Move time forward in small steps, waking sleepers due at each."""
        end = self.t + seconds
        while self.t < end:
            self.t = min(end, self.t + step)
            while self._waiters and self._waiters[0][0] <= self.t:
                _, _, fut = heapq.heappop(self._waiters)
                if not fut.done():
                    fut.set_result(None)
            await self.settle()
