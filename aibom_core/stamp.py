"""The published result of a walk: the four `aibom.dev/` annotations, and the
JSONPatch that puts them on an object. Pure.

Authority is always the UID-checked controller chain; these annotations are
only its published result, so any value a user wrote into our keys is
overwritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aibom_core.kinds import DEPLOYMENT, REPLICA_SET, GroupKind, group_kind_of
from aibom_core.objects import Obj, ObjRef, annotations_of, metadata
from aibom_core.walk import Rollup, WalkResult

DEFAULT_PREFIX = "aibom.dev/"


# Kubernetes' own validation of an annotation key (apimachinery
# validation.IsQualifiedName): an optional DNS-1123 subdomain prefix of at most
# 253 characters and `/`, then a name of at most 63 characters.
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_NAMES = ("root", "root-uid", "rollup", "rollup-reason")


def prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot prefix our annotation keys, or None when it can.

    The one check of `--annotation-prefix`, for every command: a bad prefix
    would make every patched object fail the API server's validation (every
    CREATE in opted-in namespaces denied), so it is refused at start.
    """
    if not prefix.endswith("/") or prefix.count("/") != 1:
        return "must be a DNS subdomain followed by one `/`, like `example.com/`"
    domain = prefix[:-1]
    if not domain:
        return "has an empty DNS subdomain before `/` (like `example.com/`)"
    if len(domain) > 253:
        return f"is too long: the DNS subdomain has {len(domain)} characters, at most 253"
    if not _DNS1123_SUBDOMAIN.fullmatch(domain):
        return (
            "is not a DNS-1123 subdomain followed by `/`: lowercase letters, digits, `-` and "
            "`.`, each dot-separated part starting and ending with a letter or digit "
            "(like `example.com/`)"
        )
    for name in _NAMES:
        if len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):  # pragma: no cover
            return f"makes {prefix}{name} an invalid annotation key"
    return None


@dataclass(frozen=True, slots=True)
class Keys:
    """The annotation keys under a prefix (default `aibom.dev/`)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        problem = prefix_problem(self.prefix)
        if problem:
            raise ValueError(f"annotation prefix {self.prefix!r} {problem}")

    @property
    def root(self) -> str:
        return f"{self.prefix}root"

    @property
    def root_uid(self) -> str:
        return f"{self.prefix}root-uid"

    @property
    def rollup(self) -> str:
        return f"{self.prefix}rollup"

    @property
    def reason(self) -> str:
        return f"{self.prefix}rollup-reason"

    @property
    def edge_proof(self) -> str:
        """The webhook's proof that an object's controller edge was proven."""
        return f"{self.prefix}edge-proof"

    @property
    def replicaset_edge_proof(self) -> str:
        """Where a ReplicaSet controlled by a Deployment keeps its own proof: the
        deployment controller copies every Deployment annotation, `edge-proof`
        included, onto its ReplicaSets (see `mirror_deployment`)."""
        return f"{self.prefix}replicaset-edge-proof"

    def proof_key(self, subject: GroupKind, owner: GroupKind) -> str:
        """The annotation holding the proof of `subject`'s controller edge to `owner`."""
        if subject == REPLICA_SET and owner == DEPLOYMENT:
            return self.replicaset_edge_proof
        return self.edge_proof

    def all(self) -> tuple[str, str, str, str]:
        return (self.root, self.root_uid, self.rollup, self.reason)


@dataclass(frozen=True, slots=True)
class Stamp:
    """The values of the four keys; None means the key must be absent."""

    root: str | None
    root_uid: str | None
    rollup: str
    reason: str | None

    def as_annotations(self, keys: Keys) -> dict[str, str | None]:
        return {
            keys.root: self.root,
            keys.root_uid: self.root_uid,
            keys.rollup: self.rollup,
            keys.reason: self.reason,
        }

    def annotations(self, keys: Keys) -> dict[str, str]:
        """The annotations an object with this stamp carries (`as_annotations` without
        the keys that must be absent)."""
        return {k: v for k, v in self.as_annotations(keys).items() if v is not None}


def stamp_of(result: WalkResult) -> Stamp:
    """The stamp docs/webhook.md defines for a walk result."""
    root = result.root
    return Stamp(
        root=root.kind_name if root else None,
        # Omitted when the root is the object itself and the API server has
        # not assigned its UID yet (CREATE).
        root_uid=(root.uid or None) if root else None,
        rollup=result.status.value,
        reason=(
            str(result.failure)
            if result.status in (Rollup.UNRESOLVED, Rollup.UNPROVEN) and result.failure
            else None
        ),
    )


def escape_pointer(token: str) -> str:
    """RFC 6901: `~` is `~0`, `/` is `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def stamp_patch(obj: Obj, stamp: Stamp, *, keys: Keys) -> list[dict[str, Any]]:
    """JSONPatch ops that make `obj` carry exactly `stamp`; empty when it already does."""
    meta = metadata(obj)
    current = annotations_of(obj)
    want = stamp.as_annotations(keys)
    ops: list[dict[str, Any]] = []
    has_annotations = isinstance(meta.get("annotations"), dict)
    if not has_annotations and any(v is not None for v in want.values()):
        # `add` needs its parent: create the map first.
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in want.items():
        path = f"/metadata/annotations/{escape_pointer(key)}"
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": path})
        elif current.get(key) != value:
            ops.append({"op": "replace" if key in current else "add", "path": path, "value": value})
    return ops


def stamp_merge_patch(obj: Obj, stamp: Stamp, *, keys: Keys) -> dict[str, Any] | None:
    """The same change as a JSON merge patch of annotations only (None: nothing to do)."""
    current = annotations_of(obj)
    want = stamp.as_annotations(keys)
    changes = {
        k: v for k, v in want.items() if current.get(k) != v and (v is not None or k in current)
    }
    if not changes:
        return None
    return {"metadata": {"annotations": changes}}


def read_stamp(obj: Obj, *, keys: Keys) -> Stamp | None:
    """The stamp an object carries now, if it carries our rollup key."""
    ann = annotations_of(obj)
    if keys.rollup not in ann:
        return None
    return Stamp(
        root=ann.get(keys.root),
        root_uid=ann.get(keys.root_uid),
        rollup=ann[keys.rollup],
        reason=ann.get(keys.reason),
    )


def mirror_deployment(
    stamp: Stamp,
    *,
    subject: GroupKind,
    owner: Obj | None,
    keys: Keys,
    first_hop: ObjRef | None,
) -> Stamp:
    """The stamp a ReplicaSet can keep without fighting its Deployment's controller.

    Kubernetes' deployment controller copies every annotation of a Deployment
    onto its ReplicaSets, and again on every sync whenever a value differs
    (`copyDeploymentAnnotationsToReplicaSet`, pkg/controller/deployment/util).
    A root Deployment says `rollup: root`; its ReplicaSet's own walk says
    `rolled-up`. Overwriting the copy triggers a sync that copies it back: an
    endless UPDATE loop (seen on the real kube-controller-manager). So a
    ReplicaSet whose UID-checked controller (`owner`) is a Deployment keeps
    each of our keys the Deployment carries. `root` and `root-uid` are the
    same either way; only `rollup` (and a reason) mirror the Deployment. The
    webhook, the annotator and the offline `tree` all apply this one rule.

    Only after a passed check: `first_hop` is the walk's UID-checked first hop
    (`result.chain[0]`, None when the walk took no hop). An `owner` that is not
    that hop (a Deployment deleted and re-created under the same name: the
    walk said `UIDMismatch`) is not this ReplicaSet's controller, and its
    stamp is never copied: the ReplicaSet keeps its own walk's stamp
    (`unresolved`), as the annotator computes it from its graph.
    """
    if subject != REPLICA_SET or owner is None or group_kind_of(owner) != DEPLOYMENT:
        return stamp
    if first_hop is None or first_hop.group_kind != DEPLOYMENT or first_hop.uid != _uid(owner):
        return stamp
    if stamp.rollup == Rollup.UNPROVEN.value:
        # Its edge to the Deployment is not proven: the Deployment's
        # stamp says nothing about it (a forged ReplicaSet inherits nothing).
        return stamp
    ann = annotations_of(owner)
    if not any(k in ann for k in keys.all()):
        return stamp
    return Stamp(
        root=ann.get(keys.root, stamp.root),
        root_uid=ann.get(keys.root_uid, stamp.root_uid),
        rollup=ann.get(keys.rollup, stamp.rollup),
        reason=ann.get(keys.reason, stamp.reason),
    )


def _uid(obj: Obj) -> str | None:
    uid = metadata(obj).get("uid")
    return uid if isinstance(uid, str) and uid else None


def mirror_agrees(child: Obj, owner: Obj, *, keys: Keys) -> bool:
    """Whether a (possibly cached) `owner` may answer a ReplicaSet child's mirror.

    False when `child` is a ReplicaSet, `owner` a Deployment, and the child's
    values of the keys the owner carries differ from them: the child may carry the
    deployment controller's copy of a newer Deployment than the one at hand,
    and mirroring the older one would revert it (the webhook then fetches the
    owner afresh). True for every other pair: nothing is mirrored there.
    """
    if group_kind_of(child) != REPLICA_SET or group_kind_of(owner) != DEPLOYMENT:
        return True
    mine, theirs = annotations_of(child), annotations_of(owner)
    # The controller copies the keys the Deployment carries (it never deletes).
    return all(mine.get(k) == theirs[k] for k in keys.all() if k in theirs)
