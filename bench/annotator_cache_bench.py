"""What the annotator's cache costs per object, in one process (not a test).

Builds `--pods` Pods and `--deployments` Deployments as the API server sends
them (managedFields, defaults, the token volume, a status with one container
status; the bench's shape: ten Pods per ReplicaSet, one image, one imageID per
Pod unless `--shared-digest`), serialized in LIST pages of 500 with orjson.
Each page is decoded, slimmed (`annotator.slim`) and inserted into the cache
(`annotator.cache.ClusterState`) as the informers do at list time, then:

- `cached_pod_bytes`, `cached_deployment_bytes`: tracemalloc, per object;
- `slim_insert_us_per_pod`: CPU per Pod of slimming and inserting (median of
  `--runs`, the cyclic GC off as during the annotator's first lists);
- with `--rss`: one fresh process decoding the Pods only, its RSS before and
  after and its peak, with glibc's malloc thresholds pinned as the webhook
  pins them (`--pin`) or not.

    .venv/bin/python bench/annotator_cache_bench.py [--pods 20000] [--runs 5]
    .venv/bin/python bench/annotator_cache_bench.py --pods 100000 --rss [--pin]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import orjson

from aibom_core.objects import Obj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aibom_core.kinds import GroupKind, default_registry
from annotator.cache import ClusterState
from annotator.slim import slimmer

REG = default_registry()
POD = GroupKind("", "Pod")
DEPLOYMENT = GroupKind("apps", "Deployment")
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.1"
PER_ROOT = 10


def uid(seed: str) -> str:
    h = hashlib.md5(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def container(token: str | None) -> Obj:
    mounts: list[Obj] = [{"name": "models", "mountPath": "/models"}]
    if token:
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        mounts.append({"name": token, "readOnly": True, "mountPath": sa})
    return {
        "name": "main",
        "image": IMAGE,
        "command": ["python3", "-m", "dynamo.vllm"],
        "args": ["--model", "Qwen/Qwen3-0.6B", "--tensor-parallel-size", "1"],
        "env": [{"name": "HF_HOME", "value": "/models"}, {"name": "DYN_LOG", "value": "info"}],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": mounts,
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": 9090, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 10,
        },
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }


def pod_spec(token: str | None) -> Obj:
    volumes: list[Obj] = [{"name": "models", "persistentVolumeClaim": {"claimName": "mc"}}]
    if token:
        sources = [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]
        volumes.append({"name": token, "projected": {"sources": sources, "defaultMode": 420}})
    return {
        "volumes": volumes,
        "containers": [container(token)],
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "schedulerName": "default-scheduler",
    }


def managed(*fields: str) -> list[Obj]:
    return [
        {
            "manager": "python",
            "operation": "Update",
            "time": "2026-12-04T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {f"f:{f}": {".": {}} for f in fields},
        }
    ]


def pod(i: int, *, shared_digest: bool) -> Obj:
    r = i // PER_ROOT
    rs = f"d{r}-5f7b9c8d4"
    name = f"{rs}-{i:05x}"
    digest = hashlib.sha256((str(r) if shared_digest else name).encode()).hexdigest()
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid(name),
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-12-04T10:00:00Z",
            "labels": {"app": f"d{r}"},
            "annotations": {
                "aibom.dev/root": f"Deployment/d{r}",
                "aibom.dev/root-uid": uid(f"d{r}"),
                "aibom.dev/rollup": "rolled-up",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs,
                    "uid": uid(rs),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": managed("metadata", "spec", "status"),
        },
        "spec": pod_spec(f"kube-api-access-{i:05x}"),
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imageID": f"{IMAGE.rsplit(':', 1)[0]}@sha256:{digest}",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-10-05T12:00:00Z"}},
                }
            ],
        },
    }


def deployment(i: int) -> Obj:
    name, labels = f"d{i}", {"app": f"d{i}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid(name),
            "resourceVersion": str(5000 + i),
            "annotations": {"aibom.dev/rollup": "root", "deployment.kubernetes.io/revision": "1"},
            "managedFields": managed("metadata", "spec"),
        },
        "spec": {
            "replicas": PER_ROOT,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(None)},
            "strategy": {"type": "RollingUpdate"},
        },
        "status": {
            "replicas": PER_ROOT,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
            ],
        },
    }


def pages(objs: list[Obj]) -> list[bytes]:
    return [orjson.dumps({"items": objs[k : k + 500]}) for k in range(0, len(objs), 500)]


def cache_of(texts: list[bytes], gk: GroupKind, state: ClusterState) -> float:
    """Decodes, slims and inserts every page; returns the CPU seconds of slim + insert."""
    slim = slimmer(REG)
    took = 0.0
    for text in texts:
        items = orjson.loads(text)["items"]
        t0 = time.process_time()
        for item in items:
            item.setdefault("apiVersion", "v1")
            item.setdefault("kind", gk.kind)
            state.upsert(gk, slim(item))
        took += time.process_time() - t0
    return took


def new_state() -> ClusterState:
    state = ClusterState(REG, trust_all=True)
    state.bulk = True
    return state


def held_per_object(texts: list[bytes], gk: GroupKind, n: int) -> int:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state = new_state()
    cache_of(texts, gk, state)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del state
    return round(held / n)


def status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def rss(args: argparse.Namespace) -> None:
    if args.pin:
        from aibom_edge.heap import pin_malloc_thresholds

        pin_malloc_thresholds()
    gc.collect()
    before = status_mib("VmRSS")
    state = new_state()
    slim = slimmer(REG)
    gc.disable()
    for k in range(0, args.pods, 500):
        batch = [pod(i, shared_digest=args.shared_digest) for i in range(k, k + 500)]
        text = orjson.dumps({"items": batch})
        del batch
        for item in orjson.loads(text)["items"]:
            item.update(apiVersion="v1", kind="Pod")
            state.upsert(POD, slim(item))
    gc.freeze()
    gc.enable()
    after = status_mib("VmRSS")
    print(
        f"pods {args.pods} pin {args.pin}: RSS {before:.1f} -> {after:.1f} MiB, "
        f"peak {status_mib('VmHWM'):.1f} MiB, {(after - before) * 1048576 / args.pods:.0f} B/Pod"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--deployments", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shared-digest", action="store_true", help="one imageID per ReplicaSet")
    ap.add_argument("--rss", action="store_true", help="RSS of one fresh process (Pods only)")
    ap.add_argument("--pin", action="store_true", help="with --rss: pin malloc thresholds")
    args = ap.parse_args()
    if args.rss:
        rss(args)
        return 0
    pod_pages = pages([pod(i, shared_digest=args.shared_digest) for i in range(args.pods)])
    dep_pages = pages([deployment(i) for i in range(args.deployments)])
    gc.disable()
    cpu = [cache_of(pod_pages, POD, new_state()) / args.pods * 1e6 for _ in range(args.runs)]
    gc.enable()
    out = {
        "api_pod_json_bytes": round(sum(map(len, pod_pages)) / args.pods),
        "cached_pod_bytes": held_per_object(pod_pages, POD, args.pods),
        "cached_deployment_bytes": held_per_object(dep_pages, DEPLOYMENT, args.deployments),
        "slim_insert_us_per_pod": round(statistics.median(cpu), 1),
        "slim_insert_us_per_pod_range": [round(min(cpu), 1), round(max(cpu), 1)],
    }
    print(orjson.dumps(out).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
