"""One root's AIBOM: the facts it is made of, their hash, and the CycloneDX bytes.

`facts_of` reads a root, its tracked descendants and its attributed pods
(a `RootView`) into `Facts`: every component the document will hold, already
merged (one image reference is one component, whichever objects and pods
use it, with every locator kept as evidence) and sorted. `input_hash` hashes
exactly those facts, so the annotator can skip rendering when nothing the
document says has changed. `render` writes CycloneDX 1.6 JSON from them.

Determinism: nothing here reads the clock or draws randomness. The timestamp
is the root's `creationTimestamp` (the epoch if absent), the serial number a
uuid5 of the input hash, every bom-ref derived from content, every list
sorted, and the JSON written with sorted keys (by orjson: the bytes the
stdlib's `json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)` writes, about 20 times faster; a test compares them).

Why render is not cyclonedx-python-lib's serializer: building and
serialising a typical document through the library costs milliseconds (its
reflection-driven serializer dominates; measured in docs/aibom-format.md),
which alone would exceed the offline scan's budget for 2,000 roots, and it
orders evidence occurrences by random bom-refs. The document is therefore
written directly from plain data; the library remains the judge: `validate`
runs its strict 1.6 JSON validator, and the tests load every document back
into the library's model. Pure: `validate` reads only the library's bundled
schema.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import orjson

from aibom_core.agents import AgentFinding, agents_of
from aibom_core.digests import observed_digests, status_signature
from aibom_core.evidence import Confidence, Evidence, Source, locator, strongest
from aibom_core.images import HASH_ALGORITHMS, canonical, oci_purl, parse_image, valid_digest
from aibom_core.kinds import KindRegistry, group_kind_of
from aibom_core.models import ModelFinding, hf_purl, models_of, origin_of
from aibom_core.objects import Obj, metadata, name_of
from aibom_core.runtime import SERVING, RuntimeFinding, runtimes_of
from aibom_core.scrape import (
    Container,
    Volume,
    object_signature,
    pod_signature,
    scrape,
    subject_of,
)

# Bumped whenever the same facts would render differently: part of the hash,
# so an upgrade that changes the format re-renders every document.
FORMAT_VERSION = "1"
TOOL_NAME = "aibom-rollup"
SCHEMA_URL = "http://cyclonedx.org/schema/bom-1.6.schema.json"
EPOCH = "1970-01-01T00:00:00Z"
# Pods repeat their template: their spec evidence is listed only for facts no
# other object declares, and pod evidence (digests included) names at most
# this many pods per fact, so a 5,000-pod DaemonSet still fits a ConfigMap.
MAX_POD_EVIDENCE = 3
# A stable namespace for serial numbers (uuid5 of the input hash under it).
_SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://aibom.dev/aibom-rollup/serial")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_NUMERIC_CONFIDENCE = {
    Confidence.VERIFIED: 1.0,
    Confidence.DECLARED: 0.8,
    Confidence.INFERRED: 0.5,
    Confidence.UNRESOLVED: 0.0,
}
_TECHNIQUE = {
    Source.SPEC: "manifest-analysis",
    Source.ANNOTATION: "manifest-analysis",
    Source.POD_STATUS: "dynamic-analysis",
    Source.STATUS: "dynamic-analysis",
}
# Env vars that put a model cache on a path (a volume mounted there holds it).
_CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE")

P_CONFIDENCE = "aibom.confidence"
P_EVIDENCE = "aibom.evidence."  # + source
P_OWNED = "aibom.rollup.owned."  # + index
P_UNRESOLVED_ROOT = "aibom.rollup.unresolved"
# Provenance.
P_UNPROVEN = "aibom.rollup.unproven."  # + index: objects whose edge to a member is not proven
P_UNPROVEN_ROOT = "aibom.provenance.unproven"  # the root's own refused edge (its reason)
# + index: objects adopted by a member (a proven edge) whose containers are not
# the member's Pod template: listed apart, never absorbed (aibom_core.provenance).
P_MISMATCH = "aibom.rollup.adopted-mismatch."
P_GUARDED = "aibom.provenance.guarded"  # true|false: the namespace's ownerReferences are guarded


# --- the contract ----------------------------------------------------------------


@dataclass(frozen=True)
class RootView:
    root: Obj
    status: str  # "root" or "unresolved"
    reason: str | None  # the failing hop when unresolved
    owned: tuple[Obj, ...]  # tracked descendants, sorted by (kind, name)
    pods: tuple[Obj, ...]  # pods whose UID-checked chain reaches the root, by (name, uid)
    unproven: tuple[str, ...] = ()  # `<Kind>/<name>` whose edge to a member is not proven
    guarded: bool | None = None  # the namespace is guarded (None: not known, not said)
    # `<Kind>/<name>` adopted by a member, not running its template
    mismatched: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    json_bytes: bytes
    input_hash: str
    images: tuple[str, ...]
    digests: tuple[str, ...]
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Component:
    """One component as it will be written; plain data, hashable, sorted."""

    bom_ref: str
    type: str  # container | framework | machine-learning-model | data
    name: str
    version: str | None
    purl: str | None
    hashes: tuple[str, ...]  # valid OCI digests, `<algorithm>:<hex>`
    confidence: Confidence
    evidence: tuple[Evidence, ...]
    properties: tuple[tuple[str, str], ...]  # besides confidence and evidence
    depends_on: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RootFacts:
    bom_ref: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    timestamp: str
    status: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Facts:
    """Exactly what a document is made of."""

    root: RootFacts
    owned: tuple[str, ...]  # `<Kind>/<name>`, index i is aibom.rollup.owned.<i>
    components: tuple[Component, ...]  # sorted by bom-ref
    root_depends_on: tuple[str, ...]
    images: tuple[str, ...]
    digests: tuple[str, ...]
    models: tuple[str, ...]
    # Provenance; defaults render nothing, so documents made
    # without provenance read (and hash) exactly as before.
    unproven: tuple[str, ...] = field(default=(), repr=False)  # aibom.rollup.unproven.<i>
    guarded: bool | None = field(default=None, repr=False)
    # aibom.rollup.adopted-mismatch.<i>; in the input hash only when not empty, so
    # every other document hashes as before it existed.
    mismatched: tuple[str, ...] = field(default=(), repr=False)


# --- accumulating facts ------------------------------------------------------------


@dataclass
class _Acc:
    """Findings of one fact while the objects are read."""

    confidences: list[Confidence] = field(default_factory=list)
    evidence: set[Evidence] = field(default_factory=set)
    pod_evidence: list[Evidence] = field(default_factory=list)

    def add(self, confidence: Confidence, ev: Evidence, *, in_pod: bool) -> None:
        self.confidences.append(confidence)
        if not in_pod:
            self.evidence.add(ev)
        elif len(self.pod_evidence) < MAX_POD_EVIDENCE and ev not in self.pod_evidence:
            self.pod_evidence.append(ev)

    def final_evidence(self) -> tuple[Evidence, ...]:
        return tuple(sorted(self.evidence or self.pod_evidence))


@dataclass
class _Image(_Acc):
    ref: str = ""
    digests: dict[str, _Acc] = field(default_factory=dict)
    invalid: dict[str, _Acc] = field(default_factory=dict)  # malformed digests, as written
    links: set[str] = field(default_factory=set)
    serving: set[str] = field(default_factory=set)  # serving runtimes seen on it
    unresolved: list[tuple[str, Evidence, bool]] = field(default_factory=list)
    details: set[tuple[str, str]] = field(default_factory=set)  # kept on its placeholder
    unresolved_links: set[str] = field(default_factory=set)  # data it is read from


@dataclass
class _Model(_Acc):
    model_id: str = ""
    revision: str | None = None
    served: set[str] = field(default_factory=set)
    extra: set[tuple[str, str]] = field(default_factory=set)  # e.g. aibom.model.format
    named_by: set[str] = field(default_factory=set)
    origins: set[str] = field(default_factory=set)
    links: set[str] = field(default_factory=set)


@dataclass
class _Data(_Acc):
    kind: str = ""
    name: str = ""
    mount_paths: set[str] = field(default_factory=set)
    profiles: set[str] = field(default_factory=set)


@dataclass
class _Agent(_Acc):
    kind: str = ""  # framework | endpoint
    name: str = ""
    endpoint: str | None = None
    rules: set[str] = field(default_factory=set)


@dataclass
class _Runtime(_Acc):
    runtime: str = ""
    version: str | None = None
    rules: set[str] = field(default_factory=set)  # which table rows matched
    version_from: set[str] = field(default_factory=set)


class _Builder:
    def __init__(self) -> None:
        self.images: dict[str, _Image] = {}
        # Containers that name no image (a KServe predictor `model`: its
        # ServingRuntime supplies it), by locator: their facts hang off the root.
        self.loose: dict[str, _Image] = {}
        self.root_links: set[str] = set()
        self.models: dict[tuple[str, str | None], _Model] = {}
        self.data: dict[tuple[str, str], _Data] = {}
        self.runtimes: dict[tuple[str, str | None], _Runtime] = {}
        self.agents: dict[tuple[str, str, str | None], _Agent] = {}
        # What the non-pod objects' containers say, without their pointers.
        self.declared: dict[tuple[Any, ...], set[tuple[str, str | None]]] = {}

    def image(self, ref: str) -> _Image:
        img = self.images.get(ref)
        if img is None:
            img = self.images[ref] = _Image(ref=ref)
        return img

    def container(self, c: Container) -> None:
        if not c.image.strip() and not (c.models or c.runtimes):
            return
        content = _content(c)
        annotated = {(m.id, m.revision) for m in c.models if m.source is Source.ANNOTATION}
        if not c.in_pod:
            self.declared.setdefault(content, set()).update(annotated)
        elif content in self.declared and annotated <= self.declared[content]:
            # A pod container saying exactly what its template says adds no
            # fact, and pod evidence is shown only for facts nothing else
            # declares: skipping it changes no byte and most of the cost.
            return
        if not c.image.strip():
            where = locator(c.subject, c.pointer)
            img = self.loose.setdefault(where, _Image(ref=where))
            parsed = None
        else:
            img = self.image(canonical(c.image))
            ev = Evidence(Source.SPEC, locator(c.subject, c.image_pointer))
            img.add(Confidence.DECLARED, ev, in_pod=c.in_pod)
            parsed = parse_image(c.image)
        if parsed is not None and parsed.digest is not None:
            acc = img.digests.setdefault(parsed.digest, _Acc())
            ev = Evidence(Source.SPEC, locator(c.subject, c.image_pointer))
            acc.add(Confidence.DECLARED, ev, in_pod=c.in_pod)
        elif parsed is not None and not parsed.registry and "@" in c.image:
            # `repo@SHA256:...`: the reference pins something that is not an
            # OCI digest. Evidence of it, never a digest.
            bad = c.image.strip().rpartition("@")[2]
            acc = img.invalid.setdefault(bad, _Acc())
            ev = Evidence(Source.SPEC, locator(c.subject, c.image_pointer))
            acc.add(Confidence.UNRESOLVED, ev, in_pod=c.in_pod)
        for rf in runtimes_of(c):
            self._runtime(c, img, rf)
        for af in agents_of(c):
            self._agent(c, img, af)
        models: list[_Model] = []
        unresolved = False
        paths: list[str] = []
        for mf in models_of(c):
            model = self._model(c, img, mf)
            if model is not None:
                models.append(model)
            unresolved = unresolved or mf.id is None
            if mf.detail is not None and mf.detail[1].startswith("/"):
                paths.append(mf.detail[1])
        # Only the volumes of a container that serves or names a model are
        # model sources; a web app's PVC is not.
        if c.volumes and (models or unresolved or _serving_of(c)):
            self._volumes(c, img, models, paths)

    def _runtime(self, c: Container, img: _Image, rf: RuntimeFinding) -> None:
        key = (rf.runtime, rf.version)
        acc = self.runtimes.get(key)
        if acc is None:
            acc = self.runtimes[key] = _Runtime(runtime=rf.runtime, version=rf.version)
        acc.add(rf.confidence, Evidence(rf.source, locator(c.subject, rf.pointer)), in_pod=c.in_pod)
        if rf.rule:
            acc.rules.add(rf.rule)
        if rf.version_from:
            acc.version_from.add(rf.version_from)
        if rf.version_pointer:
            vev = Evidence(Source.SPEC, locator(c.subject, rf.version_pointer))
            acc.add(rf.confidence, vev, in_pod=c.in_pod)
        img.links.add(_runtime_ref(rf.runtime, rf.version))
        if rf.runtime in SERVING:
            img.serving.add(rf.runtime)

    def _agent(self, c: Container, img: _Image, af: AgentFinding) -> None:
        key = (af.kind, af.name, af.endpoint)
        acc = self.agents.get(key)
        if acc is None:
            acc = self.agents[key] = _Agent(kind=af.kind, name=af.name, endpoint=af.endpoint)
        acc.add(af.confidence, Evidence(Source.SPEC, locator(c.subject, af.pointer)),
                in_pod=c.in_pod)  # fmt: skip
        acc.rules.add(af.rule)
        img.links.add(_agent_ref(af.kind, af.name, af.endpoint))

    def _model(self, c: Container, img: _Image, mf: ModelFinding) -> _Model | None:
        ev = Evidence(mf.source, locator(c.subject, mf.pointer))
        if mf.id is None:
            img.unresolved.append((mf.reason or "unresolved", ev, c.in_pod))
            if mf.detail is not None:
                img.details.add(mf.detail)
            return None
        key = (mf.id, mf.revision)
        acc = self.models.get(key)
        if acc is None:
            acc = self.models[key] = _Model(model_id=mf.id, revision=mf.revision)
        acc.add(mf.confidence, ev, in_pod=c.in_pod)
        acc.served.update(mf.served_names)
        acc.extra.update(mf.properties)
        acc.named_by.add(mf.via)
        acc.origins.add("nim" if mf.via in ("nim-image", "status.model") else origin_of(mf.id))
        img.links.add(_model_key_ref(key))
        return acc

    def _volumes(self, c: Container, img: _Image, models: list[_Model], paths: list[str]) -> None:
        cache_paths = [
            v.value for v in c.env if v.name in _CACHE_ENV and v.value and v.value.startswith("/")
        ]
        for vol in c.volumes:
            key = (vol.kind, vol.name)
            acc = self.data.get(key)
            if acc is None:
                acc = self.data[key] = _Data(kind=vol.kind, name=vol.name)
            acc.add(Confidence.DECLARED, Evidence(Source.SPEC, locator(c.subject, vol.pointer)),
                    in_pod=c.in_pod)  # fmt: skip
            if vol.mount_path:
                acc.mount_paths.add(vol.mount_path)
            if vol.profile:
                acc.profiles.add(vol.profile)
            dref = _data_ref(vol)
            img.links.add(dref)
            for model in models:
                if _loads_from(model, vol, cache_paths):
                    model.links.add(dref)
            if vol.mount_path and any(_under(p, vol.mount_path) for p in paths):
                img.unresolved_links.add(dref)  # the directory a model lies in
            elif vol.mount_path is None and not models:
                img.unresolved_links.add(dref)  # operator-mounted storage of no named model

    def pod_digests(self, pod: Obj, subject: str = "") -> None:
        """The digests the pod's status reports; `subject`: the pod's (default `subject_of`)."""
        for seen in observed_digests(pod):
            img = self.image(canonical(seen.image))
            if not seen.valid:
                bad = img.invalid.setdefault(seen.digest, _Acc())
                if len(bad.pod_evidence) < MAX_POD_EVIDENCE:
                    subject = subject or subject_of(pod)
                    ev = Evidence(Source.POD_STATUS, locator(subject, seen.pointer))
                    bad.add(Confidence.UNRESOLVED, ev, in_pod=True)
                continue
            acc = img.digests.get(seen.digest)
            if acc is None:
                acc = img.digests[seen.digest] = _Acc()
            if len(acc.pod_evidence) >= MAX_POD_EVIDENCE:
                acc.confidences.append(Confidence.VERIFIED)
                continue
            subject = subject or subject_of(pod)
            ev = Evidence(Source.POD_STATUS, locator(subject, seen.pointer))
            acc.add(Confidence.VERIFIED, ev, in_pod=True)


def _content(c: Container) -> tuple[Any, ...]:
    return (
        c.image,
        c.command,
        c.args,
        c.init,
        tuple((e.name, e.value, e.value_from) for e in c.env),
        tuple((v.kind, v.name, v.mount_path, v.profile) for v in c.volumes),
        # Annotations are compared apart: an object's own annotations reach
        # its template's containers but not its pods.
        tuple(
            (m.id, m.revision, m.confidence, m.source, m.via)
            for m in c.models
            if m.source is not Source.ANNOTATION
        ),
        tuple((r.runtime, r.confidence, r.source) for r in c.runtimes),
    )


def _serving_of(c: Container) -> set[str]:
    return {rf.runtime for rf in runtimes_of(c) if rf.runtime in SERVING}


def _under(path: str, mount: str) -> bool:
    return (path.rstrip("/") + "/").startswith(mount.rstrip("/") + "/")


def _loads_from(model: _Model, vol: Volume, cache_paths: list[str]) -> bool:
    """Whether a model is read from a volume: a path under its mount, or its cache."""
    if vol.mount_path is None:
        return True  # NIM: the operator mounts the cache where the NIM reads models
    mount = vol.mount_path.rstrip("/") + "/"
    if model.model_id.startswith("/") and (model.model_id + "/").startswith(mount):
        return True
    return "huggingface" in model.origins and any(
        (p.rstrip("/") + "/").startswith(mount) for p in cache_paths
    )


# --- bom-refs ---------------------------------------------------------------------


def _runtime_ref(runtime: str, version: str | None) -> str:
    return f"runtime:{runtime}@{version}" if version else f"runtime:{runtime}"


def _agent_ref(kind: str, name: str, endpoint: str | None) -> str:
    if kind == "framework":
        return f"agent:{name}"
    return f"service:{name}@{endpoint}" if endpoint else f"service:{name}"


def _model_key_ref(key: tuple[str, str | None]) -> str:
    model_id, revision = key
    return f"model:{model_id}@{revision}" if revision else f"model:{model_id}"


def _data_ref(vol: Volume) -> str:
    return f"data:{vol.kind}/{vol.name}"


def _root_ref(kind: str, namespace: str, name: str, uid: str) -> str:
    return f"workload:{kind}/{namespace}/{name}" + (f"@{uid}" if uid else "")


# --- facts ------------------------------------------------------------------------


def _timestamp(value: Any) -> str:
    """The root's creationTimestamp as RFC 3339 UTC; the epoch when absent or malformed."""
    if not isinstance(value, str) or not _TIMESTAMP.fullmatch(value):
        return EPOCH
    if len(value) == 20:  # `...Z` in seconds, as the API server writes it: kept if valid
        try:
            datetime.fromisoformat(value[:19])
        except ValueError:
            return EPOCH
        return value
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, OverflowError):  # year 1 at +02:00 is before year 1 in UTC
        return EPOCH
    # Not strftime: its %Y drops a year's leading zeros (`999-...` is no RFC 3339 date).
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def _root_facts(view: RootView) -> RootFacts:
    root = view.root if isinstance(view.root, dict) else {}
    meta = metadata(root)
    kind = str(root.get("kind") or "")
    namespace = str(meta.get("namespace") or "")
    name = name_of(root)
    uid = str(meta.get("uid") or "")
    unresolved = view.status in ("unresolved", "unproven")
    return RootFacts(
        bom_ref=_root_ref(kind, namespace, name, uid),
        api_version=str(root.get("apiVersion") or ""),
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid,
        timestamp=_timestamp(meta.get("creationTimestamp")),
        status=view.status if unresolved else "root",
        reason=(str(view.reason or "") or "unknown") if unresolved else None,
    )


def _pod_key(pod: Obj) -> tuple[str, str]:
    meta = metadata(pod)
    return (str(meta.get("name") or ""), str(meta.get("uid") or ""))


def facts_of(view: RootView, registry: KindRegistry, *, cache: FactsCache | None = None) -> Facts:
    """Everything the root's document will say, merged and sorted. Pure and cheap.

    `cache`: one `FactsCache` shared by many roots (the offline scan), so
    roots whose objects say the same things under other names are read once.
    The facts are the same with or without it.
    """
    root = _root_facts(view)
    owned_objs = sorted(
        (o for o in view.owned if isinstance(o, dict) and registry.is_tracked(group_kind_of(o))),
        key=lambda o: (str(o.get("kind") or ""), name_of(o)),
    )
    pods = sorted((p for p in view.pods if isinstance(p, dict)), key=_pod_key)
    objs = [view.root, *owned_objs]
    body = cache.body(objs, pods) if cache is not None else None
    if body is None:
        body = _body(objs, pods)
    return Facts(
        root=root,
        owned=tuple(f"{o.get('kind')}/{name_of(o)}" for o in owned_objs),
        components=body.components,
        root_depends_on=body.root_depends_on,
        images=body.images,
        digests=body.digests,
        models=body.models,
        unproven=_by_kind_name(view.unproven),
        guarded=view.guarded,
        mismatched=_by_kind_name(view.mismatched),
    )


def _by_kind_name(kind_names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(kind_names, key=lambda kn: tuple(kn.split("/", 1))))


@dataclass(frozen=True, slots=True)
class _Body:
    """The facts the objects' contents make (all but the root's identity and lists)."""

    components: tuple[Component, ...]
    root_depends_on: tuple[str, ...]
    images: tuple[str, ...]
    digests: tuple[str, ...]
    models: tuple[str, ...]


def _body(objs: list[Any], pods: list[Obj], subjects: Sequence[str] = ()) -> _Body:
    """Read the objects, then the pods, in this order. `subjects`: one per object
    and pod, what their locators name them (default: `subject_of` each)."""
    builder = _Builder()
    for i, obj in enumerate(objs):
        for c in scrape(obj, subject=subjects[i] if subjects else None):
            builder.container(c)
    first_pod = len(objs)
    signatures: list[list[Any]] = []  # few: one per distinct pod template, compared deeply
    for j, pod in enumerate(pods):
        signature = pod_signature(pod)
        if signature in signatures:
            continue  # an earlier pod said all this; only its status differs
        signatures.append(signature)
        for c in scrape(pod, subject=subjects[first_pod + j] if subjects else None):
            builder.container(c)
    for j, pod in enumerate(pods):
        builder.pod_digests(pod, subjects[first_pod + j] if subjects else "")
    components = _finish(builder)
    models = tuple(sorted({c.name for c in components if c.type == "machine-learning-model"
                           and c.confidence is not Confidence.UNRESOLVED}))  # fmt: skip
    return _Body(
        components=components,
        root_depends_on=tuple(
            sorted({f"image:{ref}" for ref in builder.images} | builder.root_links)
        ),
        images=tuple(sorted(builder.images)),
        digests=tuple(sorted({d for img in builder.images.values() for d in img.digests})),
        models=models,
    )


# Roots with more objects than this are read directly: they are few, and
# their key would cost more than it saves.
MAX_CACHED_OBJECTS = 32
_STAND_IN = "\x00"  # + one character: the stand-in for one object's name while its facts are read
_MISSING = object()


class FactsCache:
    """Facts of roots that say the same things under other names, read once.

    A fleet runs the same few templates under thousands of names: one
    Deployment, its ReplicaSet and a few Pods per root, five shapes. A
    root's facts depend on its objects' names only through the evidence
    locators (`<Kind>/<name>#<pointer>`), so the cache keys a root on what
    is read from each object (`object_signature`, and for a Pod
    `pod_signature` and `status_signature`), in the order
    `facts_of` reads them, and on how the objects' names sort. It reads
    such a root once with stand-in names that sort alike and gives every
    other root the same facts under its own names: same order, same bytes
    (a test compares every root of the benchmark dumps with `facts_of`
    without a cache).

    Not cached (read directly, as without a cache): roots of more than
    `MAX_CACHED_OBJECTS` objects, names with `#` (locators would no longer
    sort by name alone), values that cannot be serialized exactly, and
    facts that carry a name elsewhere than in a locator (a container
    without an image: its bom-ref is its locator). Keeps at most
    `max_entries` distinct roots. Not thread-safe; one per scan.
    """

    def __init__(self, *, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._bodies: dict[bytes, _Body | None] = {}

    def body(self, objs: list[Any], pods: list[Obj]) -> _Body | None:
        """The facts of these objects (read once per key); None: read them directly."""
        if len(objs) + len(pods) > MAX_CACHED_OBJECTS or not isinstance(objs[0], dict):
            return None
        subjects = [subject_of(o) for o in objs] + [subject_of(p) for p in pods]
        # Locators `<subject>#<pointer>` of two objects sort as `<subject>#` does.
        names = sorted(set(subjects), key=lambda s: s + "#")
        if any("#" in name for name in names):
            return None
        rank = {name: i for i, name in enumerate(names)}
        try:
            key = pickle.dumps(
                (
                    [rank[s] for s in subjects],
                    [object_signature(o) for o in objs],
                    [
                        (p.get("apiVersion"), p.get("kind"), pod_signature(p), status_signature(p))
                        for p in pods
                    ],
                ),
                protocol=5,
            )
        except (pickle.PicklingError, TypeError, ValueError, AttributeError, RecursionError):
            return None  # not plain data: read directly
        found = self._bodies.get(key, _MISSING)
        if found is _MISSING:
            self.misses += 1
            stand_ins = [_STAND_IN + chr(0x100 + rank[s]) for s in subjects]
            body: _Body | None = _body(objs, pods, stand_ins)
            if body is not None and not _names_only_in_locators(body):
                body = None
            if len(self._bodies) < self.max_entries:
                self._bodies[key] = body
        else:
            self.hits += 1
            body = found if isinstance(found, _Body) else None
        return _named(body, names) if body is not None else None


def _names_only_in_locators(body: _Body) -> bool:
    """Every stand-in opens a locator, and nothing else holds one."""
    for c in body.components:
        if any(e.locator[:1] != _STAND_IN for e in c.evidence):
            return False
        for name, value in c.properties:
            is_locator = name.startswith(P_EVIDENCE)
            if _STAND_IN in name or (value[:1] == _STAND_IN) != is_locator:
                return False
            if not is_locator and _STAND_IN in value:
                return False
        texts = (c.bom_ref, c.type, c.name, c.version or "", c.purl or "", *c.hashes,
                 *c.depends_on)  # fmt: skip
        if any(_STAND_IN in t for t in texts):
            return False
    texts = (*body.root_depends_on, *body.images, *body.digests, *body.models)
    return not any(_STAND_IN in t for t in texts)


_evidence = tuple.__new__  # an Evidence from a pair, without the Python-level __new__


def _named(body: _Body, names: list[str]) -> _Body:
    """The body with each stand-in replaced by the name it stands for."""
    components = []
    for c in body.components:
        if not c.evidence:
            components.append(c)
            continue
        evidence = tuple(
            [_evidence(Evidence, (source, names[ord(loc[1]) - 0x100] + loc[2:]))
             for source, loc in c.evidence]
        )  # fmt: skip
        properties = tuple(
            [
                (n, names[ord(v[1]) - 0x100] + v[2:]) if n.startswith(P_EVIDENCE) else (n, v)
                for n, v in c.properties
            ]
        )
        components.append(
            Component(c.bom_ref, c.type, c.name, c.version, c.purl, c.hashes, c.confidence,
                      evidence, properties, c.depends_on)
        )  # fmt: skip
    return _Body(tuple(components), body.root_depends_on, body.images, body.digests, body.models)


def _fold_revisions(builder: _Builder) -> dict[str, str]:
    """A model named without a revision joins its only revisioned sibling.

    `--model Qwen/Qwen3` beside a `modelRef` with revision `abc` is the same
    model; with two revisions known, the bare mention stays on its own.
    Returns old bom-ref -> new bom-ref for the links.
    """
    by_id: dict[str, list[str | None]] = {}
    for model_id, revision in builder.models:
        by_id.setdefault(model_id, []).append(revision)
    renames: dict[str, str] = {}
    for model_id, revisions in by_id.items():
        named = [r for r in revisions if r is not None]
        if None not in revisions or len(named) != 1:
            continue
        bare = builder.models.pop((model_id, None))
        into = builder.models[(model_id, named[0])]
        into.confidences += bare.confidences
        into.evidence |= bare.evidence
        for ev in bare.pod_evidence:
            if len(into.pod_evidence) < MAX_POD_EVIDENCE and ev not in into.pod_evidence:
                into.pod_evidence.append(ev)
        into.served |= bare.served
        into.extra |= bare.extra
        into.named_by |= bare.named_by
        into.origins |= bare.origins
        into.links |= bare.links
        renames[_model_key_ref((model_id, None))] = _model_key_ref((model_id, named[0]))
    return renames


def _props(confidence: Confidence, ev: tuple[Evidence, ...]) -> list[tuple[str, str]]:
    """`aibom.confidence` and one `aibom.evidence.<source>` = locator per evidence."""
    # StrEnum members are str: concatenation skips the slow `.value` descriptor.
    return [(P_CONFIDENCE, str(confidence)), *((P_EVIDENCE + e.source, e.locator) for e in ev)]


def _finish(builder: _Builder) -> tuple[Component, ...]:
    renames = _fold_revisions(builder)
    out: list[Component] = []
    sinks = [(ref, img, False) for ref, img in builder.images.items()]
    sinks += [(ref, img, True) for ref, img in builder.loose.items()]
    for ref, img, loose in sinks:
        links = {renames.get(link, link) for link in img.links}
        resolved = any(link.startswith("model:") for link in links)
        reasons = sorted({r for r, _, _ in img.unresolved})
        unresolved_ev = _Acc()
        for _, uev, in_pod in img.unresolved:
            unresolved_ev.add(Confidence.UNRESOLVED, uev, in_pod=in_pod)
        if not reasons and img.serving and not resolved:
            # A serving runtime with no model named anywhere: say so, never guess.
            reasons = [f"no model is named in the spec for {', '.join(sorted(img.serving))}"]
            for iev in img.final_evidence():
                unresolved_ev.add(Confidence.UNRESOLVED, iev, in_pod=False)
        if reasons:
            uref = f"model:unresolved:{ref}"
            links.add(uref)
            uevs = unresolved_ev.final_evidence()
            out.append(
                Component(
                    bom_ref=uref,
                    type="machine-learning-model",
                    name="unresolved",
                    version=None,
                    purl=None,
                    hashes=(),
                    confidence=Confidence.UNRESOLVED,
                    evidence=uevs,
                    properties=tuple(
                        sorted(
                            _props(Confidence.UNRESOLVED, uevs)
                            + [("aibom.model.unresolved", r) for r in reasons]
                            + list(img.details)
                        )
                    ),
                    depends_on=tuple(sorted(img.unresolved_links)),
                )
            )
        if loose:
            builder.root_links |= links  # no image to hang them on: the root's own
        else:
            out.append(_image_component(ref, img, links))
    for (name, version), rt in builder.runtimes.items():
        confidence = strongest(rt.confidences)
        ev = rt.final_evidence()
        rprops = _props(confidence, ev)
        rprops += [("aibom.runtime.rule", r) for r in rt.rules]
        rprops += [("aibom.runtime.version-from", v) for v in rt.version_from]
        out.append(
            Component(
                bom_ref=_runtime_ref(name, version),
                type="framework",
                name=name,
                version=version,
                purl=None,
                hashes=(),
                confidence=confidence,
                evidence=ev,
                properties=tuple(sorted(rprops)),
                depends_on=(),
            )
        )
    for (kind, name, endpoint), agent in builder.agents.items():
        confidence = strongest(agent.confidences)
        ev = agent.final_evidence()
        aprops = _props(confidence, ev) + [("aibom.agent.rule", r) for r in agent.rules]
        aprops.append(("aibom.agent.kind", kind))
        if endpoint:
            aprops.append(("aibom.agent.endpoint", endpoint))
        out.append(
            Component(
                bom_ref=_agent_ref(kind, name, endpoint),
                type="framework" if kind == "framework" else "service",
                name=name,
                version=None,
                purl=None,
                hashes=(),
                confidence=confidence,
                evidence=ev,
                properties=tuple(sorted(aprops)),
                depends_on=(),
            )
        )
    for key, model in builder.models.items():
        confidence = strongest(model.confidences)
        ev = model.final_evidence()
        props = _props(confidence, ev)
        props += [("aibom.model.origin", o) for o in model.origins]
        props += [("aibom.model.named-by", v) for v in model.named_by]
        props += [("aibom.model.served-name", s) for s in model.served]
        props += list(model.extra)
        purl = _model_purl(model)
        out.append(
            Component(
                bom_ref=_model_key_ref(key),
                type="machine-learning-model",
                name=model.model_id,
                version=model.revision,
                purl=purl,
                hashes=(),
                confidence=confidence,
                evidence=ev,
                properties=tuple(sorted(props)),
                depends_on=tuple(sorted(model.links)),
            )
        )
    for (kind, name), data in builder.data.items():
        ev = data.final_evidence()
        props = [*_props(Confidence.DECLARED, ev), ("aibom.data.kind", kind)]
        props += [("aibom.data.mount-path", p) for p in data.mount_paths]
        props += [("aibom.data.nim-profile", p) for p in data.profiles]
        out.append(
            Component(
                bom_ref=f"data:{kind}/{name}",
                type="data",
                name=f"{kind}/{name}",
                version=None,
                purl=None,
                hashes=(),
                confidence=Confidence.DECLARED,
                evidence=ev,
                properties=tuple(sorted(props)),
                depends_on=(),
            )
        )
    return tuple(sorted(out, key=lambda c: c.bom_ref))


def _model_purl(model: _Model) -> str | None:
    if "huggingface" in model.origins:
        return hf_purl(model.model_id, model.revision)
    if "oci" in model.origins:  # a KServe modelcar: `oci://<image reference>`
        ref = model.model_id.removeprefix("oci://")
        parsed = parse_image(ref)
        return oci_purl(ref, parsed.digest if parsed is not None else None)
    return None


def _image_component(ref: str, img: _Image, links: set[str]) -> Component:
    parsed = parse_image(ref)
    digests = sorted(img.digests)
    evidence = set(img.final_evidence())
    for acc in img.digests.values():
        evidence.update(acc.final_evidence())
    for acc in img.invalid.values():
        evidence.update(acc.final_evidence())  # where it was read; it proves nothing
    verified = any(Confidence.VERIFIED in acc.confidences for acc in img.digests.values())
    confidence = Confidence.VERIFIED if verified else Confidence.DECLARED
    ev = tuple(sorted(evidence))
    props = [*_props(confidence, ev), ("aibom.image.reference", ref)]
    props += [("aibom.image.digest", d) for d in digests]
    props += [("aibom.image.digest.invalid", d) for d in sorted(img.invalid)]
    if parsed is not None and parsed.registry:
        name = parsed.repository
        version = parsed.tag if parsed.tag is not None else parsed.digest
    else:
        name, version = ref, None
    return Component(
        bom_ref=f"image:{ref}",
        type="container",
        name=name,
        version=version,
        purl=oci_purl(ref, digests[0] if len(digests) == 1 else None),
        hashes=tuple(d for d in digests if valid_digest(d)),
        confidence=confidence,
        evidence=ev,
        properties=tuple(sorted(props)),
        depends_on=tuple(sorted(links)),
    )


# --- hash and rendering -----------------------------------------------------------


def input_hash(facts: Facts, *, tool_version: str | None = None) -> str:
    """`sha256:<hex>` over `canonical_facts`: the facts, the format version and
    (when given) the tool version.

    Pass the same `tool_version` you render with: the document names it, so
    an upgrade must change the hash. `build_document` does.
    """
    return "sha256:" + hashlib.sha256(canonical_facts(facts, tool_version=tool_version)).hexdigest()


def canonical_facts(facts: Facts, *, tool_version: str | None = None) -> bytes:
    """The RFC 8785 (JCS) bytes of `{"facts": ..., "format": ..., "tool": ...}`.

    The facts as JSON: each dataclass an object of its fields by name,
    tuples and evidence arrays, enums their string values, absent values
    `null`; keys sorted, no whitespace, UTF-8. Independent of Python's
    `repr`, so another implementation can recompute the input hash; equal to
    `aibom_core.jcs.canonicalize` of the same data (a test checks it; the
    facts hold no numbers, where JCS and orjson would differ).
    """
    doc = {"facts": facts, "format": FORMAT_VERSION, "tool": tool_version or ""}
    try:
        return orjson.dumps(doc, default=_plain, option=_CANONICAL)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"the facts cannot be written as JSON: {exc}") from None


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in (Facts, RootFacts, Component)}


_OMITTED_WHEN_EMPTY = frozenset({"mismatched"})


def _plain(value: Any) -> Any:
    """orjson's fallback: a dataclass as a dict (so its keys sort), evidence as an array."""
    names = _FIELDS.get(type(value))
    if names is not None:
        return {
            name: getattr(value, name)
            for name in names
            if name not in _OMITTED_WHEN_EMPTY or getattr(value, name)
        }
    if type(value) is Evidence:
        return tuple(value)
    raise TypeError(f"{type(value).__name__} is not part of the facts")


def serial_number(digest: str) -> str:
    """`urn:uuid:` + uuid5 of the digest (RFC 4122 §4.3, written without `uuid.UUID`)."""
    raw = hashlib.sha1(_SERIAL_NAMESPACE.bytes + digest.encode(), usedforsecurity=False).digest()
    b = bytearray(raw[:16])
    b[6] = (b[6] & 0x0F) | 0x50  # version 5
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _evidence_json(c: Component) -> dict[str, Any]:
    out: dict[str, Any] = {
        "occurrences": [
            {"location": e.locator, "additionalContext": str(e.source)} for e in c.evidence
        ],
    }
    if c.confidence is not Confidence.UNRESOLVED:
        score = _NUMERIC_CONFIDENCE[c.confidence]
        sources = sorted({e.source for e in c.evidence})
        out["identity"] = [
            {
                "field": "purl" if c.purl else "name",
                "confidence": score,
                "concludedValue": c.purl or c.name,
                "methods": [
                    {"technique": _TECHNIQUE[s], "confidence": score, "value": str(s)}
                    for s in sources
                ],
            }
        ]
    return out


def _component_json(c: Component) -> dict[str, Any]:
    out: dict[str, Any] = {"bom-ref": c.bom_ref, "type": c.type, "name": c.name}
    if c.version:
        out["version"] = c.version
    if c.purl:
        out["purl"] = c.purl
    if c.hashes:
        out["hashes"] = [
            {"alg": HASH_ALGORITHMS[alg], "content": hex_}
            for alg, _, hex_ in (h.partition(":") for h in c.hashes)
        ]
    if c.evidence:
        out["evidence"] = _evidence_json(c)
    out["properties"] = [{"name": n, "value": v} for n, v in c.properties]
    return out


def _root_json(
    root: RootFacts,
    owned: tuple[str, ...],
    unproven: tuple[str, ...] = (),
    guarded: bool | None = None,
    mismatched: tuple[str, ...] = (),
) -> dict[str, Any]:
    props = [
        ("aibom.k8s.apiVersion", root.api_version),
        ("aibom.k8s.kind", root.kind),
        ("aibom.k8s.namespace", root.namespace),
    ]
    if root.uid:
        props.append(("aibom.k8s.uid", root.uid))
    # Roll-up properties exist only when roll-up found something to say, so a
    # root without descendants renders exactly as it would without roll-up.
    props += [(f"{P_OWNED}{i}", kind_name) for i, kind_name in enumerate(owned)]
    if root.reason is not None:
        unproven_root = root.status == "unproven"
        props.append((P_UNPROVEN_ROOT if unproven_root else P_UNRESOLVED_ROOT, root.reason))
    props += [(f"{P_UNPROVEN}{i}", kind_name) for i, kind_name in enumerate(unproven)]
    props += [(f"{P_MISMATCH}{i}", kind_name) for i, kind_name in enumerate(mismatched)]
    if guarded is not None:
        props.append((P_GUARDED, "true" if guarded else "false"))
    return {
        "bom-ref": root.bom_ref,
        "type": "application",
        "name": root.name or "(unnamed)",
        "properties": [{"name": n, "value": v} for n, v in props if v],
    }


def document_json(facts: Facts, *, tool_version: str, digest: str | None = None) -> dict[str, Any]:
    """The document as plain JSON data (what `render` writes)."""
    digest = digest or input_hash(facts, tool_version=tool_version)
    # Every component has an entry; `dependsOn` only when non-empty (as the library writes it).
    edges = [(facts.root.bom_ref, facts.root_depends_on)]
    edges += [(c.bom_ref, c.depends_on) for c in facts.components]
    depends = [{"ref": ref, "dependsOn": list(on)} if on else {"ref": ref} for ref, on in edges]
    return {
        "$schema": SCHEMA_URL,
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": serial_number(digest),
        "version": 1,
        "metadata": {
            "timestamp": facts.root.timestamp,
            "tools": {
                "components": [{"type": "application", "name": TOOL_NAME, "version": tool_version}]
            },
            "component": _root_json(
                facts.root, facts.owned, facts.unproven, facts.guarded, facts.mismatched
            ),
        },
        "components": [_component_json(c) for c in facts.components if c.type != "service"],
        "dependencies": sorted(depends, key=lambda d: d["ref"]),
        **_services_json(facts.components),
    }


def _services_json(components: tuple[Component, ...]) -> dict[str, Any]:
    """The LLM APIs called, as CycloneDX services (they have no `evidence`: properties say it)."""
    out = []
    for c in components:
        if c.type != "service":
            continue
        svc: dict[str, Any] = {"bom-ref": c.bom_ref, "name": c.name}
        endpoint = next((v for n, v in c.properties if n == "aibom.agent.endpoint"), None)
        if endpoint:
            svc["endpoints"] = [endpoint]
        svc["properties"] = [{"name": n, "value": v} for n, v in c.properties]
        out.append(svc)
    return {"services": out} if out else {}


def render(facts: Facts, *, tool_version: str, digest: str | None = None) -> bytes:
    """CycloneDX 1.6 JSON, byte-deterministic (sorted keys, compact, UTF-8).

    `digest`: `input_hash(facts, tool_version=tool_version)` when the caller
    already has it (it names the serial number); computed otherwise.
    """
    doc = document_json(facts, tool_version=tool_version, digest=digest)
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # a string that is not Unicode (a lone surrogate)
        raise ValueError(f"the document cannot be written as JSON: {exc}") from None


def build_document(view: RootView, registry: KindRegistry, *, tool_version: str) -> Document:
    facts = facts_of(view, registry)
    digest = input_hash(facts, tool_version=tool_version)
    return Document(
        json_bytes=render(facts, tool_version=tool_version, digest=digest),
        input_hash=digest,
        images=facts.images,
        digests=facts.digests,
        models=facts.models,
    )


_VALIDATOR: Any = None


def validate(json_bytes: bytes) -> None:
    """Raise ValueError unless the bytes pass cyclonedx-python-lib's strict 1.6 validator."""
    global _VALIDATOR  # noqa: PLW0603 -- the schema is loaded once, on first use
    if _VALIDATOR is None:
        from cyclonedx.schema import SchemaVersion
        from cyclonedx.validation.json import JsonStrictValidator

        _VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)
    try:
        text = json_bytes.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from None
    error = _VALIDATOR.validate_str(text)
    if error is not None:
        raise ValueError(f"CycloneDX 1.6 strict validation failed: {error}")
