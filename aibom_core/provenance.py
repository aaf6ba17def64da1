"""Ownership provenance: which controller edges count. Pure.

The rule: a controller ownerReference (child -> owner) is an edge of the
roll-up only if whoever added or changed it may `update` the owner's
`finalizers` subresource (what OwnerReferencesPermissionEnforcement checks for
`blockOwnerDeletion`) or the owner itself (an operator managing it; the
reasons are in `aibom_core.guard`). Only the webhook sees who wrote an edge (the admission
request's userInfo); it checks the rule with a SubjectAccessReview and records
its verdict as the `edge-proof` annotation:

    v2:<origin>:<anchor>:<base64url, no padding, of HMAC-SHA256(key,
        "v2\\n" + namespace + "\\n" + group + "\\n" + Kind + "\\n" + name
        + "\\n" + owner_uid + "\\n" + origin + "\\n" + anchor + "\\n" + uid
        + "\\n" + containers)>

where group, Kind and name are the child's own and owner_uid is the UID its
controller reference names. What it binds, and why:

- The object and the edge: namespace, kind, name (unique while the object
  exists) and owner UID. Copied onto another object, or kept after the
  reference changed, it does not verify.
- One lifetime of the object (`anchor`). A name outlives its object: a Pod
  re-created under a deleted Pod's name, with the same owner, must not carry
  the old Pod's proof (readable while it existed). The object's UID is what
  tells lifetimes apart, but the API server assigns it (and
  `creationTimestamp`) only after mutating admission. So a proof written on
  an UPDATE binds the UID (`u`, and `uid` in the message); one written at a
  CREATE binds the second the webhook answered (`t<unix seconds>`, `uid`
  empty), and verifies only while the object's `creationTimestamp` lies in
  `CREATED_WITHIN` of it. A namesake created later does not verify.
- What the object runs (`containers`): for a Pod, the name and image of each
  of its containers and init containers (`pod_containers`), sorted; empty for
  other kinds. A Pod's image can be changed in place: a tenant who may patch
  Pods must not swap the image of a Pod its controller made and stay rolled
  up (the webhook re-checks such an UPDATE; with the webhook bypassed, the
  proof no longer verifies).
- How the edge came to be (`origin`, `Origin`): set with the object's
  content by an identity allowed to control the owner, or added to an
  existing object (adoption) whose containers are, or are not, its owner's
  template. A controller adopts whatever matches its selector: a tenant's
  bare Pod labelled like a workload's Pods is adopted by the workload's own
  controller, with a permission it holds. Such an edge is proven, and its
  proof says the content is not the template's (`Origin.MISMATCH`): listed
  apart, never absorbed.

A ReplicaSet controlled by a Deployment keeps its proof under
`replicaset-edge-proof` instead: the deployment controller copies the
Deployment's own `edge-proof` onto its ReplicaSets, and overwriting that copy
would loop (`Keys.proof_key`).

Everyone else (annotator, offline scan) decides with `ProofTrust`: an edge is
proven when its proof verifies with the key, in every namespace. A guarded
namespace (the ValidatingAdmissionPolicy refuses unproven edges there) proves
nothing by itself: trust follows what was checked when the edge was admitted,
and the guard leaves no record of its checks, while an edge admitted before
the namespace was guarded (before the policy was installed, or while the
namespace was opted out) was never checked by it. The proof is that record.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum

from aibom_core.kinds import (
    DAEMON_SET,
    DEPLOYMENT,
    JOB,
    POD,
    REPLICA_SET,
    STATEFUL_SET,
    GroupKind,
    group_kind_of,
)
from aibom_core.objects import Obj, ObjRef, OwnerRef, annotations_of, metadata, ref_of
from aibom_core.stamp import Keys
from aibom_core.walk import Reason

PROOF_VERSION = "v2"
KEY_BYTES = 32
# Where an object's creationTimestamp may lie, in seconds from the second a
# proof written at its CREATE names. Before: the clocks of the webhook and the
# API server may differ (a few seconds on clusters that keep time; the stamp
# is truncated to the second). After: the API server assigns it once every
# mutating admission plugin has answered (ours first among the webhooks of a
# typical cluster, the re-invocation after them included), and the clocks
# again. A Pod whose admission chain took longer is not proven: listed as
# unproven, never wrongly absorbed. A namesake created more than this after
# the original is refused.
CREATED_WITHIN = (-5.0, 15.0)

# Controllers whose children are made from a Pod template (`spec.template`), and
# the kind of those children: what "the owner's template" of an adopted child is.
TEMPLATE_CHILDREN: Mapping[GroupKind, GroupKind] = {
    REPLICA_SET: POD,
    STATEFUL_SET: POD,
    DAEMON_SET: POD,
    JOB: POD,
    DEPLOYMENT: REPLICA_SET,
}


class ProvenanceKeyError(ValueError):
    """The provenance key is not a key (the edges read the file: `aibom_edge.options`)."""


class Origin(StrEnum):
    """How a proven controller edge came to be (the proof's `origin`)."""

    # The object's content was set together with the edge, or changed later, by
    # an identity allowed to control the owner (its controller creating it).
    CONTROLLED = "c"
    # Added to an existing object by an identity allowed to control the owner,
    # and the object's containers are the owner's template (or the owner has no
    # Pod template to compare with: a kind outside `TEMPLATE_CHILDREN`).
    ADOPTED = "a"
    # Added the same way, but the object's containers differ from the owner's
    # template: an adoption of what someone else made. Proven, never absorbed.
    MISMATCH = "m"


# -- what an object runs --------------------------------------------------------------------


Containers = tuple[tuple[str, str, str], ...]  # (list, name, image), sorted


def containers_of(pod_spec: object) -> Containers:
    """The (list, name, image) of every container and init container of a Pod spec,
    sorted (their order does not change what runs)."""
    if not isinstance(pod_spec, Mapping):
        return ()
    out = []
    for field in ("initContainers", "containers"):
        items = pod_spec.get(field)
        for c in items if isinstance(items, list) else ():
            if isinstance(c, Mapping):
                out.append((field, str(c.get("name", "")), str(c.get("image", ""))))
    return tuple(sorted(out))


def pod_containers(obj: Obj) -> Containers | None:
    """What a Pod runs (None for other kinds: their proofs bind no content)."""
    if group_kind_of(obj) != POD:
        return None
    return containers_of(obj.get("spec"))


def template_containers(obj: Obj) -> Containers | None:
    """The containers of a controller's Pod template (`spec.template.spec`), for the
    kinds of `TEMPLATE_CHILDREN`; None for any other kind."""
    if group_kind_of(obj) not in TEMPLATE_CHILDREN:
        return None
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    return containers_of(template.get("spec") if isinstance(template, Mapping) else None)


def child_containers(child: Obj) -> Containers | None:
    """What an adopted child runs, to compare with its owner's template: a Pod's own
    containers, a ReplicaSet's template's (under a Deployment)."""
    return pod_containers(child) if group_kind_of(child) == POD else template_containers(child)


def matches_template(child: Obj, owner: Obj) -> bool | None:
    """Whether an adopted child runs exactly its owner's template: the same containers
    and init containers, by name, with the same images (no more, no fewer: an
    added container runs too). None when there is nothing to compare (the owner
    has no Pod template, or is not the kind that makes this child)."""
    made = TEMPLATE_CHILDREN.get(group_kind_of(owner))
    if made is None or made != group_kind_of(child):
        return None
    want, got = template_containers(owner), child_containers(child)
    if want is None or got is None:
        return None
    return want == got


def _content(containers: Containers | None) -> str:
    if containers is None:
        return ""
    text = json.dumps(containers, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


# -- the proof -------------------------------------------------------------------------------


def _mac(
    key: bytes, ref: ObjRef, owner: OwnerRef, *, origin: str, anchor: str, content: str
) -> str:
    uid = ref.uid if anchor == "u" else ""
    message = "\n".join(
        (
            PROOF_VERSION,
            ref.namespace,
            ref.group,
            ref.kind,
            ref.name,
            owner.uid,
            origin,
            anchor,
            uid,
            content,
        )
    )
    mac = hmac.new(key, message.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def proof_for(
    key: bytes,
    child: Obj,
    owner: OwnerRef,
    *,
    origin: Origin = Origin.CONTROLLED,
    now: float | None = None,
    ref: ObjRef | None = None,
) -> str:
    """The `edge-proof` value of this child's controller reference to `owner` (the
    message is the module docstring's). Bound to the child's UID when it has one,
    else to `now` (Unix seconds: a CREATE, before the UID exists). `ref`: who the
    child is, when that is not `ref_of(child)` (a name the webhook generated)."""
    ref = ref if ref is not None else ref_of(child)
    if ref.uid:
        anchor = "u"
    elif now is not None:
        anchor = f"t{int(now)}"
    else:
        raise ValueError("a proof for an object without a UID needs the time (now)")
    content = _content(pod_containers(child))
    mac = _mac(key, ref, owner, origin=origin.value, anchor=anchor, content=content)
    return f"{PROOF_VERSION}:{origin.value}:{anchor}:{mac}"


def created_at(obj: Obj) -> float | None:
    """The object's creationTimestamp in Unix seconds (None: none, or unreadable)."""
    stamp = metadata(obj).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return parsed.timestamp()


def origin_of(
    key: bytes, value: object, child: Obj, owner: OwnerRef, *, ref: ObjRef | None = None
) -> Origin | None:
    """The origin a proof records, when it is exactly this child's proof (this object,
    this lifetime, these containers) of its edge to `owner`; None when it is not."""
    return check_proof(
        key,
        value,
        ref if ref is not None else ref_of(child),
        owner,
        created=created_at(child),
        containers=pod_containers(child),
    )


def check_proof(
    key: bytes,
    value: object,
    ref: ObjRef,
    owner: OwnerRef,
    *,
    created: float | None,
    containers: Containers | None,
) -> Origin | None:
    """`origin_of` from what it reads of the child: who it is (`ref`), when it was
    created (Unix seconds, None: unknown) and what it runs (`pod_containers`).
    The MAC is compared in constant time."""
    if not isinstance(value, str) or not owner.uid or not ref.name:
        return None
    version, _, rest = value.partition(":")
    origin, _, rest = rest.partition(":")
    anchor, _, mac = rest.partition(":")
    if version != PROOF_VERSION or origin not in _ORIGINS or not mac:
        return None
    if anchor == "u":
        if not ref.uid:
            return None
    elif anchor.startswith("t") and anchor[1:].isdigit():
        low, high = CREATED_WITHIN
        if created is None or not low <= created - int(anchor[1:]) <= high:
            return None
    else:
        return None
    want = _mac(key, ref, owner, origin=origin, anchor=anchor, content=_content(containers))
    return Origin(origin) if hmac.compare_digest(mac.encode(), want.encode()) else None


_ORIGINS = frozenset(o.value for o in Origin)


def verify(
    key: bytes, value: object, child: Obj, owner: OwnerRef, *, ref: ObjRef | None = None
) -> bool:
    """Whether `value` is this child's proof of its edge to `owner` (any origin)."""
    return origin_of(key, value, child, owner, ref=ref) is not None


def edge_reason(origin: Origin | None) -> Reason | None:
    """The walk's verdict on an edge whose proof records `origin` (None: proven)."""
    if origin is None:
        return Reason.UNPROVEN
    if origin is Origin.MISMATCH:
        return Reason.ADOPTED_MISMATCH
    return None


def parse_key(data: bytes, *, source: str = "the provenance key") -> bytes:
    """A key file's content: base64 text of at least 32 bytes (what `aibom-rollup certs`
    writes), or exactly 32 raw bytes."""
    text = data.strip()
    try:
        decoded = base64.b64decode(text, validate=True) if text else b""
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) >= KEY_BYTES:
        return decoded
    if len(data) == KEY_BYTES:
        return data
    raise ProvenanceKeyError(
        f"{source} must hold base64 text of at least {KEY_BYTES} random bytes (as "
        f"`aibom-rollup certs` writes it) or exactly {KEY_BYTES} raw bytes; got {len(data)} bytes"
    )


def read_proof(child: Obj, ref: ObjRef, owner: OwnerRef, *, keys: Keys) -> str | None:
    """The proof annotation of this child's controller edge (`Keys.proof_key`)."""
    value = annotations_of(child).get(keys.proof_key(ref.group_kind, owner.group_kind))
    return value if isinstance(value, str) else None


class ProofTrust:
    """The edge-trust input (`aibom_core.walk.EdgeTrust`) of the annotator and the scan.

    An edge is proven when the child's `edge-proof` annotation verifies with
    `key` (no key: never), whether or not its namespace is guarded now (the
    module docstring says why); an adoption whose proof says the child is not
    its owner's template is refused as `AdoptedMismatch`.
    """

    def __init__(self, *, key: bytes | None, keys: Keys) -> None:
        self.key = key
        self.keys = keys

    def origin(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> Origin | None:
        if self.key is None:
            return None
        value = read_proof(child, ref, owner, keys=self.keys)
        return origin_of(self.key, value, child, owner, ref=ref)

    def proven(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> bool:
        return self(child, ref, owner) is None

    def __call__(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> Reason | None:
        return edge_reason(self.origin(child, ref, owner))
