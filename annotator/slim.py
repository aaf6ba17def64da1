"""What of an object the cache keeps.

The memory goal (10,000 Pods cached in well under 200 MB) rules out keeping
objects as the API sends them: `managedFields` alone is often half of an
object, and a Pod carries conditions, probes, resources, tolerations and
the service-account volume that no document reads. So:

- every object: no `managedFields`, no `kubectl.kubernetes.io/last-applied-
  configuration` (a second copy of the spec);
- tracked kinds: everything else (their spec is what the document says),
  with equal Pod templates shared between objects (`TemplateSharer`);
- walk-only intermediates other than Pods (ReplicaSet, Grove kinds, ...) and
  Namespaces: metadata only. A document is built from its root, its tracked
  members and its Pods (`aibom_core.bom.RootView`); intermediates only carry
  ownership;
- our ConfigMaps: metadata only (the input-hash annotation says what the
  data is; the data itself, up to 1 MiB each, is never needed), and a
  marker when `managedFields` show that a write other than our own apply
  owns part of the data (someone edited the document);
- Pods: exactly what the walk, the stamps, the proofs, the scrapers and the
  digest resolver read (`aibom_core.scrape` on Pods, `pod_signature`,
  `aibom_core.provenance`, `aibom_core.digests`): identity, creationTimestamp
  and ownerReferences; annotations under
  our stamp prefix and `model.aibom.dev/`; the containers' name, image,
  command, args, env and the mounts of model-source volumes;
  `spec.volumes` entries that name a claim or host path, the others
  reduced to `{}` so JSON pointers keep their indices; container
  statuses' name, image and imageID (not the phase: nothing reads it).

Pods of one ReplicaSet are alike once slimmed (the per-Pod token volume and
its mount are gone), so equal parts are shared: a Pod's containers, volumes,
statuses and ownerReferences are the previous sibling's objects when they
compare equal (`==`, C speed). Cached objects are never mutated (an update
replaces the whole object), which is what makes sharing safe. Repeated
strings (namespaces, kinds, images, annotation keys) are interned; values
that are often unique per Pod (imageIDs, annotation values) are not, since
an interned string costs a slot in the interpreter's table (siblings still
share them through the shared parts).

tests/unit/test_annotator_slim.py checks that a document built from slimmed
objects is byte-identical to one built from the full objects.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, TypedDict

import orjson

from aibom_core.document import DATA_KEY, DATA_KEY_GZ
from aibom_core.kinds import CONFIGMAP, NAMESPACE, POD, GroupKind, KindRegistry, group_kind_of
from aibom_core.objects import Obj
from aibom_core.scrape import MODEL_NAME_ANNOTATION
from aibom_core.stamp import DEFAULT_PREFIX
from aibom_edge.schema import KindSchema
from annotator.configmap import FIELD_MANAGER, FOREIGN_DATA

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MODEL_PREFIX = MODEL_NAME_ANNOTATION.rpartition("/")[0] + "/"


# What of a Pod `PodSlimmer` reads, as a schema: Pods are listed and watched
# through it (`POD_SCHEMA`, aibom_edge.schema), so the rest of each Pod is
# skipped by the decoder and never becomes Python objects. The key tuples the
# slimmer copies are derived from it: one list of fields, not two.
# tests/unit/test_annotator_slim.py checks that a Pod decoded through it slims
# to the same bytes as the whole Pod.
class _Typed(TypedDict, total=False):
    apiVersion: str
    kind: str


class OwnerRefKept(_Typed, total=False):
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class PodMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    deletionTimestamp: str
    creationTimestamp: str  # a proof written at its CREATE binds it (aibom_core.provenance)
    annotations: dict[str, str]  # filtered to our prefixes by the slimmer
    ownerReferences: list[OwnerRefKept]


class PodVolume(TypedDict, total=False):
    name: str
    persistentVolumeClaim: Any  # a model source: kept whole
    hostPath: Any  # a model source: kept whole


class PodContainer(TypedDict, total=False):
    name: str
    image: str
    command: Any
    args: Any
    env: Any
    volumeMounts: Any  # filtered to model-source volumes by the slimmer


class PodContainerStatus(TypedDict, total=False):
    name: str
    image: str
    imageID: str


class PodSpecKept(TypedDict, total=False):
    volumes: list[PodVolume]
    initContainers: list[PodContainer]
    containers: list[PodContainer]


class PodStatusKept(TypedDict, total=False):
    initContainerStatuses: list[PodContainerStatus]
    containerStatuses: list[PodContainerStatus]


class PodKept(_Typed, total=False):
    metadata: PodMeta
    spec: PodSpecKept
    status: PodStatusKept


# Every other kind the cache keeps only the metadata of (`slim_metadata`), and
# our ConfigMaps (`slim_configmap`), which also need who manages what.
class ObjectMetaKept(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerRefKept]
    deletionTimestamp: str
    creationTimestamp: str


class ManagedFieldsEntryKept(TypedDict, total=False):
    manager: str
    operation: str
    fieldsV1: Any


class ConfigMapMetaKept(ObjectMetaKept, total=False):
    managedFields: list[ManagedFieldsEntryKept]


class MetadataKept(_Typed, total=False):
    metadata: ObjectMetaKept


class ConfigMapKept(_Typed, total=False):
    metadata: ConfigMapMetaKept


POD_SCHEMA = KindSchema(PodKept)
METADATA_SCHEMA = KindSchema(MetadataKept)
CONFIGMAP_SCHEMA = KindSchema(ConfigMapKept)

_META_KEYS = tuple(ObjectMetaKept.__annotations__)

_POD_META_KEYS = tuple(
    k for k in PodMeta.__annotations__ if k not in ("annotations", "ownerReferences")
)
_CONTAINER_KEYS = tuple(k for k in PodContainer.__annotations__ if k != "volumeMounts")
_STATUS_KEYS = tuple(PodContainerStatus.__annotations__)
_SHARE_LIMIT = 50_000  # owners whose last Pod is remembered before the memo starts afresh


def _i(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) else value


def _owner(ref: Any) -> Any:
    if not isinstance(ref, dict):
        return ref
    return {k: _i(v) if k in ("apiVersion", "kind") else v for k, v in ref.items()}


def slim_metadata(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        return {}
    out: dict[str, Any] = {}
    for key in _META_KEYS:
        if key not in meta:
            continue
        value = meta[key]
        if key == "annotations" and isinstance(value, dict) and LAST_APPLIED in value:
            value = {k: v for k, v in value.items() if k != LAST_APPLIED}
        elif key == "namespace":
            value = _i(value)
        elif key == "ownerReferences" and isinstance(value, list):
            value = [_owner(r) for r in value]
        out[key] = value
    return out


def _head(obj: Obj) -> dict[str, Any]:
    return {
        "apiVersion": _i(obj.get("apiVersion")),
        "kind": _i(obj.get("kind")),
        "metadata": slim_metadata(obj.get("metadata")),
    }


def slim_metadata_only(obj: Obj) -> Obj:
    return _head(obj)


# A private marker on a slimmed ConfigMap (never sent anywhere): someone other
# than our applies wrote its data. The cache keeps no data to compare with, but
# managedFields say which writes own which field; `configmap.is_current` treats
# a marked document as stale, and the next server-side apply (force) takes the
# fields back. A write is ours only if it is an Apply under our field manager:
# we never write a document any other way, so an Update (`kubectl edit`,
# `patch`, `replace`) that borrowed our manager's name is someone else's. An
# Apply under our name leaves no such trace: the cache's resourceVersion check
# catches that one (`ClusterState.configmap`).
def slim_configmap(obj: Obj, *, field_manager: str) -> Obj:
    out = _head(obj)
    managed = (obj.get("metadata") or {}).get("managedFields")
    for entry in managed if isinstance(managed, list) else ():
        if not isinstance(entry, dict):
            continue
        if entry.get("manager") == field_manager and entry.get("operation") == "Apply":
            continue
        fields = entry.get("fieldsV1")
        if not isinstance(fields, dict):
            continue
        # Only our own keys count: a key someone else added stays theirs after
        # our apply, and flagging it would make every reconcile rewrite.
        data, binary = fields.get("f:data"), fields.get("f:binaryData")
        if (isinstance(data, dict) and f"f:{DATA_KEY}" in data) or (
            isinstance(binary, dict) and f"f:{DATA_KEY_GZ}" in binary
        ):
            out[FOREIGN_DATA] = True
            break
    return out


def slim_full(obj: Obj) -> Obj:
    """Everything but managedFields and the last-applied annotation."""
    out = dict(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        m = {k: v for k, v in meta.items() if k != "managedFields"}
        ann = m.get("annotations")
        if isinstance(ann, dict) and LAST_APPLIED in ann:
            m["annotations"] = {k: v for k, v in ann.items() if k != LAST_APPLIED}
        if "namespace" in m:
            m["namespace"] = _i(m["namespace"])
        out["metadata"] = m
    return out


_TEMPLATE_DEPTH = 8  # how deep under `spec` a Pod template is looked for (LWS, DGD: 4-5)


class TemplateSharer:
    """Tracked objects of one shape carry equal Pod templates (every Deployment of a
    Helm chart, every worker template of a LeaderWorkerSet): the PodSpecs in their spec
    (a dict with a `containers` list, at most `_TEMPLATE_DEPTH` levels down) that
    serialize to the same bytes are one dict. Same bytes, not only `==`: the same
    keys in the same order, so anything built from the shared dict is byte-identical.
    Objects are copied along the path to a replaced PodSpec, never mutated."""

    def __init__(self, floor: int = 1024) -> None:
        self._known: dict[bytes, dict[str, Any]] = {}  # 128-bit digest of the bytes -> PodSpec
        self._floor = floor
        self._prune_at = floor

    def __call__(self, obj: Obj) -> Obj:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            shared = self._walk(spec, _TEMPLATE_DEPTH)
            if shared is not spec:
                obj = {**obj, "spec": shared}
        return obj

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict):
            if isinstance(value.get("containers"), list):
                return self._share(value)
            if depth == 0:
                return value
            out: dict[str, Any] | None = None
            for key, item in value.items():
                if isinstance(item, (dict, list)):
                    new = self._walk(item, depth - 1)
                    if new is not item:
                        out = dict(value) if out is None else out
                        out[key] = new
            return value if out is None else out
        if isinstance(value, list) and depth > 0:
            items = [self._walk(item, depth - 1) for item in value]
            changed = any(a is not b for a, b in zip(items, value, strict=True))
            return items if changed else value
        return value

    def _share(self, pod_spec: dict[str, Any]) -> dict[str, Any]:
        try:
            text = orjson.dumps(pod_spec)
        except (orjson.JSONEncodeError, TypeError):
            return pod_spec
        key = hashlib.blake2b(text, digest_size=16).digest()
        known = self._known.get(key)
        if known is not None:
            return known
        if len(self._known) >= self._prune_at:
            self._prune()
        self._known[key] = pod_spec
        return pod_spec

    def _prune(self) -> None:
        """Forget the templates no cached object holds any more (a rollout replaces
        its object's template): the table stays within twice the live templates."""
        known: dict[bytes, dict[str, Any]] = {}
        for key in list(self._known):
            spec = self._known.pop(key)
            # Held only by `spec` and getrefcount's argument: no object uses it.
            if sys.getrefcount(spec) > 2:
                known[key] = spec
        self._known = known
        self._prune_at = max(self._floor, 2 * len(self._known))


def _model_source(v: Any) -> bool:
    return isinstance(v, dict) and ("persistentVolumeClaim" in v or "hostPath" in v)


class PodSlimmer:
    """Slims Pods, sharing equal parts between siblings (see the module docstring)."""

    def __init__(self, *, annotation_prefixes: Iterable[str]) -> None:
        self.prefixes = tuple(annotation_prefixes)
        self._memo: dict[str, dict[str, Any]] = {}  # owner uid -> part -> last value

    def _parts(self, owner: str) -> dict[str, Any]:
        parts = self._memo.get(owner)
        if parts is None:
            if len(self._memo) >= _SHARE_LIMIT:
                self._memo.clear()
            parts = self._memo[owner] = {}
        return parts

    def _metadata(self, meta: dict[str, Any], parts: dict[str, Any]) -> dict[str, Any]:
        out = {k: meta[k] for k in _POD_META_KEYS if k in meta}
        if "namespace" in out:
            out["namespace"] = _i(out["namespace"])
        ann = meta.get("annotations")
        if isinstance(ann, dict):
            prefixes = self.prefixes
            kept = {_i(k): v for k, v in ann.items() if k.startswith(prefixes)}
            if kept:
                # Siblings carry the same stamps: one dict for all of them.
                out["annotations"] = _shared(parts, "annotations", kept)
        refs = meta.get("ownerReferences")
        if isinstance(refs, list):
            out["ownerReferences"] = _shared(parts, "refs", [_owner(r) for r in refs])
        return out

    def __call__(self, obj: Obj) -> Obj:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        refs = meta.get("ownerReferences")
        owner = ""
        if isinstance(refs, list):
            owner = next(
                (str(r.get("uid")) for r in refs if isinstance(r, dict) and r.get("controller")), ""
            )
        parts = self._parts(owner)
        out: Obj = {
            "apiVersion": _i(obj.get("apiVersion")),
            "kind": _i(obj.get("kind")),
            "metadata": self._metadata(meta, parts),
        }
        spec = obj.get("spec")
        if isinstance(spec, dict):
            s: dict[str, Any] = {}
            volumes = spec.get("volumes")
            sources: set[Any] = set()
            if isinstance(volumes, list):
                s["volumes"] = slim_volumes = [v if _model_source(v) else {} for v in volumes]
                sources = {v.get("name") for v in slim_volumes if v}
            for key in ("initContainers", "containers"):  # PodSpecKept, volumes aside
                items = spec.get(key)
                if isinstance(items, list):
                    s[key] = [_container(c, sources) for c in items]
            out["spec"] = _shared_whole(parts, "spec", s)
        status = obj.get("status")
        if isinstance(status, dict):
            st: dict[str, Any] = {}
            for key in PodStatusKept.__annotations__:
                if key in status:
                    st[key] = _statuses(status[key])
            out["status"] = _shared_whole(parts, "status", st)
        return out


def _shared(parts: dict[str, Any], part: str, value: Any) -> Any:
    """The sibling's equal value (`==`, C speed), or this one, remembered for the next."""
    known = parts.get(part)
    if known is not None and known == value:
        return known
    parts[part] = value
    return value


def _shared_whole(parts: dict[str, Any], part: str, value: dict[str, Any]) -> dict[str, Any]:
    """A dict of parts: the sibling's whole dict when equal (the common case, one
    comparison), else a new dict whose equal parts are still shared one by one."""
    known = parts.get(part)
    if known is not None and known == value:
        return known  # type: ignore[no-any-return]
    for key, item in value.items():
        value[key] = _shared(parts, key, item)
    parts[part] = value
    return value


def _container(c: Any, sources: set[Any]) -> Any:
    if not isinstance(c, dict):
        return c
    out = {k: c[k] for k in _CONTAINER_KEYS if k in c}
    if "image" in out:
        out["image"] = _i(out["image"])
    mounts = c.get("volumeMounts")
    if isinstance(mounts, list):
        # Only mounts of model-source volumes are ever read (scrape._mounts).
        kept = [m for m in mounts if isinstance(m, dict) and m.get("name") in sources]
        if kept:
            out["volumeMounts"] = kept
    return out


def _statuses(items: Any) -> Any:
    if not isinstance(items, list):
        return items
    return [
        {k: s[k] if k == "imageID" else _i(s[k]) for k in _STATUS_KEYS if k in s}
        if isinstance(s, dict)
        else s
        for s in items
    ]


class Kept(Enum):
    """What the cache keeps of a kind (the module docstring): one rule, from which the
    slimming function, the informer's metadata-only request and the decoding schema
    all follow."""

    POD = "pod"  # PodSlimmer, through POD_SCHEMA
    CONFIGMAP = "configmap"  # slim_configmap: metadata and who manages the data
    METADATA = "metadata"  # slim_metadata_only: walk-only intermediates, Namespaces
    WHOLE = "whole"  # tracked kinds: slim_full, templates shared

    @classmethod
    def of(cls, registry: KindRegistry, gk: GroupKind) -> Kept:
        if gk == POD:
            return cls.POD
        if gk == CONFIGMAP:
            return cls.CONFIGMAP
        if gk != NAMESPACE and registry.is_tracked(gk):
            return cls.WHOLE
        return cls.METADATA


_SCHEMAS: dict[Kept, KindSchema | None] = {
    Kept.POD: POD_SCHEMA,
    Kept.CONFIGMAP: CONFIGMAP_SCHEMA,
    Kept.METADATA: METADATA_SCHEMA,
    Kept.WHOLE: None,
}


def schema_of(registry: KindRegistry, gk: GroupKind) -> KindSchema | None:
    """How lists and watches of this kind are decoded: into what `slimmer` reads of it
    (aibom_edge.schema); None for tracked kinds (all of it is kept)."""
    return _SCHEMAS[Kept.of(registry, gk)]


def keeps_metadata_only(registry: KindRegistry, gk: GroupKind) -> bool:
    """Whether the cache keeps only the metadata of this kind (what `slimmer` does with it):
    its informer then lists and watches PartialObjectMetadata."""
    return Kept.of(registry, gk) in (Kept.CONFIGMAP, Kept.METADATA)


def slimmer(
    registry: KindRegistry,
    *,
    stamp_prefix: str = DEFAULT_PREFIX,
    field_manager: str = FIELD_MANAGER,
) -> Callable[[Obj], Obj]:
    """The slimming function for objects of any kind under this registry."""
    templates = TemplateSharer()
    by_kept: dict[Kept, Callable[[Obj], Obj]] = {
        Kept.POD: PodSlimmer(annotation_prefixes=(stamp_prefix, MODEL_PREFIX)),
        Kept.CONFIGMAP: lambda obj: slim_configmap(obj, field_manager=field_manager),
        Kept.METADATA: slim_metadata_only,
        Kept.WHOLE: lambda obj: templates(slim_full(obj)),
    }
    by_kind: dict[GroupKind, Callable[[Obj], Obj]] = {}  # the rule, once per kind

    def slim(obj: Obj) -> Obj:
        gk = group_kind_of(obj)
        fn = by_kind.get(gk)
        if fn is None:
            fn = by_kind[gk] = by_kept[Kept.of(registry, gk)]
        return fn(obj)

    return slim
