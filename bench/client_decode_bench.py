"""Benchmark (not a test): decoding a LIST page, raw JSON vs the `kubernetes` package's models.

The annotator keeps its own raw-JSON request path and takes only credentials
from the `kubernetes` package (docs/annotator.md). This measures what the
package's typed path would cost per page of 500 Pods, the annotator's page
size: `json.loads` into dicts (ours) vs `ApiClient.deserialize` into
`V1PodList` models (what `CoreV1Api.list_pod_for_all_namespaces` returns),
time (median of --repeat) and memory held by the decoded page (tracemalloc).

    .venv/bin/python bench/client_decode_bench.py [--pods 500] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any


def pod(i: int) -> dict[str, Any]:
    name = f"web-{i // 10}-abcde-{i:05d}"
    image = f"registry.example/app-{i // 10}:1.{i % 7}"
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-12-04T05:00:00Z",
            "labels": {"app": f"web-{i // 10}", "pod-template-hash": "abcde"},
            "annotations": {
                "aibom.dev/root": f"Deployment/web-{i // 10}",
                "aibom.dev/rollup": "rolled-up",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{i // 10}-abcde",
                    "uid": f"11111111-0000-0000-0000-{i // 10:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-04T05:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "env": [{"name": "MODEL_ID", "value": "meta/llama"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "nodeName": "node-1",
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": image,
                    "imageID": f"{image.split(':', maxsplit=1)[0]}@sha256:{i:064x}",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-04T05:00:01Z"}},
                }
            ],
        },
    }


def measure(decode: Callable[[], Any], repeat: int) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        decode()
        times.append(time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    kept = decode()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return statistics.median(times), held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    from kubernetes.client import ApiClient

    page = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PodList",
            "metadata": {"resourceVersion": "99"},
            "items": [pod(i) for i in range(args.pods)],
        }
    ).encode()
    client = ApiClient()
    text = page.decode()
    raw_t, raw_m = measure(lambda: json.loads(page), args.repeat)
    model_t, model_m = measure(
        lambda: client.deserialize(text, "V1PodList", "application/json"),
        args.repeat,
    )
    print(f"page: {args.pods} Pods, {len(page) / 1024:.0f} KiB of JSON")
    print(f"json.loads (ours):             {raw_t * 1000:8.1f} ms  {raw_m / 2**20:6.1f} MiB held")
    print(
        f"kubernetes V1PodList models:   {model_t * 1000:8.1f} ms  {model_m / 2**20:6.1f} MiB held"
    )
    print(f"models / raw: {model_t / raw_t:.1f}x time, {model_m / raw_m:.1f}x memory")


if __name__ == "__main__":
    main()
