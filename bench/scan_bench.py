"""Benchmark of the offline scan: wall time and peak memory on a synthetic dump.

    .venv/bin/python bench/scan_bench.py                 # 100,000 objects, 2,000 roots, 3 runs
    .venv/bin/python bench/scan_bench.py --objects 20000 --roots 400 --runs 5
    .venv/bin/python bench/scan_bench.py --baseline /tmp/base   # before/after, one run

`--baseline DIR`: DIR holds another version's packages (for example
`git archive <commit> aibom_core aibom_rollup webhook annotator certs | tar -x -C DIR`);
each mode then runs that version (PYTHONPATH=DIR) and this one alternately,
on the same dump, so both see the same machine load.

Generates the dump with bench/gen_dump.py (every ownership shape, pods with
digests), then runs `aibom-rollup scan` as a separate process, once printing
the summary and once writing every document (`-o DIR`), and reports the
median wall time and the peak RSS of each mode. Goal: <= 5 s and
<= 1 GB for 100,000 objects on this 2-core machine. Not a test: numbers go
to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system) of one child process.

    CPU time is what to compare on a loaded machine: wall time then mostly
    measures the other jobs.
    """
    start = time.perf_counter()
    # Run outside the checkout: `python -m` puts the working directory first on
    # sys.path, which would shadow a --baseline PYTHONPATH.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir()
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--roots", type=int, default=2_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another version's packages, run alternately")
    ap.add_argument(
        "--mode", choices=["summary", "documents", "tree"], help="run only this mode (default: all)"
    )
    args = ap.parse_args()
    versions: dict[str, dict[str, str] | None] = {"": None}
    if args.baseline is not None:
        if not (args.baseline / "aibom_core").is_dir():
            raise SystemExit(f"--baseline {args.baseline}: no aibom_core package there")
        base_env = dict(os.environ, PYTHONPATH=str(args.baseline.resolve()))
        versions = {"baseline ": base_env, "this     ": None}
    with tempfile.TemporaryDirectory(prefix="aibom-bench-") as tmp:
        dump = Path(tmp) / "dump.json"
        subprocess.run(
            [
                sys.executable,
                str(HERE / "gen_dump.py"),
                "--objects",
                str(args.objects),
                "--roots",
                str(args.roots),
                "-o",
                str(dump),
            ],
            check=True,
        )
        size = dump.stat().st_size / 2**20
        cli = [sys.executable, "-m", "aibom_rollup"]
        modes = {
            "scan (summary)": [*cli, "scan", str(dump)],
            "scan -o DIR (all documents)": [*cli, "scan", str(dump), "-o", str(Path(tmp) / "out")],
            "tree -o json": [*cli, "tree", str(dump), "-o", "json"],
        }
        print(
            f"dump: {dump.name} {size:.0f} MiB, ~{args.objects} objects, {args.roots} roots; "
            f"{args.runs} runs each, medians",
            flush=True,
        )
        picked = {"summary": "scan (summary)", "documents": "scan -o DIR (all documents)",
                  "tree": "tree -o json"}  # fmt: skip
        for name, cmd in modes.items():
            if args.mode is not None and name != picked[args.mode]:
                continue
            walls: dict[str, list[float]] = {v: [] for v in versions}
            rss: dict[str, list[float]] = {v: [] for v in versions}
            cpus: dict[str, list[float]] = {v: [] for v in versions}
            for _ in range(args.runs):
                for version, env in versions.items():
                    w, r, c = run(cmd, env)
                    walls[version].append(w)
                    rss[version].append(r)
                    cpus[version].append(c)
            for version in versions:
                ws, cs = walls[version], cpus[version]
                print(
                    f"{version}{name:30s} wall {statistics.median(ws):6.2f} s  "
                    f"(min {min(ws):.2f}, max {max(ws):.2f})  "
                    f"cpu {statistics.median(cs):6.2f} s (min {min(cs):.2f}, max {max(cs):.2f})  "
                    f"peak RSS {statistics.median(rss[version]):6.0f} MiB",
                    flush=True,
                )
        docs = list((Path(tmp) / "out").rglob("*.json"))
        print(f"documents written: {len(docs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
