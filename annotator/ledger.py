"""Which stamp repairs keep being undone. Pure (the clock is injected).

Some controllers copy annotations from an owner onto its children: the
Deployment controller copies a Deployment's annotations (our stamp keys
included) onto its ReplicaSets on every sync. With the webhook running,
that update is stamped right at admission; without it, a repaired
ReplicaSet is overwritten again at once, and a naive repairer would patch
it every few seconds forever. The ledger remembers repairs per object, and
the stamp each one wrote: after `limit` repairs to the same stamp within
`window` seconds the object is left alone (counted and logged as
contested) until the window has passed.

The same stamp, because a fight is a repair undone: we write S, someone
writes it back, we would write S again. A repair to another stamp is news,
not a fight: the object's root changed (adopted late, the adopter adopted in
turn, released again), and each change must be repaired, however many come
within the window (the late-adoption stamp fight: counting every repair
left the stamps of a twice-adopted Deployment's Pods wrong for ten minutes).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class RepairLedger:
    def __init__(self, *, now: Callable[[], float], limit: int = 2, window: float = 600.0) -> None:
        """`now`: a monotonic clock in seconds (the controller passes `time.monotonic`)."""
        self.limit = limit
        self.window = window
        self._now = now
        self._repairs: dict[str, list[tuple[float, Hashable]]] = {}

    def _recent(self, key: str) -> list[tuple[float, Hashable]]:
        cutoff = self._now() - self.window
        recent = [r for r in self._repairs.get(key, ()) if r[0] > cutoff]
        if recent:
            self._repairs[key] = recent
        else:
            self._repairs.pop(key, None)
        return recent

    def contested(self, key: str, stamp: Hashable = None) -> bool:
        """Repaired to `stamp` `limit` times within the window already: another writer
        undoes it."""
        return sum(1 for _, wrote in self._recent(key) if wrote == stamp) >= self.limit

    def record(self, key: str, stamp: Hashable = None) -> None:
        """A repair of `key` that wrote `stamp`."""
        self._repairs.setdefault(key, []).append((self._now(), stamp))

    def forget(self, key: str) -> None:
        self._repairs.pop(key, None)

    def prune(self) -> None:
        """Drop every entry past the window (objects deleted since, or quiet)."""
        for key in list(self._repairs):
            self._recent(key)

    def __len__(self) -> int:
        return len(self._repairs)
