"""The AIBOM ConfigMap's format, in one place: its name, keys, labels, packing and unpacking. Pure.

docs/architecture.md (Documents): one ConfigMap per root, named
`aibom-<kind-lowercase>-<name>` (`configmap_name`), holding the document under
`aibom.json` (`pack`), or gzip-compressed (`gzipped`, `pack_gzipped`) under
`aibom.json.gz` in `binaryData`; labelled `app.kubernetes.io/managed-by: aibom-rollup` and with the
root's kind, name and UID under the stamp prefix (`DocLabels`, `desired_labels`).
The annotator writes it (annotator/configmap.py: the budget, cutting, the
object it applies); `kubectl aibom`, `aibom-rollup verify`, the scan and the
exporter read it with the one bounded `unpack`.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import re
import zlib
from dataclasses import dataclass
from typing import Any

from aibom_core.objects import Obj, ObjRef, metadata
from aibom_core.stamp import DEFAULT_PREFIX

CONFIGMAP_PREFIX = "aibom-"
DATA_KEY = "aibom.json"
DATA_KEY_GZ = "aibom.json.gz"
MAX_NAME = 253
# Every AIBOM ConfigMap carries this label (the annotator's watch and tools select on it).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "aibom-rollup"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def is_document(cm: Obj) -> bool:
    """Whether a ConfigMap carries our label (anyone who may create ConfigMaps can
    label one so: its payload is still only read through `unpack`)."""
    labels = metadata(cm).get("labels")
    return isinstance(labels, dict) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_MAX_LABEL = 63


@dataclass(frozen=True, slots=True)
class DocLabels:
    """Label and annotation keys of our ConfigMaps, under the stamp prefix."""

    prefix: str = DEFAULT_PREFIX

    @property
    def root_kind(self) -> str:
        return f"{self.prefix}root-kind"

    @property
    def root_name(self) -> str:
        return f"{self.prefix}root-name"

    @property
    def root_uid(self) -> str:
        return f"{self.prefix}root-uid"

    @property
    def document_for(self) -> str:
        return f"{self.prefix}document-for"

    @property
    def input_hash(self) -> str:
        return f"{self.prefix}input-hash"

    @property
    def generator(self) -> str:
        return f"{self.prefix}generator"

    @property
    def encoding(self) -> str:
        return f"{self.prefix}encoding"

    @property
    def sources_hash(self) -> str:
        """What the document was built from: the UID and resourceVersion of every object
        it reads, and the settings (`annotator.plan.sources_hash`)."""
        return f"{self.prefix}sources-hash"

    @property
    def signed_by(self) -> str:
        """The id of the key that signed the document (absent: unsigned)."""
        return f"{self.prefix}signed-by"

    @property
    def selector(self) -> str:
        """The label selector of every ConfigMap we manage (our watch uses it)."""
        return MANAGED_SELECTOR

    def root_uid_of(self, cm: Obj) -> str:
        labels = metadata(cm).get("labels")
        return str(labels.get(self.root_uid, "")) if isinstance(labels, dict) else ""


def label_value(value: str) -> str:
    """`value` if it is a valid label value, else a valid one that keeps it distinct."""
    if len(value) <= _MAX_LABEL and _LABEL_VALUE.match(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value)
    head = cleaned[: _MAX_LABEL - len(digest) - 1]
    head = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", head)
    return f"{head}-{digest}" if head else digest


def desired_labels(root: ObjRef, labels: DocLabels) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        labels.root_kind: label_value(root.kind),
        labels.root_name: label_value(root.name),
        labels.root_uid: label_value(root.uid),
    }


def configmap_name(kind: str, name: str) -> str:
    """`aibom-<kind-lowercase>-<name>`, shortened with a hash suffix past 253 chars.

    Names are DNS subdomains already (the root's own name is one), so only the
    length can be a problem; the hash keeps shortened names distinct.
    """
    full = f"{CONFIGMAP_PREFIX}{kind.lower()}-{name}"
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    head = full[: MAX_NAME - len(digest) - 1].rstrip(".-")
    return f"{head}-{digest}"


# The most a document may expand to when a reader unpacks it: a ConfigMap holds at
# most 1 MiB, and an honest CycloneDX document gzips about 10-20 to 1, so a
# payload that expands past this is not one of ours (a gzip bomb: 1 MiB of
# zeros expands to 1 GiB). The annotator never writes a larger document
# (`annotator.configmap.fit`), so every reader reads everything it writes.
MAX_DOCUMENT_BYTES = 64 << 20


class PackedDocumentError(ValueError):
    """A ConfigMap whose AIBOM payload cannot be decoded (hand-edited, damaged, or a
    gzip payload that expands past `MAX_DOCUMENT_BYTES`)."""


_CHUNK = 1 << 20


def gzipped(document: bytes) -> bytes:
    """A document gzip-compressed as `aibom.json.gz` holds it: mtime 0 and no file name,
    so the same document always packs to the same bytes."""
    return gzip.compress(document, compresslevel=9, mtime=0)


def pack(document: bytes) -> dict[str, str]:
    """The `data` of a ConfigMap holding `document` as it is (`aibom.json`)."""
    return {DATA_KEY: document.decode("utf-8")}


def pack_gzipped(packed: bytes) -> dict[str, str]:
    """The `binaryData` of a ConfigMap holding a `gzipped` document (`aibom.json.gz`)."""
    return {DATA_KEY_GZ: base64.b64encode(packed).decode("ascii")}


def gunzip(data: bytes, *, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """gzip-decompressed `data`, never holding more than `limit` bytes of it (plus one
    1 MiB step): past that, PackedDocumentError. zlib's own `max_length` would hold
    its output twice while joining it, so the steps are counted here."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    parts: list[bytes] = []
    size = 0
    tail = data
    try:
        while not d.eof:
            part = d.decompress(tail, _CHUNK)
            tail = d.unconsumed_tail
            size += len(part)
            if size > limit:
                raise PackedDocumentError(
                    f"{DATA_KEY_GZ} decompresses to more than {limit} bytes: not an AIBOM document"
                )
            parts.append(part)
            if not part and not tail:
                raise PackedDocumentError(f"{DATA_KEY_GZ} is not gzip: the stream is cut short")
    except zlib.error as exc:
        raise PackedDocumentError(f"{DATA_KEY_GZ} is not gzip: {exc}") from None
    return b"".join(parts)


def unpack(cm: dict[str, Any]) -> bytes | None:
    """The document an AIBOM ConfigMap holds (`aibom.json`, or gzip'd `aibom.json.gz`).

    The one reader of a document's payload (the annotator's tests, `kubectl
    aibom`, `aibom-rollup verify`): a gzip payload is expanded in bounded
    memory (`gunzip`). None when it holds neither key; PackedDocumentError when
    the payload is damaged or too large.
    """
    data = cm.get("data") or {}
    if isinstance(data, dict) and isinstance(data.get(DATA_KEY), str):
        return str(data[DATA_KEY]).encode("utf-8")
    binary = cm.get("binaryData") or {}
    if isinstance(binary, dict) and isinstance(binary.get(DATA_KEY_GZ), str):
        try:
            packed = base64.b64decode(str(binary[DATA_KEY_GZ]), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PackedDocumentError(f"{DATA_KEY_GZ} is not base64: {exc}") from None
        return gunzip(packed)
    return None
