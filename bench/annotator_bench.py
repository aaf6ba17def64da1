"""Benchmark of the annotator (not a test): cold reconcile, restart, memory, API requests,
update latency under Pod churn, and the API server's own write ceiling.

Starts its own real control plane (tests/controlplane), with the
controller-manager's workload controllers off (deployment, replicaset,
statefulset, daemonset, job, cronjob: the bench builds every chain itself
and they must not rescale it; the garbage collector and the rest stay on),
and fills ONE opted-in namespace with --roots roots (default 1,000) of
--pods-per-root Pods (default 10):

  - 70% Deployment -> ReplicaSet -> Pods
  - 20% DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment
        -> ReplicaSet -> Pods
  - 10% LeaderWorkerSet -> StatefulSet -> Pods

Every Pod gets container statuses with an imageID through pods/status (what
a kubelet writes). Every object is what the webhook admits: stamped as it
would have stamped it (computed with the core), and with its edge-proof
(`aibom.dev/edge-proof`, a ReplicaSet's own under `replicaset-edge-proof`
beside the copy of its Deployment's) under a key the bench makes for the run,
so the annotator has no stamp to repair and the figures are about documents.
The annotator runs in the default configuration: the provenance rule, with
that key (`--provenance-key`), in a namespace that is not guarded (no
ValidatingAdmissionPolicyBinding), so every edge counts by its proof.
`--trust-owner-references` runs the configuration of the numbers published
before (every reference taken as written, no key).

Then it starts `aibom-rollup annotator` as a subprocess and measures, in order:

  - cold: process start -> the last root's document written (seen through a
    ConfigMap watch of the bench's own), `cold_seconds`;
  - API requests the annotator made until then (its own client counter,
    aibom_annotator_api_requests_total, by verb), per root;
  - peak RSS (VmHWM of the process) after the cold pass and at the end;
  - update latency: a Pod's imageID changes -> the root's document holds the
    new digest (watch event), for --updates Pods picked evenly, one at a time,
    while --churn-pods other Pods (default 1,000) are replaced continuously
    (delete, create, status with a new digest; --churn-rate per second);
  - the write ceiling: the annotator stopped, a bare client
    (--ceiling-concurrency requests in flight, no rate limit) server-side
    applies as many ConfigMaps as there are documents, with the same data
    and annotations, into a namespace nobody watches: `write_ceiling_seconds`,
    what the API server itself takes, and `cold_over_ceiling`;
  - restart: a NEW annotator over the documents that now exist, from process
    start to its first full resync converged (its metric
    aibom_annotator_resync_completed_timestamp_seconds): `restart_seconds`,
    and the documents it wrote, deleted or stamps it patched:
    `restart_writes`;
  - just before each restart, the list ceiling: a bare client lists every
    kind the annotator lists, as it lists them (concurrently, the same
    pages, PartialObjectMetadata where it asks for that) and parses nothing
    but the continue tokens: `list_ceiling_seconds`, what the API server
    itself takes to serve the restart's lists, and
    `restart_over_list_ceiling`. `--restarts N` repeats the pair N times
    and reports the median run (the restart is where this machine's API
    server varies most from run to run).

The machine's load average is recorded at each phase (`load`), and the CPU
seconds of the annotator and of kube-apiserver and etcd per phase, which
say who the limit is on a machine shared with other work.

    .venv/bin/python bench/annotator_bench.py [--roots 1000] [--pods-per-root 10]
        [--updates 200] [--churn-pods 1000] [--churn-rate 50] [--json out.json]
        [-- extra annotator flags]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import functools
import hashlib
import itertools
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from aibom_core.objects import Obj

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aibom_core.document import (  # noqa: E402
    DocLabels,
    unpack,
)
from aibom_core.graph import OwnershipGraph  # noqa: E402
from aibom_core.kinds import (  # noqa: E402
    CONFIGMAP,
    GroupKind,
    default_registry,
    group_kind_of,
)
from aibom_core.objects import controller_ref  # noqa: E402
from aibom_core.provenance import parse_key, proof_for  # noqa: E402
from aibom_core.stamp import Keys, stamp_of  # noqa: E402
from aibom_edge.kube import METADATA_LIST, Kube  # noqa: E402
from aibom_edge.reflector import DEFAULT_PAGE_SIZE  # noqa: E402
from annotator.settings import wanted_kinds  # noqa: E402
from annotator.slim import keeps_metadata_only  # noqa: E402
from tests.controlplane import ControlPlane, child_env, owner_reference  # noqa: E402

NS = "bench"
KEYS = Keys()
REG = default_registry()
REG_POD = GroupKind("", "Pod")
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


def prove(obj: Obj, key: bytes) -> None:
    """Write the edge-proof the webhook writes when it proves `obj`'s controller edge
    (under `replicaset-edge-proof` for a ReplicaSet under a Deployment)."""
    owner = controller_ref(obj)
    if owner is None:
        return
    where = KEYS.proof_key(group_kind_of(obj), owner.group_kind)
    # Bound to the creation second, as the webhook binds a CREATE (no UID yet).
    proof = proof_for(key, obj, owner, now=time.time())
    obj["metadata"].setdefault("annotations", {})[where] = proof


class Builder:
    """Creates objects parent-first, each as the webhook admits it: stamped, and with the
    proof of its controller edge under `key` (None: no proof, for status writes only)."""

    def __init__(self, kube: Kube, concurrency: int, key: bytes | None = None) -> None:
        self.kube = kube
        self.key = key
        self.graph = OwnershipGraph(REG)
        self.sem = asyncio.Semaphore(concurrency)
        self.created = 0

    def _stamp(self, obj: Obj, owner: Obj | None) -> None:
        stamp = stamp_of(self.graph.resolve(obj))
        ann = stamp.annotations(KEYS)
        if obj["kind"] == "ReplicaSet" and owner is not None and owner["kind"] == "Deployment":
            # The webhook's (and the annotator's) rule: a ReplicaSet mirrors its Deployment.
            # The deployment controller copies every annotation, its proof included.
            own = owner["metadata"].get("annotations") or {}
            ann.update({k: v for k, v in own.items() if k in (*KEYS.all(), KEYS.edge_proof)})
        obj["metadata"]["annotations"] = ann
        if self.key is not None:
            prove(obj, self.key)

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
        body = status_body(digest, started="2026-10-05T12:00:00Z")
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
    kube: Kube,
    *,
    roots: int,
    per_root: int,
    concurrency: int,
    key: bytes,
    pods_out: dict[str, Obj] | None = None,
) -> list[tuple[str, str]]:
    """Build the namespace (edge proofs under `key`); returns (pod name, root document
    name) for every Pod.

    `pods_out`, if given, receives every Pod as stored (name -> object): the
    churn phase replaces some of them under the same owner.
    """
    b = Builder(kube, concurrency, key)
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
    if pods_out is not None:
        pods_out.update((p["metadata"]["name"], p) for p in pod_objs)
    log(f"populated in {time.monotonic() - started:.0f} s: {roots} roots, {len(pods)} Pods")
    return pods


class DocWatch:
    """A watch of the annotator's ConfigMaps: first-write times and the latest text per name.

    (bench/peer.py watches the peer's AIBOMs with it: another path, another `seen`.)
    """

    def __init__(
        self,
        kube: Kube,
        path: str = f"/api/v1/namespaces/{NS}/configmaps",
        selector: str | None = MANAGED,
    ) -> None:
        self.kube = kube
        self.path = path
        self.selector = selector
        self.first: dict[str, float] = {}
        self.text: dict[str, str] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        rv = ""
        while True:
            params = {"allowWatchBookmarks": "true"}
            if self.selector:
                params["labelSelector"] = self.selector
            if rv:
                params["resourceVersion"] = rv
            with contextlib.suppress(Exception):
                async for ev in self.kube.watch(self.path, params):
                    obj = ev.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self.seen(obj)

    def seen(self, obj: dict[str, Any]) -> None:
        """An object was added or modified: note its first time and its document's text."""
        name = obj["metadata"]["name"]
        self.first.setdefault(name, time.monotonic())
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


async def terminate(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM to the process group, SIGKILL after 30 s; returns once it exited."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def stop(proc: asyncio.subprocess.Process, watch: DocWatch) -> None:
    """`terminate` the process and end the watch (bench/peer.py)."""
    await terminate(proc)
    if watch.task:
        watch.task.cancel()


# The configuration of the numbers published before edge proofs were written by the
# bench (`--trust-owner-references`): every reference taken as written.
TRUST_ALL_ARGS = ("--trust-owner-references",)
CEILING_NS = "bench-ceiling"


def page_size_of(extra: list[str]) -> int:
    """The annotator's list page size under these args (--page-size), else its default."""
    for i, arg in enumerate(extra):
        if arg.startswith("--page-size="):
            return int(arg.split("=", 1)[1])
        if arg == "--page-size" and i + 1 < len(extra):
            return int(extra[i + 1])
    return DEFAULT_PAGE_SIZE


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose restart_seconds is the median (the lower one of an even count):
    one real run's fields, not a mix of medians."""
    ordered = sorted(runs, key=lambda r: r["restart_seconds"])
    return ordered[(len(ordered) - 1) // 2]


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def metric_sum(m: dict[str, float], name: str) -> float:
    """The sum of every series of one metric (`name` without labels)."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def try_metrics(port: int) -> dict[str, float] | None:
    try:
        return metrics(port)
    except OSError:
        return None  # not serving yet


def _status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            out[name] = cpu_seconds(pid)
    return out


def cpu_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 1) for k, v in sorted(after.items())}


class AnnotatorProcess:
    """One `aibom-rollup annotator` subprocess of the bench."""

    def __init__(
        self, proc: asyncio.subprocess.Process, mport: int, hport: int, t0: float, wall: float
    ):
        self.proc = proc
        self.mport = mport
        self.hport = hport
        self.t0 = t0  # monotonic, at start
        self.wall = wall  # time.time(), at start
        self.synced_seconds = float("nan")  # start -> /readyz 200 (every cache listed)
        self.synced_rss_kib = 0  # VmRSS then: the cache, before any write
        self._ready_task = asyncio.create_task(self._watch_ready())

    async def _watch_ready(self) -> None:
        url = f"http://127.0.0.1:{self.hport}/readyz"
        while self.proc.returncode is None:
            try:
                status = await asyncio.to_thread(_status_of, url)
            except OSError:
                status = 0
            if status == 200:
                self.synced_seconds = time.monotonic() - self.t0
                self.synced_rss_kib = rss_kib(self.pid, "VmRSS")
                return
            await asyncio.sleep(0.1)

    @classmethod
    async def start(
        cls,
        cp: ControlPlane,
        extra: list[str],
        log_file: BinaryIO,
        identity: str,
        profile: str | None = None,
    ) -> AnnotatorProcess:
        mport, hport = free_port(), free_port()
        prof = ["-m", "cProfile", "-o", f"{profile}/{identity}.prof"] if profile else []
        cmd = [
            sys.executable,
            *prof,
            "-m",
            "aibom_rollup",
            "annotator",
            f"--kubeconfig={cp.kubeconfig}",
            "--lease-namespace=default",
            "--lease-name=aibom-bench",
            f"--identity={identity}",
            "--bind-address=127.0.0.1",
            f"--metrics-port={mport}",
            f"--health-port={hport}",
            "--log-format=json",
            "--log-level=warning",
            *extra,
        ]
        env = {**child_env(), "PYTHONPATH": str(REPO)}
        t0, wall = time.monotonic(), time.time()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        return cls(proc, mport, hport, t0, wall)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        return metrics(self.mport)

    async def converged(self, timeout: float) -> tuple[float, dict[str, float]]:
        """Seconds from start until the first full resync converged (the annotator's metric)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise RuntimeError(f"annotator exited with {self.proc.returncode}")
            m = await asyncio.to_thread(try_metrics, self.mport)
            done = (m or {}).get("aibom_annotator_resync_completed_timestamp_seconds", 0.0)
            if m is not None and done > 0:
                return done - self.wall, m
            await asyncio.sleep(0.1)
        raise TimeoutError(f"the annotator did not converge within {timeout:.0f} s")

    async def stop(self) -> None:
        self._ready_task.cancel()
        await terminate(self.proc)


async def create_namespace(kube: Kube, name: str, labels: dict[str, str]) -> None:
    resp = await kube.request(
        "POST",
        "/api/v1/namespaces",
        json={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        },
    )
    assert resp.status == 201, resp.body
    deadline = time.monotonic() + 30
    while (
        await kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
    ).status != 200:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        await asyncio.sleep(0.2)


async def cold_start(watch: DocWatch, expected: int, t0: float, timeout: float = 900) -> float:
    """Seconds from `t0` until `expected` documents were seen written (reusable: bench/peer.py)."""
    ok = await watch.wait(lambda: len(watch.first) >= expected, timeout=timeout)
    assert ok, f"only {len(watch.first)} of {expected} documents after {timeout:.0f} s"
    return max(watch.first.values()) - t0


def status_body(digest: str, restarts: int = 0, started: str = "2026-10-05T13:00:00Z") -> Obj:
    """A Pod status as a kubelet writes it once the container runs: image and imageID."""
    return {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imageID": f"{IMAGE.rsplit(':', 1)[0]}@{digest}",
                    "ready": True,
                    "restartCount": restarts,
                    "started": True,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        }
    }


class Churn:
    """Replaces a fixed set of Pods round-robin (delete, create under the same owner, with
    the proof of its new name under `key`, status with a new digest) at `rate` per
    second, `concurrency` at a time, until stopped."""

    def __init__(
        self, kube: Kube, pods: list[Obj], *, rate: float, key: bytes, concurrency: int = 8
    ):
        self.kube = kube
        self.key = key
        self.slots = [
            {
                "metadata": {
                    k: v
                    for k, v in p["metadata"].items()
                    if k in ("name", "namespace", "labels", "annotations", "ownerReferences")
                },
                "spec": p["spec"],
            }
            for p in pods
        ]
        self.bases = [p["metadata"]["name"] for p in pods]
        self.rate = rate
        self.sem = asyncio.Semaphore(concurrency)
        self.replaced = 0
        self.errors = 0
        self.started = 0.0
        self.stopped = 0.0
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def _replace(self, i: int, k: int) -> None:
        async with self.sem:
            old = self.slots[i]
            name = old["metadata"]["name"]
            new = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(old)}
            new["metadata"]["name"] = f"{self.bases[i]}-r{k}"
            prove(new, self.key)  # the proof binds the name: the webhook proves it anew
            path = f"/api/v1/namespaces/{NS}/pods"
            resp = await self.kube.request(
                "DELETE", f"{path}/{name}", params={"gracePeriodSeconds": "0"}
            )
            created = await self.kube.request("POST", path, json=new)
            if resp.status not in (200, 404) or created.status != 201:
                self.errors += 1
                return
            self.slots[i] = new
            status = await self.kube.request(
                "PATCH",
                f"{path}/{new['metadata']['name']}/status",
                json=status_body(sha(f"churn-{k}")),
                content_type="application/merge-patch+json",
            )
            if not status.ok:
                self.errors += 1
                return
            self.replaced += 1

    async def _run(self) -> None:
        self.started = time.monotonic()
        for k in itertools.count():
            due = self.started + k / self.rate
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.sem.acquire()  # never more than `concurrency` queued
            self.sem.release()
            task = asyncio.create_task(self._replace(k % len(self.slots), k))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    def start(self) -> None:
        if self.slots and self.rate > 0:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, Any]:
        self.stopped = time.monotonic()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            await asyncio.gather(*self._inflight, return_exceptions=True)
        took = max(1e-9, self.stopped - self.started) if self.started else 0.0
        return {
            "churn_pods": len(self.slots) if self._task else 0,
            "churn_replacements": self.replaced,
            "churn_errors": self.errors,
            "churn_per_second": round(self.replaced / took, 1) if took else 0.0,
        }


async def measure_updates(
    kube: Kube, watch: DocWatch, pods: list[tuple[str, str]], n: int
) -> list[float]:
    """Digest change of one Pod at a time -> its root's document shows it (seconds each)."""
    step = max(1, len(pods) // max(1, n))
    latencies: list[float] = []
    for k, (pod_name, doc) in enumerate(pods[::step][:n]):
        new = sha(f"v2-{pod_name}-{k}")
        start = time.monotonic()
        resp = await kube.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{pod_name}/status",
            json=status_body(new, restarts=1),
            content_type="application/merge-patch+json",
        )
        assert resp.ok, resp.body
        ok = await watch.wait(functools.partial(_shows, watch, doc, new), timeout=60)
        assert ok, f"{doc} never showed {new}"
        latencies.append(time.monotonic() - start)
    return latencies


async def write_ceiling(
    kube: Kube, texts: list[str], *, concurrency: int, prefix: str = "aibom.dev/"
) -> dict[str, Any]:
    """A bare client server-side applies one ConfigMap per text (the documents' data and
    annotations, same size) as fast as the API server takes them, `concurrency` in flight."""
    sem = asyncio.Semaphore(concurrency)
    failures = 0

    async def one(i: int, text: str) -> None:
        nonlocal failures
        name = f"ceiling-{i}"
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": CEILING_NS,
                "labels": {"bench.aibom.dev/ceiling": "true", f"{prefix}root-name": name},
                "annotations": {
                    f"{prefix}input-hash": sha(text),
                    f"{prefix}generator": "bench-ceiling",
                    f"{prefix}encoding": "json",
                },
            },
            "data": {"aibom.json": text},
        }
        async with sem:
            resp = await kube.request(
                "PATCH",
                f"/api/v1/namespaces/{CEILING_NS}/configmaps/{name}",
                params={"fieldManager": "bench-ceiling", "force": "true"},
                json=body,
                content_type="application/apply-patch+yaml",
            )
            if not resp.ok:
                failures += 1

    started = time.monotonic()
    await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    took = time.monotonic() - started
    assert not failures, f"{failures} ceiling applies failed"
    return {
        "write_ceiling_seconds": round(took, 2),
        "write_ceiling_per_second": round(len(texts) / took, 1),
        "write_ceiling_documents": len(texts),
        "write_ceiling_concurrency": concurrency,
        "write_ceiling_mean_bytes": round(sum(len(t) for t in texts) / max(1, len(texts))),
    }


_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"]*)"')


def _continue_token(raw: bytes) -> dict[str, str]:
    """The list's continue token, from the list's metadata (which the API server writes
    before the items; an item's text is never searched), without parsing the page: the
    ceiling client reads nothing else."""
    end = raw.find(b'"items"')
    found = _CONTINUE.search(raw, 0, end if end >= 0 else len(raw))
    return {"continue": found.group(1).decode()} if found else {}


async def list_ceiling(kube: Kube, *, page_size: int) -> dict[str, Any]:
    """What the API server itself takes to serve a restart's lists: a bare client lists
    every kind the annotator lists, as it lists them (concurrently, a task per kind; the
    same pages; PartialObjectMetadata where the annotator asks for it; our ConfigMaps by
    their label), and parses nothing but each page's continue token."""

    async def one(gk: GroupKind) -> int:
        res = await kube.discovery.resource(gk)
        if res is None:
            return 0
        first = {"limit": str(page_size)}
        if gk == CONFIGMAP:
            first["labelSelector"] = DocLabels().selector
        params, pages = first, 0
        while True:
            resp = await kube.request(
                "GET",
                res.path(),
                params=params,
                accept=METADATA_LIST if keeps_metadata_only(REG, gk) else None,
                timeout=120,
                decode=_continue_token,
            )
            assert resp.ok, f"list {res.path()}: HTTP {resp.status}"
            pages += 1
            token = resp.body.get("continue")
            if not token:
                return pages
            params = {**first, "continue": token}

    started = time.monotonic()
    pages = await asyncio.gather(*(one(gk) for gk in wanted_kinds(REG)))
    return {"seconds": time.monotonic() - started, "pages": sum(pages)}


async def cached_pod_bytes(kube: Kube, sample: int = 2000) -> dict[str, Any]:
    """Bytes the annotator's cache keeps per Pod: real Pods from the API server, slimmed
    (annotator.slim) and held in the cache's graph (annotator.cache), traced by tracemalloc."""
    import gc
    import tracemalloc

    from annotator.cache import ClusterState
    from annotator.slim import slimmer

    raw: list[bytes] = []
    params = {"limit": "500"}
    while len(raw) * 500 < sample:
        resp = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods", params=params)
        raw.append(json.dumps(resp.body).encode())
        token = (resp.body.get("metadata") or {}).get("continue")
        if not token:
            break
        params = {"limit": "500", "continue": token}
    state = ClusterState(REG, trust_all=True)
    state.bulk = True
    slim = slimmer(REG)
    pod_gk = REG_POD
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    n = 0
    for page in raw:
        for item in json.loads(page)["items"]:
            item.setdefault("apiVersion", "v1")
            item.setdefault("kind", "Pod")
            state.upsert(pod_gk, slim(item))
            n += 1
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del state
    api_bytes = sum(len(page) for page in raw)
    return {
        "cached_pod_bytes": round(held / max(1, n)),
        "api_pod_json_bytes": round(api_bytes / max(1, n)),
        "cached_pod_sample": n,
        **await cached_tracked_bytes(kube),
    }


async def cached_tracked_bytes(kube: Kube, sample: int = 500) -> dict[str, Any]:
    """The same for the tracked kinds (Deployments, DGDs, DCDs, LeaderWorkerSets,
    StatefulSets): up to `sample` of each, as the bench's mix has them."""
    import gc
    import tracemalloc

    from annotator.cache import ClusterState
    from annotator.slim import slimmer

    objs: list[tuple[GroupKind, bytes]] = []
    tracked = ("Deployment", "DynamoGraphDeployment", "DynamoComponentDeployment")
    for kind in (*tracked, "LeaderWorkerSet", "StatefulSet"):
        objs += await _sample_of(kube, kind, sample)
    state = ClusterState(REG, trust_all=True)
    state.bulk = True
    slim = slimmer(REG)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for gk, text in objs:
        state.upsert(gk, slim(json.loads(text)))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del state
    return {
        "cached_tracked_bytes": round(held / max(1, len(objs))),
        "api_tracked_json_bytes": round(sum(len(t) for _, t in objs) / max(1, len(objs))),
        "cached_tracked_sample": len(objs),
    }


async def _sample_of(kube: Kube, kind: str, n: int) -> list[tuple[GroupKind, bytes]]:
    resp = await kube.request("GET", PATHS[kind].format(ns=NS), params={"limit": str(n)})
    gk = GroupKind(API_VERSIONS[kind].rpartition("/")[0], kind)
    out = []
    for item in (resp.body or {}).get("items") or []:
        item.setdefault("apiVersion", API_VERSIONS[kind])
        item.setdefault("kind", kind)
        out.append((gk, json.dumps(item).encode()))
    return out


async def bench(args: argparse.Namespace, cp: ControlPlane, log_file: BinaryIO) -> dict[str, Any]:
    key_file = Path(tempfile.mkdtemp(prefix="aibom-bench-key-")) / "provenance.key"
    key_file.write_bytes(base64.b64encode(secrets.token_bytes(32)) + b"\n")
    key = parse_key(key_file.read_bytes())
    trust = TRUST_ALL_ARGS if args.trust_owner_references else ("--provenance-key", str(key_file))
    extra = [*trust, *args.annotator_args]
    if args.export:
        extra += export_args(cp, Path(log_file.name).parent)
    load: dict[str, float] = {"start": load_average()}
    cp_pids = {k: v for k, v in cp.pids.items() if k in ("kube-apiserver", "etcd")}
    out: dict[str, Any] = {"annotator_args": extra}
    async with Kube.from_kubeconfig(str(cp.kubeconfig), pool_size=64) as kube:
        await create_namespace(kube, NS, {"aibom.dev/enabled": "true"})
        stored: dict[str, Obj] = {}
        pods = await populate(
            kube,
            roots=args.roots,
            per_root=args.pods_per_root,
            concurrency=args.concurrency,
            key=key,
            pods_out=stored,
        )
        await asyncio.sleep(2)  # let the API server's watch cache settle
        docs = sorted({doc for _, doc in pods})
        watch = DocWatch(kube)
        watch.task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.5)

        # -- cold ------------------------------------------------------------------
        load["cold"] = load_average()
        cpu0 = cpu_of(cp_pids)
        ann = await AnnotatorProcess.start(cp, extra, log_file, "bench", args.profile)
        try:
            cold = await cold_start(watch, args.roots, ann.t0)
            m = ann.metrics()
            reqs = requests_of(m)
            rss_cold = rss_kib(ann.pid, "VmHWM")
            cpu_cold = cpu_seconds(ann.pid)
            out["cold_control_plane_cpu_seconds"] = cpu_delta(cpu_of(cp_pids), cpu0)
            signed = sum('"signature":' in text for text in watch.text.values())
            log(f"cold: {cold:.2f} s, requests {reqs}, peak RSS {rss_cold / 1024:.0f} MiB")
            if args.export:
                out.update(await export_drained(ann, args.roots))
            resync, _ = await ann.converged(timeout=120)
            synced_s, synced_rss = ann.synced_seconds, ann.synced_rss_kib

            # -- updates while Pods churn ---------------------------------------------
            per_root = max(1, args.pods_per_root)
            n_churn_docs = min(len(docs) // 2, -(-args.churn_pods // per_root))
            churn_docs = set(docs[:: max(1, len(docs) // max(1, n_churn_docs))][:n_churn_docs])
            churn_pods = [stored[n] for n, d in pods if d in churn_docs][: args.churn_pods]
            steady = [(n, d) for n, d in pods if d not in churn_docs]
            churn = Churn(
                kube, churn_pods if args.churn_pods else [], rate=args.churn_rate, key=key
            )
            load["updates"] = load_average()
            churn.start()
            await asyncio.sleep(min(5.0, len(churn_pods) / max(1.0, args.churn_rate)))
            latencies = await measure_updates(kube, watch, steady, args.updates)
            out.update(await churn.stop())
            await asyncio.sleep(3)  # the last replacements reach their documents
            m2 = ann.metrics()
            rss_end = rss_kib(ann.pid, "VmHWM")
            rss_now = rss_kib(ann.pid, "VmRSS")
        finally:
            await ann.stop()
        total = sum(reqs.values())
        out.update(
            {
                "roots": args.roots,
                "pods": len(pods),
                "cold_seconds": round(cold, 2),
                "cold_synced_seconds": round(synced_s, 2),
                "rss_mib_at_synced": round(synced_rss / 1024, 1),
                "cold_resync_converged_seconds": round(resync, 2),
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
                "documents_written": {
                    k: v for k, v in m2.items() if "documents_written_total" in k
                },
                "stamp_repairs": metric_sum(m2, "aibom_annotator_stamp_repairs_total"),
            }
        )

        # -- the API server's own write ceiling ----------------------------------------
        if args.ceiling:
            texts = [watch.text[d] for d in docs if d in watch.text]
            await create_namespace(kube, CEILING_NS, {})
            load["ceiling"] = load_average()
            cpu0 = cpu_of(cp_pids)
            out.update(await write_ceiling(kube, texts, concurrency=args.ceiling_concurrency))
            out["ceiling_control_plane_cpu_seconds"] = cpu_delta(cpu_of(cp_pids), cpu0)
            out["cold_over_ceiling"] = round(cold / out["write_ceiling_seconds"], 2)
            log(f"write ceiling: {out['write_ceiling_seconds']} s for {len(texts)} ConfigMaps")

        # -- restart over existing documents ----------------------------------------------
        # Each restart follows a list ceiling (a bare client's lists of the same
        # kinds, just before it): the restart's lists cannot be faster than that.
        # With --restarts N the fields are the median run's (restart_runs
        # holds each).
        runs: list[dict[str, Any]] = []
        page_size = page_size_of(extra)
        for i in range(args.restarts if args.restart else 0):
            await asyncio.sleep(2)
            cpu0 = cpu_of(cp_pids)
            floor = await list_ceiling(kube, page_size=page_size)
            floor_cpu = cpu_delta(cpu_of(cp_pids), cpu0)
            await asyncio.sleep(2)
            load[f"restart{i or ''}"] = load_average()
            cpu0 = cpu_of(cp_pids)
            ann = await AnnotatorProcess.start(
                cp, extra, log_file, f"bench-restart{i or ''}", args.profile
            )
            try:
                took, m3 = await ann.converged(timeout=600)
                rss_restart = rss_kib(ann.pid, "VmHWM")
                synced = ann.synced_seconds
                synced_rss = ann.synced_rss_kib
                cpu_restart = cpu_seconds(ann.pid)
                cp_restart = cpu_delta(cpu_of(cp_pids), cpu0)
            finally:
                await ann.stop()
            if args.export:  # a restart over exported documents pushes nothing again
                out["restart_exports"] = {
                    k: v for k, v in m3.items() if k.startswith("aibom_annotator_exports_total")
                }
            writes = (
                metric_sum(m3, "aibom_annotator_documents_written_total")
                + metric_sum(m3, "aibom_annotator_documents_deleted_total")
                + metric_sum(m3, "aibom_annotator_stamp_repairs_total")
            )
            rreqs = requests_of(m3)
            runs.append(
                {
                    "restart_seconds": round(took, 2),
                    "restart_synced_seconds": round(synced, 2),
                    "list_ceiling_seconds": round(floor["seconds"], 2),
                    "list_ceiling_pages": floor["pages"],
                    "list_ceiling_control_plane_cpu_seconds": floor_cpu,
                    "restart_over_list_ceiling": round(took / floor["seconds"], 2),
                    "restart_writes": int(writes),
                    "restart_documents_unchanged": int(
                        metric_sum(m3, "aibom_annotator_documents_unchanged_total")
                    ),
                    "restart_current_by_sources": int(
                        metric_sum(m3, "aibom_annotator_documents_current_by_sources_total")
                    ),
                    "restart_requests": rreqs,
                    "restart_requests_per_root": round(sum(rreqs.values()) / args.roots, 3),
                    "restart_cpu_seconds": round(cpu_restart, 2),
                    "restart_control_plane_cpu_seconds": cp_restart,
                    "restart_rss_mib_at_synced": round(synced_rss / 1024, 1),
                    "restart_peak_rss_mib": round(rss_restart / 1024, 1),
                }
            )
            log(
                f"restart: {took:.2f} s (synced {synced:.2f} s; a bare client's lists "
                f"{floor['seconds']:.2f} s), {int(writes)} writes, requests {rreqs}"
            )
        if runs:
            out.update(median_run(runs))
            if len(runs) > 1:
                out["restart_runs"] = runs
        if args.pod_bytes:
            out.update(await cached_pod_bytes(kube))
        if watch.task:
            watch.task.cancel()
    load["end"] = load_average()
    out["load"] = load
    return out


def export_args(cp: ControlPlane, workdir: Path) -> list[str]:
    """--export: the harness's registry (distribution v3.1.2, TLS, htpasswd) on this control
    plane, and the annotator's flags to export every version to it."""
    reg: Any = cp.start_component("registry")
    creds = workdir / "registry-credentials.json"
    creds.write_text(reg.dockerconfigjson())
    return [
        f"--export-registry={reg.host}/bench",
        f"--export-registry-credentials={creds}",
        f"--export-ca-file={reg.ca_file}",
        "--export-cluster-id=bench",
    ]


async def export_drained(
    ann: AnnotatorProcess, roots: int, timeout: float = 3600
) -> dict[str, Any]:
    """From the annotator's start until every recorded version is in the registry (the
    backlog empty and at least one version per root exported): the export's throughput."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = ann.metrics()
        done = metric_sum(m, "aibom_annotator_exports_total")
        if done >= roots and metric_sum(m, "aibom_annotator_export_backlog_versions") == 0:
            took = time.monotonic() - ann.t0
            pushed = metric_sum(m, 'aibom_annotator_exports_total{result="pushed"}')
            push_sum = metric_sum(m, "aibom_annotator_export_push_duration_seconds_sum")
            log(f"export: {int(done)} versions in the registry {took:.2f} s after start")
            return {
                "export_drained_seconds": round(took, 2),
                "exports": {
                    k: v for k, v in m.items() if k.startswith("aibom_annotator_exports_total")
                },
                "exports_per_second_since_start": round(pushed / took, 1),
                "export_push_seconds_mean": round(push_sum / max(pushed, 1), 4),
                "export_failures": metric_sum(m, "aibom_annotator_export_failures_total"),
                "export_referrers": {
                    k: v
                    for k, v in m.items()
                    if k.startswith("aibom_annotator_export_referrers_total")
                },
                "rss_mib_export_drained": round(rss_kib(ann.pid, "VmHWM") / 1024, 1),
            }
        await asyncio.sleep(0.5)
    raise SystemExit("export: the backlog did not drain in time; see the annotator log")


class SideBySide(Protocol):
    """Another tool measured on the same cluster after ours (bench/peer.py's ``Peer``):
    this bench calls it and never imports it, so the two modules import one way."""

    def apiserver_args(self, workdir: Path) -> list[str]: ...

    def prepare(self, cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> None: ...

    def measure(self, args: argparse.Namespace, cp: ControlPlane, ours: Obj) -> Obj: ...


def main(argv: list[str] | None = None, side: SideBySide | None = None) -> int:
    """The bench; with ``side``, that tool is measured after ours, on the same objects."""
    ap = argparse.ArgumentParser(
        prog="annotator_bench.py" if side is None else "peer.py bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--roots", type=int, default=1000)
    ap.add_argument("--pods-per-root", type=int, default=10)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=48, help="requests in flight to populate")
    ap.add_argument(
        "--churn-pods",
        type=int,
        default=1000,
        help="Pods replaced continuously while the update latency is measured (0: none)",
    )
    ap.add_argument(
        "--churn-rate", type=float, default=50.0, help="Pod replacements per second (default: 50)"
    )
    ap.add_argument(
        "--ceiling-concurrency",
        type=int,
        default=32,
        help="requests in flight of the bare client that measures the write ceiling",
    )
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false")
    ap.add_argument("--no-restart", dest="restart", action="store_false")
    ap.add_argument(
        "--restarts",
        type=int,
        default=1,
        metavar="N",
        help="restart the annotator N times, each after a list ceiling; the restart "
        "fields are then the median run's, and restart_runs holds every run",
    )
    ap.add_argument(
        "--no-pod-bytes",
        dest="pod_bytes",
        action="store_false",
        help="skip measuring the bytes the cache keeps per Pod",
    )
    ap.add_argument(
        "--trust-owner-references",
        action="store_true",
        help="run the annotator with --trust-owner-references instead of the provenance rule "
        "and the run's key (the configuration of the numbers published before the bench's "
        "objects carried edge proofs)",
    )
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="run each annotator under cProfile, writing DIR/<identity>.prof (slower)",
    )
    ap.add_argument(
        "--export",
        action="store_true",
        help="export every version to the harness's registry (docs/annotator.md, Export): "
        "adds export_drained_seconds, exports_per_second_since_start and the RSS after it",
    )
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("annotator_args", nargs="*", help="extra annotator flags (after --)")
    args = ap.parse_args(argv)
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="aibom-annotator-bench-"))
    off = "-deployment,-replicaset,-statefulset,-daemonset,-job,-cronjob"
    audit = side.apiserver_args(workdir) if side is not None else []
    with ControlPlane(
        extra_controller_manager_args=[f"--controllers=*,{off}"], extra_apiserver_args=audit
    ) as cp:
        cp.install_crds()
        if side is not None:
            side.prepare(cp, args, workdir)
        with open(workdir / "annotator.log", "wb") as log_file:
            result = asyncio.run(bench(args, cp, log_file))
        if side is not None:
            result["side_by_side"] = side.measure(args, cp, result)
            log("side by side:\n" + result["side_by_side"]["table"])
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    log(f"annotator log: {workdir}/annotator.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
