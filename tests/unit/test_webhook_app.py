"""The HTTP edge of the webhook, through aiohttp's test client (bad bodies included)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from aibom_core.kinds import default_registry
from aibom_core.stamp import Keys
from aibom_core.walk import Reason
from tests.unit.kobj import chain, mk
from tests.unit.webhook_fakes import MemorySource, admission_app, apply_patch, body, review
from webhook.app import MAX_BODY, Admitter, Readiness, make_app
from webhook.metrics import Metrics
from webhook.resolver import Resolver

MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]
JSON = {"Content-Type": "application/json"}


class Hook:
    def __init__(self, client: TestClient[Any, Any], source: MemorySource, metrics: Metrics):
        self.client, self.source, self.metrics = client, source, metrics

    async def post(self, doc: Any, **kw: Any) -> tuple[int, Any]:
        data = doc if isinstance(doc, bytes) else body(doc)
        resp = await self.client.post("/mutate", data=data, headers=kw.pop("headers", JSON))
        text = await resp.text()
        return resp.status, (json.loads(text) if resp.status == 200 else text)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


@pytest.fixture
async def hook(aiohttp_client: MakeClient) -> Hook:
    source = MemorySource()
    app, metrics = admission_app(source)
    return Hook(await aiohttp_client(app), source, metrics)


def _patch(doc: dict[str, Any]) -> list[dict[str, Any]]:
    resp = doc["response"]
    if "patch" not in resp:
        return []
    assert resp["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"]))
    return ops


def _stamped(obj: dict[str, Any], doc: dict[str, Any]) -> dict[str, str]:
    ann: dict[str, str] = apply_patch(obj, _patch(doc))["metadata"].get("annotations", {})
    return {k: v for k, v in ann.items() if k.startswith("aibom.dev/")}


# -- bad requests: HTTP errors, never a crash ------------------------------------------


@pytest.mark.parametrize(
    ("data", "status", "text"),
    [
        (b"", 400, "empty body"),
        (b"<xml/>", 400, "not JSON"),
        (body({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}), 400, "v1"),
        (body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), 400, "request"),
        (
            body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}),
            400,
            "request.uid",
        ),
    ],
)
async def test_bad_bodies(hook: Hook, data: bytes, status: int, text: str) -> None:
    got, reply = await hook.post(data)
    assert got == status and text in reply and "bad AdmissionReview" in reply
    assert hook.sample("aibom_webhook_bad_requests_total", {"status": str(status)}) == 1


async def test_wrong_content_type_is_415(hook: Hook) -> None:
    status, text = await hook.post(review(mk("Pod", "p")), headers={"Content-Type": "text/yaml"})
    assert status == 415 and "application/json" in text


async def test_a_body_over_the_limit_with_no_review_in_its_first_bytes_is_413(hook: Hook) -> None:
    # A review over the limit is answered from its first bytes (test_webhook_body.py);
    # one with no object metadata there cannot be.
    assert MAX_BODY >= 2 * 6 * 3 * (1 << 20)
    status, text = await hook.post(b"{" + b" " * MAX_BODY + b"}")
    assert status == 413 and str(MAX_BODY) in text
    assert hook.sample("aibom_webhook_bad_requests_total", {"status": "413"}) == 1


async def test_update_with_two_huge_objects_is_answered(hook: Hook) -> None:
    # An UPDATE of a Deployment with a ~2.5 MiB annotation on both sides: the
    # review is ~5 MiB, above aiohttp's 1 MiB default, under our limit.
    big = {"note": "x" * (5 << 19)}
    dep = mk("Deployment", "d", annotations=big)
    status, doc = await hook.post(review(dep, operation="UPDATE", old=dep))
    assert status == 200 and doc["response"]["allowed"] is True
    assert _stamped(dep, doc)["aibom.dev/rollup"] == "root"
    # The patch touches our keys only, never re-sends the object.
    assert len(base64.b64decode(doc["response"]["patch"])) < 1000


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
async def test_delete_and_connect_are_allowed_unpatched(hook: Hook, operation: str) -> None:
    status, doc = await hook.post(review(None, operation=operation, old=mk("Pod", "p"), uid="u9"))
    assert status == 200 and doc["response"] == {"uid": "u9", "allowed": True}


async def test_status_writes_are_stamped_other_subresources_and_unknown_kinds_skipped(
    hook: Hook,
) -> None:
    """A pods/status write may change annotations (our keys included): stamped, with
    the stored ownerReferences (the status strategy puts them back); scale cannot."""
    pod = mk("Pod", "p", annotations={"aibom.dev/rollup": "rolled-up"})
    moved = mk("Pod", "p", mk("ReplicaSet", "rs"), annotations={"aibom.dev/rollup": "rolled-up"})
    status, doc = await hook.post(review(moved, operation="UPDATE", old=pod, sub_resource="status"))
    assert status == 200 and _stamped(moved, doc) == {"aibom.dev/rollup": "uncovered"}
    assert hook.source.gets["ReplicaSet"] == 0  # walked from the Pod's stored references
    status, doc = await hook.post(review(pod, operation="UPDATE", old=pod, sub_resource="scale"))
    assert status == 200 and "patch" not in doc["response"]
    status, doc = await hook.post(review(mk("ConfigMap", "c")))
    assert status == 200 and "patch" not in doc["response"]
    assert (
        hook.sample(
            "aibom_webhook_admissions_total",
            {"kind": "other", "operation": "CREATE", "result": "skipped"},
        )
        == 1
    )


# -- stamps ---------------------------------------------------------------------------


async def test_bare_pod_is_uncovered_and_echoes_the_uid(hook: Hook) -> None:
    pod = mk("Pod", "p")
    status, doc = await hook.post(review(pod, uid="abc"))
    assert status == 200
    assert doc["response"]["uid"] == "abc" and doc["response"]["allowed"] is True
    assert _stamped(pod, doc) == {"aibom.dev/rollup": "uncovered"}
    assert sum(hook.source.gets.values()) == 0  # ownerless: zero requests


async def test_create_with_generate_name_and_no_uid(hook: Hook) -> None:
    rs = chain("Deployment/d", "ReplicaSet/d-1")
    for o in rs:
        hook.source.add(o)
    pod = mk("Pod", "x", rs[1])
    pod["metadata"] = {
        k: v for k, v in pod["metadata"].items() if k not in ("name", "uid", "namespace")
    }
    pod["metadata"]["generateName"] = "d-1-"
    _, doc = await hook.post(review(pod, namespace="ns"))
    assert _stamped(pod, doc) == {
        "aibom.dev/root": "Deployment/d",
        "aibom.dev/root-uid": rs[0]["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }


async def test_dynamo_chain_is_rolled_up_to_the_graph(hook: Hook) -> None:
    objs = chain(
        "DynamoGraphDeployment/g",
        "DynamoComponentDeployment/g-w",
        "Deployment/g-w",
        "ReplicaSet/g-w-1",
        "Pod/g-w-1-a",
    )
    for o in objs[:-1]:
        hook.source.add(o)
    _, doc = await hook.post(review(objs[-1]))
    assert _stamped(objs[-1], doc)["aibom.dev/root"] == "DynamoGraphDeployment/g"
    assert hook.source.gets.total() == 4
    assert hook.sample("aibom_webhook_owner_lookups_total", {"source": "get"}) == 4


@pytest.mark.parametrize(
    "reason",
    [Reason.NOT_FOUND, Reason.FORBIDDEN, Reason.NO_MATCH, Reason.TIMEOUT],
)
async def test_failed_hops_are_unresolved_counted_and_admitted(
    hook: Hook, reason: Reason, caplog: pytest.LogCaptureFixture
) -> None:
    objs = chain("DynamoGraphDeployment/g", "DynamoComponentDeployment/g-w", "Deployment/g-w")
    for o in objs[:-1]:
        hook.source.add(o)
    hook.source.fail["DynamoComponentDeployment"] = reason
    caplog.set_level(logging.DEBUG, logger="webhook")
    for _ in range(3):
        status, doc = await hook.post(review(objs[-1]))
        assert status == 200 and doc["response"]["allowed"] is True
    assert _stamped(objs[-1], doc) == {
        "aibom.dev/root": "Deployment/g-w",
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/root-uid": objs[-1]["metadata"]["uid"],
        "aibom.dev/rollup-reason": f"{reason.value} nvidia.com/DynamoComponentDeployment/g-w",
    }
    labels = {"kind": "Deployment", "reason": reason.value}
    assert hook.sample("aibom_rollup_unresolved_total", labels) == 3
    infos = [r for r in caplog.records if r.levelno == logging.INFO and "unresolved" in r.msg]
    debugs = [r for r in caplog.records if r.levelno == logging.DEBUG and "unresolved" in r.msg]
    assert len(infos) == 1 and len(debugs) == 2  # once per (kind, reason) at INFO


async def test_replicaset_of_a_recreated_deployment_is_unresolved_not_mirrored(
    hook: Hook,
) -> None:
    """The mirror exception applies only to an owner that passed the UID check."""
    stamped = {"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"}
    old = mk("Deployment", "d")
    new = mk("Deployment", "d", gen=1, annotations=stamped)  # same name, new UID, stamped
    hook.source.add(new)
    rs = mk("ReplicaSet", "d-1", old, annotations=stamped)  # copied while `old` lived
    status, doc = await hook.post(review(rs, operation="UPDATE", old=rs))
    assert status == 200
    assert _stamped(rs, doc) == {
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/rollup-reason": "UIDMismatch apps/Deployment/d",
    }


async def test_uid_mismatch_after_recreation(hook: Hook) -> None:
    old = mk("DynamoComponentDeployment", "c")
    hook.source.add(mk("DynamoComponentDeployment", "c", gen=1))  # same name, new UID
    dep = mk("Deployment", "d", old)
    _, doc = await hook.post(review(dep))
    assert _stamped(dep, doc)["aibom.dev/rollup-reason"] == (
        "UIDMismatch nvidia.com/DynamoComponentDeployment/c"
    )


async def test_a_bug_still_admits_without_a_patch_and_is_counted(
    hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    owner = mk("Deployment", "d")
    hook.source.add(owner)
    hook.source.raise_for.add("Deployment")
    rs = mk("ReplicaSet", "d-1", owner)
    status, doc = await hook.post(review(rs, uid="bug"))
    assert status == 200 and doc["response"] == {"uid": "bug", "allowed": True}
    assert hook.sample("aibom_webhook_errors_total", {"stage": "admit"}) == 1
    assert (
        hook.sample(
            "aibom_webhook_admissions_total",
            {"kind": "ReplicaSet", "operation": "CREATE", "result": "error"},
        )
        == 1
    )
    assert any("internal error" in r.getMessage() for r in caplog.records)


async def test_already_correct_stamp_gets_no_patch(hook: Hook) -> None:
    pod = mk("Pod", "p", annotations={"aibom.dev/rollup": "uncovered"})
    _, doc = await hook.post(review(pod, operation="UPDATE", old=pod))
    assert "patch" not in doc["response"]


# -- health, readiness, metrics ---------------------------------------------------------


async def test_health_ready_metrics(aiohttp_client: MakeClient) -> None:
    metrics = Metrics()
    registry = default_registry()
    readiness = Readiness(cert_loaded=True, api_ok=False, detail={"api": "connection refused"})
    admitter = Admitter(
        resolver=Resolver(MemorySource(), registry=registry),
        registry=registry,
        keys=Keys(),
        metrics=metrics,
    )
    client = await aiohttp_client(make_app(admitter=admitter, metrics=metrics, readiness=readiness))
    assert (await client.get("/healthz")).status == 200
    resp = await client.get("/readyz")
    assert resp.status == 503 and "api" in await resp.text()
    readiness.api_ok = True
    assert (await client.get("/readyz")).status == 200
    readiness.shutting_down = True
    assert (await client.get("/readyz")).status == 503
    await client.post("/mutate", data=body(review(mk("Pod", "p"))), headers=JSON)
    text = await (await client.get("/metrics")).text()
    assert "aibom_webhook_admission_duration_seconds_bucket" in text
    labels = 'kind="Pod",operation="CREATE",result="uncovered"'
    assert f"aibom_webhook_admissions_total{{{labels}}} 1.0" in text


async def test_stale_cached_deployment_never_reverts_the_controllers_newer_copy(
    aiohttp_client: MakeClient,
) -> None:
    """A ReplicaSet carrying its Deployment's newer stamp is not reverted
    to the one of the Deployment's cached (older) resourceVersion."""
    source = MemorySource()
    app, metrics = admission_app(source, cache_ttl=600)
    hook = Hook(await aiohttp_client(app), source, metrics)
    sts = mk("StatefulSet", "owner")
    source.add(sts)
    dep = mk("Deployment", "d")
    alone = {
        "aibom.dev/root": "Deployment/d",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }
    dep["metadata"]["annotations"] = alone
    dep["metadata"]["resourceVersion"] = "100"
    source.add(dep)
    rs = mk("ReplicaSet", "d-1", dep, annotations=alone)
    status, doc = await hook.post(review(rs))
    assert status == 200 and _stamped(rs, doc) == alone  # the Deployment is now cached
    # The Deployment is adopted by the StatefulSet (its stamp changes), and the
    # deployment controller copies its new annotations onto the ReplicaSet.
    adopted = {
        "aibom.dev/root": "StatefulSet/owner",
        "aibom.dev/root-uid": sts["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }
    dep2 = mk("Deployment", "d", sts, annotations=adopted)
    dep2["metadata"]["resourceVersion"] = "107"
    source.add(dep2)
    rs2 = mk("ReplicaSet", "d-1", dep, annotations=adopted)
    gets = source.gets["Deployment"]
    status, doc = await hook.post(review(rs2, operation="UPDATE", old=rs))
    assert status == 200
    assert _patch(doc) == []  # the copy is the truth: nothing reverted
    assert source.gets["Deployment"] == gets + 1  # one fresh GET, because they disagreed
    assert hook.sample("aibom_webhook_owner_lookups_total", {"source": "refreshed"}) == 1
    # Agreement costs nothing: the refreshed entry answers the next review.
    status, doc = await hook.post(review(rs2, operation="UPDATE", old=rs2))
    assert _patch(doc) == [] and source.gets["Deployment"] == gets + 1


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 200_000,  # was an HTTP 500 (RecursionError in the parser)
        b'{"a":' * 200_000,
        b"[" * 1025 + b"]" * 1025,  # complete, but past the depth limit
        # Parses, but a value nested 1,000 deep must not reach an encoder's
        # recursion limit when the error message shows it.
        b'{"apiVersion":' + b"[" * 1000 + b"]" * 1000 + b',"kind":"AdmissionReview"}',
        b'{"apiVersion":"admission.k8s.io/v1","kind":' + b"[" * 1000 + b"]" * 1000 + b"}",
    ],
    ids=["open-brackets", "open-objects", "closed-1025", "deep-apiversion", "deep-kind"],
)
async def test_deeply_nested_json_is_a_clean_400(hook: Hook, data: bytes) -> None:
    status, reply = await hook.post(data)
    assert status == 400, reply
    assert reply.startswith("bad AdmissionReview: ") and reply.count("\n") == 1
    assert hook.sample("aibom_webhook_errors_total", {"stage": "admit"}) == 0
