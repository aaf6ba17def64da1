"""Questions an auditor asks of AIBOM documents: where does model X run, on what?

Reads the CycloneDX documents the annotator (or `scan`) writes and answers two
kinds of question, with no I/O:

- **find**: the roots whose document has a component matching every filter given
  (:class:`Filter`: an image by reference, digest or repository glob; a model by
  id, with or without its revision; a runtime by name, optionally a version or a
  version range; an agent framework; an LLM API service), each matching component
  with its confidence and the evidence that named it;
- **inventory**: one row per model (or runtime and version) with the roots that use
  it, their namespaces and the weakest confidence among them.

A document is read into :class:`Part`\\ s once (its components and services, the
kind of each told by its bom-ref prefix: docs/aibom-format.md, "bom-refs").
Names match case-insensitively; a pattern with ``*``, ``?`` or ``[`` is a glob
(``fnmatch``). Version ranges are PEP 440 specifiers (``>=0.6,<0.9``), compared
as PEP 440 versions after dropping a leading ``v`` from the tag; a version that
is not one (``latest``, ``nightly``) is never inside a range, and is reported as
not comparable rather than guessed.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from aibom_core.evidence import Confidence
from aibom_core.images import parse_image

#: What a component is, by its bom-ref prefix (docs/aibom-format.md, "bom-refs").
ROLES = {
    "image": "image",
    "runtime": "runtime",
    "model": "model",
    "agent": "framework",
    "service": "service",
    "data": "data",
}

_WEAKNESS: dict[str, int] = {
    Confidence.UNRESOLVED: 0,
    Confidence.INFERRED: 1,
    Confidence.DECLARED: 2,
    Confidence.VERIFIED: 3,
}
_GLOB = re.compile(r"[*?\[]")
_DIGEST_HEX = re.compile(r"[0-9a-f]{64}")


class QueryError(ValueError):
    """A filter that cannot be read (a usage error: exit 2)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One component (or service) of a document, as a question sees it."""

    role: str  # image | runtime | model | framework | service | data
    bom_ref: str
    name: str
    version: str
    confidence: str
    evidence: tuple[tuple[str, str], ...]  # (source, locator), as the document lists them
    digests: tuple[str, ...] = ()
    reference: str = ""
    unresolved: bool = False  # a model placeholder: the spec names no readable model

    @property
    def label(self) -> str:
        """``<role> <name>[@<version>]``: how a hit names what matched."""
        return f"{self.role} {self.name}" + (f"@{self.version}" if self.version else "")


def parts_of(body: Any) -> list[Part]:
    """The components and services of a CycloneDX document (odd input yields fewer)."""
    if not isinstance(body, dict):
        return []
    entries = [*(body.get("components") or []), *(body.get("services") or [])]
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        ref = str(entry.get("bom-ref", ""))
        role = ROLES.get(ref.partition(":")[0])
        if role is None:
            continue
        props = [p for p in entry.get("properties") or [] if isinstance(p, dict)]
        pairs = [(str(p.get("name", "")), str(p.get("value", ""))) for p in props]
        values = dict(pairs)
        digests = tuple(v for n, v in pairs if n == "aibom.image.digest")
        out.append(
            Part(
                role=role,
                bom_ref=ref,
                name=str(entry.get("name") or ""),
                version=str(entry.get("version") or ""),
                confidence=values.get("aibom.confidence", ""),
                evidence=tuple(
                    (n.removeprefix("aibom.evidence."), v)
                    for n, v in pairs
                    if n.startswith("aibom.evidence.")
                ),
                digests=digests,
                reference=values.get("aibom.image.reference", ""),
                unresolved=ref.startswith("model:unresolved:"),
            )
        )
    return out


def weakest(values: Iterable[str]) -> str:
    """The weakest of several confidences (an unknown value counts as the weakest)."""
    found = list(values)
    return min(found, key=lambda v: _WEAKNESS.get(v, -1)) if found else ""


def _name_matches(pattern: str, name: str) -> bool:
    if _GLOB.search(pattern):
        return fnmatch.fnmatchcase(name.lower(), pattern.lower())
    return name.lower() == pattern.lower()


def comparable(version: str) -> Version | None:
    """A runtime version as PEP 440 (``v0.8.5`` -> 0.8.5); None when it is not one."""
    text = version.strip()
    if text[:1] in ("v", "V") and text[1:2].isdigit():
        text = text[1:]
    try:
        return Version(text)
    except InvalidVersion:
        return None


# -- filters ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition on a component: which option, the text given, and the test."""

    option: str  # --image | --model | --runtime | --framework | --service
    text: str
    role: str
    name: str = ""
    version: str = ""  # an exact version / revision, or ""
    spec: SpecifierSet | None = None  # a version range

    def matches(self, part: Part) -> bool:
        if part.role != self.role:
            return False
        if self.role == "image":
            return image_matches(part, self.text)
        if self.role == "model" and part.unresolved:
            return False
        if not _name_matches(self.name, part.name):
            return False
        if self.spec is not None:
            got = comparable(part.version)
            return got is not None and self.spec.contains(got, prereleases=True)
        if self.version:
            return part.version.lower() == self.version.lower() or (
                self.role == "runtime" and _same_version(part.version, self.version)
            )
        return True

    def uncomparable(self, part: Part) -> bool:
        """The part has the right name but a version no range can place."""
        return (
            self.spec is not None
            and part.role == self.role
            and _name_matches(self.name, part.name)
            and comparable(part.version) is None
        )


def _same_version(a: str, b: str) -> bool:
    va, vb = comparable(a), comparable(b)
    return va is not None and va == vb


def image_filter(text: str) -> Filter:
    """``--image``: a digest (``sha256:<hex>`` or the bare hex), ``repo``, ``repo:tag``,
    ``repo@sha256:<hex>``, or a glob on the repository (``'*vllm*'``)."""
    if not text.strip():
        raise QueryError("--image needs a reference, a digest or a glob")
    return Filter(option="--image", text=text.strip(), role="image")


def model_filter(text: str) -> Filter:
    """``--model ID`` (any revision) or ``--model ID@REVISION``; ID may be a glob."""
    name, _, revision = text.strip().partition("@")
    if not name:
        raise QueryError(f"--model {text!r}: give a model id, e.g. Qwen/Qwen3-0.6B")
    return Filter(option="--model", text=text, role="model", name=name, version=revision)


_RANGE_START = re.compile(r"[<>=!~]")


def runtime_filter(text: str) -> Filter:
    """``--runtime NAME``, ``NAME@VERSION``, or ``NAME`` followed by PEP 440 specifiers
    (``vllm<0.9``, ``vllm@>=0.6,<0.9``, ``sglang~=0.4``); NAME may be a glob."""
    raw = text.strip()
    cut = _RANGE_START.search(raw)
    at = raw.find("@")
    if at != -1 and (cut is None or at < cut.start()):
        name, rest = raw[:at], raw[at + 1 :]
    elif cut is not None:
        name, rest = raw[: cut.start()], raw[cut.start() :]
    else:
        name, rest = raw, ""
    if not name:
        raise QueryError(f"--runtime {text!r}: give a runtime name, e.g. vllm or 'vllm<0.9'")
    if rest and _RANGE_START.match(rest):
        try:
            spec = SpecifierSet(rest)
        except InvalidSpecifier:
            raise QueryError(
                f"--runtime {text!r}: {rest!r} is not a version range (PEP 440: "
                "'<0.9', '>=0.6,<0.9', '~=0.4')"
            ) from None
        return Filter(option="--runtime", text=text, role="runtime", name=name, spec=spec)
    return Filter(option="--runtime", text=text, role="runtime", name=name, version=rest)


def name_filter(option: str, role: str, text: str) -> Filter:
    """``--framework NAME`` (agent frameworks) or ``--service NAME`` (LLM APIs)."""
    if not text.strip():
        raise QueryError(f"{option} needs a name")
    return Filter(option=option, text=text, role=role, name=text.strip())


def image_matches(part: Part, query: str) -> bool:
    """Whether an image component is the image ``query`` names.

    ``sha256:<hex>`` or a bare 64-hex digest matches the digest; ``repo@sha256:``
    both; ``repo:tag`` the repository and tag; ``repo`` the repository, any tag;
    a glob (``*``, ``?``, ``[``) matches the repository (normalised: ``*vllm*``
    finds ``nvcr.io/nvidia/ai-dynamo/vllm-runtime``).
    """
    if part.role != "image":
        return False
    q = query.strip()
    mine = parse_image(part.reference or part.name)
    if _GLOB.search(q):
        repository = mine.repository if mine is not None else part.name
        return fnmatch.fnmatchcase(repository.lower(), q.lower())
    bare = q.lower()
    if _DIGEST_HEX.fullmatch(bare):
        bare = f"sha256:{bare}"
    if bare.startswith("sha256:"):
        return bare in part.digests
    parsed = parse_image(q)
    if parsed is None or mine is None or parsed.repository != mine.repository:
        return False
    if parsed.digest is not None:
        return parsed.digest in part.digests or parsed.digest == mine.digest
    written_tag = ":" in q.rpartition("/")[2]
    return not written_tag or parsed.tag == mine.tag


# -- find ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hit:
    """A component of a matching root, and the options it matched."""

    part: Part
    options: tuple[str, ...]


def find(parts: Sequence[Part], filters: Sequence[Filter]) -> list[Hit]:
    """The hits of one document: empty unless every filter matches some component
    (filters combine with AND); each matching component once, in document order."""
    matched = {f: [p for p in parts if f.matches(p)] for f in filters}
    if not filters or any(not found for found in matched.values()):
        return []
    hits = []
    for part in parts:
        options = tuple(f.option for f in filters if part in matched[f])
        if options:
            hits.append(Hit(part, options))
    return hits


def uncomparable(parts: Sequence[Part], filters: Sequence[Filter]) -> list[Part]:
    """Runtimes a range could not place (their version is no PEP 440 version)."""
    return [p for p in parts for f in filters if f.uncomparable(p)]


# -- inventory ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Use:
    """One root using a model or runtime: where, and how sure its document is."""

    namespace: str
    root: str
    confidence: str


@dataclass(frozen=True, slots=True)
class InventoryRow:
    """A model (or a runtime at a version) and every root that uses it."""

    name: str
    version: str  # a model's revision, a runtime's version; "" when unknown
    uses: tuple[Use, ...]

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(sorted({u.namespace for u in self.uses}))

    @property
    def weakest(self) -> str:
        return weakest(u.confidence for u in self.uses)


def inventory(
    documents: Iterable[tuple[str, str, Sequence[Part]]], role: str
) -> list[InventoryRow]:
    """One row per (name, version) of ``role`` (``model`` or ``runtime``) over
    ``(namespace, root, parts)`` of each document, sorted by name then version; each
    row's uses sorted by namespace then root. Model placeholders (no readable model)
    are one row named ``(unresolved)``, so what cannot be read is counted too."""
    rows: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    for namespace, root, parts in documents:
        for part in parts:
            if part.role != role:
                continue
            key = ("(unresolved)", "") if part.unresolved else (part.name, part.version)
            rows.setdefault(key, {}).setdefault((namespace, root), []).append(part.confidence)
    out = []
    for (name, version), uses in sorted(rows.items(), key=lambda kv: _row_order(kv[0])):
        out.append(
            InventoryRow(
                name=name,
                version=version,
                uses=tuple(Use(ns, root, weakest(c)) for (ns, root), c in sorted(uses.items())),
            )
        )
    return out


def _row_order(key: tuple[str, str]) -> tuple[bool, str, bool, Any, str]:
    name, version = key
    parsed = comparable(version)
    return (name == "(unresolved)", name.lower(), parsed is None, parsed or 0, version)
