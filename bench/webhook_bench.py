"""Benchmark of the admission webhook (not a test): latency, throughput, API GETs per admission.

Starts the real control plane (tests/controlplane), runs `aibom-rollup webhook`
as a subprocess pinned to ONE core (taskset -c 0; the load generator and the
control plane share the other), and drives AdmissionReviews:

  (a) straight at the webhook over TLS (keep-alive connections, prebuilt bodies):
      - ownerless Deployments, closed loop at full speed (throughput on one core);
      - ownerless, open loop at a fixed rate (latency);
      - Pods at chain depth 4 (Pod -> ReplicaSet -> Deployment ->
        DynamoComponentDeployment -> DynamoGraphDeployment, real objects in the
        real API server) at 200 admissions/s, with the owner cache on (default
        TTL) and off (--owner-cache-ttl 0: 4 live GETs per admission);
  (b) through the real API server: server-side dry-run creates of the same
      Pods (POST ...?dryRun=All), with and without the webhook registered.

  (c) the owner cache cold: depth-4 Pods of `--chains` chains created
      just before each run (real objects, new UIDs), against a webhook process
      started for that run, at 200/s: with the caches off, with the TTL cache
      (cold: every chain's first walk is 4 GETs), and with the owner index
      (`--owner-watch`, the default: listed and watched before /readyz).
      Scenario (a)'s "cache off" and "owner cache on" rows run with
      `--no-owner-watch`, as before the index existed; "owner index on, TTL
      cache off" is the index alone.

Latency is measured by the client (request written -> response read), so it
includes TLS and HTTP on both sides. API GETs per admission come from the
webhook's own counters (aibom_webhook_owner_lookups_total{source="get"}).

Provenance: every run checks the Pod's own edge with a
SubjectAccessReview (the review's userInfo is the ReplicaSet controller's
ServiceAccount, which may update replicasets/finalizers) and the hops above
with the owners' edge-proofs (written here with the webhook's key, as the
webhook would have at their admission; the namespace is not guarded). The
depth-4 Pod at 200/s runs with the SAR cache on (--sar-cache-ttl 10, the
default) and off (0: one review per admission); SAR requests per admission
come from aibom_webhook_provenance_checks_total minus _cache_hits_total.

    .venv/bin/python bench/webhook_bench.py [--runs 3] [--seconds 5] [--json out.json]

The machine has 2 cores shared with whatever else runs: every figure is the
median of --runs runs, printed with the spread (min-max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webhook_process import start_webhook  # noqa: E402

from aibom_core.objects import controller_ref, ref_of  # noqa: E402
from aibom_core.provenance import proof_for  # noqa: E402
from aibom_core.stamp import Keys  # noqa: E402
from aibom_edge.options import load_provenance_key  # noqa: E402
from certs.pki import new_key_text  # noqa: E402
from tests.controlplane import ControlPlane, owner_reference  # noqa: E402
from tests.integration.support import Webhook, deployment, shipped_role  # noqa: E402
from tests.integration.support import grant_webhook as grant  # noqa: E402
from tests.integration.support import kubectl_apply as apply  # noqa: E402
from tests.integration.test_webhook import dcd, dgd  # noqa: E402

JSON = {"Content-Type": "application/json"}


def review_body(obj: dict[str, Any], ns: str) -> bytes:
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].rpartition("/")
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
                "requestKind": {"group": group, "version": version, "kind": kind},
                "operation": "CREATE",
                "namespace": ns,
                "name": obj["metadata"].get("name", ""),
                # The ReplicaSet controller's identity (kube-controller-manager runs
                # with --use-service-account-credentials): the SubjectAccessReview
                # allows its edges, so the walk goes all the way up.
                "userInfo": {
                    "username": "system:serviceaccount:kube-system:replicaset-controller",
                    "groups": [
                        "system:serviceaccounts",
                        "system:serviceaccounts:kube-system",
                        "system:authenticated",
                    ],
                },
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    ).encode()


def pod(ns: str, name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {"app": "bench"}}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0",
                    "args": ["--model", "Qwen/Qwen3-0.6B"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def drive(
    post: Callable[[aiohttp.ClientSession, bytes], Any],
    bodies: list[bytes],
    *,
    ssl_ctx: ssl.SSLContext,
    seconds: float,
    rate: float | None,
    concurrency: int,
    warm: list[bytes] | None = None,
) -> dict[str, float]:
    """Closed loop (rate None: `concurrency` workers back to back) or open loop at `rate`/s.
    `warm`: the bodies of the warm-up requests (default: `bodies`)."""
    lat: list[float] = []
    errors = 0
    conn = aiohttp.TCPConnector(ssl=ssl_ctx, limit=concurrency * 2)
    async with aiohttp.ClientSession(connector=conn) as http:
        # Warm the connections and the server.
        first = warm or bodies
        await asyncio.gather(*(post(http, first[i % len(first)]) for i in range(concurrency)))
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + seconds
        n = 0

        async def one(body: bytes) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            ok = await post(http, body)
            lat.append(time.perf_counter() - t0)
            errors += not ok

        if rate is None:

            async def worker(k: int) -> None:
                i = k
                while loop.time() < end:
                    await one(bodies[i % len(bodies)])
                    i += concurrency

            await asyncio.gather(*(worker(k) for k in range(concurrency)))
        else:
            tasks = []
            while (now := loop.time()) < end:
                due = start + n / rate
                if due > now:
                    await asyncio.sleep(due - now)
                tasks.append(asyncio.create_task(one(bodies[n % len(bodies)])))
                n += 1
            await asyncio.gather(*tasks)
        elapsed = loop.time() - start
    return {
        "n": len(lat),
        "errors": errors,
        "rps": len(lat) / elapsed,
        "p50_ms": pct(lat, 50) * 1000,
        "p99_ms": pct(lat, 99) * 1000,
    }


def poster(url: str) -> Callable[[aiohttp.ClientSession, bytes], Any]:
    async def post(http: aiohttp.ClientSession, body: bytes) -> bool:
        async with http.post(url, data=body, headers=JSON) as resp:
            await resp.read()
            return resp.status in (200, 201)

    return post


def counter(hook: Webhook, name: str, labels: dict[str, str]) -> float:
    if labels:
        return hook.metric(name, labels)
    _, text = hook.request("GET", "/metrics")  # a label-less sample has no braces
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prove_owners(kubectl: Any, ns: str, key_file: Path, owners: list[dict[str, Any]]) -> None:
    """Write the edge-proof each owner would have got from the webhook at admission."""
    key = load_provenance_key(key_file)
    keys = Keys()
    for obj in owners:
        owner = controller_ref(obj)
        assert owner is not None
        ref = ref_of(obj)
        where = keys.proof_key(ref.group_kind, owner.group_kind)
        kind = f"{obj['kind'].lower()}.{ref.group}" if ref.group else obj["kind"].lower()
        kubectl(
            "annotate",
            "-n",
            ns,
            f"{kind}/{ref.name}",
            f"{where}={proof_for(key, obj, owner)}",
            "--overwrite",
        )


def summarise(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in (
        "rps",
        "p50_ms",
        "p99_ms",
        "gets_per_admission",
        "sars_per_admission",
        "sar_errors_per_admission",
        "cpu_ms_per_admission",
        "index_objects",
    ):
        vals = [r[key] for r in runs if key in r]
        if vals:
            out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    out["errors"] = sum(r["errors"] for r in runs)
    out["n"] = sum(r["n"] for r in runs)
    return out


def show(name: str, s: dict[str, Any]) -> str:
    def f(k: str, unit: str, fmt: str = "{:.2f}") -> str:
        if k not in s:
            return ""
        m = s[k]
        label = k.split("_", maxsplit=1)[0]
        lo, mid, hi = (fmt.format(m[x]) for x in ("min", "median", "max"))
        return f" {label}={mid}{unit} [{lo}-{hi}]"

    return (
        f"{name:<48}{f('rps', '/s', '{:.0f}')}{f('p50_ms', 'ms')}{f('p99_ms', 'ms')}"
        f"{f('gets_per_admission', ' GETs', '{:.2f}')}{f('sars_per_admission', ' SARs', '{:.2f}')}"
        f"{f('sar_errors_per_admission', ' SAR-errors', '{:.2f}')}"
        f"{f('cpu_ms_per_admission', ' CPU-ms', '{:.3f}')}"
        f" n={s['n']} errors={s['errors']}"
    )


def start_hook(
    cp: ControlPlane,
    *,
    workdir: Path,
    name: str,
    kubeconfig: Path,
    extra: tuple[str, ...],
    pin: list[str],
) -> tuple[Webhook, subprocess.Popen[bytes]]:
    """`aibom-rollup webhook` pinned to one core, at WARNING (no per-review log line),
    once /readyz answers 200 (with the owner index: synced)."""
    hook = Webhook(cp, workdir, name=name, kubeconfig=kubeconfig, args=extra)
    start_webhook(hook, prefix=pin, ready_within=60).close()  # the child keeps its own
    proc = hook.proc
    assert proc is not None
    return hook, proc


def _sars(hook: Webhook) -> float:
    return sum(
        counter(hook, "aibom_webhook_provenance_checks_total", {"result": v})
        for v in ("allowed", "denied", "error")
    ) - counter(hook, "aibom_webhook_provenance_cache_hits_total", {})


def measure(
    hook: Webhook,
    proc: subprocess.Popen[bytes],
    url: str,
    ctx: ssl.SSLContext,
    bodies: list[bytes],
    *,
    rate: float | None,
    conc: int,
    seconds: float,
    warm: list[bytes] | None = None,
) -> dict[str, float]:
    """One run: latency from the client, GETs / SARs / CPU per admission from the webhook."""
    gets0 = counter(hook, "aibom_webhook_owner_lookups_total", {"source": "get"})
    cpu0 = cpu_seconds(proc.pid)
    err0 = counter(hook, "aibom_webhook_provenance_checks_total", {"result": "error"})
    sars0 = _sars(hook)
    r = asyncio.run(
        drive(
            poster(url),
            bodies,
            ssl_ctx=ctx,
            seconds=seconds,
            rate=rate,
            concurrency=conc,
            warm=warm,
        )
    )
    # The warm-up requests count too (their GETs are in the counters).
    admitted = max(r["n"] + conc, 1)
    gets1 = counter(hook, "aibom_webhook_owner_lookups_total", {"source": "get"})
    r["gets_per_admission"] = (gets1 - gets0) / admitted
    r["sars_per_admission"] = (_sars(hook) - sars0) / admitted
    err1 = counter(hook, "aibom_webhook_provenance_checks_total", {"result": "error"})
    r["sar_errors_per_admission"] = (err1 - err0) / admitted
    # CPU the webhook process spent per admission: unlike latency, hardly moved
    # by other processes competing for the core.
    r["cpu_ms_per_admission"] = (cpu_seconds(proc.pid) - cpu0) * 1000 / admitted
    return r


def new_chains(cp: ControlPlane, ns: str, key: bytes, n: int, *, tag: str) -> list[dict[str, Any]]:
    """`n` depth-4 chains (DynamoGraphDeployment -> DynamoComponentDeployment ->
    Deployment -> ReplicaSet, the last made by the real deployment controller),
    each owner carrying the edge-proof the webhook would have written; their
    ReplicaSets (a Pod naming one walks 4 hops)."""
    keys = Keys()
    base = "/apis/nvidia.com/v1alpha1/namespaces/" + ns

    def post(path: str, doc: dict[str, Any]) -> dict[str, Any]:
        resp = cp.request("POST", path, doc)
        if resp.status != 201:
            raise SystemExit(f"POST {path}: {resp.status} {resp.body!r}")
        out: dict[str, Any] = resp.json()
        return out

    def proven(doc: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
        ref = controller_ref(doc)
        assert ref is not None
        child = ref_of(doc, namespace=ns)
        where = keys.proof_key(child.group_kind, ref.group_kind)
        # Before it exists (no UID): bound to its creation, as the webhook binds it.
        doc["metadata"]["annotations"] = {where: proof_for(key, doc, ref, now=time.time())}
        return doc

    names = [f"{tag}-{i}" for i in range(n)]
    for name in names:
        graph = post(f"{base}/dynamographdeployments", dgd(ns, name))
        comp = post(f"{base}/dynamocomponentdeployments", proven(dcd(ns, name, graph), graph))
        dep = proven(deployment(ns, name, comp, replicas=0), comp)
        post(f"/apis/apps/v1/namespaces/{ns}/deployments", dep)
    found: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 120
    while len(found) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(found)} of {n} ReplicaSets made by the controller")
        time.sleep(0.5)
        items = cp.request("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets").json()["items"]
        for rs in items:
            owner = controller_ref(rs)
            if owner is not None and owner.name in names:
                found[owner.name] = {**rs, "apiVersion": "apps/v1", "kind": "ReplicaSet"}
    out = []
    for name in names:
        rs = found[name]
        owner = controller_ref(rs)
        assert owner is not None
        ref = ref_of(rs, namespace=ns)
        patch = {
            "metadata": {"annotations": {keys.replicaset_edge_proof: proof_for(key, rs, owner)}}
        }
        path = f"/apis/apps/v1/namespaces/{ns}/replicasets/{ref.name}"
        resp = cp.request("PATCH", path, patch, content_type="application/merge-patch+json")
        if resp.status != 200:
            raise SystemExit(f"PATCH {path}: {resp.status}")
        out.append(resp.json() | {"apiVersion": "apps/v1", "kind": "ReplicaSet"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=8, help="closed-loop connections")
    ap.add_argument("--json", metavar="FILE", help="write the results here too")
    ap.add_argument(
        "--chains",
        type=int,
        default=64,
        help="new depth-4 chains per run of the cold-cache rows (default 64)",
    )
    ap.add_argument(
        "--only",
        metavar="TEXT",
        help="run only the scenarios whose name contains TEXT (e.g. 'depth-4 Pod @ 200/s')",
    )
    args = ap.parse_args()
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and os.cpu_count() else []
    results: dict[str, Any] = {}
    with ControlPlane() as cp:
        cp.install_crds()
        kubectl = cp.kubectl
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        kubectl("create", "namespace", ns)
        kubectl("label", "namespace", ns, "aibom.dev/enabled=true")
        graph = apply(kubectl, dgd(ns, "graph"))
        comp = apply(kubectl, dcd(ns, "graph-worker", graph))
        dep_obj = apply(kubectl, deployment(ns, "graph-worker", comp, replicas=0))
        deadline = time.monotonic() + 30
        while not (rs := json.loads(kubectl("get", "-n", ns, "rs", "-o", "json").stdout)["items"]):
            if time.monotonic() > deadline:
                raise SystemExit("no ReplicaSet made by the controller")
            time.sleep(0.2)
        replicaset = {**rs[0], "apiVersion": "apps/v1", "kind": "ReplicaSet"}
        ownerless = [review_body(deployment(ns, f"plain-{i}"), ns) for i in range(64)]
        depth4 = [review_body(pod(ns, f"worker-{i}", replicaset), ns) for i in range(64)]
        kubeconfig = grant(cp, kubectl, "aibom-webhook-bench", shipped_role())
        workdir = Path(tempfile.mkdtemp(prefix="aibom-bench-"))

        key_file = workdir / "provenance.key"
        key_file.write_bytes(new_key_text())
        prove_owners(kubectl, ns, key_file, [comp, dep_obj, replicaset])

        def start(name: str, extra: tuple[str, ...]) -> tuple[Webhook, subprocess.Popen[bytes]]:
            return start_hook(
                cp,
                workdir=workdir,
                name=name,
                kubeconfig=kubeconfig,
                extra=(*extra, "--provenance-key", str(key_file)),
                pin=pin,
            )

        # The TTL-cache rows of BENCHMARKS.md's Webhook sections keep their meaning without the
        # owner index (--no-owner-watch); the index row is added.
        for cache_ttl, sar_ttl, watch in (
            ("5", "10", False),
            ("5", "0", False),
            ("0", "10", False),
            ("0", "10", True),
        ):
            scenarios: list[tuple[str, list[bytes], float | None, int]] = []
            if sar_ttl == "0":
                scenarios += [
                    ("direct depth-4 Pod @ 200/s, owner cache on, SAR cache off", depth4, 200.0, 32)
                ]
            elif cache_ttl == "5":
                scenarios += [
                    (
                        "direct ownerless, closed loop (throughput)",
                        ownerless,
                        None,
                        args.concurrency,
                    ),
                    ("direct ownerless @ 500/s", ownerless, 500.0, 32),
                    ("direct depth-4 Pod @ 200/s, owner cache on, SAR cache on", depth4, 200.0, 32),
                    ("direct depth-4 Pod, closed loop, cache on", depth4, None, args.concurrency),
                ]
            elif watch:
                scenarios += [
                    (
                        "direct depth-4 Pod @ 200/s, owner index on, TTL cache off",
                        depth4,
                        200.0,
                        32,
                    ),
                ]
            else:
                scenarios += [
                    ("direct depth-4 Pod @ 200/s, cache off (4 GETs)", depth4, 200.0, 32),
                ]
            scenarios = [sc for sc in scenarios if not args.only or args.only in sc[0]]
            if not scenarios and (args.only or cache_ttl != "5" or sar_ttl == "0"):
                continue
            hook, proc = start(
                f"bench-ttl{cache_ttl}-sar{sar_ttl}{'-watch' if watch else ''}",
                (
                    "--owner-cache-ttl",
                    cache_ttl,
                    "--sar-cache-ttl",
                    sar_ttl,
                    *(() if watch else ("--no-owner-watch",)),
                ),
            )
            url = f"https://127.0.0.1:{hook.port}/mutate"
            ctx = hook.ssl_context()
            for name, bodies, rate, conc in scenarios:
                runs = [
                    measure(
                        hook, proc, url, ctx, bodies, rate=rate, conc=conc, seconds=args.seconds
                    )
                    for _ in range(args.runs)
                ]
                results[name] = summarise(runs)
                print(show(name, results[name]), flush=True)

            if cache_ttl == "5" and sar_ttl != "0" and not args.only:
                # (b) through the real API server: dry-run creates, with and without us.
                api_ctx = cp.ssl_context()
                base = f"{cp.server}/api/v1/namespaces/{ns}/pods?dryRun=All"

                def api_bodies(owner: dict[str, Any] | None) -> list[bytes]:
                    return [
                        json.dumps(pod(ns, f"p-{i}-{uuid.uuid4().hex[:4]}", owner)).encode()
                        for i in range(64)
                    ]

                for registered in (True, False):
                    if registered:
                        hook.register(kubectl)
                        probe = json.dumps(pod(ns, "probe", None))
                        for _ in range(50):
                            out = kubectl(
                                "create", "--dry-run=server", "-f", "-", "-o", "json", input=probe
                            ).stdout
                            if "aibom.dev/rollup" in out:
                                break
                            time.sleep(0.2)
                        else:
                            raise SystemExit("the API server never called the webhook")
                    for label, owner in (("ownerless Pod", None), ("depth-4 Pod", replicaset)):
                        name = (
                            f"API server dry-run create, {label}, "
                            f"{'with webhook' if registered else 'no webhook'}"
                        )
                        runs = []
                        labels = {
                            "kind": "Pod",
                            "operation": "CREATE",
                            "result": "uncovered" if owner is None else "rolled-up",
                        }
                        for _ in range(args.runs):
                            a0 = counter(hook, "aibom_webhook_admissions_total", labels)
                            r = asyncio.run(
                                drive(
                                    poster(base),
                                    api_bodies(owner),
                                    ssl_ctx=api_ctx,
                                    seconds=args.seconds,
                                    rate=None,
                                    concurrency=4,
                                )
                            )
                            a1 = counter(hook, "aibom_webhook_admissions_total", labels)
                            r["webhook_calls_per_create"] = (a1 - a0) / max(r["n"] + 4, 1)
                            runs.append(r)
                        results[name] = summarise(runs)
                        print(show(name, results[name]), flush=True)
                    if registered:
                        hook.unregister(kubectl)
                        time.sleep(2)
            hook.stop()
        # Depth-4 Pods of chains the webhook has not seen, each run
        # against a freshly started process (nothing cached), at 200/s.
        cold_modes = (
            (
                "cache off (--owner-cache-ttl 0 --no-owner-watch)",
                ("--owner-cache-ttl", "0", "--no-owner-watch"),
            ),
            ("TTL cache cold (default TTL, --no-owner-watch)", ("--no-owner-watch",)),
            ("owner index (default; ready = synced)", ()),
        )
        key = load_provenance_key(key_file)
        for label, extra in cold_modes:
            name = f"direct depth-4 Pod @ 200/s, {args.chains} new chains, fresh process, {label}"
            if args.only and args.only not in name:
                continue
            runs = []
            for run in range(args.runs):
                # New chains per run: the API server's own caches are as cold as ours.
                tag = f"c{uuid.uuid4().hex[:4]}{run}"
                chains = new_chains(cp, ns, key, args.chains, tag=tag)
                bodies = [
                    review_body(pod(ns, f"{tag}-p{i}", rs), ns) for i, rs in enumerate(chains)
                ]
                hook, proc = start(f"bench-cold-{tag}", ("--sar-cache-ttl", "10", *extra))
                try:
                    runs.append(
                        measure(
                            hook,
                            proc,
                            f"https://127.0.0.1:{hook.port}/mutate",
                            hook.ssl_context(),
                            bodies,
                            rate=200.0,
                            conc=32,
                            seconds=args.seconds,
                            warm=ownerless,
                        )
                    )
                    runs[-1]["index_objects"] = counter(
                        hook, "aibom_webhook_owner_index_objects", {}
                    )
                finally:
                    hook.stop()
            results[name] = summarise(runs)
            print(show(name, results[name]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
