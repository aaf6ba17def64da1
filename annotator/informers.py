"""The informer supervisor: one informer per kind the annotator wants, as the API
serves them now.

Every `rediscovery_interval` it checks the guard (`annotator.guardwatch`),
rediscovers the API and runs one informer per wanted kind (tracked kinds,
walk-only intermediates, Namespaces, our ConfigMaps): a kind the server
does not serve gets none (and is `NoMatch` to the walk), a CRD installed
later gets one at the next rediscovery, an informer whose CRD went away
ends and its objects leave the cache. One kind's trouble never stops
another's informer. Their events go to the sink (`annotator.intake`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind
from aibom_core.objects import Obj
from aibom_core.walk import Reason
from aibom_edge.kube import ApiResource, Kube, KubeError
from annotator.cache import ClusterState, Dirty
from annotator.guardwatch import GuardWatch
from annotator.informer import Informer, Sink
from annotator.notices import Notices
from annotator.settings import Settings, wanted_kinds
from annotator.slim import keeps_metadata_only, schema_of

log = logging.getLogger("annotator")


class InformerSupervisor:
    def __init__(
        self,
        kube: Kube,
        *,
        settings: Settings,
        state: ClusterState,
        sink: Sink,
        slim: Callable[[Obj], Obj],
        guard: GuardWatch,
        notices: Notices,
        dirty: Callable[[Dirty], None],
        check_synced: Callable[[], None],
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.state = state
        self.sink = sink
        self.slim = slim
        self.guard = guard
        self.notices = notices
        self._dirty = dirty
        self._check_synced = check_synced  # after each round: all synced now?
        self.wanted = wanted_kinds(settings.registry)
        self.informers: dict[GroupKind, Informer] = {}
        self._tasks: dict[GroupKind, asyncio.Task[None]] = {}
        self.unserved: set[GroupKind] = set()

    def watched(self, gk: GroupKind) -> bool:
        informer = self.informers.get(gk)
        return informer is not None and informer.healthy

    async def supervise_once(self) -> None:
        await self.guard.check()
        try:
            await self.kube.discovery.refresh()
        except (KubeError, TimeoutError) as exc:
            log.warning(
                "discovery failed; keeping the informers we have", extra={"error": str(exc)}
            )
            return
        for gk in self.wanted:
            task = self._tasks.get(gk)
            if task is not None and not task.done():
                continue
            resource = self.kube.discovery.cached(gk)
            if resource is None:
                if gk not in self.unserved:
                    self.unserved.add(gk)
                    self.notices.once(
                        ("unserved", str(gk)), "kind not served; not watched", kind=str(gk)
                    )
                    self.informers.pop(gk, None)
                    dirty = (
                        self.state.drop_kind(gk) if gk not in (NAMESPACE, CONFIGMAP) else Dirty()
                    )
                    if gk not in (NAMESPACE, CONFIGMAP):
                        dirty.update(self.state.set_unavailable(gk, Reason.NO_MATCH))
                    self._dirty(dirty)
                continue
            if gk in self.unserved:
                self.unserved.discard(gk)
                self.notices.clear(("unserved", str(gk)))
                log.info("kind now served; starting its informer", extra={"kind": str(gk)})
            self._start_informer(gk, resource)
        self._check_synced()

    def _start_informer(self, gk: GroupKind, resource: ApiResource) -> None:
        informer = Informer(
            self.kube,
            resource,
            gk=gk,
            sink=self.sink,
            slim=self.slim,
            label_selector=self.settings.labels.selector if gk == CONFIGMAP else None,
            page_size=self.settings.page_size,
            watch_timeout=self.settings.watch_timeout,
            forbidden_retry=self.settings.forbidden_retry,
            sync_timeout=self.settings.sync_timeout,
            idle_timeout=self.settings.watch_idle_timeout,
            metadata_only=keeps_metadata_only(self.settings.registry, gk),
            schema=schema_of(self.settings.registry, gk),
        )
        self.informers[gk] = informer
        self._tasks[gk] = asyncio.create_task(informer.run(), name=f"informer-{gk}")

    async def run(self) -> None:
        """Rediscover every `rediscovery_interval`."""
        while True:
            await asyncio.sleep(self.settings.rediscovery_interval)
            await self.supervise_once()

    def synced(self) -> bool:
        """Every kind's first list has synced, or the kind is not served (Namespaces and
        our ConfigMaps: synced, whatever else)."""
        required = (NAMESPACE, CONFIGMAP)
        if not all(gk in self.informers and self.informers[gk].synced.is_set() for gk in required):
            return False
        for gk in self.wanted:
            informer = self.informers.get(gk)
            if gk in self.unserved:
                continue
            if informer is None or not informer.settled:
                return False
        return True

    def waiting(self) -> list[str]:
        """The served kinds whose first list has not settled yet."""
        return sorted(
            str(gk)
            for gk in self.wanted
            if gk not in self.unserved
            and (gk not in self.informers or not self.informers[gk].settled)
        )

    def degraded(self) -> list[Informer]:
        """Informers whose first list has been failing for too long, not yet reported."""
        return [
            informer
            for informer in list(self.informers.values())
            if informer.degraded and self.state.graph.unavailable.get(informer.gk) is None
        ]

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
