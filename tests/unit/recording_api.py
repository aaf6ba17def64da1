"""A recording stand-in for the annotator's writes: every request it gets, in order.

Not an API server: a dict of ConfigMaps with resourceVersions, with the
rules the annotator's writes rely on (a merge patch or a delete whose
preconditions no longer hold is a 409, a create of an existing name is a
409, a server-side apply stores the body), and workloads known only by
their UID and resourceVersion (a stamp patch's preconditions). Any other
request is recorded and refused (403), as the annotator's RBAC would. The
real API server's answers are tested in tests/integration/.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aibom_core.kinds import GroupKind, default_registry, group_kind_of
from aibom_core.objects import Obj
from aibom_edge.kube import ApiResource, KubeResponse
from annotator.controller import Controller
from annotator.workqueue import TokenBucket
from annotator.writer import APPLY, MERGE, Writer

CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, str]
    body: Any
    content_type: str | None


class Discovery:
    """Every kind of the default registry, as served resources."""

    def __init__(self) -> None:
        reg = default_registry()
        self.by_gk = {
            gk: ApiResource(gk.group, "v1", gk.kind, reg.resource_of(gk), namespaced=True)
            for gk in reg.tracked | reg.walk_only
        }

    def cached(self, gk: GroupKind) -> ApiResource | None:
        return self.by_gk.get(gk)


def _refused(status: int, message: str) -> KubeResponse:
    return KubeResponse(status, {"kind": "Status", "message": message}, {})


class RecordingApi:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.requests: Counter[str] = Counter()  # Kube's counter, read by the metrics
        self.discovery = Discovery()
        self.configmaps: dict[tuple[str, str], Obj] = {}
        self.objects: dict[str, tuple[str, str]] = {}  # path -> (uid, resourceVersion)
        # Called with each request before it is answered (another writer, a check).
        self.before: Callable[[Call], Awaitable[None] | None] | None = None
        self._rv = itertools.count(1000)
        self._uid = itertools.count(1)

    # -- the store ---------------------------------------------------------------

    def put(self, obj: Obj) -> Obj:
        """Store a ConfigMap as another writer would (keeps its uid, bumps its resourceVersion)."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        old = self.configmaps.get(key)
        stored = copy.deepcopy(obj)
        uid = old["metadata"]["uid"] if old else meta.get("uid") or f"cm-{next(self._uid)}"
        stored["metadata"].update(uid=uid, resourceVersion=str(next(self._rv)))
        self.configmaps[key] = stored
        return copy.deepcopy(stored)

    def serve(self, obj: Obj) -> None:
        """Hold `obj` as it is (the version the annotator's cache has): a ConfigMap, or a
        workload (known by its UID and resourceVersion, for stamp patches)."""
        meta = obj["metadata"]
        if obj.get("kind") == "ConfigMap":
            self.configmaps[meta["namespace"], meta["name"]] = copy.deepcopy(obj)
            return
        resource = self.discovery.cached(group_kind_of(obj))
        assert resource is not None, obj.get("kind")
        path = resource.path(meta["namespace"], meta["name"])
        self.objects[path] = (meta["uid"], meta.get("resourceVersion") or "1")

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.configmaps.get((namespace, name))

    def reads(self) -> list[Call]:
        return [c for c in self.calls if c.method == "GET"]

    # -- Kube's request() ----------------------------------------------------------

    async def request(self, method: str, path: str, **kw: Any) -> KubeResponse:
        params, body = dict(kw.get("params") or {}), copy.deepcopy(kw.get("json"))
        call = Call(method, path, params, body, kw.get("content_type"))
        self.calls.append(call)
        self.requests[method] += 1
        if self.before is not None:
            pending = self.before(call)
            if pending is not None:
                await pending
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4:5] == ["configmaps"]:
            return self._configmaps(call, parts[3], parts[5] if len(parts) == 6 else None)
        if method == "PATCH" and path in self.objects:
            return self._stamp(call)
        return _refused(403, f"{method} {path} is not something the annotator may do")

    def _configmaps(self, call: Call, ns: str, name: str | None) -> KubeResponse:
        if name is None:
            if call.method == "GET":
                wanted = call.params.get("fieldSelector", "").removeprefix("metadata.name=")
                items = [
                    copy.deepcopy(cm)
                    for (n, cm_name), cm in sorted(self.configmaps.items())
                    if n == ns and (not wanted or cm_name == wanted)
                ]
                return KubeResponse(200, {"kind": "ConfigMapList", "items": items}, {})
            if call.method == "POST":
                if (ns, call.body["metadata"]["name"]) in self.configmaps:
                    return _refused(409, "already exists")
                return KubeResponse(201, self.put(call.body), {})
            return _refused(405, call.method)
        current = self.configmaps.get((ns, name))
        if call.method == "PATCH" and call.content_type == APPLY:
            return KubeResponse(200, self.put(call.body), {})
        if current is None:
            return _refused(404, f"configmaps {name!r} not found")
        meta = current["metadata"]
        if call.method == "PATCH" and call.content_type == MERGE:
            rv = (call.body.get("metadata") or {}).get("resourceVersion")
            if rv is not None and rv != meta["resourceVersion"]:
                return _refused(409, "the object has been modified")
            merged = copy.deepcopy(current)
            merged.setdefault("data", {}).update(call.body.get("data") or {})
            return KubeResponse(200, self.put(merged), {})
        if call.method == "DELETE":
            pre = (call.body or {}).get("preconditions") or {}
            if any(pre.get(k) not in (None, meta[k]) for k in ("uid", "resourceVersion")):
                return _refused(409, "Precondition failed")
            del self.configmaps[(ns, name)]
            return KubeResponse(200, {"kind": "Status", "status": "Success"}, {})
        return _refused(405, call.method)

    def _stamp(self, call: Call) -> KubeResponse:
        uid, rv = self.objects[call.path]
        meta = call.body.get("metadata") or {}
        if meta.get("uid") not in (None, uid) or meta.get("resourceVersion") not in (None, rv):
            return _refused(409, "the object has been modified")
        new_rv = str(next(self._rv))
        self.objects[call.path] = (uid, new_rv)
        return KubeResponse(200, {"metadata": {"uid": uid, "resourceVersion": new_rv}}, {})


def write_through(c: Controller, api: RecordingApi) -> None:
    """Point a controller's API client and writer at `api` (no rate limit)."""
    c.kube = api  # type: ignore[assignment]
    c.writer = Writer(
        api,  # type: ignore[arg-type]
        is_leader=c.is_leader,
        bucket=TokenBucket(1e6, 1_000_000),
        stamp_bucket=TokenBucket(1e6, 1_000_000),
        identity="test",
    )


async def until(what: str, probe: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for `probe()` to be true (the event loop runs meanwhile); fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)
