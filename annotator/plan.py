"""What one reconcile must do, decided from the cache alone. Pure.

`plan_root` answers, for a root key: which outcome this is, whether the
document must be (re)rendered and written (the input hash differs from the
one on the cached ConfigMap), and which documents it supersedes. The
controller executes the plan in order: write the root's document first,
and only once that succeeded (or the cached one is already current, so a
document listing the children exists) delete the children's documents. A
crash between the two leaves a child document behind, never a gap; the
next leader's reconcile of the root finds its document current and deletes
the child's.

`plan_sweep` checks every document of one namespace (opt-out, strays) and
`plan_stamp` the four stamp annotations of one object.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aibom_core.bom import RootView, facts_of, input_hash
from aibom_core.document import configmap_name
from aibom_core.kinds import GroupKind, KindRegistry
from aibom_core.objects import Obj, ObjRef, metadata, ref_of
from aibom_core.rollup import root_entry
from aibom_core.stamp import Keys, Stamp, mirror_deployment, stamp_merge_patch, stamp_of
from aibom_core.walk import HopFailure, Reason, Rollup
from annotator.cache import ClusterState
from annotator.configmap import is_current, sources_current
from annotator.keys import RootKey, SweepKey


class Outcome(StrEnum):
    """`aibom_workload_reconcile_outcomes_total{outcome}`; defined in docs/annotator.md."""

    NOT_OPTED_IN = "not_opted_in"
    UNMATCHED = "unmatched"
    MATCHED = "matched"
    ROLLED_UP = "rolled_up"
    ROLLUP_UNRESOLVED = "rollup_unresolved"
    ROLLUP_UNPROVEN = "rollup_unproven"  # its own controller edge is not proven


@dataclass(frozen=True, slots=True, order=True)
class DocRef:
    """One of our ConfigMaps, as cached: enough for a preconditioned delete."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    for_uid: str

    @classmethod
    def of(cls, cm: Obj, *, for_uid: str) -> DocRef:
        meta = metadata(cm)
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            for_uid=for_uid,
        )

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class RootPlan:
    key: RootKey
    outcome: Outcome
    ref: ObjRef | None = None
    api_version: str = ""
    failure: HopFailure | None = None
    cm_name: str = ""
    facts: Any = None
    input_hash: str = ""
    sources_hash: str = ""  # what it was built from ("": not known, e.g. no resourceVersion)
    write: bool = False
    supersedes: tuple[DocRef, ...] = ()  # delete after our document is written
    delete_now: tuple[DocRef, ...] = ()  # the namespace does not opt in
    requeue: RootKey | None = None  # a rolled-up workload: the root covering it
    owned: tuple[ObjRef, ...] = ()
    pods: int = 0


def sources_salt(
    registry: KindRegistry,
    *,
    tool_version: str,
    prefix: str,
    trust_all: bool,
    max_depth: int,
    provenance_key: bytes | None,
) -> str:
    """Everything besides the objects that a document depends on, in a stable text: the
    tool version, the kinds and their resources, the stamp prefix, the provenance rule
    and key, the walk's depth. A change of any of them changes every `sources_hash`."""
    kinds = sorted(
        f"{'T' if registry.is_tracked(gk) else 'W'} {gk.group}/{gk.kind} {registry.resource_of(gk)}"
        for gk in registry.tracked | registry.walk_only
    )
    key = hashlib.sha256(provenance_key).hexdigest() if provenance_key is not None else "-"
    head = f"{tool_version}\n{prefix}\n{trust_all}\n{max_depth}\n{key}\n"
    return hashlib.sha256((head + "\n".join(kinds)).encode()).hexdigest()


def sources_hash(view: RootView, salt: str) -> str:
    """`sha256:<hex>` over the UID and resourceVersion of every object a document reads
    (the root, its tracked members, its Pods), the members listed as unproven, the walk's
    verdict and the namespace's guard, and `salt` (`sources_salt`). "" when an object has
    no resourceVersion (then nothing can be told from it).

    A document is a pure function of these (`aibom_core.bom.facts_of(view, registry)`):
    when a ConfigMap records the same sources hash, its content is what we would write,
    and the facts need not be computed (a restart over 10,000 unchanged roots).
    """
    if not salt:
        return ""
    parts = [salt, view.status, view.reason or "", repr(view.guarded), *view.unproven]
    if view.mismatched:  # only then: every other document's hash stays what it was
        parts += ["adopted-mismatch", *view.mismatched]
    for obj in (view.root, *view.owned, *view.pods):
        meta = metadata(obj)
        rv, uid = meta.get("resourceVersion"), meta.get("uid")
        if not rv or not uid:
            return ""
        parts.append(f"{uid}/{rv}")
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


def plan_root(
    state: ClusterState,
    key: RootKey,
    *,
    generator: str,
    tool_version: str,
    signed_by: str = "",
    salt: str = "",
) -> RootPlan:
    """The plan for one root key (see the module docstring). With `salt` (`sources_salt`),
    a ConfigMap whose recorded sources hash is this root's is current without computing
    its facts."""
    graph = state.graph
    obj = graph.get(key.uid)
    ref = graph.ref(key.uid)
    if obj is None or ref is None or not graph.registry.is_tracked(ref.group_kind):
        return RootPlan(key=key, outcome=Outcome.UNMATCHED)
    api_version = str(obj.get("apiVersion", ""))
    if not state.opted_in(ref.namespace):
        own = tuple(DocRef.of(cm, for_uid=ref.uid) for cm in state.docs_of(ref.uid))
        return RootPlan(
            key=key, outcome=Outcome.NOT_OPTED_IN, ref=ref, api_version=api_version, delete_now=own
        )
    result = graph.resolve(obj)
    if result.status is Rollup.ROLLED_UP:
        assert result.root is not None
        return RootPlan(
            key=key,
            outcome=Outcome.ROLLED_UP,
            ref=ref,
            api_version=api_version,
            requeue=RootKey.of(result.root),
        )
    entry = root_entry(graph, key.uid)
    if entry is None:  # not tracked, or not a root: nothing to document
        return RootPlan(key=key, outcome=Outcome.UNMATCHED, ref=ref)
    # Provenance unchecked (--trust-owner-references): the document says nothing
    # about it, as an offline scan without a key (and renders as the scan does).
    guarded = None if state.trust_all else state.guarded(ref.namespace)
    view = dataclasses.replace(entry.view, guarded=guarded)
    name = configmap_name(ref.kind, ref.name)
    cm = state.configmap(ref.namespace, name)
    sources = sources_hash(view, salt)
    facts: Any = None
    digest = sources_current(
        cm, ref, sources_hash=sources, generator=generator, labels=state.labels, signed_by=signed_by
    )
    current = digest is not None
    if digest is None:
        facts = facts_of(view, graph.registry)
        digest = input_hash(facts, tool_version=tool_version)
        current = is_current(
            cm,
            ref,
            input_hash=digest,
            generator=generator,
            labels=state.labels,
            signed_by=signed_by,
        )
    owned_refs = tuple(ref_of(o) for o in entry.owned)
    # The documents of the workloads it absorbs: ours only (`ClusterState.ours`), so
    # never a ConfigMap someone labelled with such a workload's UID.
    supersedes = [DocRef.of(cm, for_uid=o.uid) for o in owned_refs for cm in state.docs_of(o.uid)]
    return RootPlan(
        key=key,
        outcome=_OUTCOME[entry.status],
        ref=ref,
        api_version=api_version,
        failure=entry.failure,
        cm_name=name,
        facts=facts,
        input_hash=digest,
        sources_hash=sources,
        write=not current,
        supersedes=tuple(sorted(set(supersedes))),
        owned=owned_refs,
        pods=len(entry.pods),
    )


_OUTCOME = {
    Rollup.ROOT: Outcome.MATCHED,
    Rollup.UNRESOLVED: Outcome.ROLLUP_UNRESOLVED,
    Rollup.UNPROVEN: Outcome.ROLLUP_UNPROVEN,
}


@dataclass(frozen=True, slots=True)
class SweepPlan:
    key: SweepKey
    deletes: tuple[DocRef, ...] = ()
    requeue: tuple[RootKey, ...] = ()


def plan_sweep(state: ClusterState, key: SweepKey) -> SweepPlan:
    """Every document of a namespace that should not be there, or whose root must look."""
    ns = key.namespace
    docs = state.docs_in(ns)
    if not state.opted_in(ns):
        deletes = tuple(DocRef.of(cm, for_uid=state.labels.root_uid_of(cm)) for cm in docs)
        return SweepPlan(key=key, deletes=deletes)
    deletes_: list[DocRef] = []
    requeue: set[RootKey] = set()
    for cm in docs:
        uid = state.labels.root_uid_of(cm)
        ref = state.graph.ref(uid) if uid else None
        if ref is None:
            continue  # root gone (the garbage collector's job) or not cached
        root = state.root_key_of(uid)
        if root is None or not state.registry.is_tracked(ref.group_kind):
            # Not a workload we document (a kind no longer tracked).
            deletes_.append(DocRef.of(cm, for_uid=uid))
        elif root.uid != uid:
            # Rolled up: the root's reconcile writes its document first and
            # then removes this one. (A root's own document is its own
            # reconcile's business: every full resync queues every root, and
            # queueing it again here reconciled each root twice.)
            requeue.add(root)
    return SweepPlan(key=key, deletes=tuple(sorted(deletes_)), requeue=tuple(sorted(requeue)))


def _mirrored(
    state: ClusterState, key: str, stamp: Stamp, *, keys: Keys, first_hop: ObjRef | None
) -> Stamp:
    """A ReplicaSet keeps the stamp keys its Deployment carries: the webhook's rule
    (`aibom_core.stamp.mirror_deployment`); judging by another would make the two fight.
    """
    ref = state.graph.ref(key)
    if ref is None:
        return stamp
    parent = state.graph.parent_of(key)
    owner = state.graph.get(parent) if parent else None
    return mirror_deployment(
        stamp, subject=ref.group_kind, owner=owner, keys=keys, first_hop=first_hop
    )


# Hop failures our cache cannot tell from a live GET's answer: we do not see
# the kind (RBAC, CRD), so the webhook may know better; never "repair" those.
_UNKNOWABLE = frozenset({Reason.FORBIDDEN, Reason.NO_MATCH, Reason.TIMEOUT})


@dataclass(frozen=True, slots=True)
class StampPlan:
    key: str
    ref: ObjRef
    patch: dict[str, Any] | None
    skipped: str | None = None  # why we did not judge this object
    stamp: Stamp | None = None  # what the patch makes the stamp (the ledger's unit)


def plan_stamp(
    state: ClusterState,
    key: str,
    *,
    keys: Keys,
    watched: Callable[[GroupKind], bool],
    namespaces: AbstractSet[str] | None,
) -> StampPlan | None:
    """The merge patch that makes an object's stamp true (None: object gone).

    `watched(gk)` says whether the cache of a kind is synced and healthy: a
    NotFound or UID mismatch is only a fact when the owner's kind is
    watched; otherwise the live walk of the webhook may know better and we
    leave the stamp alone. `namespaces`: where repairs are allowed (None:
    everywhere).
    """
    obj = state.graph.get(key)
    ref = state.graph.ref(key)
    if obj is None or ref is None:
        return None
    if namespaces is not None and ref.namespace not in namespaces:
        return StampPlan(key=key, ref=ref, patch=None, skipped="namespace")
    if metadata(obj).get("deletionTimestamp"):
        return StampPlan(key=key, ref=ref, patch=None, skipped="terminating")
    if not watched(ref.group_kind):
        return StampPlan(key=key, ref=ref, patch=None, skipped="unwatched")
    result = state.graph.resolve(obj)
    failure = result.failure
    if failure is not None and (
        failure.reason in _UNKNOWABLE or not watched(GroupKind(failure.group, failure.kind))
    ):
        return StampPlan(key=key, ref=ref, patch=None, skipped="unknowable")
    first_hop = result.chain[0] if result.chain else None
    stamp = _mirrored(state, key, stamp_of(result), keys=keys, first_hop=first_hop)
    patch = stamp_merge_patch(obj, stamp, keys=keys)
    if patch is None:
        return StampPlan(key=key, ref=ref, patch=None)
    meta = metadata(obj)
    # Preconditions: the UID (never patch a namesake re-created meanwhile) and
    # the resourceVersion (if the object changed since we looked, e.g. the
    # webhook stamped it, we get 409 and judge again from the fresh cache).
    patch["metadata"]["uid"] = meta.get("uid")
    patch["metadata"]["resourceVersion"] = meta.get("resourceVersion")
    return StampPlan(key=key, ref=ref, patch=patch, stamp=stamp)
