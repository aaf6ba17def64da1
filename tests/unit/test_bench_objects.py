"""bench/annotator_bench.py builds what a real cluster has: objects as the webhook admits
them, stamped and proven, so that the annotator in its default configuration (the
provenance rule, the webhook's key, a namespace that is not guarded) absorbs every
Pod into its root and has no stamp to repair.

Its objects used to carry no edge proofs: the annotator then had to run with
--trust-owner-references, or every edge was unproven and the bench's update probe
waited for digests that never reached a document.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import annotator_bench as bench

from aibom_core.kinds import NAMESPACE, group_kind_of
from aibom_core.objects import Obj
from aibom_core.stamp import Keys
from aibom_core.walk import Rollup
from aibom_edge.kube import KubeResponse
from annotator.cache import ClusterState
from annotator.plan import plan_stamp

KEY = bytes(range(32))


class Server:
    """The API server as far as the bench's builder uses it: creates (a UID, a
    resourceVersion and the creation second the proofs bind), merge patches of metadata,
    and Pod status writes."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self._n = itertools.count(1)

    async def request(self, method: str, path: str, *, json: Any = None, **_: Any) -> KubeResponse:
        if method == "POST":
            obj = copy.deepcopy(json)
            n = next(self._n)
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            obj["metadata"].update(
                uid=f"uid-{n}", resourceVersion=str(n), creationTimestamp=created
            )
            self.objects[f"{path}/{obj['metadata']['name']}"] = obj
            return KubeResponse(201, copy.deepcopy(obj), {})
        if method == "PATCH":
            obj = self.objects[path.removesuffix("/status")]
            if path.endswith("/status"):
                obj["status"] = json["status"]
            else:
                obj["metadata"].setdefault("annotations", {}).update(
                    json["metadata"]["annotations"]
                )
            obj["metadata"]["resourceVersion"] = str(next(self._n))
            return KubeResponse(200, copy.deepcopy(obj), {})
        raise AssertionError(f"unexpected {method} {path}")


def test_the_default_annotator_absorbs_every_pod_and_repairs_no_stamp() -> None:
    server = Server()
    pods = asyncio.run(
        bench.populate(server, roots=10, per_root=2, concurrency=4, key=KEY)  # type: ignore[arg-type]
    )
    state = ClusterState(bench.REG, provenance_key=KEY)  # the default rule; no binding
    labels = {"aibom.dev/enabled": "true"}
    state.upsert(NAMESPACE, {"kind": "Namespace", "metadata": {"name": bench.NS, "labels": labels}})
    for obj in server.objects.values():
        state.upsert(group_kind_of(obj), obj)
    state.bulk = False
    assert not state.guarded(bench.NS)
    by_name = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["uid"] for o in server.objects.values()
    }
    for pod, doc in pods:
        result = state.graph.resolve(state.graph.get(by_name[("Pod", pod)]) or {})
        assert result.status is Rollup.ROLLED_UP, (pod, result)
        assert result.root is not None
        assert f"aibom-{result.root.kind.lower()}-{result.root.name}" == doc
    for key in state.graph:
        plan = plan_stamp(state, key, keys=Keys(), watched=lambda gk: True, namespaces=None)
        assert plan is not None and plan.patch is None, (key, plan)
