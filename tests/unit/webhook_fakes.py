"""In-memory owner sources, review builders and set-ups for the webhook's unit tests.

The integration tests (tests/integration/test_webhook.py) run the webhook
against the real API server; these fakes only stand in for it where the
unit under test is our own code (HTTP edge, resolver, cache).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from aibom_core.kinds import default_registry, group_kind_of
from aibom_core.objects import Obj, OwnerRef
from aibom_core.stamp import Keys
from aibom_core.walk import Fetched, Reason
from certs.pki import issue_serving, new_ca
from webhook.app import Admitter, Readiness, make_app
from webhook.metrics import Metrics
from webhook.resolver import OwnerCache, Resolver


class MemorySource:
    """Owners by (namespace, group, kind, name), with per-kind failures and delays."""

    def __init__(self, objs: Sequence[Obj] = (), *, delay: float = 0.0) -> None:
        self.objs: dict[tuple[str, str, str, str], Obj] = {}
        self.fail: dict[str, Reason] = {}  # kind -> reason
        self.raise_for: set[str] = set()  # kinds whose GET raises (a bug or transport error)
        self.held: set[str] = set()  # kinds whose GET waits until `release` is set
        self.release = asyncio.Event()
        self.delay = delay
        self.gets: Counter[str] = Counter()
        self.asked = asyncio.Event()  # set by the first GET
        for o in objs:
            self.add(o)

    def add(self, obj: Obj) -> None:
        gk = group_kind_of(obj)
        meta = obj["metadata"]
        self.objs[(meta.get("namespace", ""), gk.group, gk.kind, meta["name"])] = obj

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched:
        self.gets[owner.kind] += 1
        self.asked.set()
        if self.delay:
            await asyncio.sleep(self.delay)
        if owner.kind in self.held:
            await self.release.wait()
        if owner.kind in self.raise_for:
            raise RuntimeError(f"boom fetching {owner.kind}")
        if owner.kind in self.fail:
            return Fetched(failure=self.fail[owner.kind])
        gk = owner.group_kind
        found = self.objs.get((namespace, gk.group, gk.kind, owner.name))
        return Fetched(obj=found) if found is not None else Fetched(failure=Reason.NOT_FOUND)


def admission_app(
    source: MemorySource, *, cache_ttl: float = 0.0
) -> tuple[web.Application, Metrics]:
    """The webhook's aiohttp app over `source` (ready, a 0.5 s walk deadline) and its metrics."""
    metrics = Metrics()
    registry = default_registry()
    resolver = Resolver(source, registry=registry, deadline=0.5, cache=OwnerCache(ttl=cache_ttl))
    admitter = Admitter(resolver=resolver, registry=registry, keys=Keys(), metrics=metrics)
    return make_app(admitter=admitter, metrics=metrics, readiness=Readiness(True, True)), metrics


def serving_files(directory: Path) -> None:
    """A CA (`ca.crt`) and its serving pair for localhost and 127.0.0.1 (`tls.crt`,
    `tls.key`), valid for a day from now."""
    now = dt.datetime.now(dt.UTC)
    ca = new_ca(common_name="t", now=now, days=1)
    pair = issue_serving(ca, dns_names=["localhost"], ips=["127.0.0.1"], now=now, days=1)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "ca.crt").write_bytes(ca.cert_pem)


def review(
    obj: Obj | None,
    *,
    operation: str = "CREATE",
    old: Obj | None = None,
    uid: str | None = None,
    namespace: str | None = None,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    kind = (obj or old or {}).get("kind", "Pod")
    api_version = (obj or old or {}).get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    meta = (obj or old or {}).get("metadata", {})
    req: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": operation,
        "namespace": namespace if namespace is not None else meta.get("namespace", "ns"),
        "name": meta.get("name", ""),
        "userInfo": {"username": "tester"},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub_resource:
        req["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def apply_patch(obj: Obj, ops: list[dict[str, Any]]) -> Obj:
    """A strict RFC 6902 applier for add/replace/remove (what our patches use)."""
    doc: dict[str, Any] = json.loads(json.dumps(obj))
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[t]  # KeyError: the parent must exist (RFC 6902 §4.1)
        last = tokens[-1]
        if op["op"] == "add":
            parent[last] = op["value"]
        elif op["op"] == "replace":
            if last not in parent:
                raise KeyError(f"replace of missing {op['path']}")
            parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            raise ValueError(op["op"])
    return doc
