"""CPU cost of the webhook's provenance check per admission, in process (not a test).

The same Admitter the webhook runs, answering a depth-4 Pod review (Pod ->
ReplicaSet -> Deployment -> DynamoComponentDeployment -> DynamoGraphDeployment,
owners carrying the edge-proofs the webhook writes) from in-memory owners and
an in-memory SubjectAccessReview answer, so that only our own code is timed:

  - no provenance (the walk alone, as before provenance);
  - provenance, SAR cache on (a hit per admission after the first);
  - provenance, SAR cache off (a review per admission; the in-memory reviewer
    answers at once, so this is our side of a review only: JSON body, future,
    verdict; the API server's own cost comes on top, see webhook_bench.py).

CPU time (time.process_time) over N admissions, median of --runs runs. Less
sensitive to other load than latency, but not immune (shared caches, clock).

    .venv/bin/python bench/provenance_cost.py [--n 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aibom_core.kinds import default_registry  # noqa: E402
from aibom_core.objects import OwnerRef, controller_ref, ref_of  # noqa: E402
from aibom_core.provenance import proof_for  # noqa: E402
from aibom_core.stamp import Keys  # noqa: E402
from tests.unit.kobj import chain  # noqa: E402
from tests.unit.webhook_fakes import MemorySource, review  # noqa: E402
from webhook.admission import parse_review  # noqa: E402
from webhook.app import Admitter  # noqa: E402
from webhook.metrics import Metrics  # noqa: E402
from webhook.provenance import EdgeChecker, Provenance, SarCache  # noqa: E402
from webhook.resolver import OwnerCache, Resolver  # noqa: E402

KEY = b"k" * 32
KEYS = Keys()
REG = default_registry()


class InMemoryApi:
    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        return owner.kind.lower() + "s"

    async def access_review(self, body: dict[str, Any], *, timeout: float) -> bool:
        return True


def world() -> tuple[MemorySource, list[bytes]]:
    objs = chain(
        "DynamoGraphDeployment/g", "DynamoComponentDeployment/g-w", "Deployment/g-w",
        "ReplicaSet/g-w-1",
    )  # fmt: skip
    for obj in objs[1:]:
        owner = controller_ref(obj)
        assert owner is not None
        where = KEYS.proof_key(ref_of(obj).group_kind, owner.group_kind)
        obj["metadata"]["annotations"] = {where: proof_for(KEY, obj, owner)}
    rs = objs[-1]
    bodies = []
    for i in range(64):
        pod = chain("Pod/p")[0]
        pod["metadata"]["name"] = f"p-{i}"
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
             "uid": rs["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
        doc = review(pod)
        doc["request"]["userInfo"] = {
            "username": "system:serviceaccount:kube-system:replicaset-controller",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        }
        bodies.append(json.dumps(doc).encode())
    return MemorySource(objs), bodies


def admitter(source: MemorySource, mode: str) -> Admitter:
    resolver = Resolver(source, registry=REG, deadline=1.5, cache=OwnerCache(ttl=60))
    prov = None
    if mode != "off":
        api = InMemoryApi()
        prov = Provenance(
            EdgeChecker(api, cache=SarCache(ttl=10 if mode == "sar-cache-on" else 0)),
            key=KEY,
            keys=KEYS,
            check_budget=0.75,
        )
    return Admitter(resolver=resolver, registry=REG, keys=KEYS, metrics=Metrics(), provenance=prov)


async def run(adm: Admitter, bodies: list[bytes], n: int) -> tuple[float, str]:
    for body in bodies[:8]:  # warm the caches
        await adm.admit(parse_review(body))
    start = time.process_time()
    result = ""
    for i in range(n):
        _, result = await adm.admit(parse_review(bodies[i % len(bodies)]))
    return (time.process_time() - start) / n * 1e6, result


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    source, bodies = world()
    for mode in ("off", "sar-cache-on", "sar-cache-off"):
        samples = []
        result = ""
        for _ in range(args.runs):
            us, result = asyncio.run(run(admitter(source, mode), bodies, args.n))
            samples.append(us)
        print(
            f"provenance {mode:<14} {statistics.median(samples):7.1f} us CPU/admission "
            f"[{min(samples):.1f}-{max(samples):.1f}] stamped {result}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
