"""``make test``: every check, in the order that keeps a 2-core machine busy, timed.

    python -m tests.run [--workers N] [--unit-workers N] [--skip PHASE,...]

Phases (each timed; the summary at the end lists them, and the integration
test files by time):

1. **builds** (background): every Go program the integration tests run
   (``python -m tests.controlplane build --all``), a cache hit in well under a
   second once built, minutes on a clean machine; it runs while the next two
   phases run, so a cold build overlaps the lint and the unit tests. An operator
   whose module the proxy refuses and whose source tree is not on this machine
   (a clone without ``shared/upstream`` beside it) is "not built here": the
   summary names it and the test modules that need it skip, with the reason;
2. **lint**: ruff, ruff format, ``mypy --strict``, the import contracts; beside
3. **unit**: ``pytest -m "not integration"`` (everything that needs no control
   plane), spread over ``--unit-workers`` processes;
4. **integration**: once the builds, the lint and the unit tests are done,
   ``pytest -m integration``, one
   file per worker at a time over ``--workers`` processes (pytest-xdist
   ``--dist loadfile``); each worker runs its own control plane, so files never
   share one, and the tests mostly wait on the API server and the processes
   under test, which is why more workers than cores pays.

Exit status: 0 only when every phase passed (pytest's 5, "no tests collected",
is a failure like any other non-zero status).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
BIN: Final = Path(sys.executable).parent
PHASES: Final = ("builds", "lint", "unit", "integration")
#: Integration workers: the tests mostly wait, so more than the 2 cores pay (BENCHMARKS.md,
#: "make test" has the phases' times at this default).
DEFAULT_WORKERS: Final = 4


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    code: int | None = None
    note: str = ""
    output: list[str] = field(default_factory=list)


def _say(msg: str) -> None:
    print(f"[make test] {msg}", flush=True)


def _run(cmd: list[str], phase: Phase, *, echo: bool, prefix: str = "") -> int:
    """Run ``cmd`` in the repository; keep (and with ``echo``, print) its output."""
    began = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        phase.output.append(line)
        if echo:
            sys.stdout.write(prefix + line)
            sys.stdout.flush()
    code = proc.wait()
    phase.seconds += time.monotonic() - began
    phase.code = code if phase.code in (None, 0) else phase.code
    return code


def _lint(phase: Phase) -> None:
    for cmd in (
        [str(BIN / "ruff"), "check", "."],
        [str(BIN / "ruff"), "format", "--check", "."],
        [str(BIN / "mypy")],
        [str(BIN / "lint-imports")],
    ):
        _run(cmd, phase, echo=False)


def _pytest(args: list[str], workers: int, junit: Path | None) -> list[str]:
    cmd = [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", *args]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadfile"]
    if junit is not None:
        cmd += [f"--junitxml={junit}"]
    return cmd


def file_times(junit: Path) -> dict[str, float]:
    """Seconds of test time per test file, from a JUnit XML report."""
    times: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).iter("testcase"):
        module = (case.get("classname") or "").split(".")
        name = "/".join(p for p in module if not p[:1].isupper()) + ".py"
        times[name] += float(case.get("time") or 0)
    return dict(times)


def _summary(phases: dict[str, Phase], wall: float, junit: Path) -> None:
    print("\n" + "=" * 72)
    _say(f"summary ({wall:.0f} s wall in all)")
    for phase in phases.values():
        if phase.code is None:
            state = "skipped"
        else:
            state = "ok" if phase.code == 0 else f"FAILED (exit {phase.code})"
        note = f"  {phase.note}" if phase.note else ""
        print(f"  {phase.name:<12} {phase.seconds:7.1f} s  {state}{note}")
    if junit.is_file():
        times = sorted(file_times(junit).items(), key=lambda kv: -kv[1])
        print("  integration test time by file (summed over its tests; workers overlap):")
        for name, seconds in times[:12]:
            print(f"    {seconds:7.1f} s  {name}")
        rest = sum(s for _, s in times[12:])
        print(f"    {rest:7.1f} s  the {max(len(times) - 12, 0)} other files")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N")
    ap.add_argument("--unit-workers", type=int, default=2, metavar="N")
    ap.add_argument(
        "--skip", default="", metavar="PHASES", help=f"comma-separated, of {', '.join(PHASES)}"
    )
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(PHASES)
    if unknown:
        ap.error(f"unknown phase(s) {', '.join(sorted(unknown))}; known: {', '.join(PHASES)}")
    phases = {name: Phase(name) for name in PHASES}
    began = time.monotonic()
    junit = Path(tempfile.mkdtemp(prefix="aibom-make-test-")) / "integration.xml"

    builder = threading.Thread(
        target=_run,
        args=([sys.executable, "-m", "tests.controlplane", "build", "--all"], phases["builds"]),
        kwargs={"echo": True, "prefix": "[builds] "},
        daemon=True,
    )
    if "builds" not in skip:
        builder.start()
    linter = threading.Thread(target=_lint, args=(phases["lint"],), daemon=True)
    if "lint" not in skip:
        linter.start()
    if "unit" not in skip:
        _say(f"unit tests ({args.unit_workers} workers), beside the lint and the builds")
        cmd = _pytest(["-m", "not integration", "tests"], args.unit_workers, None)
        _run(cmd, phases["unit"], echo=True)
    # Not beside the integration tests: tried (2026-12-06), the unit tests took
    # 185 s instead of 54, the lint 109 s instead of 28, and the integration
    # phase was no shorter (BENCHMARKS.md, "make test").
    if linter.ident is not None:  # started (a skipped phase never is)
        linter.join()
    if phases["lint"].code:
        sys.stdout.writelines(phases["lint"].output)
    if builder.ident is not None:
        builder.join()
    unbuilt = [line.split("not built: ", 1)[1].split(" ", 1)[0]
               for line in phases["builds"].output if "not built: " in line]  # fmt: skip
    if unbuilt:
        phases[
            "builds"
        ].note = f"not built here: {', '.join(unbuilt)} (their tests skip or fail, see above)"
    if "integration" not in skip:
        _say(f"integration tests ({args.workers} workers, one control plane each)")
        # -rs: each skipped module's reason (a component not built here) is listed.
        # The files go out in xdist's default order (tests/integration/conftest.py).
        cmd = _pytest(["-rs", "-m", "integration", "tests"], args.workers, junit)
        _run(cmd, phases["integration"], echo=True)
    _summary(phases, time.monotonic() - began, junit)
    failed = [p.name for p in phases.values() if p.code not in (None, 0)]
    if failed:
        _say(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
