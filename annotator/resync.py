"""Resync tracking: when the documents a full resync queued are all reconciled,
say so (`annotator_resync_*` gauges and a log line with the time it took)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sized

from annotator.keys import DocKey
from annotator.metrics import Metrics
from annotator.workqueue import Queues, WorkQueue

log = logging.getLogger("annotator")


class ResyncTracker:
    def __init__(
        self,
        *,
        queues: Queues,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        verdicts: Sized,
    ) -> None:
        self.queues = queues
        self.metrics = metrics
        self._is_leader = is_leader
        self.verdicts = verdicts  # the document reconciler's: how many roots
        self.task: asyncio.Task[None] | None = None

    def track(self) -> None:
        """Report when the documents of this full resync are all reconciled."""
        if self.task is not None and not self.task.done():
            return  # the pending one waits for the same queue to drain
        try:
            self.task = asyncio.get_running_loop().create_task(
                self._converged(self.queues.docs, time.time()), name="resync"
            )
        except RuntimeError:  # no loop (unit tests drive the controller synchronously)
            self.task = None

    async def _converged(self, queue: WorkQueue[DocKey], started: float) -> None:
        written = self._written()
        await queue.wait_idle()
        if queue is not self.queues.docs or not self._is_leader():
            return  # leadership ended meanwhile: that resync never converged
        now = time.time()
        self.metrics.resync_completed.set(now)
        self.metrics.resync_duration.set(now - started)
        log.info(
            "full resync converged",
            extra={
                "seconds": round(now - started, 3),
                "documents_written": self._written() - written,
                "roots": len(self.verdicts),
            },
        )

    def _written(self) -> float:
        return sum(
            s.value
            for metric in self.metrics.documents_written.collect()
            for s in metric.samples
            if s.name.endswith("_total")
        )
