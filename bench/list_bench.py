"""Time until an informer of Pods is synced, for two source trees (or page sizes), on one
real control plane.

    .venv/bin/python bench/list_bench.py --pods 20000 --repeats 3 \\
        --tree before=/tmp/main-src --tree after=.
    .venv/bin/python bench/list_bench.py --pods 50000 --repeats 3 --tree main=. \\
        --page-size 500 --page-size 2000 --page-size 5000

Creates `--pods` Pods in one namespace as the annotator bench has them (its
Pod spec, a controller owner for every 10, the webhook's stamps, container
statuses with an imageID written through pods/status; never scheduled).
Then, for each repeat, for each tree (and each `--page-size`) in turn, a
fresh Python process imports `annotator.informer` and `annotator.slim` from
that tree and lists the Pods as the annotator does (the tree's page size
unless one is given, the real slimmer, the Pod schema where the tree has
one, a sink that stores them) until the informer is synced. Prints each
run's median and range of the seconds to synced, its CPU seconds and
kube-apiserver's and etcd's CPU seconds around it, the ratio of the medians of two
trees, and the load average before and after: on a loaded machine only
ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from annotator_bench import cpu_seconds, pod_spec, sha, status_body  # noqa: E402

from aibom_core.stamp import Keys  # noqa: E402
from aibom_edge.kube import Kube  # noqa: E402
from tests.controlplane import ControlPlane, child_env, owner_reference  # noqa: E402

NS = "list-bench"
KEYS = Keys()

CHILD = """
import asyncio, json, sys, time
from aibom_core.kinds import default_registry
from aibom_edge.kube import ApiResource, Kube
from annotator.informer import Informer
from annotator.slim import slimmer

POD = ApiResource(group="", version="v1", kind="Pod", plural="pods", namespaced=True)

class Sink:
    def __init__(self):
        self.objects = {}
    def upsert(self, gk, obj):
        key = obj["metadata"]["uid"]
        self.objects[key] = obj
        return key
    def delete(self, gk, obj):
        self.objects.pop(obj["metadata"]["uid"], None)
    def relisted(self, gk, seen):
        pass
    def status(self, informer):
        pass
    def restarted(self, gk, reason):
        pass

async def main():
    try:  # the tree's default page size, unless one is given
        from aibom_edge.reflector import DEFAULT_PAGE_SIZE
    except ImportError:
        DEFAULT_PAGE_SIZE = 500
    page_size = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_PAGE_SIZE
    async with Kube.from_kubeconfig(sys.argv[1]) as kube:
        sink = Sink()
        from aibom_core.kinds import GroupKind
        try:  # the Pod schema (aibom_edge.schema), in trees that have it
            from annotator.slim import POD_SCHEMA
            opts = {"schema": POD_SCHEMA}
        except ImportError:
            opts = {}
        inf = Informer(kube, POD, gk=GroupKind("", "Pod"), sink=sink,
                       slim=slimmer(default_registry()), page_size=page_size, **opts)
        t0, c0 = time.perf_counter(), time.process_time()
        task = asyncio.create_task(inf.run())
        await inf.synced.wait()
        took, cpu = time.perf_counter() - t0, time.process_time() - c0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        import annotator.informer as m
        print(json.dumps({"seconds": took, "cpu": cpu, "objects": len(sink.objects), "src": m.__file__}))

asyncio.run(main())
"""


async def populate(kube: Kube, n: int, concurrency: int = 48) -> None:
    resp = await kube.request(
        "POST", "/api/v1/namespaces", json={"metadata": {"name": NS}}, timeout=30
    )
    if not resp.ok and resp.status != 409:
        raise RuntimeError(f"namespace: {resp.status} {resp.body}")
    sem = asyncio.Semaphore(concurrency)

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            r = await kube.request("POST", path, json=body, timeout=60)
        if not r.ok:
            raise RuntimeError(f"{path}: {r.status} {str(r.body)[:200]}")
        return r.body  # type: ignore[no-any-return]

    # The owners: ConfigMaps (no controller acts on them; the garbage collector
    # finds them), one per 10 Pods, as a ReplicaSet would own its Pods.
    owners = await asyncio.gather(
        *(
            post(f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": f"o{k}"}})
            for k in range((n + 9) // 10)
        )
    )
    for o in owners:
        o.setdefault("apiVersion", "v1")
        o.setdefault("kind", "ConfigMap")

    async def one(i: int) -> None:
        owner = owners[i // 10]
        uid = owner["metadata"]["uid"]
        stamps = {
            KEYS.root: f"v1/ConfigMap/{NS}/{owner['metadata']['name']}",
            KEYS.root_uid: uid,
            KEYS.rollup: "rolled-up",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{i}",
                "labels": {"app": f"a{i // 10}"},
                "annotations": stamps,
                "ownerReferences": [owner_reference(owner)],
            },
            "spec": pod_spec(),
        }
        await post(f"/api/v1/namespaces/{NS}/pods", body)
        async with sem:
            r = await kube.request(
                "PATCH",
                f"/api/v1/namespaces/{NS}/pods/p{i}/status",
                json=status_body(sha(f"d{i // 10}")),
                content_type="application/merge-patch+json",
                timeout=60,
            )
        if not r.ok:
            raise RuntimeError(f"pod {i} status: {r.status} {str(r.body)[:200]}")

    await asyncio.gather(*(one(i) for i in range(n)))


def run_child(tree: Path, kubeconfig: Path, page_size: int | None) -> dict[str, Any]:
    env = child_env()
    env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-c", CHILD, str(kubeconfig)]
    if page_size is not None:
        cmd.append(str(page_size))
    out = subprocess.check_output(cmd, env=env, cwd=tree, text=True, timeout=600)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--tree", action="append", required=True, metavar="NAME=DIR", help="a source tree"
    )
    ap.add_argument(
        "--page-size",
        action="append",
        type=int,
        metavar="N",
        help="list in pages of N (repeat to compare sizes; default: each tree's own)",
    )
    args = ap.parse_args()
    sizes: list[int | None] = list(args.page_size or [None])
    trees = {
        (name if len(sizes) == 1 else f"{name}@{size}"): (Path(d).resolve(), size)
        for name, _, d in (t.partition("=") for t in args.tree)
        for size in sizes
    }
    with ControlPlane() as cp:

        async def build() -> None:
            async with Kube.from_kubeconfig(str(cp.kubeconfig)) as kube:
                started = time.monotonic()
                await populate(kube, args.pods)
                print(f"{args.pods} Pods created in {time.monotonic() - started:.1f} s")

        asyncio.run(build())
        load = {"start": os.getloadavg()[0]}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        apiserver, etcd = cp.pids["kube-apiserver"], cp.pids["etcd"]
        for _ in range(args.repeats):
            for name, (tree, size) in trees.items():
                api0, etcd0 = cpu_seconds(apiserver), cpu_seconds(etcd)
                r = run_child(tree, cp.kubeconfig, size)
                r["api_cpu"] = cpu_seconds(apiserver) - api0
                r["etcd_cpu"] = cpu_seconds(etcd) - etcd0
                if r["objects"] != args.pods:
                    raise SystemExit(f"{name}: listed {r['objects']} Pods, not {args.pods}")
                runs[name].append(r)
                print(
                    f"{name}: {r['seconds']:.2f} s to synced, {r['cpu']:.2f} s CPU, "
                    f"kube-apiserver {r['api_cpu']:.2f} s, etcd {r['etcd_cpu']:.2f} s ({r['src']})",
                    flush=True,
                )
        load["end"] = os.getloadavg()[0]
    summary: dict[str, Any] = {"pods": args.pods, "repeats": args.repeats, "load": load}
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        summary[name] = {
            "median_s": round(statistics.median(secs), 2),
            "range_s": [round(min(secs), 2), round(max(secs), 2)],
            "median_cpu_s": round(statistics.median(r["cpu"] for r in rs), 2),
            "median_apiserver_cpu_s": round(statistics.median(r["api_cpu"] for r in rs), 2),
            "median_etcd_cpu_s": round(statistics.median(r["etcd_cpu"] for r in rs), 2),
        }
    names = list(trees)
    if len(names) == 2:
        a, b = (summary[n]["median_s"] for n in names)
        summary[f"{names[1]}/{names[0]}"] = round(b / a, 3)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
