"""Benchmark of the annotator (not a test): cold reconcile, memory, API requests, update latency.

Starts its own real control plane (tests/controlplane), with the
controller-manager's workload controllers off (deployment, replicaset,
statefulset, daemonset, job, cronjob: the bench builds every chain itself
and they must not rescale it; the garbage collector and the rest stay on),
and fills ONE opted-in namespace with 1,000 roots and 10,000 Pods:

  - 700 Deployment -> ReplicaSet -> 10 Pods
  - 200 DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment
        -> ReplicaSet -> 10 Pods
  - 100 LeaderWorkerSet -> StatefulSet -> 10 Pods

Every Pod gets container statuses with an imageID through pods/status (what
a kubelet writes). Every object is stamped as the webhook would have stamped
it (computed with the core), so the annotator has no stamp to repair and the
figures are about documents.

Then it starts `aibom-rollup annotator` as a subprocess and measures:

  - cold: process start -> the 1,000th document written (seen through a
    ConfigMap watch of the bench's own);
  - API requests the annotator made until then (its own client counter,
    aibom_annotator_api_requests_total, by verb), per root;
  - peak RSS (VmHWM of the process) after the cold pass and at the end;
  - update latency: a Pod's imageID changes -> the root's document holds the
    new digest (watch event), for --updates Pods picked evenly, one at a time.

    .venv/bin/python bench/annotator_bench.py [--roots 1000] [--pods-per-root 10]
        [--updates 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aibom_core.graph import OwnershipGraph  # noqa: E402
from aibom_core.kinds import default_registry  # noqa: E402
from aibom_core.rollup import unpack  # noqa: E402
from aibom_core.stamp import Keys, stamp_of  # noqa: E402
from aibom_edge.kube import Kube  # noqa: E402
from tests.controlplane import ControlPlane, child_env, owner_reference  # noqa: E402

Obj = dict[str, Any]
NS = "bench"
KEYS = Keys()
REG = default_registry()
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.1"
MANAGED = "app.kubernetes.io/managed-by=aibom-rollup"
PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "DynamoGraphDeployment": "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments",
    "DynamoComponentDeployment": "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments",
    "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
}
API_VERSIONS = {
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Pod": "v1",
    "DynamoGraphDeployment": "nvidia.com/v1beta1",
    "DynamoComponentDeployment": "nvidia.com/v1beta1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sha(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def container(name: str = "main") -> Obj:
    return {
        "name": name,
        "image": IMAGE,
        "command": ["python3", "-m", "dynamo.vllm"],
        "args": ["--model", "Qwen/Qwen3-0.6B", "--tensor-parallel-size", "1"],
        "env": [{"name": "HF_HOME", "value": "/models"}, {"name": "DYN_LOG", "value": "info"}],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 9090}, "periodSeconds": 10},
    }


def pod_spec() -> Obj:
    return {
        "containers": [container()],
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "model-cache"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def template(labels: dict[str, str]) -> Obj:
    return {"metadata": {"labels": labels}, "spec": pod_spec()}


class Builder:
    """Creates objects parent-first, each stamped as the webhook would stamp it."""

    def __init__(self, kube: Kube, concurrency: int) -> None:
        self.kube = kube
        self.graph = OwnershipGraph(REG)
        self.sem = asyncio.Semaphore(concurrency)
        self.created = 0

    def _stamp(self, obj: Obj, owner: Obj | None) -> None:
        stamp = stamp_of(self.graph.resolve(obj))
        ann = {k: v for k, v in stamp.as_annotations(KEYS).items() if v is not None}
        if obj["kind"] == "ReplicaSet" and owner is not None and owner["kind"] == "Deployment":
            # The webhook's (and the annotator's) rule: a ReplicaSet mirrors its Deployment.
            own = owner["metadata"].get("annotations") or {}
            ann.update({k: v for k, v in own.items() if k in KEYS.all()})
        obj["metadata"]["annotations"] = ann

    async def create(self, kind: str, name: str, owner: Obj | None, **fields: Any) -> Obj:
        meta: Obj = {"name": name, "namespace": NS}
        if "labels" in fields:
            meta["labels"] = fields.pop("labels")
        if owner is not None:
            meta["ownerReferences"] = [owner_reference(owner)]
        obj: Obj = {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": meta, **fields}
        self._stamp(obj, owner)
        async with self.sem:
            resp = await self.kube.request("POST", PATHS[kind].format(ns=NS), json=obj)
            if resp.status not in (200, 201):
                raise RuntimeError(f"create {kind}/{name}: {resp.status} {str(resp.body)[:300]}")
            stored: Obj = resp.body
            if owner is None:
                # A root's own UID is only known now (the webhook stamps it on the next UPDATE).
                patch = {"metadata": {"annotations": {KEYS.root_uid: stored["metadata"]["uid"]}}}
                resp = await self.kube.request(
                    "PATCH",
                    f"{PATHS[kind].format(ns=NS)}/{name}",
                    json=patch,
                    content_type="application/merge-patch+json",
                )
                stored = resp.body
        stored.setdefault("apiVersion", API_VERSIONS[kind])
        stored.setdefault("kind", kind)
        self.graph.upsert(stored)
        self.created += 1
        return stored

    async def pods(self, owner: Obj, prefix: str, n: int, labels: dict[str, str]) -> list[Obj]:
        return list(
            await asyncio.gather(
                *(
                    self.create("Pod", f"{prefix}-{j}", owner, labels=labels, spec=pod_spec())
                    for j in range(n)
                )
            )
        )

    async def status(self, pod: Obj, digest: str) -> None:
        name = pod["metadata"]["name"]
        body = {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "imageID": f"{IMAGE.rsplit(':', 1)[0]}@{digest}",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": "2026-10-05T12:00:00Z"}},
                    }
                ],
            }
        }
        async with self.sem:
            resp = await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{NS}/pods/{name}/status",
                json=body,
                content_type="application/merge-patch+json",
            )
            if not resp.ok:
                raise RuntimeError(f"status {name}: {resp.status} {str(resp.body)[:300]}")


async def populate(
    kube: Kube, *, roots: int, per_root: int, concurrency: int
) -> list[tuple[str, str]]:
    """Build the namespace; returns (pod name, root document name) for every Pod."""
    b = Builder(kube, concurrency)
    n_dgd = roots // 5
    n_lws = roots // 10
    n_dep = roots - n_dgd - n_lws
    pods: list[tuple[str, str]] = []
    started = time.monotonic()

    async def deployment(name: str, owner: Obj | None, rs_name: str, doc: str) -> None:
        """Deployment -> ReplicaSet -> Pods under `owner`, as the controllers would make them."""
        labels = {"app": name}
        spec = {
            "replicas": per_root,
            "selector": {"matchLabels": labels},
            "template": template(labels),
        }
        dep = await b.create("Deployment", name, owner, spec=spec)
        rs = await b.create("ReplicaSet", rs_name, dep, spec=spec)
        for p in await b.pods(rs, rs_name, per_root, labels):
            pods.append((p["metadata"]["name"], doc))

    async def plain(i: int) -> None:
        await deployment(f"d{i}", None, f"d{i}-5f7b", f"aibom-deployment-d{i}")

    async def graph(i: int) -> None:
        dgd = await b.create(
            "DynamoGraphDeployment",
            f"g{i}",
            None,
            spec={
                "backendFramework": "vllm",
                "components": [
                    {
                        "name": "worker",
                        "type": "worker",
                        "replicas": per_root,
                        "podTemplate": {"spec": pod_spec()},
                    }
                ],
            },
        )
        dcd = await b.create(
            "DynamoComponentDeployment",
            f"g{i}-worker",
            dgd,
            spec={"type": "worker", "podTemplate": {"spec": pod_spec()}},
        )
        await deployment(
            f"g{i}-worker", dcd, f"g{i}-worker-6c9d", f"aibom-dynamographdeployment-g{i}"
        )

    async def group(i: int) -> None:
        labels = {"lws": f"l{i}"}
        lws = await b.create(
            "LeaderWorkerSet",
            f"l{i}",
            None,
            spec={
                "replicas": 1,
                "leaderWorkerTemplate": {"size": per_root, "workerTemplate": template(labels)},
            },
        )
        sts = await b.create(
            "StatefulSet",
            f"l{i}",
            lws,
            spec={
                "replicas": per_root,
                "selector": {"matchLabels": labels},
                "template": template(labels),
            },
        )
        for p in await b.pods(sts, f"l{i}", per_root, labels):
            pods.append((p["metadata"]["name"], f"aibom-leaderworkerset-l{i}"))

    jobs: list[Callable[[], Awaitable[None]]] = []
    jobs += [functools.partial(plain, i) for i in range(n_dep)]
    jobs += [functools.partial(graph, i) for i in range(n_dgd)]
    jobs += [functools.partial(group, i) for i in range(n_lws)]
    # Roots in parallel (each builds its chain parent-first); the semaphore bounds requests.
    batch = 50
    for k in range(0, len(jobs), batch):
        await asyncio.gather(*(j() for j in jobs[k : k + batch]))
        if k % 200 == 0:
            log(f"  {b.created} objects created ({time.monotonic() - started:.0f} s)")
    log(f"created {b.created} objects in {time.monotonic() - started:.0f} s; writing Pod status")
    by_name = {k: b.graph.get(k) for k in b.graph}
    pod_objs = [o for o in by_name.values() if o is not None and o["kind"] == "Pod"]
    for k in range(0, len(pod_objs), 500):
        await asyncio.gather(
            *(b.status(p, sha(f"v1-{p['metadata']['name']}")) for p in pod_objs[k : k + 500])
        )
    log(f"populated in {time.monotonic() - started:.0f} s: {roots} roots, {len(pods)} Pods")
    return pods


class DocWatch:
    """A watch of the annotator's ConfigMaps: first-write times and the latest text per name."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.first: dict[str, float] = {}
        self.text: dict[str, str] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        rv = ""
        path = f"/api/v1/namespaces/{NS}/configmaps"
        while True:
            params = {"labelSelector": MANAGED, "allowWatchBookmarks": "true"}
            if rv:
                params["resourceVersion"] = rv
            with contextlib.suppress(Exception):
                async for ev in self.kube.watch(path, params):
                    obj = ev.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        name = obj["metadata"]["name"]
                        now = time.monotonic()
                        self.first.setdefault(name, now)
                        raw = unpack(obj)
                        self.text[name] = raw.decode() if raw else ""
                        self.changed.set()

    async def wait(self, probe: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not probe():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return True


def _shows(watch: DocWatch, doc: str, digest: str) -> bool:
    return digest.split(":", 1)[1] in watch.text.get(doc, "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def metrics(port: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[key] = float(value)
    return out


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (less sensitive to a loaded machine than wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests_of(m: dict[str, float]) -> dict[str, int]:
    prefix = 'aibom_annotator_api_requests_total{verb="'
    return {k[len(prefix) : -2]: int(v) for k, v in m.items() if k.startswith(prefix)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def bench(args: argparse.Namespace, cp: ControlPlane, log_file: BinaryIO) -> dict[str, Any]:
    async with Kube.from_kubeconfig(str(cp.kubeconfig), pool_size=64) as kube:
        resp = await kube.request(
            "POST",
            "/api/v1/namespaces",
            json={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NS, "labels": {"aibom.dev/enabled": "true"}},
            },
        )
        assert resp.status == 201, resp.body
        deadline = time.monotonic() + 30
        while (
            await kube.request("GET", f"/api/v1/namespaces/{NS}/serviceaccounts/default")
        ).status != 200:
            assert time.monotonic() < deadline, "no default ServiceAccount"
            await asyncio.sleep(0.2)
        pods = await populate(
            kube, roots=args.roots, per_root=args.pods_per_root, concurrency=args.concurrency
        )
        await asyncio.sleep(2)  # let the API server's watch cache settle

        watch = DocWatch(kube)
        watch.task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.5)
        mport, hport = free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "aibom_rollup",
            "annotator",
            f"--kubeconfig={cp.kubeconfig}",
            "--lease-namespace=default",
            "--lease-name=aibom-bench",
            "--identity=bench",
            "--bind-address=127.0.0.1",
            f"--metrics-port={mport}",
            f"--health-port={hport}",
            "--log-format=json",
            "--log-level=warning",
            *args.annotator_args,
        ]
        env = {**child_env(), "PYTHONPATH": str(REPO)}
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        try:
            ok = await watch.wait(lambda: len(watch.first) >= args.roots, timeout=600)
            cold = max(watch.first.values()) - t0 if watch.first else float("nan")
            assert ok, f"only {len(watch.first)} documents after 600 s; see {log_file.name}"
            m = metrics(mport)
            reqs = requests_of(m)
            rss_cold = rss_kib(proc.pid, "VmHWM")
            cpu_cold = cpu_seconds(proc.pid)
            signed = sum('"signature":' in text for text in watch.text.values())
            log(f"cold: {cold:.2f} s, requests {reqs}, peak RSS {rss_cold / 1024:.0f} MiB")

            # Update latency: one Pod at a time gets a new digest.
            step = max(1, len(pods) // args.updates)
            latencies: list[float] = []
            for k, (pod_name, doc) in enumerate(pods[::step][: args.updates]):
                new = sha(f"v2-{pod_name}-{k}")
                start = time.monotonic()
                body = {
                    "status": {
                        "containerStatuses": [
                            {
                                "name": "main",
                                "image": IMAGE,
                                "imageID": f"{IMAGE.rsplit(':', 1)[0]}@{new}",
                                "ready": True,
                                "restartCount": 1,
                                "started": True,
                                "state": {"running": {"startedAt": "2026-10-05T13:00:00Z"}},
                            }
                        ]
                    }
                }
                resp = await kube.request(
                    "PATCH",
                    f"/api/v1/namespaces/{NS}/pods/{pod_name}/status",
                    json=body,
                    content_type="application/merge-patch+json",
                )
                assert resp.ok, resp.body
                ok = await watch.wait(functools.partial(_shows, watch, doc, new), timeout=30)
                assert ok, f"{doc} never showed {new}"
                latencies.append(time.monotonic() - start)
            m2 = metrics(mport)
            rss_end = rss_kib(proc.pid, "VmHWM")
            rss_now = rss_kib(proc.pid, "VmRSS")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
            if watch.task:
                watch.task.cancel()
        total = sum(reqs.values())
        return {
            "roots": args.roots,
            "pods": len(pods),
            "cold_seconds": round(cold, 2),
            "cold_cpu_seconds": round(cpu_cold, 2),
            "signed_documents_after_cold": signed,
            "requests_until_converged": reqs,
            "requests_per_root": round(total / args.roots, 3),
            "peak_rss_mib_after_cold": round(rss_cold / 1024, 1),
            "peak_rss_mib_at_end": round(rss_end / 1024, 1),
            "rss_mib_at_end": round(rss_now / 1024, 1),
            "update_samples": len(latencies),
            "update_p50_ms": round(1000 * statistics.median(latencies), 1),
            "update_p99_ms": round(1000 * pct(latencies, 99), 1),
            "update_max_ms": round(1000 * max(latencies), 1),
            "documents_written": {k: v for k, v in m2.items() if "documents_written_total" in k},
            "stamp_repairs": sum(
                v for k, v in m2.items() if k.startswith("aibom_annotator_stamp_repairs_total")
            ),
        }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--roots", type=int, default=1000)
    ap.add_argument("--pods-per-root", type=int, default=10)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("annotator_args", nargs="*", help="extra annotator flags (after --)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="aibom-annotator-bench-"))
    off = "-deployment,-replicaset,-statefulset,-daemonset,-job,-cronjob"
    with ControlPlane(extra_controller_manager_args=[f"--controllers=*,{off}"]) as cp:
        cp.install_crds()
        with open(workdir / "annotator.log", "wb") as log_file:
            result = asyncio.run(bench(args, cp, log_file))
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    log(f"annotator log: {workdir}/annotator.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
