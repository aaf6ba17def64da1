"""The auditor's inventory over a fleet: `kubectl aibom models|runtimes|find -A`.

A real control plane holds one AIBOM ConfigMap per root of the benchmark's fleet
(`gen_dump.py`'s shapes, documents built by the same core and packed by the same
code as the annotator's, so each is what the annotator writes), and the plugin
answers from them. For each question it reports the wall time (median of
``--runs``), the plugin's peak RSS, and the API requests it made, read from the
API server's own counter (``apiserver_request_total`` for ConfigMaps): the
inventory reads the ConfigMaps once, with one paginated LIST, whatever the number
of roots.

    .venv/bin/python bench/inventory_bench.py --roots 10000 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_dump import generate

from aibom_core.bom import facts_of, input_hash, render
from aibom_core.document import DocLabels
from aibom_core.graph import build_graph
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj
from aibom_core.rollup import inventory
from aibom_edge.kube import Kube
from annotator.configmap import configmap_body, fit
from tests.controlplane import ControlPlane, child_env

SHAPES = ["deployment", "nim", "cronjob", "lws", "dcd", "dynamo"]
QUESTIONS = {
    "models -A -o json": ["models", "-A", "-o", "json"],
    "runtimes -A -o csv": ["runtimes", "-A", "-o", "csv"],
    "find -A --model --runtime range": [
        "find", "-A", "--model", "meta/*", "--runtime", "nim<2", "-o", "json"],
    "get -A (the table, as before)": ["get", "-A"],
}  # fmt: skip
_LIST = re.compile(
    r'^apiserver_request_total\{(?=[^}]*resource="configmaps")(?=[^}]*verb="(LIST|GET)")[^}]*\} (\S+)$',
    re.M,
)


def log(msg: str) -> None:
    print(f"[inventory-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def configmaps(roots: int) -> list[Obj]:
    """One AIBOM ConfigMap per root of the fleet, as the annotator would write it
    (without its ownerReference: the roots are not created, and the garbage
    collector would delete dependents of roots that do not exist)."""
    reg = default_registry()
    objects = list(generate(roots, roots * 6, max(1, roots // 500), SHAPES))
    graph = build_graph(objects, reg)
    out = []
    for entry in inventory(graph):
        facts = facts_of(entry.view, reg)
        digest = input_hash(facts, tool_version="bench")
        raw = render(facts, tool_version="bench", digest=digest)
        body = configmap_body(
            entry.ref, api_version="v1", name=entry.configmap_name, payload=fit(raw),
            input_hash=digest, generator="aibom-rollup/bench", labels=DocLabels(),
        )  # fmt: skip
        body["metadata"].pop("ownerReferences", None)
        out.append(body)
    return out


async def load(cp: ControlPlane, items: list[Obj], concurrency: int = 32) -> None:
    async with Kube.from_kubeconfig(str(cp.kubeconfig), pool_size=concurrency) as kube:
        namespaces = sorted({i["metadata"]["namespace"] for i in items})
        for ns in namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            await kube.request("POST", "/api/v1/namespaces", json=body)
        queue = list(items)
        failures: Counter[int] = Counter()

        async def worker() -> None:
            while queue:
                cm = queue.pop()
                path = f"/api/v1/namespaces/{cm['metadata']['namespace']}/configmaps"
                resp = await kube.request("POST", path, json=cm)
                if not resp.ok:
                    failures[resp.status] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        if failures:
            raise RuntimeError(f"ConfigMap creates failed: {dict(failures)}")


def requests(cp: ControlPlane) -> dict[str, float]:
    text = cp.request("GET", "/metrics").body.decode()
    out: dict[str, float] = {}
    for verb, value in _LIST.findall(text):
        out[verb] = out.get(verb, 0.0) + float(value)
    return out


def ask(cp: ControlPlane, args: list[str]) -> tuple[float, int, int]:
    """(seconds, peak RSS in KiB, bytes printed) of one plugin run."""
    plugin = Path(sys.executable).parent / "kubectl-aibom"
    cmd = ["/usr/bin/time", "-f", "%M", str(plugin), f"--kubeconfig={cp.kubeconfig}", *args]
    began = time.monotonic()
    got = subprocess.run(cmd, capture_output=True, env=child_env(), check=False)
    seconds = time.monotonic() - began
    if got.returncode != 0:
        raise RuntimeError(f"kubectl aibom {' '.join(args)}: {got.stderr.decode()[-2000:]}")
    rss = int(got.stderr.decode().strip().splitlines()[-1])
    return seconds, rss, len(got.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--roots", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    log(f"building {args.roots} documents")
    items = configmaps(args.roots)
    size = sum(len(json.dumps(i)) for i in items)
    result: dict[str, Any] = {"roots": len(items), "configmap_bytes": size, "questions": {}}
    with ControlPlane() as cp:
        log(f"creating {len(items)} ConfigMaps ({size / 1e6:.1f} MB)")
        began = time.monotonic()
        asyncio.run(load(cp, items))
        result["load_seconds"] = round(time.monotonic() - began, 1)
        for name, question in QUESTIONS.items():
            runs: list[dict[str, Any]] = []
            for _ in range(args.runs):
                before = requests(cp)
                seconds, rss, printed = ask(cp, question)
                after = requests(cp)
                made = {v: int(after.get(v, 0) - before.get(v, 0)) for v in ("LIST", "GET")}
                runs.append({"seconds": round(seconds, 2), "peak_rss_mib": round(rss / 1024, 1),
                             "configmap_requests": made, "output_bytes": printed})  # fmt: skip
                log(f"{name}: {runs[-1]}")
            median = statistics.median(float(r["seconds"]) for r in runs)
            result["questions"][name] = {
                "median_seconds": median,
                "peak_rss_mib": max(float(r["peak_rss_mib"]) for r in runs),
                "configmap_requests_per_run": runs[0]["configmap_requests"],
                "runs": runs,
            }
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
