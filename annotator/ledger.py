"""Which stamp repairs keep being undone. Pure (the clock is injected).

Some controllers copy annotations from an owner onto its children: the
Deployment controller copies a Deployment's annotations (our stamp keys
included) onto its ReplicaSets on every sync. With the webhook running,
that update is stamped right at admission; without it, a repaired
ReplicaSet is overwritten again at once, and a naive repairer would patch
it every few seconds forever. The ledger remembers repairs per object: after
`limit` repairs within `window` seconds the object is left alone (counted
and logged as contested) until the window has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RepairLedger:
    def __init__(
        self, *, limit: int = 2, window: float = 600.0, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._now = now
        self._repairs: dict[str, list[float]] = {}

    def _recent(self, key: str) -> list[float]:
        cutoff = self._now() - self.window
        times = [t for t in self._repairs.get(key, ()) if t > cutoff]
        if times:
            self._repairs[key] = times
        else:
            self._repairs.pop(key, None)
        return times

    def contested(self, key: str) -> bool:
        """Repaired `limit` times within the window already: another writer undoes it."""
        return len(self._recent(key)) >= self.limit

    def record(self, key: str) -> None:
        self._repairs.setdefault(key, []).append(self._now())

    def forget(self, key: str) -> None:
        self._repairs.pop(key, None)

    def prune(self) -> None:
        """Drop every entry past the window (objects deleted since, or quiet)."""
        for key in list(self._repairs):
            self._recent(key)

    def __len__(self) -> int:
        return len(self._repairs)
