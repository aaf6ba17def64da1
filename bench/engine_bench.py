"""Benchmark (not a test): the admission latency of a Pod through our webhook plus a policy engine.

Starts the real control plane (tests/controlplane) and our webhook (as shipped:
its ClusterRole, its configuration, its edge-proof key), and in one opted-in
namespace a Deployment (0 replicas) and the ReplicaSet its controller makes,
admitted through the webhook (so its edge carries the webhook's proof). Then,
through the real API server, server-side dry-run creates of Pods that
ReplicaSet controls (POST .../pods?dryRun=All, as the admin; every admission
chain runs, nothing is stored) at a fixed rate (open loop, default 200/s), in
these set-ups, one at a time:

  1. the API server alone (the same Pods in a namespace not opted in: no
     webhook is called);
  2. our webhook, alone;
  3. our webhook + Kyverno v1.19.1 with manifests/policies/kyverno;
  4. our webhook + Gatekeeper v3.23.1 with manifests/policies/gatekeeper;

each engine started as the tests start it (tests/controlplane/components/: its
release's ServiceAccounts, RBAC and webhooks) and stopped before the next. The
Pods are rolled up (the policies admit them); with each engine, a bare Pod
(uncovered: refused by the policy) is measured too.

Latency is measured by the client (request written -> response read), so it
includes TLS, authentication, every admission webhook and the response. Our
webhook runs as its own process (not pinned); the engines, the control plane and
the load generator share the 2 cores. CPU-ms: the CPU time per request of our
webhook's process (line 2) or of the engine's processes (lines 3-4), from
/proc.

    .venv/bin/python bench/engine_bench.py [--runs 3] [--seconds 10] [--rate 200] [--json out.json]

Every figure is the median of --runs runs, printed with the spread (min-max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webhook_bench import JSON, cpu_seconds, drive, pod, show, summarise  # noqa: E402
from webhook_process import start_webhook  # noqa: E402

from tests.controlplane import ControlPlane  # noqa: E402
from tests.controlplane.components.gatekeeper import Gatekeeper  # noqa: E402
from tests.integration.support import Webhook, deployment, shipped_role  # noqa: E402
from tests.integration.support import grant_webhook as grant  # noqa: E402
from tests.integration.support import kubectl_apply as apply  # noqa: E402

POLICIES = REPO / "manifests" / "policies"
OPTED_IN = "aibom.dev/enabled=true"


def poster(url: str, expect: int) -> Callable[[aiohttp.ClientSession, bytes], Any]:
    """POST a body; a success is the status ``expect`` (201 admitted, 403 refused)."""

    async def post(http: aiohttp.ClientSession, body: bytes) -> bool:
        async with http.post(url, data=body, headers=JSON) as resp:
            await resp.read()
            return resp.status == expect

    return post


def wait(what: str, probe: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def dry_run(cp: ControlPlane, ns: str, body: dict[str, Any]) -> tuple[int, str]:
    resp = cp.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", body)
    return resp.status, resp.body.decode(errors="replace")


@contextmanager
def kyverno(cp: ControlPlane) -> Iterator[str]:
    """Kyverno with the shipped policies; yields what its refusal says."""
    cp.start_component("kyverno")
    cp.kubectl("apply", "-k", str(POLICIES / "kyverno"))
    try:
        yield "aibom-require-coverage"
    finally:
        cp.kubectl("delete", "-k", str(POLICIES / "kyverno"), "--ignore-not-found")
        cp.stop_component("kyverno")


@contextmanager
def gatekeeper(cp: ControlPlane) -> Iterator[str]:
    """Gatekeeper with the shipped template and enforcing constraint, its audit every
    60 s as released; yields what its refusal says."""
    Gatekeeper.audit_interval = 60
    cp.start_component("gatekeeper")
    folder = POLICIES / "gatekeeper"
    cp.kubectl("apply", "-f", str(folder / "template.yaml"))
    crd = "aibomcoveredpods.constraints.gatekeeper.sh"
    wait(f"Gatekeeper to serve {crd}", lambda: cp.crd_established(crd))
    cp.kubectl("apply", "-f", str(folder / "require-aibom-coverage.yaml"))
    try:
        yield "[aibom-require-coverage]"
    finally:
        for name in ("require-aibom-coverage.yaml", "template.yaml"):
            cp.kubectl("delete", "-f", str(folder / name), "--ignore-not-found")
        cp.stop_component("gatekeeper")


def measure(
    cp: ControlPlane,
    ns: str,
    bodies: list[bytes],
    *,
    expect: int,
    args: argparse.Namespace,
    pids: list[int],
) -> dict[str, Any]:
    """``--runs`` runs; ``cpu_ms_per_admission``: the CPU time of ``pids`` (the webhook's
    or the engine's processes) per request."""
    url = f"{cp.server}/api/v1/namespaces/{ns}/pods?dryRun=All"
    runs = []
    for _ in range(args.runs):
        cpu = sum(cpu_seconds(pid) for pid in pids)
        run = asyncio.run(
            drive(
                poster(url, expect),
                bodies,
                ssl_ctx=cp.ssl_context(),
                seconds=args.seconds,
                rate=args.rate,
                concurrency=8,
            )
        )
        if pids:
            spent = sum(cpu_seconds(pid) for pid in pids) - cpu
            run["cpu_ms_per_admission"] = spent * 1000 / max(run["n"], 1)
        runs.append(run)
    return summarise(runs)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=200.0, help="dry-run creates per second")
    ap.add_argument("--json", metavar="FILE", help="write the results here too")
    ap.add_argument("--engines", default="kyverno,gatekeeper")
    args = ap.parse_args()
    results: dict[str, Any] = {}

    def report(name: str, summary: dict[str, Any]) -> None:
        results[name] = summary
        print(show(name, summary), flush=True)

    with ControlPlane() as cp:
        cp.install_crds()
        kubectl = cp.kubectl
        ns, plain = f"bench-{uuid.uuid4().hex[:6]}", f"plain-{uuid.uuid4().hex[:6]}"
        for name in (ns, plain):
            kubectl("create", "namespace", name)
        kubectl("label", "namespace", ns, OPTED_IN)
        workdir = Path(tempfile.mkdtemp(prefix="aibom-engine-bench-"))
        kubeconfig = grant(cp, kubectl, "aibom-webhook-bench", shipped_role())
        hook = Webhook(cp, workdir, name="aibom-rollup-bench", kubeconfig=kubeconfig)
        # With its edge-proof key (written by `certs`), as deployed: the ReplicaSet
        # below, admitted through it, carries the proof of its edge to the Deployment.
        hook.args = ("--provenance-key", str(hook.dir / "provenance.key"))
        log = start_webhook(hook, ready_within=60)
        try:
            hook.register(kubectl)
            probe = deployment(ns, "probe", replicas=0)

            def stamping() -> bool:
                out = kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                              input=json.dumps(probe))  # fmt: skip
                return '"aibom.dev/rollup": "root"' in out.stdout

            wait("our webhook to stamp", stamping)
            apply(kubectl, deployment(ns, "web", replicas=0))
            wait(
                "the ReplicaSet", lambda: bool(kubectl("get", "-n", ns, "rs", "-o", "name").stdout)
            )
            rs = json.loads(kubectl("get", "-n", ns, "rs", "-o", "json").stdout)["items"][0]
            rs = {**rs, "apiVersion": "apps/v1", "kind": "ReplicaSet"}

            def bodies(namespace: str, owner: dict[str, Any] | None) -> list[bytes]:
                return [
                    json.dumps(pod(namespace, f"p-{i}-{uuid.uuid4().hex[:4]}", owner)).encode()
                    for i in range(64)
                ]

            covered, bare = bodies(ns, rs), bodies(ns, None)
            code, body = dry_run(cp, ns, pod(ns, "probe", rs))
            assert code == 201 and '"aibom.dev/rollup":"rolled-up"' in body, body[:500]
            # The same Pods where no webhook is called (a namespace not opted in).
            report(
                "API server alone, covered Pod",
                measure(cp, plain, bodies(plain, rs), expect=201, args=args, pids=[]),
            )
            assert hook.proc is not None
            mine = [hook.proc.pid]
            report(
                "+ our webhook, covered Pod",
                measure(cp, ns, covered, expect=201, args=args, pids=mine),
            )
            engines = {"kyverno": kyverno, "gatekeeper": gatekeeper}
            for name in [e for e in args.engines.split(",") if e]:
                with engines[name](cp) as refusal:
                    component = cp.component(name)
                    assert component is not None
                    theirs = [p.pid for p in component.processes if p.pid is not None]
                    refused: list[int] = []

                    def refusing(refusal: str = refusal, refused: list[int] = refused) -> bool:
                        code, body = dry_run(cp, ns, pod(ns, "probe", None))
                        refused.append(code)
                        return code != 201 and refusal in body

                    wait(f"{name} to refuse an uncovered Pod", refusing, timeout=180)
                    report(
                        f"+ our webhook + {name}, covered Pod",
                        measure(cp, ns, covered, expect=201, args=args, pids=theirs),
                    )
                    # The engine's refusal status (Kyverno 400, Gatekeeper 403).
                    report(
                        f"+ our webhook + {name}, bare Pod (refused, HTTP {refused[-1]})",
                        measure(cp, ns, bare, expect=refused[-1], args=args, pids=theirs),
                    )
        finally:
            hook.unregister(kubectl)
            if hook.proc is not None:
                hook.stop()
            log.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
