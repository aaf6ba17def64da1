"""Bytes per owner held by the webhook's owner index (not a test).

Builds `--owners` ReplicaSets as the API server sends them in a metadata-only
list (PartialObjectMetadata: labels, annotations a real ReplicaSet carries,
our stamp and proof, one controller reference, managedFields), decoded from
JSON as the client decodes them, slims each into `webhook.ownerwatch.OwnerStore`
and drops the decoded objects; `tracemalloc` then says what the store keeps.
Also prints, for scale, what keeping the decoded metadata whole would cost.

    .venv/bin/python bench/owner_index_mem.py [--owners 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aibom_core.kinds import GroupKind
from aibom_core.stamp import Keys
from aibom_edge.kube import ApiResource
from webhook.ownerwatch import OwnerStore

RS = GroupKind("apps", "ReplicaSet")
RESOURCE = ApiResource(
    group="apps", version="v1", kind="ReplicaSet", plural="replicasets", namespaced=True
)


def wire(i: int) -> bytes:
    """One ReplicaSet of a metadata-only list, as JSON."""
    dep = f"model-server-{i // 3:06d}"
    name = f"{dep}-{uuid.uuid4().hex[:10]}"
    owner_uid = str(uuid.uuid4())
    meta: dict[str, Any] = {
        "name": name,
        "namespace": f"team-{i % 200:03d}",
        "uid": str(uuid.uuid4()),
        "resourceVersion": str(100000 + i),
        "generation": 3,
        "creationTimestamp": "2026-12-04T07:00:00Z",
        "labels": {"app": dep, "pod-template-hash": name.rsplit("-", 1)[1]},
        "annotations": {
            "deployment.kubernetes.io/desired-replicas": "3",
            "deployment.kubernetes.io/max-replicas": "4",
            "deployment.kubernetes.io/revision": "2",
            "aibom.dev/root": f"DynamoGraphDeployment/{dep}",
            "aibom.dev/root-uid": str(uuid.uuid4()),
            "aibom.dev/rollup": "rolled-up",
            "aibom.dev/edge-proof": "v1:" + uuid.uuid4().hex + uuid.uuid4().hex[:11],
            "aibom.dev/replicaset-edge-proof": "v1:" + uuid.uuid4().hex + uuid.uuid4().hex[:11],
        },
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": dep,
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2026-12-04T07:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}, "f:labels": {".": {}}}},
            }
        ],
    }
    return json.dumps(
        {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    ).encode()


def measure(n: int, *, whole: bool) -> float:
    """Bytes per owner retained (slim entries, or the decoded metadata whole)."""
    texts = [wire(i) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    store = OwnerStore(Keys())
    kept: list[Any] = []
    for text in texts:
        raw = json.loads(text)
        if whole:
            kept.append(raw)
            continue
        obj = store.slim(RESOURCE, raw)
        assert obj is not None
        store.upsert(RS, obj)
    del texts
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert whole or len(store) == n
    return current / n


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--owners", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = {
        label: sorted(measure(args.owners, whole=whole) for _ in range(args.runs))
        for label, whole in (("owner index entry (slim)", False), ("metadata kept whole", True))
    }
    print(f"bytes per owner, {args.owners} owners, median [min-max] of {args.runs} runs:")
    for label, vals in rows.items():
        print(f"  {label}: {statistics.median(vals):.0f} [{vals[0]:.0f}-{vals[-1]:.0f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
