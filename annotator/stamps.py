"""The stamp reconciler: an object whose `aibom.dev/` stamp annotations no longer
say what the cache says (its root, its rollup) is patched back.

It executes `annotator.plan.plan_stamp` with `annotator.writer`, in one task
taking object keys from the stamps queue. A kind another writer keeps
undoing is left alone for a while (`annotator.ledger`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aibom_core.kinds import GroupKind
from aibom_edge.kube import Kube, KubeError
from annotator.cache import ClusterState
from annotator.ledger import RepairLedger
from annotator.metrics import Metrics
from annotator.notices import Notices
from annotator.plan import plan_stamp
from annotator.settings import Settings
from annotator.workqueue import Queues, QueueShutDown
from annotator.writer import NotLeader, WriteError, Writer

log = logging.getLogger("annotator")


def stamp_scope(settings: Settings, state: ClusterState) -> frozenset[str] | None:
    """The namespaces whose stamps are repaired (None: all of them)."""
    if settings.stamp_mode == "all":
        return None
    return state.opted_in_set


class StampReconciler:
    def __init__(
        self,
        kube: Kube,
        *,
        settings: Settings,
        state: ClusterState,
        queues: Queues,
        writer: Writer,
        metrics: Metrics,
        notices: Notices,
        watched: Callable[[GroupKind], bool],
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.state = state
        self.queues = queues
        self.writer = writer
        self.metrics = metrics
        self.notices = notices
        self.watched = watched  # whether a kind's informer is healthy
        self.ledger = RepairLedger(now=time.monotonic)

    async def run(self) -> None:
        """The one stamp worker: take an object's key, repair its stamp, retry if that failed."""
        while True:
            try:
                key = await self.queues.stamps.get()
            except QueueShutDown:
                return
            started = time.perf_counter()
            result = "error"
            try:
                result = await self.repair_stamp(key)
                self.queues.stamps.forget(key)
            except NotLeader:
                result = "not_leader"
            except asyncio.CancelledError:
                raise
            except (WriteError, KubeError, TimeoutError) as exc:
                self.queues.stamps.add_rate_limited(key)
                self.metrics.errors.labels("stamp").inc()
                log.warning(
                    "stamp repair failed; will retry", extra={"key": key, "error": str(exc)}
                )
            except Exception:
                self.queues.stamps.add_rate_limited(key)
                self.metrics.errors.labels("stamp").inc()
                log.exception("stamp check crashed (a bug)", extra={"key": key})
            finally:
                self.queues.stamps.done(key)
                self.metrics.reconcile_duration.labels("stamps", result).observe(
                    time.perf_counter() - started
                )
            await asyncio.sleep(0)

    async def repair_stamp(self, key: str) -> str:
        plan = plan_stamp(
            self.state,
            key,
            keys=self.settings.keys,
            watched=self.watched,
            namespaces=stamp_scope(self.settings, self.state),
        )
        if plan is None:
            self.ledger.forget(key)
            return "gone"
        if plan.skipped:
            self.metrics.stamp_skips.labels(plan.skipped).inc()
            return "skipped"
        if plan.patch is None:
            return "unchanged"
        resource = self.kube.discovery.cached(plan.ref.group_kind)
        if resource is None:
            return "gone"
        if self.ledger.contested(key, plan.stamp):
            self.metrics.stamp_skips.labels("contested").inc()
            self.notices.once(
                ("stamp-contested", plan.ref.group, plan.ref.kind),
                "another writer keeps undoing stamp repairs of this kind (without the webhook, "
                "the Deployment controller copies a Deployment's annotations onto its "
                "ReplicaSets); leaving such objects alone for a while",
                kind=str(plan.ref.group_kind),
                example=f"{plan.ref.namespace}/{plan.ref.name}",
            )
            return "contested"
        outcome = await self.writer.patch_stamp(resource, plan.ref, plan.patch)
        if outcome == "patched":
            self.ledger.record(key, plan.stamp)
            self.metrics.stamp_repairs.labels(plan.ref.kind).inc()
            log.info(
                "stamp repaired",
                extra={
                    "object": f"{plan.ref.namespace}/{plan.ref.hop}",
                    "annotations": plan.patch["metadata"]["annotations"],
                },
            )
        elif outcome == "conflict":
            self.queues.stamps.add_after(key, self.settings.stamp_settle)
        elif outcome == "forbidden":
            self.notices.once(
                ("stamp-forbidden", plan.ref.group, plan.ref.kind),
                "may not patch this kind; its stamps are not repaired",
                kind=str(plan.ref.group_kind),
            )
        return outcome
