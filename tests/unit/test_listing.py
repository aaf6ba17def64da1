"""The one paged list (aibom_edge.listing) and its readers: `kubectl aibom`'s live
source and `aibom-rollup verify` relist on a 410 on a continue token, as the
reflector does (tests/unit/test_reflector.py), against a scripted endpoint."""

from __future__ import annotations

from typing import Any

import pytest

from aibom_core.kinds import default_registry
from aibom_edge.kube import ApiResource, KubeError
from aibom_edge.listing import list_all
from aibom_edge.options import UsageError
from aibom_rollup import verify
from aibom_rollup.sources import LiveSource, SourceError
from tests.unit.fakeapi import Reply, ScriptedApi

CM = ApiResource("", "v1", "ConfigMap", "configmaps", namespaced=True)


def cm(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"}}


def page(names: list[str], rv: str, cont: str = "") -> Reply:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return Reply(body={"metadata": meta, "items": [cm(n) for n in names]})


def expired_mid_list() -> list[Reply]:
    """Page 1 (with a ghost deleted since), its continue token expired, the relist."""
    return [
        page(["ghost"], "10", cont="t1"),
        Reply(status=410, body={"reason": "Expired", "message": "too old"}),
        page(["a"], "12", cont="t3"),
        page(["b"], "12"),
    ]


def names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


def continues(api: ScriptedApi) -> list[str]:
    return [q.get("continue", "") for q in api.list_queries]


async def test_a_410_on_a_continue_token_relists_without_ghosts() -> None:
    async with ScriptedApi(expired_mid_list(), []) as api, api.kube() as kube:
        items, rv = await list_all(
            lambda q: kube.request("GET", "/api/v1/configmaps", params=q),
            {"labelSelector": "x=y"},
            limit=2,
        )
    assert names(items) == ["a", "b"] and rv == "12"
    assert continues(api) == ["", "t1", "", "t3"]
    assert all(q["limit"] == "2" and q["labelSelector"] == "x=y" for q in api.list_queries)


async def test_a_410_on_the_first_page_is_an_error() -> None:
    # Without a continue token there is nothing to start over: the list failed.
    script = [Reply(status=410, body={"message": "gone"})]
    async with ScriptedApi(script, []) as api, api.kube() as kube:
        with pytest.raises(KubeError) as exc:
            await list_all(lambda q: kube.request("GET", "/x", params=q), {}, limit=5)
    assert exc.value.status == 410


async def test_verify_relists_on_an_expired_continue_token() -> None:
    # verify's own loop stopped at the 410 with exit 2 (HTTP 410: too old).
    async with ScriptedApi(expired_mid_list(), []) as api, api.kube() as kube:
        items = await verify._list(kube, "/api/v1/namespaces/ns/configmaps", "m=n")
    assert names(items) == ["a", "b"]
    assert continues(api) == ["", "t1", "", "t3"]


async def test_verify_says_which_list_failed() -> None:
    script = [Reply(status=500, body={"message": "etcd timeout"})]
    async with ScriptedApi(script, []) as api, api.kube() as kube:
        with pytest.raises(UsageError, match=r"GET /p: HTTP 500: etcd timeout"):
            await verify._list(kube, "/p", None)


async def test_the_live_source_relists_on_an_expired_continue_token() -> None:
    # LiveSource's own loop failed with `cannot list configmaps: HTTP 410`.
    async with ScriptedApi(expired_mid_list(), []) as api, api.kube() as kube:
        source = LiveSource(kube, registry=default_registry(), default_namespace="ns", prefix="")
        items, status = await source._list(CM, "ns")
    assert status == 200 and names(items) == ["a", "b"]
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("v1", "ConfigMap")}


@pytest.mark.parametrize("status", [401, 403])
async def test_the_live_source_tells_a_refusal_apart(status: int) -> None:
    script = [page(["a"], "1", cont="t1"), Reply(status=status, body={"message": "no"})]
    async with ScriptedApi(script, []) as api, api.kube() as kube:
        source = LiveSource(kube, registry=default_registry(), default_namespace="ns", prefix="")
        assert await source._list(CM, "ns") == ([], status)


async def test_the_live_source_says_which_list_failed() -> None:
    script = [Reply(status=500, body={"message": "etcd timeout"})]
    async with ScriptedApi(script, []) as api, api.kube() as kube:
        source = LiveSource(kube, registry=default_registry(), default_namespace="ns", prefix="")
        with pytest.raises(SourceError, match="cannot list configmaps: HTTP 500: etcd timeout"):
            await source._list(CM, "ns")
