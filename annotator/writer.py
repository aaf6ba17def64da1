"""Every write the annotator makes, in one place: gated on leadership, rate-limited.

- ConfigMaps: server-side apply (`PATCH` with `application/apply-patch+yaml`,
  a stable `fieldManager`, `force=true` as controllers do), so the fields
  we write are ours and fields we stop writing are removed.
- Deletes carry preconditions (UID and resourceVersion): we delete exactly
  the document we judged superseded, never one that changed meanwhile.
- Stamp repairs are JSON merge patches of `metadata.annotations` only, with
  the object's UID and resourceVersion as preconditions.
- Events (`events.k8s.io/v1`) on a root when its document had to be cut.

A replica that is not the leader never writes: every call checks first
(`NotLeader`), again after waiting for a rate-limit token, and the request's
timeout is capped by the leadership left (`lease_left`, from the elector's
renew deadline), so no write is still in flight once the deadline passes.
Writes share one token bucket (client-go's client-side limiter), stamp
repairs have their own, smaller one: a cluster full of unstamped objects is
repaired steadily, never in a storm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aibom_core.objects import Obj, ObjRef
from aibom_edge.kube import ApiResource, Kube, KubeResponse
from annotator.configmap import FIELD_MANAGER
from annotator.lease import micro_time
from annotator.plan import DocRef
from annotator.workqueue import TokenBucket

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
REPORTING_CONTROLLER = "aibom.dev/annotator"


class NotLeader(Exception):
    """A write was attempted by a replica that does not hold the Lease."""


class WriteError(Exception):
    """The API server refused a write; `status` says how (the caller decides: retry or not)."""

    def __init__(self, operation: str, status: int, message: str) -> None:
        super().__init__(f"{operation}: HTTP {status}: {message}")
        self.operation = operation
        self.status = status


def _message(resp: KubeResponse) -> str:
    body = resp.body
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or body)[:500]
    return str(body)[:500]


class Writer:
    def __init__(
        self,
        kube: Kube,
        *,
        is_leader: Callable[[], bool],
        bucket: TokenBucket,
        stamp_bucket: TokenBucket,
        identity: str,
        field_manager: str = FIELD_MANAGER,
        lease_left: Callable[[], float] | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self.kube = kube
        self.is_leader = is_leader
        self.bucket = bucket
        self.stamp_bucket = stamp_bucket
        self.identity = identity
        self.field_manager = field_manager
        self.lease_left = lease_left
        self.request_timeout = request_timeout

    async def _gate(self, bucket: TokenBucket) -> float:
        """Wait for a token while leading; the timeout the write may use (fenced)."""
        if not self.is_leader():
            raise NotLeader()
        await bucket.acquire()
        return self._fenced_timeout()

    def _fenced_timeout(self) -> float:
        # Leadership may have ended while we waited for a token, and it ends
        # at a deadline: the request must be over by then.
        if not self.is_leader():
            raise NotLeader()
        timeout = self.request_timeout
        if self.lease_left is not None:
            left = self.lease_left()
            if left <= 0:
                raise NotLeader()
            timeout = min(timeout, left)
        return timeout

    async def apply_configmap(self, body: dict[str, Any]) -> Obj:
        """Server-side apply one ConfigMap; returns the object the server stored."""
        timeout = await self._gate(self.bucket)
        meta = body["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"
        resp = await self.kube.request(
            "PATCH",
            path,
            params={"fieldManager": self.field_manager, "force": "true"},
            json=body,
            content_type=APPLY,
            timeout=timeout,
        )
        if not resp.ok or not isinstance(resp.body, dict):
            raise WriteError(
                f"apply {meta['namespace']}/{meta['name']}", resp.status, _message(resp)
            )
        return resp.body

    async def delete_configmap(self, doc: DocRef) -> bool:
        """Delete one document if it is still the one we judged; False: it changed (409)."""
        timeout = await self._gate(self.bucket)
        preconditions = {"uid": doc.uid}
        if doc.resource_version:
            preconditions["resourceVersion"] = doc.resource_version
        resp = await self.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{doc.namespace}/configmaps/{doc.name}",
            json={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions},
            timeout=timeout,
        )
        if resp.ok or resp.status == 404:
            return True
        if resp.status == 409:
            return False
        raise WriteError(f"delete {doc}", resp.status, _message(resp))

    async def patch_stamp(self, resource: ApiResource, ref: ObjRef, patch: dict[str, Any]) -> str:
        """Merge-patch the stamp annotations: `patched`, `conflict` (changed/gone), `forbidden`."""
        timeout = await self._gate(self.stamp_bucket)
        resp = await self.kube.request(
            "PATCH",
            resource.path(ref.namespace, ref.name),
            params={"fieldManager": self.field_manager},
            json=patch,
            content_type=MERGE,
            timeout=timeout,
        )
        if resp.ok:
            return "patched"
        if resp.status in (404, 409):
            return "conflict"
        if resp.status in (401, 403):
            return "forbidden"
        raise WriteError(f"patch stamp {ref.hop}", resp.status, _message(resp))

    async def event(
        self,
        regarding: ObjRef,
        *,
        api_version: str,
        reason: str,
        note: str,
        action: str,
        type_: str = "Warning",
    ) -> None:
        """Record an Event on an object (best effort: a failed Event is only logged)."""
        await self._gate(self.bucket)
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming, `<object>.<unix nanoseconds in hex>`: a
            # generateName would end in `.`, which Events refuse.
            "metadata": {
                "name": f"{regarding.name[:200].rstrip('.-')}.{time.time_ns():x}",
                "namespace": regarding.namespace,
            },
            # The API requires eventTime; this is the I/O edge, the clock is allowed here.
            "eventTime": micro_time(time.time()),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.identity[:128],
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            "regarding": {
                "apiVersion": api_version,
                "kind": regarding.kind,
                "name": regarding.name,
                "namespace": regarding.namespace,
                "uid": regarding.uid,
            },
        }
        resp = await self.kube.request(
            "POST",
            f"/apis/events.k8s.io/v1/namespaces/{regarding.namespace}/events",
            json=body,
            timeout=self._fenced_timeout(),
        )
        if not resp.ok:
            raise WriteError(f"event on {regarding.hop}", resp.status, _message(resp))
