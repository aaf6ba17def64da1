"""The annotator's informer: one kind listed and watched into the cache.

The list+watch itself (paged and pipelined list, watch with bookmarks, 410
relist, 429/Retry-After, backoff, idle timeout, 403/404) is
`aibom_edge.reflector.Reflector`, shared with the webhook's owner index. What
is the annotator's own: objects are completed (apiVersion/kind), slimmed
(`annotator.slim`) and delivered to a `Sink` (the controller, which feeds the
cache) as they arrive, list pages one at a time; a completed list deletes the
keys the sink knew but the list did not contain (objects removed while we were
not watching); a kind the API server does not serve (404) ends the informer,
and the supervisor restarts it when discovery sees the kind again. Cached
objects are kept through errors: a degraded watch never empties the cache
(docs/architecture.md's degradation table: the root's AIBOM is kept).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from aibom_core.kinds import GroupKind
from aibom_core.objects import Obj
from aibom_edge.kube import ApiResource, Kube
from aibom_edge.reflector import Reflector, ReflectorState, complete

log = logging.getLogger("annotator.informer")

InformerState = ReflectorState


class Sink(Protocol):
    """Where an informer delivers (the controller, which feeds the cache)."""

    def upsert(self, gk: GroupKind, obj: Obj) -> str: ...

    def delete(self, gk: GroupKind, obj: Obj) -> None: ...

    def relisted(self, gk: GroupKind, seen: set[str]) -> None: ...

    def status(self, informer: Informer) -> None: ...

    def restarted(self, gk: GroupKind, reason: str) -> None: ...


class _Pass:
    """One list pass: each item upserted at once, its key kept; `done` drops the rest."""

    def __init__(self, informer: Informer, res: ApiResource) -> None:
        self._informer, self._res = informer, res
        self.seen: set[str] = set()

    def add(self, obj: Obj) -> None:
        inf = self._informer
        self.seen.add(inf.sink.upsert(inf.gk, inf.complete(self._res, obj)))

    def done(self) -> None:
        self._informer.sink.relisted(self._informer.gk, self.seen)


class Informer(Reflector):
    """One kind into the sink. `options`: the reflector's (aibom_edge.reflector):
    `label_selector`, `metadata_only` (the cache keeps only the metadata of the kind,
    annotator.slim: the server is asked for PartialObjectMetadata), `page_size`,
    `watch_timeout`, `idle_timeout`, backoff, `forbidden_retry`, `sync_timeout`, and
    the injected clock, sleep and jitter source."""

    def __init__(
        self,
        kube: Kube,
        resource: ApiResource,
        *,
        gk: GroupKind,
        sink: Sink,
        slim: Callable[[Obj], Obj],
        **options: Any,
    ) -> None:
        super().__init__(
            kube,
            gk,
            resolve=self._resource,
            log=log,
            on_state=sink.status,
            on_restart=sink.restarted,
            **options,
        )
        self.resource = resource
        self.sink = sink
        self.slim = slim

    async def _resource(self) -> ApiResource:
        return self.resource

    @property
    def degraded(self) -> bool:
        """Never synced, and failing for longer than `sync_timeout` (e.g. a broken
        conversion webhook answering 500): the others must not wait for it."""
        return (
            not self.synced.is_set()
            and self.state is InformerState.BACKOFF
            and self._clock() - self.started_at > self.sync_timeout
        )

    @property
    def settled(self) -> bool:
        """Synced once, known not to be readable, or degraded: readiness does not wait."""
        return (
            self.synced.is_set()
            or self.state in (InformerState.FORBIDDEN, InformerState.NO_MATCH)
            or self.degraded
        )

    def complete(self, res: ApiResource, obj: Obj) -> Obj:
        return self.slim(complete(res, obj, metadata_only=self.metadata_only))

    def begin_list(self, res: ApiResource) -> _Pass:
        return _Pass(self, res)

    def upsert(self, res: ApiResource, obj: Obj) -> None:
        self.sink.upsert(self.gk, self.complete(res, obj))

    def delete(self, res: ApiResource, obj: Obj) -> None:
        self.sink.delete(self.gk, self.complete(res, obj))
