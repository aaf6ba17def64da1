"""The event intake: the informers' sink (`annotator.informer.Sink`).

Each event goes into the cache (`ClusterState`), which says which keys it
made dirty; the leader queues them (documents at once, stamps after a
settle delay). Standbys keep the same warm cache and queue nothing; a full
resync (the first sync, leadership, an RBAC or CRD change, a rotated
signing key) queues every document and stamp.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aibom_core.kinds import GroupKind
from aibom_core.objects import Obj
from aibom_core.walk import Reason
from annotator.cache import ClusterState, Dirty
from annotator.informer import Informer, InformerState
from annotator.keys import SweepKey
from annotator.metrics import Metrics
from annotator.notices import Notices
from annotator.resync import ResyncTracker
from annotator.settings import Settings
from annotator.stamps import stamp_scope
from annotator.workqueue import Queues

log = logging.getLogger("annotator")


class Intake:
    def __init__(
        self,
        *,
        settings: Settings,
        state: ClusterState,
        queues: Queues,
        metrics: Metrics,
        notices: Notices,
        synced: Callable[[], bool],
        leading: Callable[[], bool],
        check_synced: Callable[[], None],
        resync: ResyncTracker,
    ) -> None:
        self.settings = settings
        self.state = state
        self.queues = queues
        self.metrics = metrics
        self.notices = notices
        self._synced = synced
        self._leading = leading  # leading now (not fenced: what it queues is checked later)
        self._check_synced = check_synced
        self._resync = resync

    def upsert(self, gk: GroupKind, obj: Obj) -> str:
        self.dirty(self.state.upsert(gk, obj))
        return self.state.key(gk, obj)

    def delete(self, gk: GroupKind, obj: Obj) -> None:
        self.dirty(self.state.delete(gk, obj))

    def relisted(self, gk: GroupKind, seen: set[str]) -> None:
        dirty = Dirty()
        for key in list(self.state.keys_of_kind(gk)):
            if key not in seen:
                dirty.update(self.state.delete_key(gk, key))
        self.dirty(dirty)

    def restarted(self, gk: GroupKind, reason: str) -> None:
        self.metrics.watch_restarts.labels(gk.group or "core", gk.kind, reason).inc()

    def status(self, informer: Informer) -> None:
        gk = informer.gk
        group = gk.group or "core"
        for state in InformerState:
            self.metrics.watch_state.labels(group, gk.kind, state.value).set(
                1 if informer.state is state else 0
            )
        self.metrics.watch_healthy.labels(group, gk.kind).set(1 if informer.healthy else 0)
        if informer.state is InformerState.FORBIDDEN:
            self.notices.once(
                ("forbidden", str(gk)),
                "cannot list a kind: walks through it end as unresolved (Forbidden)",
                kind=str(gk),
                error=informer.last_error,
            )
            self.dirty(self.state.set_unavailable(gk, Reason.FORBIDDEN))
        elif informer.state is InformerState.NO_MATCH:
            log.warning("kind no longer served; dropping its cache", extra={"kind": str(gk)})
            dirty = self.state.drop_kind(gk)
            dirty.update(self.state.set_unavailable(gk, Reason.NO_MATCH))
            self.dirty(dirty)
        elif informer.degraded:
            self.notices.once(
                ("degraded", str(gk)),
                "kind cannot be listed; walks through it end unresolved (Timeout) until it can",
                kind=str(gk),
                error=informer.last_error,
            )
            self.dirty(self.state.set_unavailable(gk, Reason.TIMEOUT))
        elif informer.state is InformerState.WATCHING:
            self.notices.clear(("forbidden", str(gk)))
            self.notices.clear(("degraded", str(gk)))
            self.dirty(self.state.set_unavailable(gk, None))
        self._check_synced()

    def dirty(self, dirty: Dirty) -> None:
        if not dirty or not self._leading() or not self._synced():
            return  # standbys queue nothing; the first sync ends with a full resync
        if dirty.full:
            self.full_resync()
            return
        for root in dirty.roots:
            self.queues.docs.add(root)
        for sweep in dirty.sweeps:
            self.queues.docs.add(sweep)
        if self.settings.stamp_mode != "off":
            scope = stamp_scope(self.settings, self.state)
            for key in dirty.stamps:
                ref = self.state.graph.ref(key)
                if ref is None or (scope is not None and ref.namespace not in scope):
                    continue
                # Settle first: the webhook stamped the object from live GETs a
                # moment ago, and our cache may not have seen its owner yet.
                self.queues.stamps.add_after(key, self.settings.stamp_settle)

    def full_resync(self) -> None:
        """Queue every document and every stamp (start of leadership, RBAC/CRD change)."""
        if not self._leading():
            return
        for root in self.state.roots(self.state.opted_in_namespaces()):
            self.queues.docs.add(root)
        for ns in self.state.doc_namespaces():
            self.queues.docs.add(SweepKey(ns))
        if self.settings.stamp_mode != "off":
            scope = stamp_scope(self.settings, self.state)
            for key in list(self.state.graph.keys()):
                ref = self.state.graph.ref(key)
                if ref is not None and (scope is None or ref.namespace in scope):
                    self.queues.stamps.add_after(key, self.settings.stamp_settle)
        self._resync.track()
