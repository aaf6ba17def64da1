"""List+watch of one kind (client-go's reflector, in asyncio), shared by the annotator's
informers (annotator/informer.py) and the webhook's owner index (webhook/ownerwatch.py).

- The list is paged (`limit`, `continue`: aibom_edge.listing, the loop every
  reader pages with). Pages are pipelined: as soon as
  page N is decoded, the request for page N+1 (its continue token is in page
  N's metadata) is sent, and only then are page N's items handed to the list
  pass, so the API server serves the next page while this process slims and
  stores the current one (on two cores the two costs overlap instead of
  alternating). At most one page is in flight ahead of the one being
  processed (the memory bound: two pages), and the loop gets a turn between
  pages. A completed list ends the pass (`ListPass.done`): what the sink knew
  of the kind but the list did not contain is dropped.
- The watch starts at the list's resourceVersion, with bookmarks
  (`allowWatchBookmarks`) so the resourceVersion to resume from stays fresh
  even when the kind is quiet. A watch the server ends (`timeoutSeconds`) is
  resumed from the last resourceVersion; `410 Gone` relists.
- Errors are told apart by HTTP status, never by message text: `429`, or a
  5xx with `Retry-After`, waits as long as the server asked (capped) and
  resumes the watch from the last resourceVersion (a throttled list page is
  asked for again with the same continue token); other 5xx and connection
  errors back off exponentially (jitter from an injected source, capped) and
  resume likewise; `401/403/404` on a watch relist (the list says which). A
  `410` on a `continue` restarts the list with a new pass (what the aborted
  pass saw is forgotten). A watch silent for `idle_timeout` (no event, no
  bookmark: a half-open connection) is restarted from the last
  resourceVersion. A list refused with 401/403 (RBAC not granted yet) is
  retried every `forbidden_retry` seconds; a kind not served (404, or absent
  from discovery) ends the reflector, or with `absent_retry` is looked up
  again that often.
- What was stored is kept through errors: a degraded watch never empties
  the sink.

What differs between the two users is passed in, not copied: where objects go
(the hooks `begin_list`, `upsert`, `delete` of a subclass), whether to ask for
metadata only (PartialObjectMetadata), how the resource is found (`resolve`),
what to do when it is not served, the logger and its message, and the
callbacks that feed each one's metrics (`on_state`, `on_restart`).
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
    KubeResponse,
    WatchExpired,
    retry_after,
)
from aibom_edge.listing import message_of, pages
from aibom_edge.schema import KindSchema

# The longest server-side watch (`timeoutSeconds`) a --watch-timeout flag may ask for.
MAX_WATCH_TIMEOUT = 3600
# Objects per list page. kube-apiserver (1.36) answers each continued page from
# its watch cache. On a fresh API server, listing 100,000 Pods cost it 13.9 s
# of CPU in pages of 500, 6.9 s in pages of 1,000 and 11.3 s in pages of 2,000
# (medians of 3, bench/list_bench.py); on one that had served many such
# lists, one page size varied from 8.4 to 20.9 s between runs, more than the
# sizes differ (BENCHMARKS.md). So 1,000 is a middle, not a proven optimum.
# Two pages are held here at once (pipelining): about 9 MB of Pod JSON.
DEFAULT_PAGE_SIZE = 1000


class ReflectorState(StrEnum):
    LISTING = "listing"
    WATCHING = "watching"
    BACKOFF = "backoff"
    FORBIDDEN = "forbidden"
    NO_MATCH = "no_match"  # the API server does not serve the kind
    STOPPED = "stopped"


class ListPass(Protocol):
    """One pass of a (paged) list: its items, then `done` once the list completed.
    A pass aborted (410 on a continue, an error) is dropped without `done`."""

    def add(self, obj: Obj) -> None: ...

    def done(self) -> None: ...


class Refused(Exception):
    """401/403 (not allowed) or 404 / not in discovery (not served)."""

    def __init__(self, state: ReflectorState, message: str) -> None:
        super().__init__(message)
        self.state = state


class _Idle(Exception):
    pass


def complete(res: ApiResource, obj: Obj, *, metadata_only: bool) -> Obj:
    """The object with the resource's apiVersion and kind: list items of built-in kinds
    carry none, and PartialObjectMetadata carries its own (ours are the object's)."""
    if metadata_only:
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
    else:
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
    return obj


class Reflector:
    """List and watch one kind until cancelled (module doc). Subclasses say where the
    objects go: `begin_list`, `upsert`, `delete`."""

    def __init__(
        self,
        kube: Kube,
        gk: GroupKind,
        *,
        resolve: Callable[[], Awaitable[ApiResource | None]],
        log: logging.Logger,
        retry_message: str = "list/watch failed; retrying",
        label_selector: str | None = None,
        metadata_only: bool = False,
        schema: KindSchema | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        list_timeout: float = 120.0,
        watch_timeout: int = 300,
        idle_timeout: float = 90.0,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        forbidden_retry: float = 30.0,
        absent_retry: float | None = None,
        sync_timeout: float = 30.0,
        on_state: Callable[[Any], None] = lambda r: None,
        on_restart: Callable[[GroupKind, str], None] = lambda gk, why: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.kube = kube
        self.gk = gk
        self._resolve = resolve
        self._log = log
        self._retry_message = retry_message
        self.label_selector = label_selector
        self.metadata_only = metadata_only
        # Decodes list pages and watch events into only the fields the subclass
        # keeps (aibom_edge.schema); None: whole objects.
        self.schema = schema
        self.page_size = page_size
        self.list_timeout = list_timeout
        self.watch_timeout = watch_timeout
        # The server ends the watch after timeoutSeconds and sends a bookmark
        # about once a minute meanwhile: a stream silent for this long is a
        # half-open connection or a stuck server, not a quiet kind.
        self.idle_timeout = min(idle_timeout, watch_timeout + 30)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.forbidden_retry = forbidden_retry
        self.absent_retry = absent_retry
        self.sync_timeout = sync_timeout
        self._on_state = on_state
        self._on_restart = on_restart
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.state = ReflectorState.LISTING
        self.last_error = ""
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.started_at = clock()
        self.unhealthy_since: float | None = None  # when it last stopped watching
        self._failures = 0

    # -- where objects go (subclasses) ---------------------------------------------------

    def begin_list(self, res: ApiResource) -> ListPass:
        raise NotImplementedError

    def upsert(self, res: ApiResource, obj: Obj) -> None:
        raise NotImplementedError

    def delete(self, res: ApiResource, obj: Obj) -> None:
        raise NotImplementedError

    # -- state ---------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """Listed once and watching now."""
        return self.synced.is_set() and self.state is ReflectorState.WATCHING

    def _set(self, state: ReflectorState, error: str = "") -> None:
        if state is ReflectorState.WATCHING:
            self.unhealthy_since = None
        elif self.unhealthy_since is None:
            self.unhealthy_since = self._clock()
        changed = state is not self.state or error != self.last_error
        self.state = state
        self.last_error = error
        if changed:
            self._on_state(self)

    def _restarted(self, reason: str) -> None:
        self._on_restart(self.gk, reason)

    async def run(self) -> None:
        """List and watch until cancelled (or, without `absent_retry`, until the kind
        is not served)."""
        need_list = True
        ended_absent = False
        try:
            while True:
                try:
                    res = await self._resolve()
                    if res is None:
                        raise Refused(ReflectorState.NO_MATCH, f"{self.gk} is not served")
                    if need_list:
                        self._set(ReflectorState.LISTING)
                        self.resource_version = await self._list(res)
                        self.synced.set()
                        need_list = False
                    self._set(ReflectorState.WATCHING)
                    await self._watch(res)
                    self._failures = 0
                    self._restarted("closed")
                except WatchExpired:
                    need_list = True
                    self._restarted("expired")
                except Refused as exc:
                    need_list = True
                    self._set(exc.state, str(exc))
                    if exc.state is ReflectorState.FORBIDDEN:
                        await self._sleep(self.forbidden_retry)
                    elif self.absent_retry is None:
                        ended_absent = True  # whoever started it restarts it when served
                        return
                    else:
                        await self._sleep(self.absent_retry)
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
            if not ended_absent:  # else keep saying why it ended
                self._set(ReflectorState.STOPPED)

    def backoff_delay(self, retry_after: float | None = None) -> float:
        """The next wait: the server's Retry-After if it sent one, else exponential from
        `backoff_base` with jitter (x0.8-1.2, from the injected `rand`); never above
        `backoff_cap`."""
        self._failures += 1
        if retry_after is not None:
            return min(self.backoff_cap, retry_after)
        exponent = min(self._failures - 1, 30)
        jitter = 0.8 + 0.4 * self._rand()
        return min(self.backoff_cap, self.backoff_base * 2.0**exponent * jitter)

    async def _backoff(self, error: str, retry_after: float | None = None) -> None:
        self._set(ReflectorState.BACKOFF, error)
        delay = self.backoff_delay(retry_after)
        self._log.warning(
            self._retry_message,
            extra={
                "kind": str(self.gk),
                "error": error[:300],
                "retry_in_s": round(delay, 2),
                "retry_after": retry_after,
            },
        )
        await self._sleep(delay)

    # -- list ----------------------------------------------------------------------------

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    async def _page(self, path: str, params: dict[str, str]) -> KubeResponse:
        return await self.kube.request(
            "GET",
            path,
            params=params,
            timeout=self.list_timeout,
            accept=METADATA_LIST if self.metadata_only else None,
            decode=self.schema.page if self.schema is not None else None,
        )

    async def _list(self, res: ApiResource) -> str:
        """One complete list into a pass (the one paged list, aibom_edge.listing, with
        pages asked for ahead); its resourceVersion."""
        path = res.path()

        async def refused(resp: KubeResponse) -> None:
            why = f"list {path}: HTTP {resp.status} {message_of(resp.body)}"
            if resp.status in (401, 403):
                raise Refused(ReflectorState.FORBIDDEN, why)
            if resp.status == 404:
                raise Refused(ReflectorState.NO_MATCH, why)
            wait = retry_after(resp.headers)
            if resp.status == 429 or (resp.status >= 500 and wait is not None):
                # Throttled: wait as told and ask for the same page again (the
                # continue token stays valid for minutes; if not, a 410 relists).
                self._restarted("throttled")
                await self._backoff(why, wait)
                self._set(ReflectorState.LISTING)
                return
            raise KubeError(why, status=resp.status, retry_after=wait)

        listed: ListPass | None = None
        stream = pages(
            lambda query: self._page(path, query),
            self._params(),
            limit=self.page_size,
            refused=refused,
            ahead=True,
            # An object the aborted pass listed may have been deleted since: the
            # new pass forgets it (keeping its key would keep a ghost).
            on_expired=lambda: self._restarted("continue_expired"),
        )
        async with contextlib.aclosing(stream):  # a failed pass drops the page asked ahead
            async for page in stream:
                if page.fresh or listed is None:
                    listed = self.begin_list(res)
                for item in page.items:
                    listed.add(item)
                if page.last:
                    listed.done()
                    self._failures = 0
                    return page.resource_version
        raise AssertionError("unreachable: pages ends with the last page")

    # -- watch ---------------------------------------------------------------------------

    async def _watch(self, res: ApiResource) -> None:
        params = {
            **self._params(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        stream = self.kube.watch(
            res.path(),
            params,
            accept=METADATA_WATCH if self.metadata_only else None,
            decode=self.schema.event if self.schema is not None else None,
        )
        idle = self.idle_timeout
        try:
            while True:
                try:
                    async with asyncio.timeout(idle):
                        event = await anext(stream, None)
                except TimeoutError:
                    raise _Idle(f"watch {res.path()}: no data for {idle:g} s") from None
                if event is None:
                    return
                self._failures = 0
                self._event(res, event)
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]

    def _event(self, res: ApiResource, event: dict[str, Any]) -> None:
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        rv = str(metadata(raw).get("resourceVersion", ""))
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED"):
            self.upsert(res, raw)
        elif kind == "DELETED":
            self.delete(res, raw)
        if rv:
            self.resource_version = rv
