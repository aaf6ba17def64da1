"""How sure a document is about each fact, and where the fact was read.

Every component of an AIBOM carries a confidence and its evidence: the source
(which part of the cluster said so) and a locator (`<Kind>/<name>#<pointer>`,
an RFC 6901 JSON pointer into that object). Pure data; no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Confidence(StrEnum):
    """The value of `aibom.confidence` (docs/aibom-format.md)."""

    VERIFIED = "verified"  # observed in status (a digest the kubelet pulled)
    DECLARED = "declared"  # written in the spec under a name that means it
    INFERRED = "inferred"  # a heuristic: image naming, shell parsing, a fallback
    UNRESOLVED = "unresolved"  # the spec points at it but its value cannot be read


_RANK = {
    Confidence.UNRESOLVED: 0,
    Confidence.INFERRED: 1,
    Confidence.DECLARED: 2,
    Confidence.VERIFIED: 3,
}


def strongest(values: list[Confidence] | tuple[Confidence, ...]) -> Confidence:
    """The strongest confidence among several findings of one fact."""
    best = Confidence.UNRESOLVED
    for value in values:
        if _RANK[value] > _RANK[best]:
            best = value
    return best


class Source(StrEnum):
    """Where a fact was read; the last word of `aibom.evidence.<source>`."""

    SPEC = "spec"  # an object's spec (a Pod's spec included)
    POD_STATUS = "pod-status"  # a Pod's status, as the kubelet reported it
    STATUS = "status"  # another object's status, as its operator reported it
    ANNOTATION = "annotation"  # metadata.annotations written by a person


class Evidence(NamedTuple):
    """One place a fact was read (a tuple: sorts and hashes at C speed)."""

    source: Source
    locator: str


def escape_token(token: str) -> str:
    """One RFC 6901 reference token: `~` -> `~0`, `/` -> `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer from raw tokens (`pointer("spec", 0)` -> `/spec/0`)."""
    return "".join("/" + escape_token(str(t)) for t in tokens)


def locator(subject: str, ptr: str) -> str:
    """`<Kind>/<name>#<pointer>`: which object, and where inside it."""
    return f"{subject}#{ptr}"
