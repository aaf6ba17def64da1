"""The audit trail's shapes: document versions as OCI artifacts, their names, their changes.

What the annotator pushes to an OCI registry, and what `history` and `--at`
read back, all pure: a version's manifest is built from its fields (the time
is passed in, never read), so the same version gives the same manifest bytes
and the same digest on every push (a second push of a version is a no-op).

- A **version** is one document as stored (signed, maybe truncated) of one
  root: its digest, size, input hash, signer, the cluster it came from and
  when it was written.
- Its **manifest** is an OCI 1.1 artifact manifest: `artifactType`
  `application/vnd.cyclonedx+json`, the empty config, one layer (the
  document), the annotations of `annotations()`; with a `subject` it is a
  referrer of an image manifest.
- Its **names**: the root's repository (`<prefix>/<cluster>/<namespace>/
  <kind>.<group>/<name>`), tagged `sha256-<hex>` of the document (the tags
  of that repository are the root's history); an image's repository in the
  export registry follows a template (`{host}/{repository}` by default: the
  path a mirror of the image has there).
- `diff` says what changed between two versions: models, runtimes, image
  digests, absorbed and unproven workloads.

Never here: I/O, clocks, the OCI client (aibom_edge.oci), the annotator.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aibom_core.images import parse_image, valid_digest
from aibom_core.query import parts_of

ARTIFACT_TYPE: Final = "application/vnd.cyclonedx+json"
MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
# OCI image-spec 1.1 "Guidance for an empty descriptor": an artifact without a
# config uses this one, whose blob is the two bytes `{}`.
EMPTY_CONFIG_BYTES: Final = b"{}"
EMPTY_CONFIG: Final = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
}
TITLE: Final = "aibom.json"

# Manifest annotations (reverse-DNS keys, as the OCI spec asks of custom ones).
A_CREATED: Final = "org.opencontainers.image.created"
A_TITLE: Final = "org.opencontainers.image.title"
A_GROUP: Final = "dev.aibom.root.group"
A_KIND: Final = "dev.aibom.root.kind"
A_NAME: Final = "dev.aibom.root.name"
A_NAMESPACE: Final = "dev.aibom.root.namespace"
A_UID: Final = "dev.aibom.root.uid"
A_CLUSTER: Final = "dev.aibom.cluster"
A_INPUT_HASH: Final = "dev.aibom.input-hash"
A_SIGNED_BY: Final = "dev.aibom.signed-by"

DEFAULT_IMAGE_TEMPLATE: Final = "{host}/{repository}"

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG_PREFIX: Final = "sha256-"


class TrailError(ValueError):
    """A name or manifest that cannot be part of the trail (the message says why)."""


@dataclass(frozen=True, slots=True, order=True)
class RootId:
    """Which root a version belongs to."""

    namespace: str
    kind: str
    name: str
    group: str = ""
    uid: str = ""

    @property
    def ref(self) -> str:
        """`<Kind>/<name>`, the form of `aibom.dev/root`."""
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Version:
    """One document version of one root, as exported."""

    root: RootId
    cluster: str
    digest: str  # sha256:<hex> of the document bytes
    size: int
    input_hash: str
    created: str  # RFC 3339, UTC, the time the annotator wrote it
    signed_by: str = ""

    @property
    def tag(self) -> str:
        return tag_of(self.digest)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tag_of(digest: str) -> str:
    """The tag of a version in its root's repository: `sha256-<hex>` (a tag may not hold `:`)."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not valid_digest(digest):
        raise TrailError(f"not a sha256 digest: {digest!r}")
    return _TAG_PREFIX + hexdigest


def digest_of_tag(tag: str) -> str | None:
    """The document digest a tag names, or None for a tag that is not a version's."""
    if not tag.startswith(_TAG_PREFIX):
        return None
    digest = "sha256:" + tag.removeprefix(_TAG_PREFIX)
    return digest if valid_digest(digest) else None


# -- names ---------------------------------------------------------------------------------


def component(text: str) -> str:
    """One path component of a repository name from any text: lowercase, runs of other
    characters as one `-`; never empty."""
    out = re.sub(r"[^a-z0-9._-]+", "-", text.lower())
    out = re.sub(r"[._-]*([._-])[._-]*", r"\1", out).strip("._-")
    return out or "x"


def root_repository(prefix: str, cluster: str, root: RootId) -> str:
    """`<prefix>/<cluster>/<namespace>/<kind>.<group>/<name>`: one repository per root
    (its tags are the root's versions). A root re-created under the same name shares
    it: its versions carry their own UID."""
    kind = component(f"{root.kind}.{root.group}" if root.group else root.kind)
    parts = [prefix.strip("/"), component(cluster), component(root.namespace), kind]
    return "/".join(p for p in [*parts, component(root.name)] if p)


def cluster_prefix(prefix: str, cluster: str) -> str:
    """The repositories of one cluster's roots start with this (`--at` lists them)."""
    return "/".join(p for p in (prefix.strip("/"), component(cluster)) if p) + "/"


def check_repository(name: str) -> str:
    if not name or not all(_COMPONENT.fullmatch(p) for p in name.split("/")):
        raise TrailError(f"not an OCI repository name: {name!r}")
    return name


def image_repository(template: str, image: str) -> str | None:
    """The repository of `image` in the export registry, by `template` (`{host}`,
    `{repository}`: `nvcr.io` and `nvidia/ai-dynamo/vllm-runtime`); None when the
    reference cannot be read or the result is no repository name."""
    parsed = parse_image(image)
    if parsed is None or not parsed.registry:
        return None
    try:
        name = template.format(host=parsed.registry, repository=parsed.path).strip("/")
    except (KeyError, IndexError, ValueError):
        raise TrailError(
            f"image path template {template!r}: only {{host}} and {{repository}} may appear"
        ) from None
    name = "/".join(component(p) if ":" in p else p for p in name.split("/"))
    return name if all(_COMPONENT.fullmatch(p) for p in name.split("/")) else None


# -- manifests -----------------------------------------------------------------------------


def manifest_annotations(version: Version) -> dict[str, str]:
    root = version.root
    out = {
        A_CREATED: version.created,
        A_TITLE: TITLE,
        A_GROUP: root.group,
        A_KIND: root.kind,
        A_NAME: root.name,
        A_NAMESPACE: root.namespace,
        A_UID: root.uid,
        A_CLUSTER: version.cluster,
        A_INPUT_HASH: version.input_hash,
    }
    if version.signed_by:
        out[A_SIGNED_BY] = version.signed_by
    return out


def manifest(version: Version, *, subject: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The OCI 1.1 artifact manifest of a version (a referrer of `subject` when given)."""
    out: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": dict(EMPTY_CONFIG),
        "layers": [
            {
                "mediaType": ARTIFACT_TYPE,
                "digest": version.digest,
                "size": version.size,
                "annotations": {A_TITLE: TITLE},
            }
        ],
        "annotations": manifest_annotations(version),
    }
    if subject is not None:
        out["subject"] = {
            "mediaType": str(subject["mediaType"]),
            "digest": str(subject["digest"]),
            "size": int(subject["size"]),
        }
    return out


def version_of(manifest_body: Any) -> Version | None:
    """A version read back from its manifest; None for anything else (another artifact)."""
    if not isinstance(manifest_body, dict) or manifest_body.get("artifactType") != ARTIFACT_TYPE:
        return None
    ann = manifest_body.get("annotations")
    layers = manifest_body.get("layers")
    if not isinstance(ann, dict) or not isinstance(layers, list) or len(layers) != 1:
        return None
    layer = layers[0]
    if not isinstance(layer, dict) or not valid_digest(str(layer.get("digest", ""))):
        return None
    text = {k: str(v) for k, v in ann.items()}
    size = layer.get("size")
    return Version(
        root=RootId(
            namespace=text.get(A_NAMESPACE, ""),
            kind=text.get(A_KIND, ""),
            name=text.get(A_NAME, ""),
            group=text.get(A_GROUP, ""),
            uid=text.get(A_UID, ""),
        ),
        cluster=text.get(A_CLUSTER, ""),
        digest=str(layer["digest"]),
        size=size if isinstance(size, int) else 0,
        input_hash=text.get(A_INPUT_HASH, ""),
        created=text.get(A_CREATED, ""),
        signed_by=text.get(A_SIGNED_BY, ""),
    )


def image_digests(body: Any) -> list[tuple[str, str]]:
    """`(reference, digest)` of every image digest a document names, sorted, once each:
    what a version is attached to as a referrer."""
    out: set[tuple[str, str]] = set()
    for part in parts_of(body):
        if part.role != "image":
            continue
        reference = part.reference or part.name
        for digest in part.digests:
            if valid_digest(digest):
                out.add((reference, digest))
    return sorted(out)


# -- history -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """What is in `new` and not in `old` (added) and the reverse (removed), per aspect."""

    added: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    removed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(self.added.values()) and not any(self.removed.values())


ASPECTS: Final = ("models", "runtimes", "images", "digests", "absorbed", "unproven")


def aspects(body: Any) -> dict[str, frozenset[str]]:
    """Each aspect of a document as a set of strings (what `diff` compares)."""
    out: dict[str, set[str]] = {a: set() for a in ASPECTS}
    for part in parts_of(body):
        named = f"{part.name}@{part.version}" if part.version else part.name
        if part.role == "model" and not part.unresolved:
            out["models"].add(named)
        elif part.role == "runtime":
            out["runtimes"].add(named)
        elif part.role == "image":
            out["images"].add(part.reference or part.name)
            out["digests"].update(part.digests)
    comp = (body.get("metadata") or {}).get("component") if isinstance(body, dict) else None
    for prop in (comp.get("properties") or []) if isinstance(comp, dict) else []:
        name = str(prop.get("name", "")) if isinstance(prop, dict) else ""
        if name.startswith("aibom.rollup.owned."):
            out["absorbed"].add(str(prop.get("value", "")))
        elif name.startswith("aibom.rollup.unproven."):
            out["unproven"].add(str(prop.get("value", "")))
    return {k: frozenset(v) for k, v in out.items()}


def diff(old: Any, new: Any) -> Change:
    """What changed from document `old` to document `new` (None: nothing before)."""
    before = aspects(old) if old is not None else {a: frozenset() for a in ASPECTS}
    after = aspects(new)
    return Change(
        added={a: tuple(sorted(after[a] - before[a])) for a in ASPECTS},
        removed={a: tuple(sorted(before[a] - after[a])) for a in ASPECTS},
    )


def in_order(versions: Iterable[Version]) -> list[Version]:
    """Oldest first (by time written, then digest: stable for equal times)."""
    return sorted(versions, key=lambda v: (v.created, v.digest))


def at(versions: Iterable[Version], when: str) -> Version | None:
    """The version in force at `when` (RFC 3339, UTC): the last written at or before it."""
    before = [v for v in in_order(versions) if v.created and v.created <= when]
    return before[-1] if before else None
