"""What of an object the cache keeps. Pure.

The memory goal (10,000 Pods cached in well under 200 MB) rules out keeping
objects as the API sends them: `managedFields` alone is often half of an
object, and a Pod carries conditions, probes, resources, tolerations and
the service-account volume that no document reads. So:

- every object: no `managedFields`, no `kubectl.kubernetes.io/last-applied-
  configuration` (a second copy of the spec);
- walk-only intermediates other than Pods (ReplicaSet, Grove kinds, ...):
  metadata only. A document is built from its root, its tracked members and
  its Pods (`aibom_core.bom.RootView`); intermediates only carry ownership;
- Pods: the fields the scrapers and the digest resolver read
  (`aibom_core.scrape` for Pods: containers' name, image, command, args,
  env, volumeMounts; `spec.volumes` entries that name a claim or host path,
  the others reduced to their name so JSON pointers keep their indices;
  container statuses' name, image, imageID), plus ownership metadata;
- tracked kinds: everything else (their spec is what the document says);
- our ConfigMaps: metadata only (the input-hash annotation says what the
  data is; the data itself, up to 1 MiB each, is never needed).

Repeated strings (namespaces, kinds, images) are interned, so 10,000 Pods
of one image share one string. tests/unit/test_annotator_slim.py checks
that a document built from slimmed objects is byte-identical to one built
from the full objects.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from aibom_core.kinds import GroupKind, KindRegistry, group_kind_of
from aibom_core.objects import Obj

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
POD = GroupKind("", "Pod")
CONFIGMAP = GroupKind("", "ConfigMap")
NAMESPACE = GroupKind("", "Namespace")

_META_KEYS = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
    "creationTimestamp",
)
_CONTAINER_KEYS = ("name", "image", "command", "args", "env", "envFrom", "volumeMounts")
_STATUS_KEYS = ("name", "image", "imageID")


def _i(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) else value


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


def _owner(ref: Any) -> Any:
    if not isinstance(ref, dict):
        return ref
    return {k: _i(v) if k in ("apiVersion", "kind") else v for k, v in ref.items()}


def _head(obj: Obj) -> dict[str, Any]:
    return {
        "apiVersion": _i(obj.get("apiVersion")),
        "kind": _i(obj.get("kind")),
        "metadata": slim_metadata(obj.get("metadata")),
    }


def slim_metadata_only(obj: Obj) -> Obj:
    return _head(obj)


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


def _container(c: Any) -> Any:
    if not isinstance(c, dict):
        return c
    out = {k: c[k] for k in _CONTAINER_KEYS if k in c}
    if "image" in out:
        out["image"] = _i(out["image"])
    return out


def _volume(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    if "persistentVolumeClaim" in v or "hostPath" in v:
        return v
    return {"name": v.get("name")}


def _statuses(items: Any) -> Any:
    if not isinstance(items, list):
        return items
    return [
        {k: _i(s[k]) for k in _STATUS_KEYS if k in s} if isinstance(s, dict) else s for s in items
    ]


def slim_pod(obj: Obj) -> Obj:
    out = _head(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        s: dict[str, Any] = {}
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                s[key] = [_container(c) for c in spec[key]]
        if isinstance(spec.get("volumes"), list):
            s["volumes"] = [_volume(v) for v in spec["volumes"]]
        out["spec"] = s
    status = obj.get("status")
    if isinstance(status, dict):
        st: dict[str, Any] = {}
        if "phase" in status:
            st["phase"] = _i(status["phase"])
        for key in ("containerStatuses", "initContainerStatuses"):
            if key in status:
                st[key] = _statuses(status[key])
        out["status"] = st
    return out


def slimmer(registry: KindRegistry) -> Callable[[Obj], Obj]:
    """The slimming function for objects of any kind under this registry."""

    def slim(obj: Obj) -> Obj:
        gk = group_kind_of(obj)
        if gk == POD:
            return slim_pod(obj)
        if gk in (CONFIGMAP, NAMESPACE):
            return slim_metadata_only(obj)
        if registry.is_tracked(gk):
            return slim_full(obj)
        return slim_metadata_only(obj)

    return slim
