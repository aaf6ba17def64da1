"""The webhook's half of ownership provenance: who may set an edge.

For an object's own controller edge, the webhook asks the API server, with a
SubjectAccessReview built from the admission request's `userInfo` (username,
uid, groups, extra), whether that identity may `update` the owner's
`finalizers` subresource (group of the reference's apiVersion, the owner
kind's plural resource, the child's namespace, the reference's name): the
check OwnerReferencesPermissionEnforcement applies to `blockOwnerDeletion`;
and, when that is denied, whether it may `update` the owner itself (an
operator that manages the owner: Grove grants no `*/finalizers`). Either
proves the edge, as in the guard's policy (`aibom_core.guard`); a tenant who
may only create Pods has neither.

- Verdicts are cached per (identity, owner group/resource/namespace/name) for
  a short TTL (`SarCache`; 0 turns it off): a ReplicaSet controller creating
  50 Pods asks once. Concurrent checks of the same key share one request.
  Errors are never cached.
- An error or timeout of the review is `error`: the edge is not proven (the
  stamp says `Unchecked`), admission is never denied or held past the walk's
  deadline.
- Deeper hops: an owner's own edge counts when its `edge-proof` verifies, in
  every namespace. A guarded namespace proves no edge by itself: the guard
  leaves no record of what it checked, and an edge admitted before the
  namespace was guarded was never checked (`aibom_core.provenance`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from aibom_core.objects import (
    Obj,
    ObjRef,
    OwnerRef,
    annotations_of,
    controller_ref,
    hop_of,
    metadata,
    ref_of,
)
from aibom_core.provenance import (
    TEMPLATE_CHILDREN,
    Containers,
    Origin,
    check_proof,
    created_at,
    edge_reason,
    matches_template,
    origin_of,
    pod_containers,
    proof_for,
    read_proof,
)
from aibom_core.stamp import Keys
from aibom_core.walk import UNPROVEN_REASONS, EdgeTrust, Fetched, Reason
from aibom_edge.kube import Kube, KubeError

DEFAULT_SAR_TTL = 10.0
DEFAULT_SAR_SIZE = 10_000


class Verdict(StrEnum):
    """`aibom_webhook_provenance_checks_total{result}`."""

    ALLOWED = "allowed"
    DENIED = "denied"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class UserInfo:
    """`request.userInfo` of an AdmissionReview (authentication.k8s.io/v1 UserInfo)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, raw: object) -> UserInfo | None:
        """None when the review carries no usable identity (nothing can be proven then)."""
        if not isinstance(raw, Mapping):
            return None
        name = raw.get("username")
        if not isinstance(name, str) or not name:
            return None
        groups = raw.get("groups")
        extra = raw.get("extra")
        return cls(
            username=name,
            uid=str(raw.get("uid") or ""),
            groups=tuple(g for g in groups if isinstance(g, str))
            if isinstance(groups, list)
            else (),
            extra=tuple(
                sorted(
                    (str(k), tuple(str(x) for x in v))
                    for k, v in extra.items()
                    if isinstance(v, list)
                )
            )
            if isinstance(extra, Mapping)
            else (),
        )


@dataclass(frozen=True, slots=True)
class FinalizersAttributes:
    """`update` on `<group>/<resource>/finalizers` of `namespace/name` (or, with
    `subresource=""`, on the owner itself)."""

    group: str
    resource: str
    namespace: str
    name: str
    subresource: str = "finalizers"


#: What proves an edge, in the order asked: the owner's finalizers, then the owner.
PROVING_SUBRESOURCES = ("finalizers", "")


def review_body(user: UserInfo, attrs: FinalizersAttributes) -> dict[str, Any]:
    """The SubjectAccessReview (authorization.k8s.io/v1) the webhook POSTs."""
    resource = {
        "verb": "update",
        "group": attrs.group,
        "resource": attrs.resource,
        "subresource": attrs.subresource,
        "namespace": attrs.namespace,
        "name": attrs.name,
    }
    if not attrs.subresource:
        del resource["subresource"]
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "resourceAttributes": resource,
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class AccessReviewer(Protocol):
    """Where verdicts come from (`ApiReviewer` in production)."""

    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        """The owner kind's plural resource (None: the server does not serve it)."""
        ...

    async def access_review(self, body: dict[str, Any], *, timeout: float) -> bool:
        """POST the review; its `status.allowed`. Raises on errors and timeouts."""
        ...


SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ApiReviewer:
    """The API server's answers: the owner kind's resource from discovery, the verdict
    from a SubjectAccessReview (the webhook's own queries; the shared client only sends them)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        res = await self._kube.discovery.resource(owner.group_kind)
        return res.plural if res is not None else None

    async def access_review(self, body: dict[str, Any], *, timeout: float) -> bool:
        """POST a SubjectAccessReview; `status.allowed`. KubeError on a non-201 answer."""
        path = SUBJECT_ACCESS_REVIEWS
        resp = await self._kube.request("POST", path, json=body, timeout=timeout)
        if resp.status not in (200, 201) or not isinstance(resp.body, dict):
            raise KubeError(f"POST {path}: HTTP {resp.status}")
        status = resp.body.get("status")
        return isinstance(status, dict) and status.get("allowed") is True


# (identity, owner group, owner kind, namespace, name): the kind stands for its
# resource (one to one), so a hit needs no discovery lookup.
CacheKey = tuple[UserInfo, str, str, str, str]


class SarCache:
    """Verdicts (allowed or denied) per (identity, owner), each for at most `ttl` seconds."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_SAR_TTL,
        size: int = DEFAULT_SAR_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[CacheKey, tuple[float, bool]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> bool | None:
        if self.ttl <= 0:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, allowed = entry
        if self._clock() - stored_at >= self.ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return allowed

    def put(self, key: CacheKey, allowed: bool) -> None:
        if self.ttl <= 0:
            return
        self._entries[key] = (self._clock(), allowed)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    cached: bool  # answered from the cache
    detail: str = ""  # why, for an error


class EdgeChecker:
    """`await checker.check(user, namespace, owner)`: may `user` set this controller edge?"""

    def __init__(self, reviewer: AccessReviewer, *, cache: SarCache | None = None) -> None:
        self._reviewer = reviewer
        self.cache = cache if cache is not None else SarCache()
        self._in_flight: dict[CacheKey, asyncio.Future[bool]] = {}

    async def check(
        self, user: UserInfo | None, namespace: str, owner: OwnerRef, *, timeout: float
    ) -> Check:
        if user is None:
            return Check(Verdict.DENIED, cached=False, detail="no userInfo in the review")
        gk = owner.group_kind
        key = (user, gk.group, gk.kind, namespace, owner.name)
        hit = self.cache.get(key)
        if hit is not None:  # the fast path: no await, no timer
            return Check(Verdict.ALLOWED if hit else Verdict.DENIED, cached=True)
        if timeout <= 0:
            return Check(Verdict.ERROR, cached=False, detail="no time left")
        try:
            async with asyncio.timeout(timeout):
                resource = await self._reviewer.finalizers_resource(owner)
        except Exception as exc:  # discovery failed or timed out
            return Check(Verdict.ERROR, cached=False, detail=_what(exc))
        if resource is None:
            # OwnerReferencesPermissionEnforcement refuses an owner it cannot
            # map to a resource; so do we.
            return Check(Verdict.DENIED, cached=False, detail="owner kind not served")
        attrs = FinalizersAttributes(
            group=gk.group, resource=resource, namespace=namespace, name=owner.name
        )
        flight = self._in_flight.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._review(key, user, attrs, timeout))
            flight.add_done_callback(_retrieve)
            self._in_flight[key] = flight
        try:
            allowed = await asyncio.wait_for(asyncio.shield(flight), timeout)
        except Exception as exc:
            return Check(Verdict.ERROR, cached=False, detail=_what(exc))
        return Check(Verdict.ALLOWED if allowed else Verdict.DENIED, cached=False)

    async def _review(
        self, key: CacheKey, user: UserInfo, attrs: FinalizersAttributes, timeout: float
    ) -> bool:
        """Allowed when the identity may update the owner's finalizers or, failing
        that, the owner itself (a second review only after a denial)."""
        try:
            async with asyncio.timeout(timeout):
                for subresource in PROVING_SUBRESOURCES:
                    body = review_body(user, dataclasses.replace(attrs, subresource=subresource))
                    if await self._reviewer.access_review(body, timeout=timeout):
                        self.cache.put(key, True)
                        return True
            self.cache.put(key, False)
            return False
        finally:
            self._in_flight.pop(key, None)


def _what(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _retrieve(flight: asyncio.Future[bool]) -> None:
    if not flight.cancelled():
        flight.exception()


# -- the decision for one admission ---------------------------------------------------------

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's names.SimpleNameGenerator
_MAX_GENERATE_PREFIX = 58  # 63 - 5 random characters


def generated_name(prefix: str) -> str:
    """A name the way the API server generates one from `generateName`."""
    import secrets

    return prefix[:_MAX_GENERATE_PREFIX] + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


class Adoption(StrEnum):
    """`aibom_webhook_adoptions_total{result}`: an edge added to an existing object."""

    MATCHING = "matching"  # the object runs its owner's template (or it has none)
    MISMATCH = "mismatch"  # it does not: proven, never absorbed
    ERROR = "error"  # the owner could not be read: unchecked


class TemplateOwners(Protocol):
    """Where an adopting owner's Pod template is read (`aibom_edge.kube.Kube`)."""

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched:
        """The owner whole (its spec: the template), or why not."""
        ...


@dataclass(frozen=True, slots=True)
class EdgeDecision:
    """What the webhook decided about the object's own controller edge.

    `first`: None when the edge is proven, else why not (`Unproven`, `Unchecked`,
    `AdoptedMismatch`).
    `proof`: the `edge-proof` value the object must carry (None: none).
    `name`: a name to assign (CREATE with generateName and a proof to write: the
    proof binds the object's name, which the API server would only pick later).
    `trust`: the walk's edge-trust input (first hop from `first`, deeper hops
    from the owners' proofs).
    """

    first: Reason | None
    proof: str | None
    name: str | None
    trust: EdgeTrust | None
    check: Check | None  # the review's outcome (None: no check was made)
    kept: bool = False  # UPDATE keeping the controller reference: not re-checked
    adoption: Adoption | None = None  # an edge added on UPDATE: was it the template?


class Provenance:
    """Decides `EdgeDecision`s: the SubjectAccessReview for the object's own edge (and,
    for an adoption, its owner's template), proofs for the hops above it."""

    def __init__(
        self,
        checker: EdgeChecker,
        *,
        key: bytes | None,
        keys: Keys,
        check_budget: float,
        owners: TemplateOwners | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.checker = checker
        self.key = key
        self.keys = keys
        self.check_budget = check_budget
        # None: adoptions are not compared with a template (unit tests of the rest).
        self.owners = owners
        # The second a proof written at a CREATE binds (aibom_core.provenance).
        self.wall = wall

    async def decide(
        self,
        obj: Obj,
        *,
        operation: str,
        old_obj: Obj | None,
        namespace: str,
        user_info: object,
        remaining: float,
    ) -> EdgeDecision | None:
        """None when the object has no controller reference (nothing to prove)."""
        owner = controller_ref(obj)
        if owner is None:
            return None
        child = ref_of(obj, namespace=namespace)
        if operation == "CREATE":
            # Whatever UID the request carries, the API server assigns another after
            # admission: a proof written now binds the object's creation instead.
            child = dataclasses.replace(child, uid="")
        old_owner = controller_ref(old_obj) if old_obj is not None else None
        budget = min(self.check_budget, remaining)
        user = UserInfo.parse(user_info)
        check: Check | None = None
        adoption: Adoption | None = None
        origin: Origin | None = None
        proof: str | None = None  # a proof kept as it is
        kept = operation == "UPDATE" and old_obj is not None and _same_edge(old_owner, owner)
        if kept:
            assert old_obj is not None
            first, origin, proof = self._carried(old_obj, namespace, owner)
            if first is None and pod_containers(obj) != pod_containers(old_obj):
                # A Pod's image changed under a kept edge: its content is now the
                # updater's, checked as a new edge would be.
                check = await self.checker.check(user, namespace, owner, timeout=budget)
                first, origin, proof = _VERDICT[check.verdict], Origin.CONTROLLED, None
        else:
            check = await self.checker.check(user, namespace, owner, timeout=budget)
            first = _VERDICT[check.verdict]
            origin = Origin.CONTROLLED
            if first is None and operation == "UPDATE":
                # Added to an object that already existed: an adoption. Its content
                # is whoever created it's, not the controller's.
                adoption = await self._adoption(obj, namespace, owner, budget)
                origin = _ADOPTED.get(adoption)
                first = None if origin is not None else Reason.UNCHECKED
        if first is None and origin is Origin.MISMATCH:
            first = Reason.ADOPTED_MISMATCH
        name: str | None = None
        proven = first is None or first is Reason.ADOPTED_MISMATCH
        if proven and origin is not None and self.key is not None and proof is None:
            meta = metadata(obj)
            if not meta.get("name"):
                prefix = meta.get("generateName")
                name = generated_name(prefix) if isinstance(prefix, str) and prefix else None
                child = dataclasses.replace(child, name=name or "")
            if child.name:
                proof = proof_for(self.key, obj, owner, origin=origin, now=self.wall(), ref=child)
        if not proven:
            proof = None
        trust = _Trust(obj, first, self.key, self.keys)
        return EdgeDecision(
            first=first,
            proof=proof,
            name=name,
            trust=trust,
            check=check,
            kept=kept,
            adoption=adoption,
        )

    async def _adoption(
        self, obj: Obj, namespace: str, owner: OwnerRef, timeout: float
    ) -> Adoption:
        """Whether an adopted object runs its owner's template (its Pod template read
        whole, with the walk's UID check): `aibom_core.provenance.matches_template`."""
        if self.owners is None or owner.group_kind not in TEMPLATE_CHILDREN:
            return Adoption.MATCHING  # nothing to compare with
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                got = await self.owners.get_owner(namespace, owner, timeout=timeout)
        except (TimeoutError, KubeError):
            return Adoption.ERROR
        found = got.obj
        if found is None or metadata(found).get("uid") != owner.uid:
            return Adoption.ERROR
        match = matches_template(obj, found)
        return Adoption.MISMATCH if match is False else Adoption.MATCHING

    def _carried(
        self, old_obj: Obj, namespace: str, owner: OwnerRef
    ) -> tuple[Reason | None, Origin | None, str | None]:
        """The verdict oldObject carries (an UPDATE that keeps the edge is not
        re-checked): (reason, origin, the proof to keep)."""
        if self.key is not None:
            old_ref = ref_of(old_obj, namespace=namespace)
            value = read_proof(old_obj, old_ref, owner, keys=self.keys)
            origin = origin_of(self.key, value, old_obj, owner, ref=old_ref)
            if origin is None:
                return Reason.UNPROVEN, None, None
            return edge_reason(origin), origin, value
        # No key: the stamp the webhook gave at admission is the only record
        # (a stamp written while the webhook was down is taken at its word:
        # run with a key). `unproven` whose reason names a hop above this edge
        # (`Unproven <group>/<Kind>/<name>` of another owner) leaves this edge
        # proven, as its proof would with a key.
        ann = annotations_of(old_obj)
        rollup = ann.get(self.keys.rollup)
        if rollup is None:
            return Reason.UNPROVEN, None, None
        if rollup != "unproven":
            return None, Origin.CONTROLLED, None
        word, _, hop = ann.get(self.keys.reason, "").partition(" ")
        gk = owner.group_kind
        above = word in UNPROVEN_REASONS and hop not in ("", hop_of(gk.group, gk.kind, owner.name))
        if above:
            return None, Origin.CONTROLLED, None
        if word == Reason.ADOPTED_MISMATCH.value:
            return Reason.ADOPTED_MISMATCH, Origin.MISMATCH, None
        return Reason.UNPROVEN, None, None


_VERDICT = {
    Verdict.ALLOWED: None,
    Verdict.DENIED: Reason.UNPROVEN,
    Verdict.ERROR: Reason.UNCHECKED,
}
_ADOPTED = {Adoption.MATCHING: Origin.ADOPTED, Adoption.MISMATCH: Origin.MISMATCH}


def _same_edge(old: OwnerRef | None, new: OwnerRef) -> bool:
    return (
        old is not None
        and old.uid == new.uid
        and old.name == new.name
        and old.group_kind == new.group_kind
    )


class _Trust:
    """The walk's edge-trust input for one admission."""

    __slots__ = ("_first", "_key", "_keys", "_obj")

    def __init__(self, obj: Obj, first: Reason | None, key: bytes | None, keys: Keys) -> None:
        self._obj = obj
        self._first = first
        self._key = key
        self._keys = keys

    def __call__(self, child: Obj, ref: ObjRef, owner: OwnerRef) -> Reason | None:
        if child is self._obj:
            return self._first
        value = read_proof(child, ref, owner, keys=self._keys)
        if self._key is None or value is None:
            return Reason.UNPROVEN
        origin = _origin(
            self._key,
            value,
            ref,
            owner,
            created=created_at(child),
            containers=pod_containers(child),
        )
        return edge_reason(origin)


@functools.lru_cache(maxsize=4096)
def _origin(
    key: bytes,
    value: str,
    ref: ObjRef,
    owner: OwnerRef,
    *,
    created: float | None,
    containers: Containers | None,
) -> Origin | None:
    """`check_proof`, memoised: the owners above a Pod are the same objects admission
    after admission (the owner cache), and a verdict is a pure function of what it
    reads of them (identity, creation, containers)."""
    return check_proof(key, value, ref, owner, created=created, containers=containers)
