"""AdmissionReview v1 in and out: parse a request body, build responses. Pure.

No aiohttp, no clock, no I/O: bytes in, a frozen `Review` (or a `BadReview`
carrying the HTTP status the edge should answer with) out; responses are
small constructors over plain dicts (controller-runtime's `Allowed` /
`Patched`). Two error families, as in kopf: a request we cannot read is an
HTTP error (`BadReview`, 4xx, no review in the body); everything about the
object itself is an admission outcome inside a 200 review, and that outcome
is always `allowed: true`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import orjson

from aibom_core.objects import Obj

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"
OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
STAMPED_OPERATIONS: Final = frozenset({"CREATE", "UPDATE"})
# orjson refuses JSON nested deeper than this (a clean 400 for us); Python's
# json would recurse and raise RecursionError (an HTTP 500) instead. No
# Kubernetes object we stamp comes near it: the API server's own decoder
# allows 10,000, but an object nested past 1,024 is refused here and, with
# failurePolicy: Ignore, admitted unstamped (the annotator stamps it).
MAX_DEPTH: Final = 1024


class BadReview(Exception):
    """The body is not an AdmissionReview v1 we can answer; `status` is the HTTP code."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of `request` the webhook reads; `obj`/`old_obj` stay raw dicts."""

    uid: str
    operation: str
    kind: str  # request.kind.kind (the resource's kind as the API server sees it)
    group: str
    namespace: str
    name: str
    sub_resource: str
    obj: Obj | None
    old_obj: Obj | None
    # request.userInfo, raw (provenance: who set the controller reference).
    user_info: dict[str, Any] | None = None
    # Decoded from the first bytes of a body over the limit (webhook.body): the
    # object's metadata only, no oldObject, no spec.
    partial: bool = False

    @property
    def stampable(self) -> bool:
        """CREATE or UPDATE of a main resource, or an UPDATE through `status` (a write
        through pods/status, deployments/status, ... may change annotations, our keys
        included: manifests/webhook/mutatingwebhook.yaml), with an object to patch."""
        if self.sub_resource not in ("", "status"):
            return False
        return self.operation in STAMPED_OPERATIONS and bool(self.obj)


class PatchOp(TypedDict, total=False):
    op: str
    path: str
    value: Any


class ReviewResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    patchType: str
    patch: str
    warnings: list[str]


def _str_field(req: dict[str, Any], name: str, *, required: bool) -> str:
    value = req.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadReview(f"request.{name} must be a non-empty string, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """A short, single-line rendering of a request value for an error message.

    Never recursive: a container is named by its type and size (a value
    nested 1,000 deep must not reach an encoder's recursion limit).
    """
    if isinstance(value, dict):
        return f"an object of {len(value)} key(s)"
    if isinstance(value, list):
        return f"an array of {len(value)} item(s)"
    text = json.dumps(value)  # a scalar: one line, control characters escaped
    return text if len(text) <= 60 else text[:57] + "..."


def parse_review(body: bytes | bytearray) -> Review:
    """An AdmissionReview v1 body -> Review; raises BadReview with a clear message."""
    if not body or not body.strip():
        raise BadReview(f"empty body: expected a JSON {API_VERSION} {KIND}")
    try:
        # orjson: no recursion in the parser (nesting past MAX_DEPTH is a
        # JSONDecodeError, a ValueError), and several times faster than json.
        doc = orjson.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadReview(f"body is not JSON ({exc}): expected a {API_VERSION} {KIND}") from None
    return review_of(doc)


def review_of(doc: object, *, partial: bool = False) -> Review:
    """A decoded AdmissionReview -> Review; raises BadReview with a clear message.
    `partial`: decoded from the first bytes of a body too large to read (webhook.body)."""
    if not isinstance(doc, dict):
        raise BadReview(f"body is a JSON {type(doc).__name__}, not a {KIND} object")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version != API_VERSION:
        raise BadReview(
            f"unsupported apiVersion {_shown(api_version)}: this webhook answers {API_VERSION} "
            "only (set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    if kind != KIND:
        raise BadReview(f"kind is {_shown(kind)}, expected {KIND}")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview(f"{KIND} has no `request` object (got {_shown(req)})")
    uid = _str_field(req, "uid", required=True)
    operation = _str_field(req, "operation", required=True)
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation {operation!r} is not one of {sorted(OPERATIONS)}")
    gvk = req.get("kind")
    if not isinstance(gvk, dict) or not isinstance(gvk.get("kind"), str) or not gvk["kind"]:
        raise BadReview(f"request.kind must be {{group, version, kind}}, got {_shown(gvk)}")
    obj, old = req.get("object"), req.get("oldObject")
    if operation in STAMPED_OPERATIONS and not isinstance(obj, dict):
        raise BadReview(f"request.object must be an object for {operation}, got {_shown(obj)}")
    return Review(
        uid=uid,
        operation=operation,
        kind=gvk["kind"],
        group=str(gvk.get("group") or ""),
        namespace=_str_field(req, "namespace", required=False),
        name=_str_field(req, "name", required=False),
        sub_resource=_str_field(req, "subResource", required=False),
        obj=obj if isinstance(obj, dict) else None,
        old_obj=old if isinstance(old, dict) else None,
        user_info=req["userInfo"] if isinstance(req.get("userInfo"), dict) else None,
        partial=partial,
    )


def allowed(uid: str) -> ReviewResponse:
    """Admit unchanged."""
    return {"uid": uid, "allowed": True}


def patched(uid: str, ops: list[PatchOp] | list[dict[str, Any]]) -> ReviewResponse:
    """Admit with a JSONPatch; no patch at all when there is nothing to change."""
    if not ops:
        return allowed(uid)
    patch = orjson.dumps(ops)
    return {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(patch).decode("ascii"),
    }


def encode(response: ReviewResponse) -> bytes:
    """The review the API server reads back (apiVersion and kind echo the request's)."""
    doc = {"apiVersion": API_VERSION, "kind": KIND, "response": response}
    return orjson.dumps(doc)
