"""Fuzz benchmark of the webhook process (not a test): 100,000 hostile AdmissionReviews.

Starts the real control plane (tests/controlplane) and `aibom-rollup webhook`
as a subprocess (the shipped ClusterRole, log level warning, logs to a file),
then sends the seeded bodies of tests/unit/review_fuzz.py (invalid JSON,
wrong kinds, wrong types in every field, huge annotations, deep
ownerReference lists, hostile names, owner cycles) over TLS with a few
keep-alive connections, checks every answer with the same oracle as the
unit test, and samples the process's RSS (/proc/PID/status VmRSS).

    .venv/bin/python bench/webhook_fuzz.py [--count 100000] [--seed 14] [--concurrency 8]

Prints: answers by class, failures (must be 0), 5xx (must be 0), whether the
process is still alive, RSS after warm-up (the first 2 %) and at every
quarter, and the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webhook_process import start_webhook  # noqa: E402

from tests.controlplane import ControlPlane  # noqa: E402
from tests.integration.support import Webhook, shipped_role  # noqa: E402
from tests.integration.support import grant_webhook as grant  # noqa: E402
from tests.unit.review_fuzz import rss_mib, send_reviews  # noqa: E402


async def drive(
    url: str, ctx: ssl.SSLContext, pid: int, args: argparse.Namespace
) -> dict[str, object]:
    marks = {max(1, args.count // 50)} | {args.count * q // 4 for q in (1, 2, 3)}
    run = await send_reviews(
        url,
        ctx,
        seed=args.seed,
        count=args.count,
        concurrency=args.concurrency,
        pid=pid,
        marks=marks,
    )
    return {
        "count": args.count,
        "seed": args.seed,
        "classes": dict(run.classes),
        "failures": len(run.failures),
        "failure_examples": run.failures[:5],
        "wall_s": round(run.wall, 1),
        "rss_mib": [(n, round(m, 1)) for n, m in sorted(run.rss.items())],
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", metavar="FILE", help="write the results here too")
    args = ap.parse_args()
    with ControlPlane() as cp:
        kubectl = cp.kubectl
        ns = "ns"  # the namespace the fuzz owners live in (most lookups: NotFound)
        kubectl("create", "namespace", ns)
        kubeconfig = grant(cp, kubectl, f"aibom-fuzz-{uuid.uuid4().hex[:4]}", shipped_role())
        hook = Webhook(
            cp, Path(tempfile.mkdtemp(prefix="aibom-fuzz-")), name="fuzz", kubeconfig=kubeconfig
        )
        log = start_webhook(hook)
        proc = hook.proc
        assert proc is not None
        try:
            start_rss = rss_mib(proc.pid)
            url = f"https://127.0.0.1:{hook.port}/mutate"
            result = asyncio.run(drive(url, hook.ssl_context(), proc.pid, args))
            result["rss_mib_at_ready"] = round(start_rss, 1)
            result["alive"] = proc.poll() is None
            _, metrics = hook.request("GET", "/metrics")
            errors = [
                line
                for line in metrics.decode().splitlines()
                if line.startswith("aibom_webhook_errors_total{")
            ]
            result["errors_total"] = errors
            result["metric_lines"] = len(metrics.decode().splitlines())
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = result["failures"] == 0 and result["alive"] and not result["errors_total"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
