"""The informer under faults: throttling, a silent stream, an expired continue token.

The real `Kube` client and the real `Informer` talk HTTP to a scripted
loopback endpoint (tests/unit/fakeapi.py) that answers 429 / 503 with
Retry-After, 410 on a continue, or a watch stream that never sends a byte.
The real API server's side: tests/integration/test_annotator_faults.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aibom_core.kinds import GroupKind
from aibom_edge.kube import ApiResource, KubeResponse
from annotator.informer import Informer
from tests.unit.fakeapi import Reply, ScriptedApi
from tests.unit.test_annotator_informer import Script, Sink, drive, obj

GK = GroupKind("apps", "Deployment")
RES = ApiResource(
    group="apps", version="v1", kind="Deployment", plural="deployments", namespaced=True
)


def listing(items: list[dict[str, Any]], rv: str, cont: str | None = None) -> Reply:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return Reply(body={"kind": "DeploymentList", "metadata": meta, "items": items})


async def run_against(api: ScriptedApi, **kw: Any) -> tuple[Informer, Sink]:
    sink = Sink()
    async with api, api.kube() as kube:
        inf = Informer(kube, RES, gk=GK, sink=sink, slim=lambda o: o, backoff_base=0.001, **kw)
        task = asyncio.create_task(inf.run())
        done = asyncio.create_task(api.exhausted.wait())
        await asyncio.wait([task, done], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        done.cancel()
        await asyncio.gather(task, done, return_exceptions=True)
    return inf, sink


@pytest.mark.parametrize(
    "refusal",
    [
        Reply(status=429, body={"kind": "Status", "code": 429}, headers={"Retry-After": "1"}),
        Reply(status=503, body={"kind": "Status", "code": 503}, headers={"Retry-After": "1"}),
    ],
    ids=["429", "503+Retry-After"],
)
async def test_a_throttled_watch_waits_and_resumes_without_relisting(refusal: Reply) -> None:
    # Today's informer relists on any "HTTP 4" in the error text (a 429
    # among them): a throttled API server got a full LIST for its trouble.
    api = ScriptedApi(
        lists=[listing([obj("a", "1")], "10")],
        watches=[
            refusal,
            Reply(events=[{"type": "MODIFIED", "object": obj("a", "12")}]),
        ],
    )
    _, sink = await run_against(api)
    assert len(api.list_queries) == 1, f"relisted after a {refusal.status}: {api.list_queries}"
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "10", "12"]
    assert sink.objects["u-a"]["metadata"]["resourceVersion"] == "12"


async def test_a_watch_that_goes_silent_is_restarted_from_the_last_resource_version() -> None:
    api = ScriptedApi(
        lists=[listing([obj("a", "1")], "10")],
        watches=[
            Reply(events=[{"type": "MODIFIED", "object": obj("a", "11")}], hang=True),
            Reply(events=[{"type": "MODIFIED", "object": obj("a", "12")}]),
        ],
    )
    _inf, sink = await run_against(api, idle_timeout=0.5)
    assert len(api.list_queries) == 1
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "11", "12"]
    assert "idle" in sink.restarts


async def test_a_throttled_list_page_is_asked_for_again_with_the_same_continue_token() -> None:
    api = ScriptedApi(
        lists=[
            listing([obj("a", "1")], "10", cont="tok"),
            Reply(status=429, body={"kind": "Status"}, headers={"Retry-After": "0"}),
            listing([obj("b", "2")], "10"),
        ],
        watches=[],
    )
    inf, sink = await run_against(api, page_size=1)
    assert api.list_queries == [
        {"limit": "1"},
        {"limit": "1", "continue": "tok"},
        {"limit": "1", "continue": "tok"},
    ]
    assert inf.synced.is_set() and sorted(sink.objects) == ["u-a", "u-b"]


async def test_an_expired_continue_token_forgets_what_the_aborted_pass_saw() -> None:
    # Today's informer keeps the aborted pass's keys in `seen`: an object
    # deleted while the list restarted survived in the cache (a ghost whose
    # root kept its document).
    script = Script(
        lists=[
            # the first list: a, b, c
            KubeResponse(
                200,
                {"metadata": {"resourceVersion": "5"}, "items": [obj("a", "1"), obj("b", "2")]},
                {},
            ),
        ],
        watches=[([{"type": "ADDED", "object": obj("c", "3")}], _gone())],
    )
    script.lists += [
        # the relist: page 1 (a, b), then the token expires; meanwhile b and c went
        KubeResponse(
            200,
            {
                "metadata": {"resourceVersion": "9", "continue": "tok"},
                "items": [obj("a", "1"), obj("b", "2")],
            },
            {},
        ),
        KubeResponse(410, {"reason": "Expired"}, {}),
        KubeResponse(200, {"metadata": {"resourceVersion": "20"}, "items": [obj("a", "1")]}, {}),
    ]
    _, sink = await drive(script, page_size=2)
    assert sorted(sink.objects) == ["u-a"], f"ghosts in the cache: {sorted(sink.objects)}"


def _gone() -> Exception:
    from aibom_edge.kube import WatchExpired

    return WatchExpired("410")


async def test_backoff_honours_retry_after_capped_and_jitter_is_injected() -> None:
    inf = Informer(
        None,  # type: ignore[arg-type]  # no I/O here
        RES,
        gk=GK,
        sink=Sink(),
        slim=lambda o: o,
        backoff_base=1.0,
        backoff_cap=8.0,
        rand=lambda: 0.5,  # the middle of 0.8..1.2: no jitter
    )
    assert [inf.backoff_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert inf.backoff_delay(retry_after=3) == 3.0
    assert inf.backoff_delay(retry_after=600) == 8.0
    low = Informer(
        None,  # type: ignore[arg-type]
        RES,
        gk=GK,
        sink=Sink(),
        slim=lambda o: o,
        backoff_base=1.0,
        rand=lambda: 0.0,
    )
    assert low.backoff_delay() == pytest.approx(0.8)


async def test_retry_after_on_a_watch_is_waited_exactly() -> None:
    waited: list[float] = []

    async def sleep(d: float) -> None:
        waited.append(d)

    api = ScriptedApi(
        lists=[listing([obj("a", "1")], "10")],
        watches=[Reply(status=429, body={}, headers={"Retry-After": "7"})],
    )
    await run_against(api, sleep=sleep)
    assert waited[:1] == [7.0]


async def test_the_client_retries_a_429_with_retry_after_within_its_timeout() -> None:
    api = ScriptedApi(
        lists=[
            Reply(status=429, body={}, headers={"Retry-After": "0"}),
            Reply(status=503, body={}, headers={"Retry-After": "0"}),
            Reply(status=503, body={"message": "no Retry-After: returned as is"}),
        ],
        watches=[],
    )
    async with api, api.kube(max_retries=5) as kube:
        resp = await kube.request("GET", "/api/v1/pods")
        assert resp.status == 503 and kube.throttled["GET"] == 2
    # A Retry-After longer than the request's time left: the 429 is returned.
    api = ScriptedApi(lists=[Reply(status=429, body={}, headers={"Retry-After": "5"})], watches=[])
    async with api, api.kube(max_retries=5) as kube:
        resp = await kube.request("GET", "/api/v1/pods", timeout=1)
        assert resp.status == 429 and kube.throttled["GET"] == 0
