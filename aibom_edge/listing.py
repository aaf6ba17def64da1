"""A paged LIST (`limit`, `continue`): the one loop every reader pages with.

The reflector (aibom_edge.reflector: the annotator's informers, the webhook's
owner index), `kubectl aibom`'s live source and `aibom-rollup verify` all list
through `pages`, so each gets the same answer to a continue token that expired
mid-list: `410 Gone` on a `continue` starts the list over (a new pass; what the
aborted pass gave is void, `Page.fresh` says so), as client-go's pager does.

What differs between the readers is passed in: how a page is asked for
(`fetch`: the reflector's decodes into slim objects, and may ask for metadata
only), what a refused page means (`refused`: raise to stop; return to ask for
the same page again, as the reflector does after a throttling wait), and
whether the next page is asked for before this one is handed over (`ahead`:
the reflector overlaps the API server's work with its own).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from aibom_core.objects import Obj
from aibom_edge.wire import KubeError, KubeResponse, retry_after

Fetch = Callable[[dict[str, str]], Coroutine[Any, Any, KubeResponse]]
Refused = Callable[[KubeResponse], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list. `fresh`: the first page of a pass (the first of all, or
    the first after a 410 on a continue token: drop what earlier pages gave)."""

    items: list[Obj]
    resource_version: str
    fresh: bool
    last: bool


def message_of(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or "")[:300]
    return str(body)[:300]


async def refuse(resp: KubeResponse) -> None:
    """The default for a refused page: KubeError with its status (and Retry-After)."""
    raise KubeError(
        f"list: HTTP {resp.status} {message_of(resp.body)}",
        status=resp.status,
        retry_after=retry_after(resp.headers),
    )


def _retrieve(task: asyncio.Task[KubeResponse]) -> None:
    if not task.cancelled():
        task.exception()  # a dropped page's error is not an unretrieved one


async def pages(
    fetch: Fetch,
    params: Mapping[str, str],
    *,
    limit: int,
    refused: Refused = refuse,
    ahead: bool = False,
    on_expired: Callable[[], None] = lambda: None,
) -> AsyncGenerator[Page, None]:
    """The pages of a list, until the last (module doc). `fetch` gets the query of each
    page (`params`, `limit`, `continue`); `refused` sees every response that is not a
    page (a 2xx JSON object) but a 410 on a continue token, which restarts the list
    (and calls `on_expired`). With `ahead`, page N+1 is requested (and the loop
    given a turn) before page N is yielded: at most one page is in flight ahead."""
    first = {**params, "limit": str(limit)}
    query = first
    fresh = True
    pending: asyncio.Task[KubeResponse] | None = None
    try:
        resp = await fetch(query)
        while True:
            if resp.status == 410 and "continue" in query:
                # The continue token expired mid-list: start over with a new pass
                # (an object the aborted pass listed may have been deleted since).
                on_expired()
                query, fresh = first, True
                resp = await fetch(query)
                continue
            body = resp.body
            if not resp.ok or not isinstance(body, dict):
                await refused(resp)  # raises, or returns: the same page again
                resp = await fetch(query)
                continue
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            page = Page(
                items=[i for i in body.get("items") or () if isinstance(i, dict)],
                resource_version=str(meta.get("resourceVersion", "")),
                fresh=fresh,
                last=not token,
            )
            del body, meta, resp  # hold one page here, not two
            if token:
                query = {**first, "continue": token}
                if ahead:
                    # Ask for the next page before handing this one over, and let
                    # the request go out: the server serves it meanwhile.
                    pending = asyncio.create_task(fetch(query))
                    await asyncio.sleep(0)
            yield page
            if page.last:
                return
            del page
            fresh = False
            if pending is not None:
                resp, pending = await pending, None
            else:
                resp = await fetch(query)
    finally:
        if pending is not None:  # the pass failed or was abandoned: drop the next page
            pending.cancel()
            pending.add_done_callback(_retrieve)


async def list_all(
    fetch: Fetch, params: Mapping[str, str], *, limit: int, refused: Refused = refuse
) -> tuple[list[Obj], str]:
    """Every item of a list and its resourceVersion; a 410 on a continue token relists."""
    items: list[Obj] = []
    stream = pages(fetch, params, limit=limit, refused=refused)
    async with contextlib.aclosing(stream):
        async for page in stream:
            if page.fresh:
                items = []
            items += page.items
            if page.last:
                return items, page.resource_version
    raise AssertionError("unreachable: pages ends with the last page")
