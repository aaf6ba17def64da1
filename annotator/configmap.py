"""The AIBOM ConfigMap the annotator writes for a root: budget, ownerReference, the applied
object. Pure.

The format (name, keys, labels, packing) is aibom_core.document's, which every
reader shares. The contract is docs/architecture.md's (Documents): name
`aibom-<kind-lowercase>-<name>` (`aibom_core.document.configmap_name`), data
key `aibom.json`, labels `app.kubernetes.io/managed-by: aibom-rollup`, `<prefix>root-kind`,
`<prefix>root-name`, `<prefix>root-uid`, and an ownerReference to the root
that is *not* a controller reference (the ConfigMap is a dependent the
garbage collector removes with the root, not something the root manages).

Label values must be valid (at most 63 characters of `[A-Za-z0-9._-]`,
alphanumeric at both ends); an object name may have 253, so a long name is
shortened with a hash suffix, and the full `<group>/<Kind>/<name>` is in the
`<prefix>document-for` annotation.

Size: data plus binaryData of a ConfigMap may not exceed 1 MiB
(`MaxSecretSize` in the API server's validation, which counts the value
bytes). A larger document is gzip-compressed into `binaryData`
(`aibom.json.gz`); if even that does not fit, components and owned entries
are cut until it does, and the document says so in `aibom.truncated*`
properties. Nothing is dropped silently; the caller also emits an Event.
All of it deterministic: same document, same bytes (gzip with mtime 0).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aibom_core.document import (
    MAX_DOCUMENT_BYTES,
    DocLabels,
    desired_labels,
    gzipped,
    pack,
    pack_gzipped,
)
from aibom_core.objects import Obj, ObjRef, metadata

FIELD_MANAGER = "aibom-rollup-annotator"
# k8s.io/kubernetes pkg/apis/core/validation: ValidateConfigMap sums the
# lengths of every data and binaryData value against MaxSecretSize = 1 MiB.
MAX_DATA_BYTES = 1 << 20
TRUNCATED_PREFIX = "aibom.truncated"
# Set by annotator.slim on a cached ConfigMap whose data another writer owns.
FOREIGN_DATA = "\x00foreign-data"
OWNED_PREFIX = "aibom.rollup.owned."


@dataclass(frozen=True, slots=True)
class Payload:
    """What goes into the ConfigMap: `json` as is, `gzip`, or `truncated` (and gzip)."""

    encoding: str
    data: Mapping[str, str]
    binary_data: Mapping[str, str]
    size: int  # the bytes counted against the limit
    original_size: int
    omitted_components: int = 0
    omitted_owned: int = 0

    @property
    def truncated(self) -> bool:
        return self.encoding == "truncated"


Seal = Callable[[bytes], bytes]


def fit(
    document: bytes,
    *,
    limit: int = MAX_DATA_BYTES,
    seal: Seal | None = None,
    unpacked_limit: int = MAX_DOCUMENT_BYTES,
) -> Payload:
    """Put a document into a ConfigMap's budget, compressing or cutting as needed.

    `seal` (signing) is applied to a cut document: a signature must cover
    the bytes stored, so a signed document that is cut is signed again.
    A gzip'd document is also kept within `unpacked_limit` once expanded:
    every reader unpacks in memory bounded by it (`aibom_core.document.unpack`).
    """
    if len(document) <= limit:
        return Payload("json", pack(document), {}, len(document), len(document))
    packed = gzipped(document)
    if len(packed) <= limit and len(document) <= unpacked_limit:
        return Payload("gzip", {}, pack_gzipped(packed), len(packed), len(document))
    cut, omitted_c, omitted_o = truncate(
        document, limit=limit, seal=seal, unpacked_limit=unpacked_limit
    )
    packed = gzipped(cut)
    return Payload(
        "truncated",
        {},
        pack_gzipped(packed),
        len(packed),
        len(document),
        omitted_c,
        omitted_o,
    )


def truncate(
    document: bytes,
    *,
    limit: int,
    seal: Seal | None = None,
    unpacked_limit: int = MAX_DOCUMENT_BYTES,
) -> tuple[bytes, int, int]:
    """The largest cut of a CycloneDX document whose gzip fits `limit`.

    Keeps the same leading fraction of `components` and of the root's
    `aibom.rollup.owned.<i>` properties (in the document's order, so the
    kept indices stay 0..n-1), drops dependencies on removed components,
    and says what happened in the document's `metadata.properties`:
    `aibom.truncated`, `aibom.truncated.reason`,
    `aibom.truncated.omitted-components`, `aibom.truncated.omitted-owned`.
    Returns the bytes and how many components and owned entries were cut.
    A signature of the whole document is dropped; `seal` signs each cut.
    """
    doc = json.loads(document)
    doc.pop("signature", None)
    components: list[Any] = list(doc.get("components") or [])
    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    root: dict[str, Any] = meta["component"] if isinstance(meta.get("component"), dict) else {}
    root_props: list[Any] = list(root.get("properties") or [])
    owned = [p for p in root_props if _is_owned(p)]
    original = len(document)

    def build(keep: float) -> tuple[bytes, int, int]:
        n_c = int(len(components) * keep)
        n_o = int(len(owned) * keep)
        kept_owned = {id(p) for p in owned[:n_o]}
        out = dict(doc)
        kept = components[:n_c]
        out["components"] = kept
        refs = {c.get("bom-ref") for c in kept if isinstance(c, dict)}
        if "dependencies" in doc:
            out["dependencies"] = _prune_dependencies(doc["dependencies"], refs, root)
        out_root = dict(root)
        out_root["properties"] = [p for p in root_props if not _is_owned(p) or id(p) in kept_owned]
        note = [
            {"name": TRUNCATED_PREFIX, "value": "true"},
            {
                "name": f"{TRUNCATED_PREFIX}.reason",
                "value": f"the document of {original} bytes does not fit a ConfigMap "
                f"({limit} bytes) even gzip-compressed",
            },
            {
                "name": f"{TRUNCATED_PREFIX}.omitted-components",
                "value": str(len(components) - n_c),
            },
            {"name": f"{TRUNCATED_PREFIX}.omitted-owned", "value": str(len(owned) - n_o)},
        ]
        out_meta = dict(meta)
        out_meta["component"] = out_root
        out_meta["properties"] = [*(meta.get("properties") or []), *note]
        out["metadata"] = out_meta
        data = json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        if seal is not None:
            data = seal(data)
        return data, len(components) - n_c, len(owned) - n_o

    def fits(data: bytes) -> bool:
        return len(data) <= unpacked_limit and len(gzipped(data)) <= limit

    lo, hi = 0.0, 1.0
    best = build(0.0)
    if not fits(best[0]):
        raise ValueError(f"even an empty document does not fit {limit} bytes")
    for _ in range(20):  # 2**-20 of the entries: precise enough, bounded cost
        mid = (lo + hi) / 2
        candidate = build(mid)
        if fits(candidate[0]):
            best, lo = candidate, mid
        else:
            hi = mid
    return best


def _is_owned(prop: Any) -> bool:
    return isinstance(prop, dict) and str(prop.get("name", "")).startswith(OWNED_PREFIX)


def _prune_dependencies(deps: Any, refs: set[Any], root: Mapping[str, Any]) -> list[Any]:
    if not isinstance(deps, list):
        return []
    root_ref = root.get("bom-ref")
    keep = refs | {root_ref}
    out = []
    for dep in deps:
        if not isinstance(dep, dict) or dep.get("ref") not in keep:
            continue
        kept = dict(dep)
        if isinstance(kept.get("dependsOn"), list):
            kept["dependsOn"] = [r for r in kept["dependsOn"] if r in keep]
        out.append(kept)
    return out


# -- the object ------------------------------------------------------------------


def owner_reference(root: ObjRef, api_version: str) -> dict[str, Any]:
    """A plain (non-controller) ownerReference to the root: GC removes us with it."""
    return {"apiVersion": api_version, "kind": root.kind, "name": root.name, "uid": root.uid}


def configmap_body(
    root: ObjRef,
    *,
    api_version: str,
    name: str,
    payload: Payload,
    input_hash: str,
    generator: str,
    labels: DocLabels,
    signed_by: str = "",
    sources_hash: str = "",
) -> dict[str, Any]:
    """The object we server-side apply: every field we own, nothing else."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": root.namespace,
            "labels": desired_labels(root, labels),
            "annotations": {
                labels.document_for: root.hop,
                labels.input_hash: input_hash,
                labels.generator: generator,
                labels.encoding: payload.encoding,
            },
            "ownerReferences": [owner_reference(root, api_version)],
        },
    }
    if signed_by:
        body["metadata"]["annotations"][labels.signed_by] = signed_by
    if sources_hash:
        body["metadata"]["annotations"][labels.sources_hash] = sources_hash
    if payload.data:
        body["data"] = dict(payload.data)
    if payload.binary_data:
        body["binaryData"] = dict(payload.binary_data)
    return body


def is_current(
    cm: Obj | None,
    root: ObjRef,
    *,
    input_hash: str,
    generator: str,
    labels: DocLabels,
    signed_by: str = "",
) -> bool:
    """Whether a cached ConfigMap already is the document we would write.

    Compared on metadata only (the cache keeps no data): the input hash and
    generator say the content is the same, the labels and ownerReference
    that it is still ours and tied to this root, and no other writer owns
    part of the data (someone edited it: rewrite). A document signed by
    another key than `signed_by` (or unsigned while we sign) is rewritten:
    a key rotation re-signs every document.
    """
    if cm is None or cm.get(FOREIGN_DATA):
        return False
    ann = _annotations(cm)
    if ann.get(labels.input_hash) != input_hash:
        return False
    return _ours(cm, ann, root, generator=generator, labels=labels, signed_by=signed_by)


def sources_current(
    cm: Obj | None,
    root: ObjRef,
    *,
    sources_hash: str,
    generator: str,
    labels: DocLabels,
    signed_by: str = "",
) -> str | None:
    """The recorded input hash of a cached ConfigMap that was built from exactly these
    sources (`annotator.plan.sources_hash`), and is otherwise current as `is_current`
    says; None when that cannot be told without computing the facts."""
    if not sources_hash or cm is None or cm.get(FOREIGN_DATA):
        return None
    ann = _annotations(cm)
    recorded = ann.get(labels.input_hash)
    if ann.get(labels.sources_hash) != sources_hash or not isinstance(recorded, str):
        return None
    if not _ours(cm, ann, root, generator=generator, labels=labels, signed_by=signed_by):
        return None
    return recorded


def _annotations(cm: Obj) -> dict[str, Any]:
    ann = metadata(cm).get("annotations")
    return ann if isinstance(ann, dict) else {}


def _ours(
    cm: Obj,
    ann: dict[str, Any],
    root: ObjRef,
    *,
    generator: str,
    labels: DocLabels,
    signed_by: str,
) -> bool:
    """Same generator and signer, our labels, tied to this root."""
    meta = metadata(cm)
    if ann.get(labels.generator) != generator:
        return False
    if ann.get(labels.signed_by, "") != signed_by:
        return False
    have = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    assert isinstance(have, dict)
    if any(have.get(k) != v for k, v in desired_labels(root, labels).items()):
        return False
    refs = meta.get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(r, dict) and r.get("uid") == root.uid for r in refs
    )
