"""The upward owner walk (docs/architecture.md), UID-checked at every hop.

The walk is written sans-I/O, like h11: `walk()` is a generator that yields an
`OwnerRequest` for each hop and is sent back a `Fetched` (the owner object, or
the reason it could not be had). The webhook drives it with live async GETs,
the annotator and the offline scan with in-memory lookups (`resolve`); the
logic, and so the stamp, is the same everywhere. Expected outcomes are data:
the walk returns a frozen `WalkResult`, it never raises for them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from enum import StrEnum

from aibom_core.kinds import KindRegistry
from aibom_core.objects import Obj, ObjRef, OwnerRef, controller_ref, hop_of, ref_of

# Worker Pod -> worker StatefulSet -> leader Pod -> leader StatefulSet ->
# LeaderWorkerSet -> DynamoComponentDeployment -> DynamoGraphDeployment is
# exactly 6 hops, the deepest real chain we know (docs/architecture.md); the cap
# counts hops, so 6 must reach.
DEFAULT_MAX_DEPTH = 6
# The most hops a --max-depth may allow (every command and server takes it).
MAX_DEPTH_LIMIT = 64


class Reason(StrEnum):
    """Why a hop failed; the first word of `aibom.dev/rollup-reason`."""

    NOT_FOUND = "NotFound"
    FORBIDDEN = "Forbidden"
    NO_MATCH = "NoMatch"
    UID_MISMATCH = "UIDMismatch"
    DEPTH_EXCEEDED = "DepthExceeded"
    CYCLE = "Cycle"
    TIMEOUT = "Timeout"
    # Provenance: the edge was not followed because nobody proved
    # that whoever set it may control the owner (denied, or no verdict), or
    # because the check itself failed (SubjectAccessReview error or timeout).
    UNPROVEN = "Unproven"
    UNCHECKED = "Unchecked"
    # Provenance: the edge was proven, but added to an existing object (adopted)
    # whose containers are not its owner's template (`aibom_core.provenance`).
    ADOPTED_MISMATCH = "AdoptedMismatch"


UNPROVEN_REASONS = frozenset({Reason.UNPROVEN, Reason.UNCHECKED, Reason.ADOPTED_MISMATCH})


class Rollup(StrEnum):
    """The value of `aibom.dev/rollup`."""

    ROOT = "root"
    ROLLED_UP = "rolled-up"
    UNRESOLVED = "unresolved"
    UNCOVERED = "uncovered"
    UNPROVEN = "unproven"


@dataclass(frozen=True, slots=True)
class OwnerRequest:
    """Fetch this owner of `child` (same namespace: ownerReferences never cross one)."""

    namespace: str
    owner: OwnerRef
    child: ObjRef


@dataclass(frozen=True, slots=True)
class Fetched:
    """The answer to an OwnerRequest: the live object, or why there is none."""

    obj: Obj | None = None
    failure: Reason | None = None

    def __post_init__(self) -> None:
        if (self.obj is None) == (self.failure is None):
            raise ValueError("Fetched needs exactly one of obj and failure")


@dataclass(frozen=True, slots=True)
class HopFailure:
    """The hop that failed: its reason and the owner it tried to reach."""

    reason: Reason
    group: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.reason.value} {hop_of(self.group, self.kind, self.name)}"


@dataclass(frozen=True, slots=True)
class WalkResult:
    """Where the walk went and what it means for the object it started from."""

    subject: ObjRef
    status: Rollup
    root: ObjRef | None
    nearest_tracked: ObjRef | None
    chain: tuple[ObjRef, ...]
    failure: HopFailure | None

    @property
    def hops(self) -> int:
        return len(self.chain)


# The edge-trust input: called with the child object, its ref and
# its controller reference before that edge is followed; None means the edge
# is proven, a reason (`Unproven`, `Unchecked`) that it is refused and not
# followed. No trust input means every edge is trusted (the pre-provenance
# rule). The webhook answers the first hop from a SubjectAccessReview, the
# annotator and the offline scan from `aibom_core.provenance`.
EdgeTrust = Callable[[Obj, ObjRef, OwnerRef], Reason | None]


def _failed(req: OwnerRequest, reason: Reason) -> HopFailure:
    gk = req.owner.group_kind
    return HopFailure(reason=reason, group=gk.group, kind=gk.kind, name=req.owner.name)


def walk(
    obj: Obj,
    *,
    registry: KindRegistry,
    max_depth: int = DEFAULT_MAX_DEPTH,
    namespace: str | None = None,
    trust: EdgeTrust | None = None,
) -> Generator[OwnerRequest, Fetched, WalkResult]:
    """Walk controller ownerReferences up from `obj`; yields one request per hop.

    An object with no controller owner yields nothing (zero requests); nor
    does one whose controller is of a kind the registry does not know (not an
    edge: the object is the top of its chain). An edge `trust` refuses is not
    followed (no request for it either).
    """
    subject = ref_of(obj, namespace=namespace)
    ns = subject.namespace
    chain: list[ObjRef] = []
    # Keyed by UID; the subject may have none yet (CREATE), then by identity.
    seen = {subject.uid or f"\x00{subject.hop}"}
    nearest: ObjRef | None = None
    topmost: ObjRef | None = None
    failure: HopFailure | None = None
    current, current_ref = obj, subject
    while (owner := controller_ref(current)) is not None:
        if not registry.is_known(owner.group_kind):
            # Only kinds of the registry are edges of the roll-up: the
            # provenance guard (`aibom-rollup policy`) proves exactly those,
            # so a reference to any other kind, which nothing proves, ends
            # the chain here as if there were none (docs/provenance-guard.md).
            break
        req = OwnerRequest(namespace=ns, owner=owner, child=current_ref)
        if len(chain) >= max_depth:
            failure = _failed(req, Reason.DEPTH_EXCEEDED)
            break
        if owner.uid in seen:
            failure = _failed(req, Reason.CYCLE)
            break
        if trust is not None and (refused := trust(current, current_ref, owner)) is not None:
            failure = _failed(req, refused)
            break
        got = yield req
        if got.obj is None:
            assert got.failure is not None
            failure = _failed(req, got.failure)
            break
        # resolveControllerRef's rule: right kind and name is not enough, the
        # UID must match, or a lingering child would attach to an owner
        # re-created under the same name.
        fetched_ref = ref_of(got.obj, namespace=ns)
        if fetched_ref.uid != owner.uid or fetched_ref.group_kind != owner.group_kind:
            failure = _failed(req, Reason.UID_MISMATCH)
            break
        seen.add(owner.uid)
        chain.append(fetched_ref)
        if registry.is_tracked(fetched_ref.group_kind):
            topmost = fetched_ref
            nearest = nearest or fetched_ref
        current, current_ref = got.obj, fetched_ref
    return conclude(
        subject, registry=registry, chain=chain, nearest=nearest, topmost=topmost, failure=failure
    )


def conclude(
    subject: ObjRef,
    *,
    registry: KindRegistry,
    chain: list[ObjRef],
    nearest: ObjRef | None,
    topmost: ObjRef | None,
    failure: HopFailure | None,
) -> WalkResult:
    """The result of a walk from `subject` that went through `chain` and stopped.

    `topmost` is the topmost tracked object of the chain; `failure` the hop
    that stopped the walk, if one did.
    """
    tracked_self = registry.is_tracked(subject.group_kind)
    root: ObjRef | None
    if topmost is not None:
        # A failure above a tracked ancestor: that ancestor is itself
        # unresolved and reported as its own root, so we are still covered.
        status, root = Rollup.ROLLED_UP, topmost
    elif failure is not None:
        status = Rollup.UNPROVEN if failure.reason in UNPROVEN_REASONS else Rollup.UNRESOLVED
        root = subject if tracked_self else None
    elif tracked_self:
        status, root = Rollup.ROOT, subject
    else:
        status, root = Rollup.UNCOVERED, None
    return WalkResult(
        subject=subject,
        status=status,
        root=root,
        nearest_tracked=nearest,
        chain=tuple(chain),
        failure=failure,
    )


Lookup = Callable[[OwnerRequest], Fetched]


def resolve(
    obj: Obj,
    *,
    registry: KindRegistry,
    lookup: Lookup,
    max_depth: int = DEFAULT_MAX_DEPTH,
    namespace: str | None = None,
    trust: EdgeTrust | None = None,
) -> WalkResult:
    """Drive `walk` with a synchronous lookup (in-memory: offline scan, annotator)."""
    gen = walk(obj, registry=registry, max_depth=max_depth, namespace=namespace, trust=trust)
    try:
        req = next(gen)
        while True:
            req = gen.send(lookup(req))
    except StopIteration as stop:
        result: WalkResult = stop.value
        return result
