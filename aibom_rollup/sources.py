"""Where `kubectl aibom` reads objects and documents: a live cluster, or a dump.

One interface, two readers, so every subcommand has exactly one code path and
`--from-file dump.json` gives the offline answer with the same output:

- `LiveSource` reads through the same async raw-JSON client as the webhook
  and the annotator (`aibom_edge.kube.Kube`): owners by GET, exactly as the
  webhook's walk does (without its cache), namespaces by paginated LIST of
  every kind the registry walks, documents from the AIBOM ConfigMaps.
- `DumpSource` answers from an `OwnershipGraph` built from the dump, whose
  `lookup` behaves like a live GET (the walk's UID check decides); documents
  are the dump's AIBOM ConfigMaps when it holds any, else the core builds them
  from the dump's workloads, as `aibom-rollup scan` does.
- `DocumentsSource` answers from AIBOM documents read from files (a directory
  `aibom-rollup scan -o DIR` wrote, or exported documents): the questions about
  documents (`get`, `find`, `models`, `runtimes`); the objects themselves
  (`explain`, `tree`) are not in them, and it says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aibom_core.bom import facts_of, input_hash, render
from aibom_core.document import (
    MANAGED_SELECTOR,
    DocLabels,
    PackedDocumentError,
    configmap_name,
    is_document,
    unpack,
)
from aibom_core.dump import Dump
from aibom_core.graph import OwnershipGraph, build_graph
from aibom_core.kindnames import offline_kinds, with_registry
from aibom_core.kinds import (
    CONFIGMAP,
    POD,
    REPLICA_SET,
    GroupKind,
    KindInfo,
    KindRegistry,
    group_kind_of,
)
from aibom_core.objects import Obj, metadata
from aibom_core.rollup import inventory
from aibom_core.walk import DEFAULT_MAX_DEPTH, Fetched, OwnerRequest, Reason
from aibom_edge.kube import ApiResource, Kube, KubeError
from aibom_edge.listing import list_all

LIST_PAGE = 500


class SourceError(Exception):
    """The cluster (or dump) could not answer; the message is for the user."""


class _Forbidden(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@dataclass(frozen=True, slots=True)
class Doc:
    """One AIBOM document and the root it belongs to."""

    namespace: str
    configmap: str
    root_hop: str  # `<group>/<Kind>/<name>` (group `core` for the core group)
    raw: bytes
    body: dict[str, Any]

    @property
    def root(self) -> str:
        """`<Kind>/<name>`, the form of `aibom.dev/root`."""
        _, kind, name = self.root_hop.split("/", 2)
        return f"{kind}/{name}"


class Source(Protocol):
    registry: KindRegistry
    default_namespace: str
    # Why ConfigMaps labelled as AIBOMs were left out of the last `documents` (one
    # line each): a listing is not spoiled by one document nobody can read.
    skipped: list[str]

    async def kinds(self) -> list[KindInfo]: ...

    async def get(self, kind: KindInfo, namespace: str, name: str) -> Obj | None: ...

    async def fetch_owner(self, req: OwnerRequest) -> Fetched: ...

    async def graph(self, namespace: str | None) -> OwnershipGraph: ...

    async def documents(self, namespace: str | None, selector: str | None) -> list[Doc]: ...

    async def document(self, namespace: str, kind: str, name: str) -> Doc | None: ...


def doc_of(cm: Obj, *, prefix: str) -> Doc | None:
    """The document of an AIBOM ConfigMap (None when it holds none); raises SourceError."""
    meta = metadata(cm)
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    try:
        raw = unpack(cm)
    except PackedDocumentError as exc:
        raise SourceError(f"configmap {ns}/{name}: {exc}") from None
    if raw is None:
        return None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise SourceError(f"configmap {ns}/{name}: the document is not JSON: {exc}") from None
    annotations = meta.get("annotations") or {}
    key = DocLabels(prefix).document_for
    hop = str(annotations.get(key, "")) if isinstance(annotations, dict) else ""
    if hop.count("/") < 2:
        hop = _hop_from_document(body) or f"?/?/{name}"
    return Doc(namespace=ns, configmap=name, root_hop=hop, raw=raw, body=body)


def readable_docs(cms: Iterable[Obj], *, prefix: str, skipped: list[str]) -> list[Doc]:
    """The documents of these ConfigMaps; each one that cannot be read (damaged, or a
    payload too large to unpack: `aibom_core.document.unpack`) is left out and said
    in `skipped`. Anyone who may create ConfigMaps can label one as ours."""
    out = []
    for cm in cms:
        try:
            doc = doc_of(cm, prefix=prefix)
        except SourceError as exc:
            skipped.append(f"{exc} (skipped)")
            continue
        if doc is not None:
            out.append(doc)
    return out


def _hop_from_document(body: Any) -> str | None:
    """`group/Kind/name` from the document's root component (ConfigMaps without our annotation)."""
    comp = (body.get("metadata") or {}).get("component") if isinstance(body, dict) else None
    if not isinstance(comp, dict):
        return None
    props = {p.get("name"): p.get("value") for p in comp.get("properties") or []}
    kind, api_version = props.get("aibom.k8s.kind"), props.get("aibom.k8s.apiVersion", "")
    if not kind:
        return None
    group = str(api_version).rpartition("/")[0] or "core"
    return f"{group}/{kind}/{comp.get('name', '')}"


def _walked(registry: KindRegistry) -> list[GroupKind]:
    return sorted(registry.tracked | registry.walk_only | {POD, REPLICA_SET})


class LiveSource:
    def __init__(
        self,
        kube: Kube,
        *,
        registry: KindRegistry,
        default_namespace: str,
        prefix: str,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self.kube = kube
        self.registry = registry
        self.default_namespace = default_namespace
        self.prefix = prefix
        self.max_depth = max_depth
        self.skipped: list[str] = []

    async def kinds(self) -> list[KindInfo]:
        try:
            served = await self.kube.discovery.all()
        except KubeError as exc:
            raise SourceError(f"cannot reach the API server: {exc}") from None
        return with_registry((_info(r) for r in served), self.registry)

    async def _resource(self, gk: GroupKind) -> ApiResource | None:
        try:
            return await self.kube.discovery.resource(gk)
        except KubeError as exc:
            raise SourceError(f"cannot reach the API server: {exc}") from None

    async def get(self, kind: KindInfo, namespace: str, name: str) -> Obj | None:
        res = await self._resource(kind.group_kind)
        if res is None:
            raise SourceError(f"the server does not serve {kind.group_kind}")
        resp = await self._request("GET", res.path(namespace, name))
        if resp.status == 404:
            return None
        _check(resp.status, resp.body, f"get {res.plural} {name}")
        return dict(resp.body)

    async def fetch_owner(self, req: OwnerRequest) -> Fetched:
        return await self.kube.get_owner(req.namespace, req.owner)

    async def _request(self, method: str, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            return await self.kube.request(method, path, params=params)
        except (KubeError, TimeoutError) as exc:
            raise SourceError(f"{method} {path}: {exc or 'timed out'}") from None

    async def _list(
        self, res: ApiResource, namespace: str | None, selector: str | None = None
    ) -> tuple[list[Obj], int]:
        """Every object of a kind (the one paged list: a 410 on a continue relists); the
        HTTP status of a refusal, else 200."""
        path = res.path(namespace)

        async def refused(resp: Any) -> None:
            if resp.status in (401, 403):
                raise _Forbidden(resp.status)
            _check(resp.status, resp.body, f"list {res.plural}")

        try:
            items, _ = await list_all(
                lambda query: self._request("GET", path, query),
                {"labelSelector": selector} if selector else {},
                limit=LIST_PAGE,
                refused=refused,
            )
        except _Forbidden as exc:
            return [], exc.status
        # A List's items carry no apiVersion/kind: put them back, the core needs them.
        for item in items:
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
        return items, 200

    async def graph(self, namespace: str | None) -> OwnershipGraph:
        objects: list[Obj] = []
        unavailable: dict[GroupKind, Reason] = {}
        for gk in _walked(self.registry):
            res = await self._resource(gk)
            if res is None:
                unavailable[gk] = Reason.NO_MATCH
                continue
            items, status = await self._list(res, namespace)
            if status != 200:
                unavailable[gk] = Reason.FORBIDDEN
            objects += items
        return build_graph(
            objects, self.registry, max_depth=self.max_depth, unavailable=unavailable
        )

    async def documents(self, namespace: str | None, selector: str | None) -> list[Doc]:
        res = await self._resource(CONFIGMAP)
        assert res is not None  # core v1 ConfigMaps are always served
        sel = MANAGED_SELECTOR + (f",{selector}" if selector else "")
        items, status = await self._list(res, namespace, sel)
        if status != 200:
            where = f"in namespace {namespace}" if namespace else "cluster-wide"
            raise SourceError(f"forbidden: cannot list configmaps {where} (HTTP {status})")
        return _sorted(readable_docs(items, prefix=self.prefix, skipped=self.skipped))

    async def document(self, namespace: str, kind: str, name: str) -> Doc | None:
        res = await self._resource(CONFIGMAP)
        assert res is not None
        resp = await self._request("GET", res.path(namespace, configmap_name(kind, name)))
        if resp.status == 404:
            return None
        _check(resp.status, resp.body, f"get configmap {configmap_name(kind, name)}")
        if not is_document(resp.body):
            return None
        return doc_of(resp.body, prefix=self.prefix)


class DumpSource:
    def __init__(
        self,
        dump: Dump,
        *,
        registry: KindRegistry,
        prefix: str,
        tool_version: str,
        max_depth: int = DEFAULT_MAX_DEPTH,
        default_namespace: str = "default",
    ) -> None:
        self.dump = dump
        self.registry = registry
        self.prefix = prefix
        self.tool_version = tool_version
        self.default_namespace = default_namespace
        self._graph = build_graph(dump.objects, registry, max_depth=max_depth)
        self.skipped: list[str] = []

    async def kinds(self) -> list[KindInfo]:
        return offline_kinds(self.registry, self.dump.objects)

    async def get(self, kind: KindInfo, namespace: str, name: str) -> Obj | None:
        return self._graph.find(namespace, kind.group_kind, name)

    async def fetch_owner(self, req: OwnerRequest) -> Fetched:
        return self._graph.lookup(req)

    async def graph(self, namespace: str | None) -> OwnershipGraph:
        return self._graph

    def _stored(self) -> list[Obj]:
        return [o for o in self.dump.objects if group_kind_of(o) == CONFIGMAP and is_document(o)]

    async def documents(self, namespace: str | None, selector: str | None) -> list[Doc]:
        stored = self._stored()
        if stored:
            found = readable_docs(stored, prefix=self.prefix, skipped=self.skipped)
            return _sorted(d for d in found if namespace is None or d.namespace == namespace)
        if selector:
            raise SourceError("-l selects AIBOM ConfigMaps; this dump holds none")
        out = []
        wanted = None if namespace is None else [namespace]
        for entry in inventory(self._graph, namespaces=wanted):
            facts = facts_of(entry.view, self.registry)
            digest = input_hash(facts, tool_version=self.tool_version)
            raw = render(facts, tool_version=self.tool_version, digest=digest)
            out.append(
                Doc(
                    namespace=entry.ref.namespace,
                    configmap=entry.configmap_name,
                    root_hop=entry.ref.hop,
                    raw=raw,
                    body=json.loads(raw),
                )
            )
        return _sorted(out)

    async def document(self, namespace: str, kind: str, name: str) -> Doc | None:
        for doc in await self.documents(namespace, None):
            if doc.root == f"{kind}/{name}":
                return doc
        return None


class DocumentsSource:
    def __init__(
        self,
        files: Iterable[tuple[bytes, str]],
        *,
        registry: KindRegistry,
        default_namespace: str = "default",
    ) -> None:
        self.registry = registry
        self.default_namespace = default_namespace
        self.skipped: list[str] = []  # a file that is no AIBOM is an error, not a skip
        docs = []
        for raw, name in files:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise SourceError(f"{name}: not a JSON document: {exc}") from None
            hop = _hop_from_document(body)
            if hop is None:
                raise SourceError(f"{name}: an AIBOM without its root (metadata.component)")
            _, kind, root = hop.split("/", 2)
            docs.append(
                Doc(
                    namespace=_root_property(body, "aibom.k8s.namespace"),
                    configmap=configmap_name(kind, root),
                    root_hop=hop,
                    raw=raw,
                    body=body,
                )
            )
        self._docs = _sorted(docs)

    async def kinds(self) -> list[KindInfo]:
        return offline_kinds(self.registry)

    def _no_objects(self) -> SourceError:
        return SourceError(
            "AIBOM documents hold no objects: explain and tree need a cluster or a dump"
        )

    async def get(self, kind: KindInfo, namespace: str, name: str) -> Obj | None:
        raise self._no_objects()

    async def fetch_owner(self, req: OwnerRequest) -> Fetched:
        raise self._no_objects()

    async def graph(self, namespace: str | None) -> OwnershipGraph:
        raise self._no_objects()

    async def documents(self, namespace: str | None, selector: str | None) -> list[Doc]:
        if selector:
            raise SourceError("-l selects AIBOM ConfigMaps; documents read from files have none")
        return [d for d in self._docs if namespace is None or d.namespace == namespace]

    async def document(self, namespace: str, kind: str, name: str) -> Doc | None:
        want = f"{kind}/{name}"
        return next((d for d in self._docs if d.namespace == namespace and d.root == want), None)


def _root_property(body: Any, name: str) -> str:
    comp = (body.get("metadata") or {}).get("component") if isinstance(body, dict) else None
    props = comp.get("properties") or [] if isinstance(comp, dict) else []
    return next((str(p.get("value", "")) for p in props if p.get("name") == name), "")


def _sorted(docs: Iterable[Doc]) -> list[Doc]:
    return sorted(docs, key=lambda d: (d.namespace, d.root, d.root_hop))


def _info(r: ApiResource) -> KindInfo:
    return KindInfo(
        group=r.group,
        kind=r.kind,
        plural=r.plural,
        singular=r.singular or r.kind.lower(),
        short_names=r.short_names,
        namespaced=r.namespaced,
    )


def _check(status: int, body: Any, what: str) -> None:
    if 200 <= status < 300 and isinstance(body, dict):
        return
    message = body.get("message") if isinstance(body, dict) else str(body)[:200]
    if status in (401, 403):
        raise SourceError(f"forbidden: cannot {what}: {message}")
    raise SourceError(f"cannot {what}: HTTP {status}: {message}")
