"""List+watch of one resource into the cache (client-go's reflector, in asyncio).

- The list is paged (`limit`, `continue`) so the 10,000 Pods of a large
  namespace never sit in memory as one response; each page is slimmed
  (`annotator.slim`) and handed to the sink before the next is read. When
  the list completes, keys the sink knew but the list did not contain are
  deleted (objects removed while we were not watching).
- The watch starts at the list's resourceVersion, with bookmarks
  (`allowWatchBookmarks`) so the resourceVersion we would resume from stays
  fresh even when the kind is quiet. A watch the server ends normally
  (`timeoutSeconds`) is resumed from the last resourceVersion; `410 Gone`
  (too old: history is about 5 minutes) means a relist.
- Errors are told apart by HTTP status, never by message text: `410`
  relists; `429`, or a 5xx with `Retry-After`, waits as long as the server
  asked (capped) and resumes the watch from the last resourceVersion (a
  throttled list page is asked for again with the same continue token);
  other 5xx and connection errors back off exponentially (jitter from an
  injected source, capped) and resume likewise; `401/403/404` on a watch
  relist (the list says which). A 410 on a `continue` restarts the list and
  forgets the keys the aborted pass saw. A watch silent for `idle_timeout`
  (no event, no bookmark: a half-open connection) is restarted from the
  last resourceVersion. A kind the API
  server does not serve (404) ends the informer, the supervisor restarts it
  when discovery sees the kind again; a kind we may not list (403) is
  reported and retried slowly, so RBAC granted later is picked up.
- Cached objects are kept through errors: a degraded watch never empties
  the cache (docs/architecture.md's degradation table: the root's AIBOM is kept).

The informer only reads; it never blocks the loop for long (pages are
parsed one at a time and the loop gets a turn between them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, Protocol

from aibom_core.kinds import GroupKind
from aibom_core.objects import Obj, metadata
from aibom_edge.kube import (
    METADATA_LIST,
    METADATA_WATCH,
    ApiResource,
    Kube,
    KubeError,
    WatchExpired,
    retry_after,
)

log = logging.getLogger("annotator.informer")


class InformerState(StrEnum):
    LISTING = "listing"
    WATCHING = "watching"
    BACKOFF = "backoff"
    FORBIDDEN = "forbidden"
    NO_MATCH = "no_match"
    STOPPED = "stopped"


class Sink(Protocol):
    """Where an informer delivers (the controller, which feeds the cache)."""

    def upsert(self, gk: GroupKind, obj: Obj) -> str: ...

    def delete(self, gk: GroupKind, obj: Obj) -> None: ...

    def relisted(self, gk: GroupKind, seen: set[str]) -> None: ...

    def status(self, informer: Informer) -> None: ...

    def restarted(self, gk: GroupKind, reason: str) -> None: ...


class _Forbidden(Exception):
    pass


class _NoMatch(Exception):
    pass


class _Idle(Exception):
    pass


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: ApiResource,
        *,
        gk: GroupKind,
        sink: Sink,
        slim: Callable[[Obj], Obj],
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        forbidden_retry: float = 30.0,
        sync_timeout: float = 30.0,
        idle_timeout: float = 90.0,
        metadata_only: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.gk = gk
        self.sink = sink
        self.slim = slim
        self.label_selector = label_selector
        # The cache keeps only the metadata of this kind (annotator.slim): ask
        # the server for nothing more (PartialObjectMetadata).
        self.metadata_only = metadata_only
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.forbidden_retry = forbidden_retry
        self.state = InformerState.LISTING
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.last_error = ""
        self.relists = 0
        self._failures = 0
        self.sync_timeout = sync_timeout
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.waits: list[float] = []  # backoff delays taken (tests, logs)
        self.started_at = clock()

    @property
    def healthy(self) -> bool:
        return self.synced.is_set() and self.state is InformerState.WATCHING

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

    def _set(self, state: InformerState, error: str = "") -> None:
        changed = state is not self.state or error != self.last_error
        self.state = state
        self.last_error = error
        if changed:
            self.sink.status(self)

    async def run(self) -> None:
        """List and watch until cancelled, or until the server stops serving the kind."""
        need_list = True
        try:
            while True:
                try:
                    if need_list:
                        self._set(InformerState.LISTING)
                        self.resource_version = await self._list()
                        self.relists += 1
                        self.synced.set()
                        need_list = False
                    self._set(InformerState.WATCHING)
                    await self._watch()
                    self._failures = 0
                    self._restarted("closed")
                except WatchExpired:
                    need_list = True
                    self._restarted("expired")
                except _Forbidden as exc:
                    need_list = True
                    self._set(InformerState.FORBIDDEN, str(exc))
                    await self._sleep(self.forbidden_retry)
                except _NoMatch as exc:
                    self._set(InformerState.NO_MATCH, str(exc))
                    return
                except _Idle as exc:
                    # A stream that went silent (no event, no bookmark): a
                    # half-open connection. Resume from where we were.
                    self._restarted("idle")
                    await self._backoff(str(exc))
                except KubeError as exc:
                    # Decided by the status, never by the text: 401/403/404 on
                    # a watch mean RBAC or the CRD changed under us, and the
                    # list tells which; 429 and 5xx (with or without
                    # Retry-After) and connection trouble resume the watch
                    # from the last resourceVersion after a backoff.
                    if exc.status in (401, 403, 404):
                        need_list = True
                    self._restarted("throttled" if exc.throttled else "error")
                    await self._backoff(str(exc) or type(exc).__name__, exc.retry_after)
                except (TimeoutError, ValueError) as exc:
                    self._restarted("error")
                    await self._backoff(str(exc) or type(exc).__name__)
        finally:
            if self.state is not InformerState.NO_MATCH:  # keep saying why it ended
                self._set(InformerState.STOPPED)

    def backoff_delay(self, retry_after: float | None = None) -> float:
        """The next wait: the server's Retry-After if it sent one, else exponential with
        jitter (0.8-1.2, from the injected `rand`); both capped at `backoff_cap`."""
        if retry_after is not None:
            delay = min(self.backoff_cap, retry_after)
        else:
            delay = min(self.backoff_cap, self.backoff_base * 2 ** min(self._failures, 30))
            delay *= 0.8 + 0.4 * self._rand()
        self._failures += 1
        return delay

    async def _backoff(self, error: str, retry_after: float | None = None) -> None:
        self._set(InformerState.BACKOFF, error)
        delay = self.backoff_delay(retry_after)
        self.waits.append(delay)
        log.warning(
            "list/watch failed; retrying",
            extra={
                "kind": str(self.gk),
                "error": error[:300],
                "retry_in_s": round(delay, 2),
                "retry_after": retry_after,
            },
        )
        await self._sleep(delay)

    def _restarted(self, reason: str) -> None:
        self.sink.restarted(self.gk, reason)

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    def _complete(self, obj: Any) -> Obj | None:
        if not isinstance(obj, dict):
            return None
        if self.metadata_only:
            # PartialObjectMetadata says so in its apiVersion/kind: the object's are ours.
            obj["apiVersion"] = self.resource.api_version
            obj["kind"] = self.resource.kind
        else:
            # List items of built-in kinds carry no apiVersion/kind.
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
        return self.slim(obj)

    async def _list(self) -> str:
        path = self.resource.path()
        seen: set[str] = set()
        params = {**self._params(), "limit": str(self.page_size)}
        while True:
            if self.metadata_only:
                resp = await self.kube.request(
                    "GET", path, params=params, timeout=120, accept=METADATA_LIST
                )
            else:
                resp = await self.kube.request("GET", path, params=params, timeout=120)
            if resp.status == 410 and "continue" in params:
                # The continue token expired mid-list: start over, and forget
                # what the aborted pass saw (an object it listed may have been
                # deleted since; keeping its key would keep a ghost).
                params.pop("continue")
                seen = set()
                self._restarted("continue_expired")
                continue
            if resp.status in (401, 403):
                raise _Forbidden(f"list {path}: {resp.status} {_message(resp.body)}")
            if resp.status == 404:
                raise _NoMatch(f"list {path}: 404 {_message(resp.body)}")
            if resp.status == 429 or (resp.status >= 500 and retry_after(resp.headers) is not None):
                # Throttled: wait as told and ask for the same page again (the
                # continue token stays valid for minutes; if not, 410 above).
                self._restarted("throttled")
                await self._backoff(
                    f"list {path}: HTTP {resp.status} {_message(resp.body)}",
                    retry_after(resp.headers),
                )
                self._set(InformerState.LISTING)
                continue
            if not resp.ok or not isinstance(resp.body, dict):
                raise KubeError(
                    f"list {path}: HTTP {resp.status} {_message(resp.body)}", status=resp.status
                )
            body = resp.body
            items = body.get("items") or []
            for item in items:
                obj = self._complete(item)
                if obj is not None:
                    seen.add(self.sink.upsert(self.gk, obj))
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                break
            params["continue"] = str(token)
            del body, items
            await asyncio.sleep(0)  # a turn for the loop between pages
        self._failures = 0
        self.sink.relisted(self.gk, seen)
        return rv

    async def _watch(self) -> None:
        params = {
            **self._params(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        stream = (
            self.kube.watch(self.resource.path(), params, accept=METADATA_WATCH)
            if self.metadata_only
            else self.kube.watch(self.resource.path(), params)
        )
        # The server ends the watch after timeoutSeconds and sends a bookmark
        # about once a minute meanwhile: a stream silent for `idle_timeout`
        # is a half-open connection or a stuck server, not a quiet kind.
        idle = min(self.idle_timeout, self.watch_timeout + 30)
        try:
            while True:
                try:
                    async with asyncio.timeout(idle):
                        event = await anext(stream, None)
                except TimeoutError:
                    raise _Idle(f"watch {self.resource.path()}: no data for {idle:g} s") from None
                if event is None:
                    return
                self._failures = 0
                self._event(event)
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        rv = str(metadata(raw).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        obj = self._complete(raw)
        if obj is None:
            return
        if kind in ("ADDED", "MODIFIED"):
            self.sink.upsert(self.gk, obj)
        elif kind == "DELETED":
            self.sink.delete(self.gk, obj)
        if rv:
            self.resource_version = rv


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or "")[:300]
    return str(body)[:300]
