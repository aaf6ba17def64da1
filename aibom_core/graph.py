"""The in-memory ownership graph of a set of objects (docs/architecture.md). Pure.

One index serves the offline scan (built once from a dump) and the annotator
(kept current from watch events with `upsert` / `remove`):

- objects by key (their UID; a synthetic key for manifests that have none);
- objects by (namespace, group, kind, name), which is what a live GET reads,
  so the in-memory `lookup` behaves exactly like the webhook's API lookup and
  the walk's UID check decides, as it does live;
- controller claims by owner UID: "child C says owner U controls it". A claim
  is an edge only while an object with that UID exists *and* has the group,
  kind and name the reference names. An owner deleted and re-created under
  the same name gets a new UID, so the stale child's claim is no edge and it
  is never adopted.

Pods are nodes like any other: an LWS leader Pod controller-owns its worker
StatefulSet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from aibom_core.kinds import POD, GroupKind, KindRegistry
from aibom_core.objects import Obj, ObjRef, OwnerRef, controller_ref, ref_of
from aibom_core.walk import (
    DEFAULT_MAX_DEPTH,
    UNPROVEN_REASONS,
    EdgeTrust,
    Fetched,
    OwnerRequest,
    Reason,
    Rollup,
    WalkResult,
    conclude,
    resolve,
)

Scope = tuple[str, str, str]  # namespace, group, kind


def key_of(ref: ObjRef) -> str:
    """The graph key of an object: its UID, or a synthetic key when it has none."""
    return ref.uid or f"\x00{ref.namespace}/{ref.hop}"


@dataclass(frozen=True, slots=True)
class _Node:
    obj: Obj
    ref: ObjRef
    owner: OwnerRef | None
    # Where a GET of the owner would look: (namespace, group, kind) and `owner.name`.
    # Siblings share their owner reference and this tuple (`OwnershipGraph.upsert`).
    owner_at: Scope | None


class OwnershipGraph:
    """Objects indexed for the upward walk and the descendant closure.

    `unavailable` maps kinds the reader cannot see to the reason a live GET
    would fail with (`Forbidden` when RBAC denies them, `NoMatch` when the
    server does not serve them); a lookup of such a kind fails that way even
    when no object of it is known. Any other absent owner is `NotFound`.

    `trust` is the edge-trust input of every walk (docs/provenance-guard.md; None: every edge
    counts). Edges stay structural (`parent_of`, `children_of`,
    `descendants`); a refused edge only changes the walk results, so a child
    whose edge is refused is never a member of its owner's root.
    """

    def __init__(
        self,
        registry: KindRegistry,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        unavailable: Mapping[GroupKind, Reason] | None = None,
        trust: EdgeTrust | None = None,
    ) -> None:
        self.registry = registry
        self.max_depth = max_depth
        self.trust = trust
        self.unavailable: dict[GroupKind, Reason] = dict(unavailable or {})
        self._nodes: dict[str, _Node] = {}
        # (namespace, group, kind) -> name -> key: one scope tuple per kind and namespace,
        # not one 4-tuple per object (100,000 Pods: 7 MB).
        self._by_name: dict[Scope, dict[str, str]] = {}
        self._claims: dict[str, set[str]] = {}

    # -- maintenance ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def get(self, key: str) -> Obj | None:
        node = self._nodes.get(key)
        return node.obj if node else None

    def ref(self, key: str) -> ObjRef | None:
        node = self._nodes.get(key)
        return node.ref if node else None

    def objects(self) -> Iterator[Obj]:
        return (node.obj for node in self._nodes.values())

    def keys(self) -> Iterator[str]:
        return iter(self._nodes)

    def upsert(self, obj: Obj, ref: ObjRef | None = None) -> str:
        """Add or replace an object; returns its key. `ref`: `ref_of(obj)`, if the caller has it."""
        if ref is None:
            ref = ref_of(obj)
        key = key_of(ref)
        if key in self._nodes:
            self._unlink(key)
        owner = controller_ref(obj)
        owner_at = None
        if owner is not None:
            sibling = self._sibling(owner.uid)
            if (
                sibling is not None
                and sibling.owner == owner
                and sibling.ref.namespace == ref.namespace
            ):
                # Pods of one ReplicaSet: one OwnerRef and one scope tuple for all of them.
                owner, owner_at = sibling.owner, sibling.owner_at
            else:
                gk = owner.group_kind
                owner_at = (ref.namespace, gk.group, gk.kind)
        self._nodes[key] = _Node(obj=obj, ref=ref, owner=owner, owner_at=owner_at)
        scope = (ref.namespace, ref.group, ref.kind)
        names = self._by_name.get(scope)
        if names is None:
            names = self._by_name[scope] = {}
        names[ref.name] = key
        if owner is not None and owner.uid:
            self._claims.setdefault(owner.uid, set()).add(key)
        return key

    def _sibling(self, owner_uid: str) -> _Node | None:
        """Any object that already claims this owner UID."""
        claims = self._claims.get(owner_uid) if owner_uid else None
        for key in claims or ():
            return self._nodes.get(key)
        return None

    def _named(self, scope: Scope, name: str) -> str | None:
        names = self._by_name.get(scope)
        return names.get(name) if names is not None else None

    def remove(self, key: str) -> Obj | None:
        """Forget an object; returns it if it was known."""
        node = self._nodes.get(key)
        if node is None:
            return None
        self._unlink(key)
        return node.obj

    def _unlink(self, key: str) -> None:
        node = self._nodes.pop(key)
        scope = (node.ref.namespace, node.ref.group, node.ref.kind)
        names = self._by_name.get(scope)
        if names is not None and names.get(node.ref.name) == key:
            del names[node.ref.name]
            if not names:
                del self._by_name[scope]
        if node.owner is not None and node.owner.uid:
            claims = self._claims.get(node.owner.uid)
            if claims is not None:
                claims.discard(key)
                if not claims:
                    del self._claims[node.owner.uid]

    # -- the walk ------------------------------------------------------------

    def lookup(self, req: OwnerRequest) -> Fetched:
        """What a live GET of the owner by namespace/kind/name would return."""
        gk = req.owner.group_kind
        reason = self.unavailable.get(gk)
        if reason is not None:
            return Fetched(failure=reason)
        key = self._named((req.namespace, gk.group, gk.kind), req.owner.name)
        if key is None:
            return Fetched(failure=Reason.NOT_FOUND)
        return Fetched(obj=self._nodes[key].obj)

    def find(self, namespace: str, gk: GroupKind, name: str) -> Obj | None:
        """The object a GET by namespace, kind and name would return, if known."""
        key = self._named((namespace, gk.group, gk.kind), name)
        return self._nodes[key].obj if key is not None else None

    def resolve(self, obj: Obj) -> WalkResult:
        return resolve(
            obj,
            registry=self.registry,
            lookup=self.lookup,
            max_depth=self.max_depth,
            trust=self.trust,
        )

    def resolve_key(self, key: str) -> WalkResult | None:
        node = self._nodes.get(key)
        return self.resolve(node.obj) if node else None

    # -- downward ------------------------------------------------------------

    def parent_of(self, key: str) -> str | None:
        """The key of the object's controller, if the reference is a valid edge.

        Valid exactly when the walk's hop would succeed: a GET by the
        reference's namespace, group, kind and name finds an object, and its
        UID is the reference's.
        """
        node = self._nodes.get(key)
        if node is None or node.owner is None:
            return None
        return self._edge(node)

    def _edge(self, node: _Node) -> str | None:
        if node.owner_at is None or node.owner is None:
            return None
        if not self.registry.is_known(node.owner.group_kind):
            return None  # not an edge of the roll-up: the walk stops there too
        found = self._named(node.owner_at, node.owner.name)
        if found is None or found != node.owner.uid:
            return None
        if self.unavailable and node.owner.group_kind in self.unavailable:
            return None
        return found

    def children_of(self, key: str) -> list[str]:
        """Keys of the objects this one validly controls, in a stable order."""
        out = self._children(key)
        out.sort(key=lambda k: _order(self._nodes[k].ref))
        return out

    def _children(self, key: str) -> list[str]:
        node = self._nodes.get(key)
        if node is None or not node.ref.uid:
            return []
        claims = self._claims.get(node.ref.uid, ())
        return [c for c in claims if self._edge(self._nodes[c]) == key]

    def descendants(self, key: str) -> list[str]:
        """Every object below `key` through valid edges, breadth first, bounded.

        Bounded by the walk's depth cap (nothing deeper can resolve up to
        `key`) and guarded against cycles by a visited set.
        """
        seen = {key}
        out: list[str] = []
        frontier = [key]
        for _ in range(self.max_depth):
            nxt: list[str] = []
            for k in frontier:
                for child in self._children(k):
                    if child not in seen:
                        seen.add(child)
                        nxt.append(child)
            out.extend(nxt)
            if not nxt:
                break
            frontier = nxt
        return out

    def members(self, root_key: str) -> tuple[list[str], list[str]]:
        """The tracked descendants and the Pods whose own walk ends at this root.

        Each descendant's membership is decided by its own upward walk (the
        same function that produced its stamp), so the document and the
        stamps never disagree, also at the depth cap. The walks are derived
        top-down from the root's (`_derive`, as in `resolve_all`), so a root
        with 10,000 Pods costs one pass, not 10,000 walks.
        """
        owned, pods, _ = self.members_and_unproven(root_key)
        return owned, pods

    def members_and_unproven(self, root_key: str) -> tuple[list[str], list[str], list[str]]:
        """`members`, and the objects whose refused edge points at the root or at an
        object whose walk reaches it (`aibom.rollup.unproven.<i>`), each sorted."""
        root = self._nodes.get(root_key)
        if root is None or not root.ref.uid:
            return [], [], []
        owned: list[str] = []
        pods: list[str] = []
        unproven: list[str] = []
        results = {root_key: self.resolve(root.obj)}
        for ck in self._derive_down(results, [root_key], levels=self.max_depth):
            result = results[ck]
            if refused_here(result):
                parent = self._edge(self._nodes[ck])
                if parent is not None and (
                    parent == root_key or _reaches(results.get(parent), root.ref.uid)
                ):
                    unproven.append(ck)
            gk = self._nodes[ck].ref.group_kind
            is_pod = gk == POD
            if not is_pod and not self.registry.is_tracked(gk):
                continue
            if result.status is Rollup.ROLLED_UP and _reaches(result, root.ref.uid):
                (pods if is_pod else owned).append(ck)
        for out in (owned, pods, unproven):
            out.sort(key=lambda k: _order(self._nodes[k].ref))
        return owned, pods, unproven

    def resolve_all(self) -> dict[str, WalkResult]:
        """Every object's walk result, each derived from its parent's in one pass.

        Equal to `resolve` of every object (a test checks it), but linear: a
        child's walk is its parent's walk plus one good hop, unless the depth
        cap or a failure would end the two walks differently, in which case
        the child is walked on its own.
        """
        results: dict[str, WalkResult] = {}
        frontier = [k for k, n in self._nodes.items() if n.owner is None or self._edge(n) is None]
        for k in frontier:
            results[k] = self.resolve(self._nodes[k].obj)
        self._derive_down(results, frontier, levels=None)
        for k, n in self._nodes.items():  # members of ownership cycles
            if k not in results:
                results[k] = self.resolve(n.obj)
        return results

    def _derive_down(
        self, results: dict[str, WalkResult], frontier: list[str], *, levels: int | None
    ) -> list[str]:
        """Derive the walks below `frontier` (whose results are known) into `results`,
        breadth first, for at most `levels` levels; returns the keys it added, in order."""
        added: list[str] = []
        level = 0
        while frontier and (levels is None or level < levels):
            nxt: list[str] = []
            for pk in frontier:
                parent = self._nodes[pk]
                presult = results[pk]
                for ck in self._children(pk):
                    if ck not in results:
                        results[ck] = self._derive(self._nodes[ck], parent, presult)
                        nxt.append(ck)
            added += nxt
            frontier = nxt
            level += 1
        return added

    def _derive(self, child: _Node, parent: _Node, presult: WalkResult) -> WalkResult:
        if (
            self.trust is not None
            and child.owner is not None
            and self.trust(child.obj, child.ref, child.owner) is not None
        ):
            return self.resolve(child.obj)  # its own edge is refused: walked on its own
        hops = len(presult.chain) + 1
        failure = presult.failure
        if failure is not None and (
            hops >= self.max_depth or failure.reason in (Reason.DEPTH_EXCEEDED, Reason.CYCLE)
        ):
            return self.resolve(child.obj)
        if failure is None and hops > self.max_depth:
            return self.resolve(child.obj)
        parent_tracked = self.registry.is_tracked(parent.ref.group_kind)
        above = presult.root if presult.status is Rollup.ROLLED_UP else None
        return conclude(
            child.ref,
            registry=self.registry,
            chain=[parent.ref, *presult.chain],
            nearest=parent.ref if parent_tracked else presult.nearest_tracked,
            topmost=above or (parent.ref if parent_tracked else None),
            failure=failure,
        )

    def namespace_keys(self, namespace: str) -> list[str]:
        return [k for k, n in self._nodes.items() if n.ref.namespace == namespace]


def refused_here(result: WalkResult) -> bool:
    """The walk stopped at the object's own edge because that edge is not proven."""
    return (
        not result.chain
        and result.failure is not None
        and result.failure.reason in UNPROVEN_REASONS
    )


def _reaches(result: WalkResult | None, root_uid: str) -> bool:
    return result is not None and result.root is not None and result.root.uid == root_uid


def _order(ref: ObjRef) -> tuple[str, str, str, str]:
    return (ref.kind, ref.name, ref.group, ref.uid)


def build_graph(
    objects: Iterable[Obj],
    registry: KindRegistry,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    unavailable: Mapping[GroupKind, Reason] | None = None,
    trust: EdgeTrust | None = None,
) -> OwnershipGraph:
    graph = OwnershipGraph(registry, max_depth=max_depth, unavailable=unavailable, trust=trust)
    for obj in objects:
        graph.upsert(obj)
    return graph
