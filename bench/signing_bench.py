"""Benchmark of document signing (not a test): per-document cost of signing and verifying.

For each document: render (what the annotator pays anyway, for scale), sign
(parse + JCS + signature + our serialisation: `aibom_core.jsf.sign_bytes`,
exactly what the annotator adds per write), and verify (`verify_bytes`).
Medians over --repeat runs, per algorithm. Documents: the examples/ workloads'
(small, 2-9 KB) and one large root (a Deployment whose --pods Pods each
carry a distinct sidecar image: many components, as a big DaemonSet's
document would have).

    .venv/bin/python bench/signing_bench.py [--repeat 300] [--pods 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aibom_core import jsf  # noqa: E402
from aibom_core.bom import build_document, facts_of, render  # noqa: E402
from aibom_core.dump import load  # noqa: E402
from aibom_core.graph import build_graph  # noqa: E402
from aibom_core.kinds import default_registry  # noqa: E402
from aibom_core.rollup import inventory  # noqa: E402


def _objects(pods: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    uid = "uid-big"
    objs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "big", "namespace": "bench", "uid": uid},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "m",
                                "image": "vllm/vllm-openai:v0.9.0",
                                "args": ["--model", "Qwen/Qwen3-0.6B"],
                            }
                        ]
                    }
                }
            },
        }
    )
    for i in range(pods):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"big-{i}",
                    "namespace": "bench",
                    "uid": f"pod-{i}",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": "big",
                            "uid": uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "containers": [
                        {
                            "name": "m",
                            "image": "vllm/vllm-openai:v0.9.0",
                            "args": ["--model", "Qwen/Qwen3-0.6B"],
                        },
                        {"name": "sidecar", "image": f"registry.example/sidecar-{i}:1"},
                    ]
                },
            }
        )
    return objs


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    dump = load([(json.dumps({"kind": "List", "items": _objects(args.pods)}).encode(), "bench")])
    graph = build_graph(dump.objects, default_registry())
    registry = graph.registry
    entries = list(inventory(graph))
    rows = []
    keys = {alg: jsf.SigningKey.of(jsf.generate(alg), kid=alg) for alg in jsf.ALGORITHMS}
    for entry in entries:
        facts = facts_of(entry.view, registry)
        doc = build_document(entry.view, registry, tool_version="0.1.0").json_bytes
        row: dict[str, Any] = {
            "root": f"{entry.ref.kind}/{entry.ref.name}",
            "bytes": len(doc),
            "components": len(json.loads(doc).get("components") or []),
            "render_ms": median_ms(partial(render, facts, tool_version="0.1.0"), args.repeat),
        }
        for alg, key in keys.items():
            signed = jsf.sign_bytes(doc, key)
            trusted = jsf.KeySet.of([key.jwk])
            row[f"sign_{alg}_ms"] = median_ms(partial(jsf.sign_bytes, doc, key), args.repeat)
            row[f"verify_{alg}_ms"] = median_ms(
                partial(jsf.verify_bytes, signed, trusted), args.repeat
            )
        rows.append(row)
        print(
            f"{row['root']:<55} {row['bytes']:>8} B {row['components']:>4} comp  "
            f"render {row['render_ms']:.3f} ms  "
            + "  ".join(
                f"{alg}: sign {row[f'sign_{alg}_ms']:.3f} / verify {row[f'verify_{alg}_ms']:.3f} ms"
                for alg in jsf.ALGORITHMS
            ),
            file=sys.stderr,
        )
    result = {
        "repeat": args.repeat,
        "documents": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "load": os.getloadavg(),
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
