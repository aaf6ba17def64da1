"""Image digests observed in pod status (docs/architecture.md, Documents).

A pod's container status reports the digest the kubelet actually pulled
(`imageID`). It belongs to a spec image only when the status is for the same
container NAME (containers with containerStatuses, initContainers with
initContainerStatuses) and names the same IMAGE: after an in-place image
change a container keeps reporting its old image and digest until it
restarts, and that digest is not the new image's. Every match is returned;
choosing between two digests of one tag (a rolling update) is not ours to do.
An `imageID` whose digest breaks the OCI grammar (`SHA256:...`, uppercase
hex, a wrong length) is returned with `valid=False`: kept as evidence, never
reported as a digest. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from aibom_core.images import (
    digest_of_image_id,
    invalid_digest_of_image_id,
    parse_image,
    same_image,
)

_LISTS = (("containers", "containerStatuses"), ("initContainers", "initContainerStatuses"))


@dataclass(frozen=True, slots=True)
class ObservedDigest:
    image: str  # the pod spec image, as written
    container: str
    digest: str  # "sha256:<hex>"; as written when not valid
    pointer: str  # JSON pointer to the status imageID inside the pod
    valid: bool = True  # False: the imageID's digest breaks the OCI grammar


@lru_cache(maxsize=8192)
def status_digest(spec_image: str, status_image: str, image_id: str) -> str | None:
    """The digest one container status reports for a spec image, or None if it is not its."""
    digest = digest_of_image_id(image_id)
    if digest is None or not same_image(spec_image, status_image):
        return None
    pinned = parse_image(spec_image)
    if pinned is not None and pinned.digest is not None and pinned.digest != digest:
        return None  # a pinned spec runs exactly its digest; anything else is stale
    return digest


@lru_cache(maxsize=8192)
def status_invalid_digest(spec_image: str, status_image: str, image_id: str) -> str | None:
    """The malformed digest one container status reports for a spec image, as written."""
    invalid = invalid_digest_of_image_id(image_id)
    if invalid is None or not same_image(spec_image, status_image):
        return None
    return invalid


def observed_digests(pod: Any) -> tuple[ObservedDigest, ...]:
    """The digests one pod's status reports for its spec containers."""
    if not isinstance(pod, dict):
        return ()
    spec, status = pod.get("spec"), pod.get("status")
    if not isinstance(spec, dict) or not isinstance(status, dict):
        return ()
    out = []
    for spec_key, status_key in _LISTS:
        statuses = status.get(status_key)
        if not isinstance(statuses, list) or not statuses:
            continue
        images: dict[str, str] = {}
        containers = spec.get(spec_key)
        for c in containers if isinstance(containers, list) else ():
            if isinstance(c, dict):
                name, image = c.get("name"), c.get("image")
                if isinstance(name, str) and isinstance(image, str) and image:
                    images[name] = image
        for j, st in enumerate(statuses):
            if not isinstance(st, dict):
                continue
            name, image_id = st.get("name"), st.get("imageID")
            image = images.get(name) if isinstance(name, str) else None
            if image is None or not isinstance(image_id, str):
                continue
            status_image = st.get("image")
            status_ref = status_image if isinstance(status_image, str) else ""
            digest = status_digest(image, status_ref, image_id)
            valid = digest is not None
            if digest is None:
                digest = status_invalid_digest(image, status_ref, image_id)
                if digest is None:
                    continue
            out.append(
                ObservedDigest(
                    image=image,
                    container=str(name),
                    digest=digest,
                    pointer=f"/status/{status_key}/{j}/imageID",
                    valid=valid,
                )
            )
    return tuple(out)
