"""Reading raw Kubernetes objects: identity and controller ownerReferences.

Objects stay the raw dicts the API server sent (no model deserialization);
these helpers read the few fields the roll-up needs. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aibom_core.kinds import GroupKind, group_of

Obj = dict[str, Any]

# One GroupKind per (group, kind): every ObjRef and OwnerRef carries one, and a
# cache of 100,000 Pods would otherwise hold 100,000 equal tuples (7 MB).
_GROUP_KINDS: dict[tuple[str, str], GroupKind] = {}
_GROUP_KINDS_MAX = 10_000


def _group_kind(group: str, kind: str) -> GroupKind:
    gk = _GROUP_KINDS.get((group, kind))
    if gk is None:
        gk = GroupKind(group, kind)
        if len(_GROUP_KINDS) < _GROUP_KINDS_MAX:  # kinds are few; a flood of them is not cached
            _GROUP_KINDS[gk] = gk
    return gk


def hop_of(group: str, kind: str, name: str) -> str:
    """`<group>/<Kind>/<name>` (group `core` for the core group), as in rollup-reason."""
    return f"{group or 'core'}/{kind}/{name}"


@dataclass(frozen=True, order=True, slots=True)
class ObjRef:
    """Who an object is: group, kind, namespace, name and (when assigned) UID."""

    group: str
    kind: str
    namespace: str
    name: str
    uid: str
    # Derived, cached: the walk and the graph ask for it on every hop.
    group_kind: GroupKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_kind", _group_kind(self.group, self.kind))

    @property
    def kind_name(self) -> str:
        """`<Kind>/<name>`, the form of `aibom.dev/root` and `aibom.rollup.owned.<i>`."""
        return f"{self.kind}/{self.name}"

    @property
    def hop(self) -> str:
        return hop_of(self.group, self.kind, self.name)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """A controller ownerReference: enough to fetch the owner and check its UID."""

    api_version: str
    kind: str
    name: str
    uid: str
    # Derived, cached as on ObjRef: every edge check and hop asks for it.
    group_kind: GroupKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_kind", _group_kind(group_of(self.api_version), self.kind))


def metadata(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def name_of(obj: Obj) -> str:
    """The name, or for a CREATE with generateName the prefix (the name is not assigned yet)."""
    meta = metadata(obj)
    return str(meta.get("name") or meta.get("generateName") or "")


def ref_of(obj: Obj, *, namespace: str | None = None) -> ObjRef:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    api_version = obj.get("apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    return ObjRef(
        group=group,
        kind=str(obj.get("kind", "")),
        namespace=str(meta.get("namespace") or namespace or ""),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        uid=str(meta.get("uid") or ""),
    )


def controller_ref(obj: Obj) -> OwnerRef | None:
    """The ownerReference with `controller: true`, if any.

    Only the controller reference counts: other owners (garbage-collection
    owners) do not say who manages the object. The API server refuses more than
    one controller reference, so the first is the only one.
    """
    refs = metadata(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return OwnerRef(
                api_version=str(ref.get("apiVersion", "")),
                kind=str(ref.get("kind", "")),
                name=str(ref.get("name", "")),
                uid=str(ref.get("uid", "")),
            )
    return None


def annotations_of(obj: Obj) -> dict[str, str]:
    ann = metadata(obj).get("annotations")
    return ann if isinstance(ann, dict) else {}
