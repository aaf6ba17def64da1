"""The shared reflector's pipelined paging (aibom_edge/reflector.py), driven by a page
server the test controls: the next page is requested before the current one's items
reach the sink, at most one page ahead, and the error rules still hold."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aibom_core.kinds import GroupKind
from aibom_core.stamp import Keys
from aibom_edge.kube import ApiResource, KubeResponse
from annotator.informer import Informer
from tests.unit.test_annotator_informer import GK, RES, Sink, drive, obj, page
from webhook.ownerwatch import KindWatch, OwnerStore


class Pages:
    """A page server: each answer is released by the test (`release`), and every
    request and every item the sink receives goes into one ordered log."""

    def __init__(self, answers: dict[str, list[KubeResponse]], *, held: bool = True) -> None:
        self.answers = answers  # continue token ("" first) -> answers, in order
        self.log: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        gate = asyncio.Event if held else _Open
        self.gates: dict[str, asyncio.Event] = {tok: gate() for tok in answers}
        self.done = asyncio.Event()  # the list completed: watching
        self.asked = asyncio.Condition()
        self.idle = asyncio.Event()  # no request in flight

    async def request(self, method: str, path: str, *, params: Any = None, **_: Any) -> Any:
        tok = (params or {}).get("continue", "")
        self.log.append(f"GET {tok or 'first'}")
        self.in_flight += 1
        self.idle.clear()
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        async with self.asked:
            self.asked.notify_all()
        try:
            await self.gates[tok].wait()
            self.gates[tok].clear()
            return self.answers[tok].pop(0)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.idle.set()

    def watch(self, path: str, params: Any = None, **kw: Any) -> Any:
        self.log.append("WATCH")
        self.done.set()
        return self._forever()

    async def _forever(self) -> Any:
        await asyncio.Event().wait()
        yield {}

    async def asked_for(self, n: int) -> None:
        async with self.asked:
            await asyncio.wait_for(self.asked.wait_for(lambda: len(self._gets()) >= n), 5)

    def _gets(self) -> list[str]:
        return [e for e in self.log if e.startswith("GET")]


class LoggingSink(Sink):
    def __init__(self, pages: Pages) -> None:
        super().__init__()
        self.pages = pages

    def upsert(self, gk: Any, o: dict[str, Any]) -> str:
        self.pages.log.append(f"item {o['metadata']['name']}")
        return super().upsert(gk, o)


async def test_the_next_page_is_requested_before_the_sink_gets_this_pages_items() -> None:
    pages = Pages(
        {
            "": [page([obj("a", "1")], "10", cont="t1")],
            "t1": [page([obj("b", "2")], "10", cont="t2")],
            "t2": [page([obj("c", "3")], "10")],
        }
    )
    sink = LoggingSink(pages)
    run = asyncio.create_task(drive(pages, sink, page_size=1))  # type: ignore[arg-type]
    pages.gates[""].set()
    await pages.asked_for(2)  # each answer is held until the test releases it
    pages.gates["t1"].set()
    await pages.asked_for(3)
    pages.gates["t2"].set()
    inf, _ = await asyncio.wait_for(run, 10)
    assert inf.synced.is_set()
    # Page N+1 is asked for before page N's item reaches the sink (the previous code:
    # GET first, item a, GET t1, item b, GET t2, item c).
    assert pages.log[:6] == ["GET first", "GET t1", "item a", "GET t2", "item b", "item c"]
    assert pages.most_in_flight == 1  # one page ahead at most: never two requests at once
    assert sorted(sink.objects) == ["u-a", "u-b", "u-c"]


async def test_a_410_on_the_page_asked_ahead_restarts_the_list_without_ghosts() -> None:
    """The continue token of page 1 expires: page 1's items still reach the sink (asked
    ahead, the 410 is read after them), then the list starts over with a new pass; an
    object only the aborted pass saw is dropped by the completed list."""
    pages = Pages(
        {
            "": [
                page([obj("ghost", "1")], "10", cont="t1"),
                page([obj("a", "1")], "12", cont="t3"),
            ],
            "t1": [KubeResponse(410, {"reason": "Expired"}, {})],
            "t3": [page([obj("b", "2")], "12")],
        },
        held=False,
    )
    inf, sink = await drive(pages, page_size=1)  # type: ignore[arg-type]
    assert gets(pages) == ["GET first", "GET t1", "GET first", "GET t3"]
    assert "continue_expired" in sink.restarts
    assert sorted(sink.objects) == ["u-a", "u-b"], f"ghosts: {sorted(sink.objects)}"
    assert inf.synced.is_set() and inf.resource_version == "12"


async def test_an_error_on_the_page_asked_ahead_keeps_what_was_stored_and_relists() -> None:
    pages = Pages(
        {
            "": [page([obj("a", "1")], "10", cont="t1"), page([obj("a", "1")], "11")],
            "t1": [KubeResponse(500, {"message": "etcd timeout"}, {})],
        },
        held=False,
    )
    inf, sink = await drive(pages, page_size=1)  # type: ignore[arg-type]
    assert "error" in sink.restarts and sorted(sink.objects) == ["u-a"]
    assert gets(pages) == ["GET first", "GET t1", "GET first"]
    assert inf.synced.is_set()


def gets(pages: Pages) -> list[str]:
    return [e for e in pages.log if e.startswith("GET")]


async def test_a_cancelled_list_leaves_no_page_request_behind() -> None:
    pages = Pages({"": [page([obj("a", "1")], "10", cont="t1")], "t1": []})
    inf = Informer(pages, RES, gk=GK, sink=Sink(), slim=lambda o: o, page_size=1)  # type: ignore[arg-type]
    pages.gates[""].set()
    task = asyncio.create_task(inf.run())
    await pages.asked_for(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(pages.idle.wait(), 5)  # the page asked ahead was cancelled too
    assert not inf.synced.is_set()


class _Open(asyncio.Event):
    """A gate that never closes (every answer at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.set()

    def clear(self) -> None:
        pass


class _Discovery:
    def __init__(self, res: ApiResource | None) -> None:
        self.res = res

    async def resource(self, gk: GroupKind) -> ApiResource | None:
        return self.res


async def test_the_owner_index_shares_it_throttled_page_asked_again_index_replaced_once() -> None:
    """The webhook's KindWatch runs the same reflector: pipelined, a throttled page asked
    for again with the same continue token (it used to relist from the first page), and
    the index of the kind replaced only once the list is complete."""
    dcd = GroupKind("nvidia.com", "DynamoComponentDeployment")
    res = ApiResource(
        group=dcd.group,
        version="v1alpha1",
        kind=dcd.kind,
        plural="dynamocomponentdeployments",
        namespaced=True,
    )
    store = OwnerStore(Keys())
    stale = store.slim(res, obj("stale", "1"))
    assert stale is not None
    store.upsert(dcd, stale)
    pages = Pages(
        {
            "": [page([obj("a", "1")], "10", cont="t1")],
            "t1": [
                KubeResponse(429, {"message": "slow down"}, {"Retry-After": "0"}),
                page([obj("b", "2")], "10"),
            ],
        },
        held=False,
    )
    pages.discovery = _Discovery(res)  # type: ignore[attr-defined]
    seen: list[int] = []
    watch = KindWatch(
        cast(Any, pages), dcd, store, page_size=1, on_change=lambda w: seen.append(len(store))
    )
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(pages.done.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert gets(pages) == ["GET first", "GET t1", "GET t1"]
    assert watch.synced.is_set() and store.count(dcd) == 2
    assert store.get("u-stale") is None and store.get("u-a") is not None
    assert 1 in seen  # while listing, the stale entry still answered (no half-replaced kind)
