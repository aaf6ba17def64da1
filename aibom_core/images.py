"""Container image references: parse, normalise, compare, and name them as purls.

One image is one component, whatever spelling a spec used for it: `nginx`,
`docker.io/library/nginx` and `index.docker.io/library/nginx:latest` are the
same reference once normalised the way the container runtimes do (default
registry `docker.io`, `library/` for one-segment names, tag `latest` when
neither a tag nor a digest is given). Pure; results are cached because the
same few references recur across every pod of a root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from packageurl import PackageURL

DOCKER_HUB = "docker.io"
_DOCKER_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
# The OCI image-spec digest grammar (descriptor.md, "Digests"): `algorithm ":"
# encoded`, with the registered algorithms' encodings fixed: sha256 is 64 and
# sha512 is 128 LOWERCASE hex. Nothing is lowercased or trimmed for a match: an
# uppercase or otherwise malformed value is evidence of nothing.
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
# What a digest attempt looks like (to keep an invalid one as evidence).
_DIGEST_LIKE = re.compile(r"[A-Za-z0-9]+(?:[+._-][A-Za-z0-9]+)*:\S+")
HASH_ALGORITHMS = {"sha256": "SHA-256", "sha512": "SHA-512"}  # CycloneDX hash-alg names
# A tag that is a version (`v0.8.5`, `1.3.1`, `24.08-trtllm-python-py3`):
# the leading dotted numbers, with an optional pre/post-release suffix.
_VERSION = re.compile(r"v?(\d+(?:\.\d+){1,3}(?:[.-]?(?:post|rc|dev)\d+)?)(?=$|[-_+])")


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A normalised image reference."""

    registry: str  # "docker.io", "nvcr.io", "localhost:5000"
    path: str  # repository path without the registry: "library/nginx"
    tag: str | None
    digest: str | None  # "sha256:<64 hex>" / "sha512:<128 hex>" when the reference pins one

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}" if self.registry else self.path

    @property
    def name(self) -> str:
        """The last path segment: the purl name."""
        return self.path.rpartition("/")[2]

    @property
    def canonical(self) -> str:
        out = self.repository
        if self.tag is not None:
            out += f":{self.tag}"
        if self.digest is not None:
            out += f"@{self.digest}"
        return out


def valid_digest(value: str) -> bool:
    """Whether a value is an OCI digest we can report: sha256 or sha512, lowercase hex."""
    return bool(_DIGEST.fullmatch(value))


@lru_cache(maxsize=4096)
def parse_image(ref: str) -> ImageRef | None:
    """Normalise a reference as written in a spec; None when there is none."""
    ref = ref.strip()
    if not ref or any(c.isspace() for c in ref):
        return None
    rest, _, digest_part = ref.partition("@")
    digest = digest_part if _DIGEST.fullmatch(digest_part) else None
    if digest_part and digest is None:
        # `repo@md5:...`, `repo@SHA256:...`, uppercase hex or a truncated
        # digest: not an OCI reference. Keep what was written as the path
        # rather than invent a normalisation (or a digest) for it.
        return ImageRef(registry="", path=ref, tag=None, digest=None)
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first.lower(), remainder
    else:
        registry, path = DOCKER_HUB, rest
    if registry in _DOCKER_ALIASES:
        registry = DOCKER_HUB
    tag: str | None = None
    head, colon, tail = path.rpartition(":")
    if colon and "/" not in tail:
        path, tag = head, tail
    if not path or tag == "":
        return ImageRef(registry="", path=ref, tag=None, digest=None)
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry=registry, path=path, tag=tag, digest=digest)


def canonical(ref: str) -> str:
    """The normalised spelling of a reference (the reference itself if unparsable)."""
    parsed = parse_image(ref)
    return parsed.canonical if parsed is not None else ref.strip()


@lru_cache(maxsize=4096)
def digest_of_image_id(image_id: str) -> str | None:
    """The digest in a container status `imageID`, in any of the runtimes' forms.

    `docker-pullable://repo@sha256:...` (dockershim), `repo@sha256:...`
    (containerd, CRI-O) and a bare `sha256:...`; anything else is no digest.
    The digest must be valid as written (`valid_digest`): an uppercase or
    malformed one is not normalised into a valid one.
    """
    candidate = _image_id_digest_part(image_id)
    return candidate if candidate is not None and _DIGEST.fullmatch(candidate) else None


@lru_cache(maxsize=4096)
def invalid_digest_of_image_id(image_id: str) -> str | None:
    """The digest-like value of an `imageID` that is not a valid digest, as written.

    `repo@SHA256:...`, `sha256:<63 hex>`, `repo@md5:...`: kept as evidence,
    never reported as a digest. None for a valid digest and for a value that
    does not try to be one (`nginx:latest`, empty).
    """
    candidate = _image_id_digest_part(image_id)
    if candidate is None or _DIGEST.fullmatch(candidate):
        return None
    at = "@" in image_id
    if at or candidate[:7].lower() in ("sha256:", "sha512:"):
        return candidate if (at and candidate) or _DIGEST_LIKE.fullmatch(candidate) else None
    return None


def _image_id_digest_part(image_id: str) -> str | None:
    value = image_id.strip()
    _scheme, sep, rest = value.partition("://")
    if sep:
        value = rest
    candidate = value.rpartition("@")[2]
    return candidate or None


@lru_cache(maxsize=4096)
def same_image(spec_ref: str, status_ref: str) -> bool:
    """Whether a container status `image` is the image its spec asked for.

    A status that names another repository or another tag belongs to a
    container that still runs an older image (the spec was changed in place):
    its digest is not this image's. A status image that names no repository
    (a bare image ID, or nothing) cannot contradict the spec and is accepted.
    """
    status_ref = status_ref.strip()
    if not status_ref or status_ref.lower().startswith("sha256:"):
        return True
    spec, status = parse_image(spec_ref), parse_image(status_ref)
    if spec is None or status is None:
        return spec_ref.strip() == status_ref
    if spec.repository != status.repository:
        return False
    if spec.digest is not None and status.digest is not None:
        return spec.digest == status.digest
    if spec.digest is not None or status.digest is not None:
        # One side names the content, the other a tag: runtimes report the
        # pinned form for digest-pinned specs, so a mismatch cannot be told.
        return True
    return spec.tag == status.tag


@lru_cache(maxsize=4096)
def oci_purl(ref: str, digest: str | None) -> str | None:
    """`pkg:oci/<name>@<digest>?repository_url=<registry/path>&tag=<tag>` (purl spec, type oci).

    The version is the digest and is left out when no single digest is known;
    packageurl-python does the encoding and lowercases the name as the spec asks.
    """
    parsed = parse_image(ref)
    if parsed is None or not parsed.registry or not parsed.name:
        return None
    qualifiers = {"repository_url": parsed.repository}
    if parsed.tag is not None:
        qualifiers["tag"] = parsed.tag
    purl = PackageURL(type="oci", name=parsed.name, version=digest, qualifiers=qualifiers)
    return str(purl.to_string())


def version_of_tag(tag: str | None) -> str | None:
    """The version a tag states (`v0.8.5` -> `0.8.5`), or None (`latest`, `my-tag`)."""
    if not tag:
        return None
    match = _VERSION.match(tag)
    return match.group(1) if match else None
