"""Reading a `kubectl get -o json` dump (or YAML manifests) into objects. Pure.

Takes text and a source name, never a path: the CLI reads the files. Accepts
a JSON object or array, a `List` (`kubectl get -A -o json`), and multi-document
YAML; nested Lists are flattened. Every problem is a `DumpError` whose message
starts with the place (`file: items[3]`, `file: document 2`), so the CLI can
print one clear line and exit 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml

from aibom_core.objects import Obj

# Kinds that are cluster-scoped: a dump's objects without a namespace are put
# in `default` (as `kubectl apply` would) unless they are one of these or were
# read from an API server (they have a UID): those are cluster-scoped.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "IngressClass",
        "RuntimeClass",
        "CSIDriver",
        "CSINode",
        "VolumeAttachment",
    }
)


class DumpError(ValueError):
    """Input that is not a set of Kubernetes objects; the message names the place."""


@dataclass(slots=True)
class Dump:
    """Namespaced objects, and the labels of the Namespaces the dump holds."""

    objects: list[Obj] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    places: dict[int, str] = field(default_factory=dict)  # id(obj) -> place

    def place(self, obj: Obj) -> str:
        return self.places.get(id(obj), "?")


def parse_documents(text: str | bytes, source: str) -> list[tuple[Any, str]]:
    """Top-level documents of one input, each with its place."""
    raw = text if isinstance(text, bytes) else None
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DumpError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] in "{[":
        try:
            doc = orjson.loads(raw if raw is not None else text)
        except orjson.JSONDecodeError as exc:
            raise DumpError(
                f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from None
        if isinstance(doc, list):
            return [(d, f"{source}: [{i}]") for i, d in enumerate(doc)]
        return [(doc, source)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[tuple[Any, str]] = []
    try:
        for i, doc in enumerate(yaml.load_all(text, Loader=loader), start=1):
            if doc is not None:
                out.append((doc, f"{source}: document {i}"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DumpError(f"{source}: neither JSON nor YAML{where}: {problem}") from None
    return out


def _flatten(doc: Any, place: str) -> Iterator[tuple[Obj, str]]:
    if not isinstance(doc, dict):
        raise DumpError(f"{place}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc["items"]
        if not isinstance(items, list):
            raise DumpError(f"{place}: a {kind} needs an `items` list")
        for i, item in enumerate(items):
            yield from _flatten(item, f"{place}: items[{i}]")
        return
    yield doc, place


def _check(obj: Obj, place: str) -> None:
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise DumpError(f"{place}: not a Kubernetes object (no `kind`)")
    if not isinstance(obj.get("apiVersion"), str) or not obj["apiVersion"]:
        raise DumpError(f"{place}: {kind} has no `apiVersion`")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise DumpError(f"{place}: {kind} has no `metadata`")
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        raise DumpError(f"{place}: {kind} has no `metadata.name`")
    for fld in ("uid", "namespace"):
        if fld in meta and meta[fld] is not None and not isinstance(meta[fld], str):
            raise DumpError(f"{place}: {kind}/{name} metadata.{fld} must be a string")
    refs = meta.get("ownerReferences")
    if refs is not None and not isinstance(refs, list):
        raise DumpError(f"{place}: {kind}/{name} metadata.ownerReferences must be a list")
    for i, ref in enumerate(refs or ()):
        if not isinstance(ref, dict):
            raise DumpError(f"{place}: {kind}/{name} ownerReferences[{i}] must be an object")


def load(inputs: Iterable[tuple[str | bytes, str]], *, default_namespace: str = "default") -> Dump:
    """Objects of several inputs (text, source name), checked; duplicate UIDs refused."""
    dump = Dump()
    seen_uid: dict[str, str] = {}
    for text, source in inputs:
        for doc, doc_place in parse_documents(text, source):
            for obj, place in _flatten(doc, doc_place):
                _check(obj, place)
                meta = obj["metadata"]
                if obj["kind"] == "Namespace" and obj["apiVersion"] == "v1":
                    labels = meta.get("labels")
                    dump.namespaces[str(meta.get("name"))] = (
                        {str(k): str(v) for k, v in labels.items()}
                        if isinstance(labels, dict)
                        else {}
                    )
                    continue
                if not meta.get("namespace"):
                    # Cluster-scoped: a built-in kind, or an object read from an
                    # API server (it has a UID) without a namespace (the server
                    # always sets it on namespaced objects). Never an owner of a
                    # namespaced object here, exactly as a live walk's lookup in
                    # the child's namespace never finds it (NotFound).
                    if obj["kind"] in CLUSTER_SCOPED or meta.get("uid"):
                        continue
                    meta["namespace"] = default_namespace
                uid = meta.get("uid")
                if uid:
                    if uid in seen_uid:
                        raise DumpError(f"{place}: duplicate uid {uid} (also at {seen_uid[uid]})")
                    seen_uid[uid] = place
                dump.places[id(obj)] = place
                dump.objects.append(obj)
    return dump
