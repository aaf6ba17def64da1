"""What pydantic costs each server process in resident memory (not a test).

For each server (the annotator, the webhook) a fresh interpreter imports the
modules its command runs (`aibom_rollup.cli` and the server's `main`) and
validates its default flags, in three ways:

  - `pydantic`: as shipped;
  - `stubbed`: a stand-in `pydantic` module with just the names our models
    use is put in first, so no pydantic, pydantic-core, annotated-types or
    typing-inspection code is loaded (nothing is validated: the base without
    pydantic);
  - `dropped`: as shipped, then every model we define and every pydantic
    module is dropped from memory (`sys.modules`, `gc.collect()`): what
    importing pydantic only where it validates and letting go afterwards
    would give back.

The parent reads the child's /proc/PID/status (VmRSS, and its anonymous and
file-backed parts) once the child says it is done. Medians of --runs.

    .venv/bin/python bench/import_rss.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from annotator_bench import rss_kib  # noqa: E402

SERVERS = {
    "annotator": (
        "import annotator.main as m, aibom_rollup.cli, argparse\n"
        "p = argparse.ArgumentParser(); m.configure_parser(p)\n"
        "VALIDATE = lambda: m.settings_of(p.parse_args([]))\n"
        "MODELS = [(m, 'Limits')]\n"
    ),
    "webhook": (
        "import webhook.main as m, webhook.flags as f, aibom_rollup.cli, argparse\n"
        "from aibom_edge.options import flags_in_bounds\n"
        "p = argparse.ArgumentParser(); m.configure_parser(p)\n"
        "a = p.parse_args(['--cert-file', 'c', '--key-file', 'k'])\n"
        "VALIDATE = lambda: flags_in_bounds(f.Limits, a)\n"
        "MODELS = [(f, 'Limits')]\n"
    ),
}

STUB = """
import sys, types
stub = types.ModuleType("pydantic")
stub.BaseModel = type("BaseModel", (), {})
stub.ConfigDict = dict
stub.Field = lambda *a, **k: None
stub.field_validator = stub.model_validator = lambda *a, **k: (lambda f: f)
stub.ValidationError = type("ValidationError", (Exception,), {})
sys.modules["pydantic"] = stub
"""

DROP = """
import gc, sys, aibom_core.kinds as kinds
for module, name in [*MODELS, (kinds, "_Entry"), (kinds, "_Config")]:
    delattr(module, name)
for name in [n for n in sys.modules if n.split(".")[0] in PYDANTIC]:
    del sys.modules[name]
del p, m
gc.collect()
"""

PYDANTIC = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection")


def child_code(server: str, mode: str) -> str:
    code = STUB if mode == "stubbed" else ""
    code += SERVERS[server]
    if mode != "stubbed":
        code += "VALIDATE()\ndel VALIDATE\n"
    if mode == "dropped":
        code += f"PYDANTIC = {PYDANTIC!r}\n" + DROP
    loaded = "[n for n in sys.modules if n.split('.')[0] in " + repr(PYDANTIC) + "]"
    return code + f"import sys\nprint(len({loaded}), flush=True)\nsys.stdin.readline()\n"


def measure(server: str, mode: str) -> tuple[dict[str, float], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", child_code(server, mode)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    modules = int(child.stdout.readline())
    mib = {f: rss_kib(child.pid, f) / 1024 for f in ("VmRSS", "RssAnon", "RssFile")}
    child.stdin.write("\n")
    child.stdin.close()
    if child.wait() != 0:
        raise SystemExit(f"{server}/{mode}: the child failed")
    return mib, modules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    print("| server | mode | VmRSS MiB | RssAnon | RssFile | pydantic modules loaded |")
    print("|---|---|---|---|---|---|")
    for server in SERVERS:
        for mode in ("pydantic", "stubbed", "dropped"):
            samples = [measure(server, mode) for _ in range(runs)]
            med = {
                f: statistics.median(s[0][f] for s in samples)
                for f in ("VmRSS", "RssAnon", "RssFile")
            }
            print(
                f"| {server} | {mode} | {med['VmRSS']:.1f} | {med['RssAnon']:.1f} | "
                f"{med['RssFile']:.1f} | {samples[-1][1]} |"
            )


if __name__ == "__main__":
    main()
