"""The informer's list+watch rules (client-go's reflector), driven by a scripted client.

The client here is a script of answers, not an API server: it checks the
informer's side of the protocol (paging, resourceVersion bookkeeping,
bookmarks, relist on 410, backoff, 403/404). tests/integration/test_annotator.py
runs the same code against the real API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aibom_core.kinds import GroupKind
from aibom_edge.kube import (
    METADATA_LIST,
    METADATA_WATCH,
    ApiResource,
    KubeError,
    KubeResponse,
    WatchExpired,
)
from annotator.informer import Informer, InformerState

GK = GroupKind("apps", "Deployment")
RES = ApiResource(
    group="apps", version="v1", kind="Deployment", plural="deployments", namespaced=True
)


def obj(name: str, rv: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": rv}
    }


def page(items: list[dict[str, Any]], rv: str, cont: str | None = None) -> KubeResponse:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return KubeResponse(200, {"kind": "DeploymentList", "metadata": meta, "items": items}, {})


class Script:
    """Answers in order; a watch is a list of events, then an exception or the end of stream."""

    def __init__(
        self,
        lists: list[KubeResponse],
        watches: list[tuple[list[dict[str, Any]], Exception | None]],
    ) -> None:
        self.lists = lists
        self.watches = watches
        self.list_params: list[dict[str, str]] = []
        self.watch_params: list[dict[str, str]] = []
        self.accepts: list[str | None] = []  # the Accept of each list page and watch
        self.done = asyncio.Event()

    async def request(
        self, method: str, path: str, *, params: Any = None, **_: Any
    ) -> KubeResponse:
        assert method == "GET" and path == "/apis/apps/v1/deployments"
        self.list_params.append(dict(params or {}))
        self.accepts.append(_.get("accept"))
        if not self.lists:
            self.done.set()
            await asyncio.Event().wait()
        return self.lists.pop(0)

    async def _stream(
        self, events: list[dict[str, Any]], error: Exception | None
    ) -> AsyncIterator[dict[str, Any]]:
        for e in events:
            yield e
        if error is not None:
            raise error

    def watch(self, path: str, params: Any = None, **kw: Any) -> AsyncIterator[dict[str, Any]]:
        self.watch_params.append(dict(params or {}))
        self.accepts.append(kw.get("accept"))
        if not self.watches:
            self.done.set()
            return self._forever()
        events, error = self.watches.pop(0)
        return self._stream(events, error)

    async def _forever(self) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


class Sink:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []
        self.states: list[InformerState] = []
        self.restarts: list[str] = []
        self.changed = asyncio.Event()  # set on every state change

    def upsert(self, gk: GroupKind, o: dict[str, Any]) -> str:
        key = o["metadata"]["uid"]
        self.objects[key] = o
        self.log.append(("upsert", o["metadata"]["name"]))
        return str(key)

    def delete(self, gk: GroupKind, o: dict[str, Any]) -> None:
        self.objects.pop(o["metadata"]["uid"], None)
        self.log.append(("delete", o["metadata"]["name"]))

    def relisted(self, gk: GroupKind, seen: set[str]) -> None:
        for key in [k for k in self.objects if k not in seen]:
            self.log.append(("delete", self.objects.pop(key)["metadata"]["name"]))

    def status(self, informer: Informer) -> None:
        self.states.append(informer.state)
        self.changed.set()

    def restarted(self, gk: GroupKind, reason: str) -> None:
        self.restarts.append(reason)


async def drive(script: Script, sink: Sink | None = None, **kw: Any) -> tuple[Informer, Sink]:
    sink = sink or Sink()
    inf = Informer(
        script,  # type: ignore[arg-type]  # a scripted stand-in with Kube's watch/request
        RES,
        gk=GK,
        sink=sink,
        slim=lambda o: o,
        backoff_base=0.001,
        forbidden_retry=0.001,
        **kw,
    )
    task = asyncio.create_task(inf.run())
    done = asyncio.create_task(script.done.wait())
    await asyncio.wait([task, done], timeout=5, return_when=asyncio.FIRST_COMPLETED)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return inf, sink


async def test_paged_list_then_watch_with_bookmarks_and_resume() -> None:
    script = Script(
        lists=[page([obj("a", "1")], "10", cont="tok"), page([obj("b", "2")], "10")],
        watches=[
            (
                [
                    {"type": "ADDED", "object": obj("c", "11")},
                    {"type": "MODIFIED", "object": obj("a", "12")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                    {"type": "DELETED", "object": obj("b", "16")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
                ],
                None,
            ),  # the server ends the watch (timeoutSeconds)
        ],
    )
    inf, sink = await drive(script, page_size=1)
    assert script.list_params == [{"limit": "1"}, {"limit": "1", "continue": "tok"}]
    assert script.watch_params[0]["resourceVersion"] == "10"
    assert script.watch_params[0]["allowWatchBookmarks"] == "true"
    # Resumed from the last bookmark, no relist.
    assert script.watch_params[1]["resourceVersion"] == "20"
    assert len(script.list_params) == 2
    assert sink.log == [
        ("upsert", "a"),
        ("upsert", "b"),
        ("upsert", "c"),
        ("upsert", "a"),
        ("delete", "b"),
    ]
    assert sorted(o["metadata"]["name"] for o in sink.objects.values()) == ["a", "c"]
    # List items get apiVersion and kind (built-in lists leave them out).
    assert (
        sink.objects["u-a"]["apiVersion"] == "apps/v1"
        and sink.objects["u-a"]["kind"] == "Deployment"
    )
    assert inf.synced.is_set() and sink.restarts == ["closed"]


async def test_gone_relists_and_drops_what_disappeared_meanwhile() -> None:
    script = Script(
        lists=[page([obj("a", "1"), obj("b", "2")], "10"), page([obj("b", "30")], "31")],
        watches=[([{"type": "ADDED", "object": obj("c", "11")}], WatchExpired("410"))],
    )
    _inf, sink = await drive(script)
    assert len(script.list_params) == 2
    assert script.watch_params[-1]["resourceVersion"] == "31"
    assert sorted(o["metadata"]["name"] for o in sink.objects.values()) == ["b"]
    assert ("delete", "a") in sink.log and ("delete", "c") in sink.log
    assert "expired" in sink.restarts


async def test_transport_error_backs_off_and_resumes_the_watch_without_relisting() -> None:
    script = Script(
        lists=[page([obj("a", "1")], "10")],
        watches=[
            ([{"type": "MODIFIED", "object": obj("a", "12")}], KubeError("connection reset")),
        ],
    )
    _, sink = await drive(script)
    assert len(script.list_params) == 1
    assert [p["resourceVersion"] for p in script.watch_params] == ["10", "12"]
    assert InformerState.BACKOFF in sink.states and "error" in sink.restarts


async def test_forbidden_is_reported_and_retried() -> None:
    denied = KubeResponse(403, {"message": "deployments.apps is forbidden"}, {})
    script = Script(lists=[denied, page([obj("a", "1")], "10")], watches=[])
    inf, sink = await drive(script)
    assert sink.states[:2] == [InformerState.FORBIDDEN, InformerState.LISTING]
    assert inf.synced.is_set() and "u-a" in sink.objects


async def test_not_served_ends_the_informer() -> None:
    script = Script(lists=[KubeResponse(404, {"message": "not found"}, {})], watches=[])
    sink = Sink()
    inf = Informer(script, RES, gk=GK, sink=sink, slim=lambda o: o)  # type: ignore[arg-type]
    await asyncio.wait_for(inf.run(), 2)
    assert sink.states[-1] is InformerState.NO_MATCH
    assert inf.settled and not inf.synced.is_set()


async def test_expired_continue_token_restarts_the_list() -> None:
    script = Script(
        lists=[
            page([obj("a", "1")], "10", cont="tok"),
            KubeResponse(410, {}, {}),
            page([obj("a", "1"), obj("b", "2")], "12"),
        ],
        watches=[],
    )
    _, sink = await drive(script, page_size=1)
    assert script.list_params[2] == {"limit": "1"}
    assert sorted(sink.objects) == ["u-a", "u-b"]


async def test_a_first_list_failing_too_long_is_degraded_not_waited_for() -> None:
    broken = KubeResponse(500, {"message": "conversion webhook failed"}, {})
    script = Script(lists=[broken], watches=[])
    now = [0.0]
    sink = Sink()
    inf = Informer(
        script,  # type: ignore[arg-type]
        RES,
        gk=GK,
        sink=sink,
        slim=lambda o: o,
        backoff_base=10,  # stays in backoff after the first failure
        sync_timeout=30,
        clock=lambda: now[0],
    )
    task = asyncio.create_task(inf.run())
    async with asyncio.timeout(10):  # until the first list has failed
        while inf.state is not InformerState.BACKOFF:
            await sink.changed.wait()
            sink.changed.clear()
    assert not inf.degraded and not inf.settled
    now[0] = 31.0
    assert inf.degraded and inf.settled and not inf.synced.is_set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_metadata_only_kinds_ask_for_partial_object_metadata_and_keep_their_kind() -> None:
    """A kind the cache keeps as metadata is listed and watched as
    PartialObjectMetadata; the objects are filed under the informer's own kind."""
    partial = {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata"}
    script = Script(
        lists=[page([{**partial, **obj("a", "1")}], "10")],
        watches=[([{"type": "ADDED", "object": {**partial, **obj("b", "11")}}], None)],
    )
    _, sink = await drive(script, metadata_only=True)
    assert script.accepts[0] == METADATA_LIST
    assert set(script.accepts[1:]) == {METADATA_WATCH}  # every watch, the resumed one too
    assert {(o["apiVersion"], o["kind"]) for o in sink.objects.values()} == {
        ("apps/v1", "Deployment")
    }
    # Full objects otherwise (the default Accept of the client).
    script = Script(lists=[page([obj("a", "1")], "10")], watches=[])
    await drive(script)
    assert script.accepts[:2] == [None, None]
