"""AdmissionReview parsing and responses (pure), and the stamp patch they carry."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from aibom_core.kinds import default_registry
from aibom_core.stamp import Keys, Stamp, stamp_of, stamp_patch
from aibom_core.walk import Fetched, Reason, resolve
from tests.unit.kobj import chain, mk
from tests.unit.webhook_fakes import apply_patch, body, review
from webhook.admission import BadReview, allowed, encode, parse_review, patched

KEYS = Keys()
REG = default_registry()


def _good() -> dict[str, Any]:
    return review(mk("Pod", "p"))


def _without(path: str) -> bytes:
    doc = _good()
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    del node[last]
    return body(doc)


def _with(path: str, value: Any) -> bytes:
    doc = _good()
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value
    return body(doc)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty body"),
        (b"   \n", "empty body"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "JSON list, not a AdmissionReview object"),
        (b'"review"', "JSON str"),
        (_with("apiVersion", "admission.k8s.io/v1beta1"), "unsupported apiVersion"),
        (_without("apiVersion"), "unsupported apiVersion null"),
        (_with("kind", "Review"), 'kind is "Review"'),
        (_without("request"), "no `request` object"),
        (_with("request", []), "no `request` object"),
        (_without("request.uid"), "request.uid must be a non-empty string"),
        (_with("request.uid", ""), "request.uid must be a non-empty string"),
        (_with("request.uid", 7), "request.uid must be a non-empty string, got 7"),
        (_without("request.operation"), "request.operation must be"),
        (_with("request.operation", "PATCH"), "'PATCH' is not one of"),
        (_without("request.kind"), "request.kind must be {group, version, kind}"),
        (_with("request.kind", {"group": ""}), "request.kind must be"),
        (_without("request.object"), "request.object must be an object for CREATE"),
        (_with("request.object", "pod"), "request.object must be an object for CREATE"),
        (_with("request.namespace", 3), "request.namespace must be a non-empty string"),
    ],
)
def test_bad_reviews_are_400_with_a_clear_message(raw: bytes, message: str) -> None:
    with pytest.raises(BadReview) as info:
        parse_review(raw)
    assert info.value.status == 400
    assert message in str(info.value)


def test_v1beta1_message_says_what_to_configure() -> None:
    with pytest.raises(BadReview, match=r"admissionReviewVersions: \[v1\]"):
        parse_review(_with("apiVersion", "admission.k8s.io/v1beta1"))


def test_parse_reads_what_the_webhook_needs() -> None:
    obj = mk("Pod", "p")
    doc = review(obj, operation="UPDATE", old=obj, uid="u-1", sub_resource="status")
    doc["request"]["dryRun"] = True
    r = parse_review(body(doc))
    assert (r.uid, r.operation, r.kind, r.group, r.namespace, r.name) == (
        "u-1",
        "UPDATE",
        "Pod",
        "",
        "ns",
        "p",
    )
    assert r.sub_resource == "status" and r.obj == obj and r.old_obj == obj
    # A status write may change annotations (our keys included): stamped. Other
    # subresources cannot: never.
    assert r.stampable
    doc["request"]["subResource"] = "scale"
    assert not parse_review(body(doc)).stampable


def test_delete_has_no_object_and_is_not_stampable() -> None:
    old = mk("Pod", "p")
    r = parse_review(body(review(None, operation="DELETE", old=old)))
    assert r.obj is None and r.old_obj == old and not r.stampable


def test_responses() -> None:
    assert allowed("u") == {"uid": "u", "allowed": True}
    assert patched("u", []) == {"uid": "u", "allowed": True}  # empty patch: no patch field
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {}}]
    resp = patched("u", ops)
    assert resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == ops
    doc = json.loads(encode(resp))
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    assert doc["response"]["uid"] == "u" and doc["response"]["allowed"] is True


# -- the stamp patch (aibom_core.stamp.stamp_patch), as the webhook sends it ---------------


def _stamp(objs: list[dict[str, Any]], subject: dict[str, Any]) -> Stamp:
    by_uid = {o["metadata"]["uid"]: o for o in objs}

    def lookup(req: Any) -> Fetched:
        found = by_uid.get(req.owner.uid)
        return Fetched(obj=found) if found else Fetched(failure=Reason.NOT_FOUND)

    return stamp_of(resolve(subject, registry=REG, lookup=lookup))


def test_patch_creates_annotations_and_escapes_slashes() -> None:
    pod = mk("Pod", "p")
    ops = stamp_patch(pod, _stamp([], pod), keys=KEYS)
    assert ops[0] == {"op": "add", "path": "/metadata/annotations", "value": {}}
    rollup = {"op": "add", "path": "/metadata/annotations/aibom.dev~1rollup", "value": "uncovered"}
    assert rollup in ops
    out = apply_patch(pod, ops)
    assert out["metadata"]["annotations"] == {"aibom.dev/rollup": "uncovered"}


def test_patch_overwrites_forged_values_and_removes_the_reason() -> None:
    objs = chain("DynamoGraphDeployment/g", "DynamoComponentDeployment/g-w", "Deployment/g-w")
    forged = {
        "aibom.dev/root": "Deployment/evil",
        "aibom.dev/root-uid": "nope",
        "aibom.dev/rollup": "root",
        "aibom.dev/rollup-reason": "NotFound core/Pod/x",
        "other": "kept",
    }
    dep = mk("Deployment", "g-w", objs[1], annotations=forged)
    ops = stamp_patch(dep, _stamp(objs, dep), keys=KEYS)
    out = apply_patch(dep, ops)
    assert out["metadata"]["annotations"] == {
        "aibom.dev/root": "DynamoGraphDeployment/g",
        "aibom.dev/root-uid": objs[0]["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
        "other": "kept",
    }
    assert all(op["op"] != "add" or op["path"] != "/metadata/annotations" for op in ops)
    # Idempotent: the stamped object needs no patch.
    assert stamp_patch(out, _stamp(objs, out), keys=KEYS) == []


def test_patch_escapes_the_prefix_and_a_tilde_prefix_is_refused() -> None:
    keys = Keys("a-b.dev/")
    ops = stamp_patch(mk("Pod", "p"), _stamp([], mk("Pod", "p")), keys=keys)
    assert any(op["path"] == "/metadata/annotations/a-b.dev~1rollup" for op in ops)
    # `~` cannot be in an annotation key's prefix (refused at start).
    with pytest.raises(ValueError, match="DNS-1123"):
        Keys("a~b.dev/")


def test_create_of_a_root_has_no_root_uid_yet() -> None:
    dep = mk("Deployment", "d", uid="")
    ops = stamp_patch(dep, _stamp([], dep), keys=KEYS)
    ann = apply_patch(dep, ops)["metadata"]["annotations"]
    assert ann == {"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"}
