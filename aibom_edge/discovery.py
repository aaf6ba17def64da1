"""API discovery: which resource (path, scope, verbs) serves a kind.

Resource paths come from discovery, cached per kind and refreshed on a miss
at most every `rediscover_after` seconds, so a CRD installed later is found
without a restart and an unserved kind costs no request storm. Aggregated
discovery (Kubernetes >= 1.30: two requests) first, else one request per
group-version.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol

from aibom_core.kinds import GroupKind
from aibom_edge.wire import KubeError, KubeResponse

AGGREGATED_DISCOVERY = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;q=0.9"
)


class Requester(Protocol):
    """What discovery asks with (`aibom_edge.kube.Kube`)."""

    async def request(
        self, method: str, path: str, *, accept: str | None = None
    ) -> KubeResponse: ...


@dataclass(frozen=True, slots=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()
    short_names: tuple[str, ...] = ()  # kubectl's short names (`deploy`, `rs`), for tools
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        return base


class Discovery:
    """GroupKind -> ApiResource, from /api and /apis, cached; misses refresh at most every N s."""

    def __init__(self, kube: Requester, *, rediscover_after: float = 30.0) -> None:
        self._kube = kube
        self._rediscover_after = rediscover_after
        self._by_gk: dict[GroupKind, ApiResource] = {}
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()

    async def resource(self, gk: GroupKind) -> ApiResource | None:
        """The served resource of a kind, or None if the server does not serve it (NoMatch)."""
        found = self._by_gk.get(gk)
        if found is not None:
            return found
        if self._loaded_at is None or time.monotonic() - self._loaded_at >= self._rediscover_after:
            async with self._lock:
                if gk not in self._by_gk and (
                    self._loaded_at is None
                    or time.monotonic() - self._loaded_at >= self._rediscover_after
                ):
                    await self.refresh()
        return self._by_gk.get(gk)

    def cached(self, gk: GroupKind) -> ApiResource | None:
        return self._by_gk.get(gk)

    async def all(self) -> list[ApiResource]:
        """Every served kind (discovering first if nothing is known yet)."""
        if self._loaded_at is None:
            async with self._lock:
                if self._loaded_at is None:
                    await self.refresh()
        return list(self._by_gk.values())

    async def refresh(self) -> None:
        """Reload what the server serves: aggregated discovery (2 requests), else per version."""
        by_gk = await self._aggregated()
        if by_gk is None:
            by_gk = await self._legacy()
        self._by_gk = by_gk
        self._loaded_at = time.monotonic()

    async def _aggregated(self) -> dict[GroupKind, ApiResource] | None:
        """`/api` and `/apis` as APIGroupDiscoveryList (Kubernetes >= 1.30); None if refused."""
        by_gk: dict[GroupKind, ApiResource] = {}
        for path in ("/api", "/apis"):
            resp = await self._kube.request("GET", path, accept=AGGREGATED_DISCOVERY)
            body = resp.body
            if (
                not resp.ok
                or not isinstance(body, dict)
                or body.get("kind") != "APIGroupDiscoveryList"
            ):
                return None
            for group in body.get("items") or []:
                name = (group.get("metadata") or {}).get("name", "")
                # Versions come in preference order; earlier ones win a kind.
                for ver in group.get("versions") or []:
                    for r in ver.get("resources") or []:
                        kind = (r.get("responseKind") or {}).get("kind", "")
                        if not kind or not r.get("resource"):
                            continue
                        by_gk.setdefault(
                            GroupKind(name, kind),
                            ApiResource(
                                group=name,
                                version=ver.get("version", ""),
                                kind=kind,
                                plural=r["resource"],
                                namespaced=r.get("scope") == "Namespaced",
                                verbs=frozenset(r.get("verbs") or ()),
                                short_names=tuple(r.get("shortNames") or ()),
                                singular=r.get("singularResource") or "",
                            ),
                        )
        return by_gk

    async def _legacy(self) -> dict[GroupKind, ApiResource]:
        """One request per group-version (servers without aggregated discovery)."""
        by_gk: dict[GroupKind, ApiResource] = {}
        core = await self._kube.request("GET", "/api/v1")
        if core.ok:
            by_gk.update(self._parse("", "v1", core.body))
        groups = await self._kube.request("GET", "/apis")
        if not groups.ok:
            raise KubeError(f"discovery: GET /apis answered {groups.status}")
        versions: list[tuple[str, str]] = []
        for g in groups.body.get("groups", []):
            # Preferred version first; other versions fill kinds it lacks.
            preferred = (g.get("preferredVersion") or {}).get("version")
            names = [v.get("version") for v in g.get("versions", [])]
            ordered = [preferred, *[n for n in names if n != preferred]] if preferred else names
            versions += [(g["name"], v) for v in ordered if v]
        results = await asyncio.gather(
            *(self._kube.request("GET", f"/apis/{g}/{v}") for g, v in versions)
        )
        for (g, v), resp in zip(versions, results, strict=True):
            if resp.ok:
                for gk, res in self._parse(g, v, resp.body).items():
                    by_gk.setdefault(gk, res)
        return by_gk

    @staticmethod
    def _parse(group: str, version: str, body: Any) -> dict[GroupKind, ApiResource]:
        out: dict[GroupKind, ApiResource] = {}
        for r in body.get("resources", []) if isinstance(body, dict) else []:
            name = r.get("name", "")
            if "/" in name:  # subresource
                continue
            gk = GroupKind(group, r.get("kind", ""))
            out.setdefault(
                gk,
                ApiResource(
                    group=group,
                    version=version,
                    kind=gk.kind,
                    plural=name,
                    namespaced=bool(r.get("namespaced")),
                    verbs=frozenset(r.get("verbs") or ()),
                    short_names=tuple(r.get("shortNames") or ()),
                    singular=r.get("singularName") or "",
                ),
            )
        return out
