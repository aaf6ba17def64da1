"""Roots and what each one absorbs: the inventory the documents are made from. Pure.

A root is a tracked object whose own walk says `root` or `unresolved` (a
tracked object whose walk failed before any tracked ancestor is reported as
its own root; docs/architecture.md, The owner walk). Its members are the
tracked descendants and Pods whose own walk ends at it
(`OwnershipGraph.members`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aibom_core.bom import RootView
from aibom_core.document import configmap_name
from aibom_core.graph import OwnershipGraph, key_of, refused_here
from aibom_core.kinds import POD
from aibom_core.objects import Obj, ObjRef, ref_of
from aibom_core.walk import HopFailure, Reason, Rollup, WalkResult


@dataclass(frozen=True, slots=True)
class RootEntry:
    """One root and what its document covers."""

    ref: ObjRef
    obj: Obj
    status: Rollup  # ROOT, UNRESOLVED or UNPROVEN
    failure: HopFailure | None
    owned: tuple[Obj, ...]  # tracked descendants, sorted by kind then name
    pods: tuple[Obj, ...]  # Pods attributed through the UID-checked chain
    # Objects whose controller edge to a member is not proven:
    # listed, never absorbed.
    unproven: tuple[Obj, ...] = ()
    # Objects adopted by a member (a proven edge) that do not run its Pod template:
    # listed apart, never absorbed.
    mismatched: tuple[Obj, ...] = ()

    @property
    def reason(self) -> str | None:
        return str(self.failure) if self.failure else None

    @property
    def view(self) -> RootView:
        """What the AIBOM builder reads (`aibom_core.bom.facts_of`)."""
        return RootView(
            root=self.obj,
            status=self.status.value,
            reason=self.reason,
            owned=self.owned,
            pods=self.pods,
            unproven=tuple(ref_of(o).kind_name for o in self.unproven),
            mismatched=tuple(ref_of(o).kind_name for o in self.mismatched),
        )

    @property
    def configmap_name(self) -> str:
        return configmap_name(self.ref.kind, self.ref.name)


def root_entry(graph: OwnershipGraph, key: str) -> RootEntry | None:
    """The entry for `key` if it is a root now, else None."""
    obj = graph.get(key)
    ref = graph.ref(key)
    if obj is None or ref is None or not graph.registry.is_tracked(ref.group_kind):
        return None
    result = graph.resolve(obj)
    if result.status not in _ROOTISH:
        return None
    owned, pods, refused = graph.members_and_unproven(key)
    reasons = {k: graph.resolve_key(k) for k in refused}
    unproven, mismatched = _split(refused, reasons)
    return RootEntry(
        ref=ref,
        obj=obj,
        status=result.status,
        failure=result.failure,
        owned=tuple(graph.get(k) or {} for k in owned),
        pods=tuple(graph.get(k) or {} for k in pods),
        unproven=tuple(graph.get(k) or {} for k in unproven),
        mismatched=tuple(graph.get(k) or {} for k in mismatched),
    )


def _split(
    refused: list[str], results: Mapping[str, WalkResult | None]
) -> tuple[list[str], list[str]]:
    """Objects whose own edge was refused: (not proven, adopted not matching)."""
    unproven: list[str] = []
    mismatched: list[str] = []
    for k in refused:
        result = results.get(k)
        failure = result.failure if result is not None else None
        mismatch = failure is not None and failure.reason is Reason.ADOPTED_MISMATCH
        (mismatched if mismatch else unproven).append(k)
    return unproven, mismatched


def inventory(graph: OwnershipGraph, *, namespaces: Iterable[str] | None = None) -> list[RootEntry]:
    """Every root of the graph (optionally of some namespaces), in a stable order.

    One pass over all objects (`resolve_all`), with the same members as
    `root_entry` gives each root (the annotator's incremental path).
    """
    wanted = set(namespaces) if namespaces is not None else None
    results = graph.resolve_all()
    # root uid -> key, owned, pods, unproven
    roots: dict[str, tuple[str, list[ObjRef], list[ObjRef], list[ObjRef]]] = {}
    for key, result in results.items():
        ref = result.subject
        if wanted is not None and ref.namespace not in wanted:
            continue
        if graph.registry.is_tracked(ref.group_kind) and result.status in _ROOTISH:
            roots.setdefault(ref.uid or key, (key, [], [], []))
    for key, result in results.items():
        ref = result.subject
        if refused_here(result):
            parent = graph.parent_of(key)
            presult = results.get(parent) if parent else None
            if presult is not None:
                # The parent is a root itself, or the member of one.
                is_root = presult.status in _ROOTISH and graph.registry.is_tracked(
                    presult.subject.group_kind
                )
                puid = presult.subject.uid if is_root else None
                if presult.status is Rollup.ROLLED_UP and presult.root is not None:
                    puid = presult.root.uid
                if puid and (bucket := roots.get(puid)) is not None:
                    bucket[3].append(ref)
        if result.status is not Rollup.ROLLED_UP or result.root is None:
            continue
        bucket = roots.get(result.root.uid)
        if bucket is None:
            continue
        if ref.group_kind == POD:
            bucket[2].append(ref)
        elif graph.registry.is_tracked(ref.group_kind):
            bucket[1].append(ref)
    entries = []
    for key, owned, pods, refused in roots.values():
        result = results[key]
        keys_ = [key_of(r) for r in refused]
        _, mismatched = _split(keys_, {k: results.get(k) for k in keys_})
        apart = set(mismatched)
        entries.append(
            RootEntry(
                ref=result.subject,
                obj=graph.get(key) or {},
                status=result.status,
                failure=result.failure,
                owned=_objs(graph, owned),
                pods=_objs(graph, pods),
                unproven=_objs(graph, [r for r in refused if key_of(r) not in apart]),
                mismatched=_objs(graph, [r for r in refused if key_of(r) in apart]),
            )
        )
    entries.sort(key=lambda e: (e.ref.namespace, e.ref.kind, e.ref.name, e.ref.uid))
    return entries


_ROOTISH = (Rollup.ROOT, Rollup.UNRESOLVED, Rollup.UNPROVEN)


def _objs(graph: OwnershipGraph, refs: list[ObjRef]) -> tuple[Obj, ...]:
    refs.sort(key=lambda r: (r.kind, r.name, r.group, r.uid))
    return tuple(graph.get(key_of(r)) or {} for r in refs)
