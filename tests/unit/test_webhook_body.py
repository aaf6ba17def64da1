"""Reading an AdmissionReview body (webhook/body.py): the limit the API server's own
encoding implies, bounded memory, and a body over the limit still answered."""

from __future__ import annotations

import asyncio
import base64
import json
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from aibom_core.kinds import default_registry
from aibom_core.objects import Obj
from aibom_core.provenance import pod_containers, template_containers
from aibom_core.stamp import Keys
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, apply_patch, review
from webhook.admission import BadReview, Review, parse_review
from webhook.app import Admitter, Readiness, make_app
from webhook.body import (
    MAX_BODY,
    SMALL,
    BodyBudget,
    large_review,
    prefix_review,
)
from webhook.metrics import Metrics
from webhook.resolver import OwnerCache, Resolver

MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]
MiB = 1 << 20
FORGED = {"aibom.dev/rollup": "rolled-up", "aibom.dev/root": "Deployment/web"}


def go_json(doc: Any) -> bytes:
    """The review as the API server writes it: Go's encoder escapes `<`, `>` and `&`
    in strings as \\u003c, \\u003e, \\u0026 (six bytes for one)."""
    text = json.dumps(doc, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def padded_pod(name: str, padding: int, *, annotations: dict[str, str] | None = None) -> Obj:
    """A bare Pod whose postStart command is `padding` `<` characters."""
    spec = {
        "containers": [
            {
                "name": "main",
                "image": "evil.example/padded:1",
                "lifecycle": {"postStart": {"exec": {"command": ["<" * padding]}}},
            }
        ]
    }
    return mk("Pod", name, spec=spec, annotations=annotations)


def test_the_limit_is_what_the_api_server_can_send() -> None:
    """3 MiB request limit x 6 (JSON escaping) x 2 (object and oldObject) + 1 MiB."""
    assert 2 * 6 * 3 * MiB + MiB == MAX_BODY
    # The largest object a request can carry, all `<`, on both sides of an UPDATE.
    pod = padded_pod("p", 3 * MiB - 400)
    assert len(json.dumps(pod)) <= 3 * MiB
    body = go_json(review(pod, operation="UPDATE", old=pod))
    assert 2 * 6 * (3 * MiB - 400) < len(body) <= MAX_BODY


# -- one decoding, whatever the size ----------------------------------------------------------


def _reviews() -> list[tuple[str, dict[str, Any]]]:
    rs = mk(
        "ReplicaSet",
        "rs",
        mk("Deployment", "d"),
        annotations={"aibom.dev/replicaset-edge-proof": "v2:c:u:x", "note": "<&>"},
        spec={
            "replicas": 3,
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {
                    "initContainers": [{"name": "init", "image": "i:1", "args": ["a"]}],
                    "containers": [{"name": "main", "image": "m:1", "env": [{"name": "X"}]}],
                },
            },
        },
    )
    pod = mk(
        "Pod",
        "p",
        rs,
        labels={"app": "d"},
        spec={"containers": [{"name": "main", "image": "m:1", "ports": [{"containerPort": 1}]}]},
        status={"phase": "Running"},
    )
    dgd = mk("DynamoGraphDeployment", "g", spec={"components": [{"name": "w", "containers": 1}]})
    odd = mk("Pod", "odd")
    odd["metadata"]["annotations"] = "not a map"
    odd["spec"] = {"containers": "not a list"}
    status = review(pod, operation="UPDATE", old=pod, sub_resource="status")
    status["request"]["userInfo"] = {"username": "kubelet", "groups": ["system:nodes"]}
    return [
        ("pod create", review(pod)),
        ("replicaset update", review(rs, operation="UPDATE", old=rs)),
        ("crd", review(dgd)),
        ("pod status", status),
        ("hostile shapes", review(odd)),
        ("delete", review(None, operation="DELETE", old=pod)),
    ]


def _read(r: Review) -> tuple[Any, ...]:
    """What the webhook reads of a review."""

    def obj(o: Obj | None) -> Any:
        if o is None:
            return None
        return (o.get("apiVersion"), o.get("kind"), o.get("metadata"), _runs(o))

    head = (r.uid, r.operation, r.kind, r.group, r.namespace, r.name, r.sub_resource)
    return (*head, r.user_info, obj(r.obj), obj(r.old_obj))


def _runs(o: Obj) -> Any:
    return (pod_containers(o), template_containers(o))


@pytest.mark.parametrize(("what", "doc"), _reviews(), ids=[w for w, _ in _reviews()])
def test_a_large_body_is_read_as_a_small_one_would_be(what: str, doc: dict[str, Any]) -> None:
    """Over SMALL, a body is decoded through a schema of what the webhook reads: for
    every field the webhook reads, the same as parsing it whole."""
    body = go_json(doc)
    assert _read(large_review(body)) == _read(parse_review(body)), what


def test_large_and_whole_refuse_the_same_non_reviews() -> None:
    for body in (b"[1]", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}'):
        with pytest.raises(BadReview):
            parse_review(body)
        with pytest.raises(BadReview):
            large_review(body)


def test_a_large_body_costs_no_memory_beyond_its_bytes() -> None:
    """30 MiB of small JSON objects (300,000 env variables): parsed whole, hundreds
    of MiB of Python objects; through the schema, nothing of them."""
    env = [{"name": f"E{i}", "value": "v"} for i in range(300_000)]
    pod = mk("Pod", "p", spec={"containers": [{"name": "main", "image": "m:1", "env": env}]})
    body = go_json(review(pod))
    assert len(body) > 8 * MiB
    tracemalloc.start()
    try:
        got = large_review(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB, peak
    assert pod_containers(got.obj or {}) == (("containers", "main", "m:1"),)


# -- over the limit: answered from the prefix --------------------------------------------------


def _app(source: MemorySource, *, max_body: int) -> tuple[Any, Metrics]:
    metrics = Metrics()
    registry = default_registry()
    resolver = Resolver(source, registry=registry, deadline=0.5, cache=OwnerCache(ttl=0))
    admitter = Admitter(resolver=resolver, registry=registry, keys=Keys(), metrics=metrics)
    app = make_app(
        admitter=admitter, metrics=metrics, readiness=Readiness(True, True), max_body=max_body
    )
    return app, metrics


def _ops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    resp = doc["response"]
    ops: list[dict[str, Any]] = (
        json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    )
    return ops


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
async def test_a_review_over_the_limit_is_stamped_not_left_to_failure_policy(
    aiohttp_client: MakeClient, operation: str
) -> None:
    """A 413 would be failurePolicy Ignore: the object stored with the stamp values its
    author wrote. Over the limit, the first bytes are read (the request's fields and
    the object's metadata come first) and the review answered from them."""
    app, metrics = _app(MemorySource(), max_body=64 * 1024)
    client = await aiohttp_client(app)
    pod = padded_pod("padded", 100_000, annotations=dict(FORGED))
    body = go_json(review(pod, operation=operation, old=pod if operation == "UPDATE" else None))
    assert len(body) > 64 * 1024
    resp = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    stored = apply_patch(pod, _ops(doc))
    ann = stored["metadata"]["annotations"]
    assert {k: v for k, v in ann.items() if k.startswith("aibom.dev/")} == {
        "aibom.dev/rollup": "uncovered"
    }
    assert metrics.registry.get_sample_value("aibom_webhook_partial_reviews_total") == 1
    assert metrics.registry.get_sample_value("aibom_webhook_request_body_bytes_sum") == len(body)


async def test_a_body_over_the_limit_without_an_object_in_its_prefix_is_413(
    aiohttp_client: MakeClient,
) -> None:
    app, metrics = _app(MemorySource(), max_body=64 * 1024)
    client = await aiohttp_client(app)
    pod = mk("Pod", "p", annotations={"pad": "x" * 100_000})  # metadata itself past the prefix
    for body in (go_json(review(pod)), b"{" + b" " * 100_000 + b"}"):
        resp = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
        assert resp.status == 413, await resp.text()
        assert "metadata is not within its first 65536 bytes" in await resp.text()
    assert (
        metrics.registry.get_sample_value("aibom_webhook_bad_requests_total", {"status": "413"})
        == 2
    )


def test_the_prefix_reader_takes_request_fields_and_the_objects_metadata_only() -> None:
    pod = padded_pod("padded", 10_000, annotations=dict(FORGED))
    doc = review(pod, operation="UPDATE", old=pod)
    doc["request"]["userInfo"] = {"username": "alice", "groups": ["tenants"]}
    body = go_json(doc)
    got = prefix_review(body[: len(body) // 3])  # cut in the object's spec
    assert got.partial and got.old_obj is None
    assert (got.uid, got.operation, got.kind, got.name) == (
        doc["request"]["uid"],
        "UPDATE",
        "Pod",
        "padded",
    )
    assert got.user_info == {"username": "alice", "groups": ["tenants"]}
    assert got.obj == {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]}
    for cut in (10, 200, body.index(b'"metadata"') + 20):
        with pytest.raises(BadReview) as err:
            prefix_review(body[:cut])
        assert err.value.status == 413


async def test_a_chunked_body_without_a_length_is_read_too(aiohttp_client: MakeClient) -> None:
    app, _ = _app(MemorySource(), max_body=MAX_BODY)
    client = await aiohttp_client(app)
    body = go_json(review(mk("Pod", "p")))

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 7):
            yield body[i : i + 7]

    resp = await client.post("/mutate", data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert any(op["path"].endswith("rollup") for op in _ops(await resp.json()))


async def test_large_bodies_wait_for_room_in_the_budget() -> None:
    """At most `total` bytes of large bodies are held at once; one alone always fits."""
    budget = BodyBudget(10 * SMALL)
    order: list[str] = []
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def holder(name: str, size: int) -> None:
        async with budget.hold(size):
            order.append(f"{name} in")
            if name == "a":
                first_in.set()
                await release.wait()
            order.append(f"{name} out")

    a = asyncio.create_task(holder("a", 6 * SMALL))
    await first_in.wait()
    b = asyncio.create_task(holder("b", 6 * SMALL))
    c = asyncio.create_task(holder("c", 40 * SMALL))  # more than the total: alone
    await asyncio.sleep(0)
    assert order == ["a in"] and budget.held == 6 * SMALL
    release.set()
    await asyncio.gather(a, b, c)
    assert order[:2] == ["a in", "a out"] and budget.held == 0
