"""Ownership provenance: which controller edges count. Pure.

The rule: a controller ownerReference (child -> owner) is an edge of the
roll-up only if whoever added or changed it may `update` the owner's
`finalizers` subresource (what OwnerReferencesPermissionEnforcement checks for
`blockOwnerDeletion`) or the owner itself (an operator managing it; the
reasons are in `aibom_core.guard`). Only the webhook sees who wrote an edge (the admission
request's userInfo); it checks the rule with a SubjectAccessReview and records
its verdict as the `edge-proof` annotation:

    v1:<base64url, no padding, of HMAC-SHA256(key, "v1\\n" + namespace + "\\n"
        + group + "\\n" + Kind + "\\n" + name + "\\n" + owner_uid)>

where group, Kind and name are the child's own and owner_uid is the UID its
controller reference names. The proof binds the object (namespace, kind,
name: unique while the object exists) and the edge (owner UID): copied onto
another object, or kept after the reference changed, it does not verify.
A ReplicaSet controlled by a Deployment keeps its proof under
`replicaset-edge-proof` instead: the deployment controller copies the
Deployment's own `edge-proof` onto its ReplicaSets, and overwriting that copy
would loop (`Keys.proof_key`).

Everyone else (annotator, offline scan) decides with `ProofTrust`: an edge is
proven when its namespace is guarded (the ValidatingAdmissionPolicy refused
unproven edges at admission) or its proof verifies with the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable

from aibom_core.objects import Obj, ObjRef, OwnerRef, annotations_of
from aibom_core.stamp import Keys
from aibom_core.walk import Reason

PROOF_VERSION = "v1"
KEY_BYTES = 32


class ProvenanceKeyError(ValueError):
    """The provenance key is not a key (the edges read the file: `aibom_edge.options`)."""


def proof_for(key: bytes, child: ObjRef, owner: OwnerRef) -> str:
    """The `edge-proof` value of this child's controller reference to `owner` (the
    message is the module docstring's)."""
    message = "\n".join(
        (PROOF_VERSION, child.namespace, child.group, child.kind, child.name, owner.uid)
    )
    mac = hmac.new(key, message.encode(), hashlib.sha256)
    return f"{PROOF_VERSION}:" + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def verify(key: bytes, value: object, child: ObjRef, owner: OwnerRef) -> bool:
    """Whether `value` is the proof of exactly this child and owner UID (constant time)."""
    if not isinstance(value, str) or not child.name or not owner.uid:
        return False
    return hmac.compare_digest(value.encode(), proof_for(key, child, owner).encode())


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

    An edge is proven when its child's namespace is `guarded`, or when the
    child's `edge-proof` annotation verifies with `key` (no key: never).
    """

    def __init__(
        self,
        *,
        key: bytes | None,
        keys: Keys,
        guarded: Callable[[str], bool] = lambda namespace: False,
    ) -> None:
        self.key = key
        self.keys = keys
        self.guarded = guarded

    def proven(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> bool:
        if self.guarded(ref.namespace):
            return True
        if self.key is None:
            return False
        return verify(self.key, read_proof(child, ref, owner, keys=self.keys), ref, owner)

    def __call__(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> Reason | None:
        return None if self.proven(child, ref, owner) else Reason.UNPROVEN
