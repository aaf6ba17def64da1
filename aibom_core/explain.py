"""Explaining one object's walk hop by hop, and its stamp against the one it carries. Pure.

`kubectl aibom explain` answers "why is this Pod unresolved?" with the very
walk the webhook runs (`aibom_core.walk.walk`), not a second one: `traced`
wraps that generator and records every request it made and the answer it got,
and `explanation` turns the record into hops, the stamp the webhook would
give now (`stamp_of` + the ReplicaSet mirror rule), and the differences with
the stamp the object carries. The caller drives the generator: live (async
GETs) or over a dump (`OwnershipGraph.lookup`), with the same result.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from aibom_core.kinds import KindRegistry
from aibom_core.objects import Obj, ObjRef, ref_of
from aibom_core.stamp import Keys, Stamp, mirror_deployment, read_stamp, stamp_of
from aibom_core.walk import DEFAULT_MAX_DEPTH, Fetched, OwnerRequest, Reason, WalkResult, walk

Answered = tuple[OwnerRequest, Fetched]


def traced(
    obj: Obj,
    *,
    registry: KindRegistry,
    max_depth: int = DEFAULT_MAX_DEPTH,
    namespace: str | None = None,
) -> Generator[OwnerRequest, Fetched, tuple[WalkResult, list[Answered]]]:
    """`walk`, recording each (request, answer); returns the result and the record."""
    record: list[Answered] = []
    gen = walk(obj, registry=registry, max_depth=max_depth, namespace=namespace)
    try:
        req = next(gen)
        while True:
            got = yield req
            record.append((req, got))
            req = gen.send(got)
    except StopIteration as stop:
        return stop.value, record


@dataclass(frozen=True, slots=True)
class Hop:
    """One controller ownerReference the walk followed, or stopped at."""

    child: ObjRef
    group: str  # the owner's API group ("" for core)
    kind: str
    name: str
    ref_uid: str  # the UID the reference names ("" when the walk stopped before asking)
    found_uid: str | None  # the UID a GET by name found (None: nothing fetched)
    verdict: str  # "ok", or the Reason that stopped the walk here
    tracked: bool  # the owner's kind gets its own AIBOM

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


@dataclass(frozen=True, slots=True)
class Explanation:
    subject: ObjRef
    hops: tuple[Hop, ...]
    result: WalkResult
    expected: Stamp  # what the webhook would stamp now
    carried: Stamp | None  # what the object carries (None: no stamp)
    mirrored_from: str | None  # `Deployment/x` when the expected stamp mirrors it
    differences: tuple[str, ...]  # human sentences; empty when the stamps agree

    @property
    def agrees(self) -> bool:
        return not self.differences


def explanation(
    obj: Obj,
    *,
    registry: KindRegistry,
    keys: Keys,
    result: WalkResult,
    record: list[Answered],
) -> Explanation:
    """The hops of a traced walk, the stamp it gives and how it compares to the carried one."""
    hops = [_hop(req, got, registry) for req, got in record]
    if result.failure is not None and (not hops or hops[-1].ok):
        # The walk stopped before asking (depth cap, cycle): no GET was made.
        f = result.failure
        hops.append(
            Hop(
                child=result.chain[-1] if result.chain else result.subject,
                group=f.group,
                kind=f.kind,
                name=f.name,
                ref_uid="",
                found_uid=None,
                verdict=f.reason.value,
                tracked=False,
            )
        )
    first_owner = record[0][1].obj if record and hops and hops[0].ok else None
    own = stamp_of(result)
    expected = mirror_deployment(
        own,
        subject=result.subject.group_kind,
        owner=first_owner,
        keys=keys,
        first_hop=result.chain[0] if result.chain else None,
    )
    mirrored_from = None
    if expected != own and first_owner is not None:
        mirrored_from = ref_of(first_owner).kind_name
    carried = read_stamp(obj, keys=keys)
    return Explanation(
        subject=result.subject,
        hops=tuple(hops),
        result=result,
        expected=expected,
        carried=carried,
        mirrored_from=mirrored_from,
        differences=tuple(_differences(expected, carried, keys)),
    )


def _hop(req: OwnerRequest, got: Fetched, registry: KindRegistry) -> Hop:
    gk = req.owner.group_kind
    found = ref_of(got.obj, namespace=req.namespace) if got.obj is not None else None
    if got.failure is not None:
        verdict = got.failure.value
    elif found is None or found.uid != req.owner.uid or found.group_kind != gk:
        verdict = Reason.UID_MISMATCH.value  # the walk's own check, restated for display
    else:
        verdict = "ok"
    return Hop(
        child=req.child,
        group=gk.group,
        kind=gk.kind,
        name=req.owner.name,
        ref_uid=req.owner.uid,
        found_uid=found.uid if found else None,
        verdict=verdict,
        tracked=registry.is_tracked(gk),
    )


def _differences(expected: Stamp, carried: Stamp | None, keys: Keys) -> list[str]:
    if carried is None:
        return [
            f"the object carries no {keys.rollup} stamp (admitted while the webhook was "
            "down or before it was installed, or its namespace is not opted in); the "
            "annotator stamps it if its namespace is opted in"
        ]
    out = []
    for key, want, have in (
        (keys.rollup, expected.rollup, carried.rollup),
        (keys.root, expected.root, carried.root),
        (keys.root_uid, expected.root_uid, carried.root_uid),
        (keys.reason, expected.reason, carried.reason),
    ):
        if want != have:
            out.append(f"{key}: carries {_show(have)}, the walk now gives {_show(want)}")
    return out


def _show(value: str | None) -> str:
    return "nothing" if value is None else repr(value)
