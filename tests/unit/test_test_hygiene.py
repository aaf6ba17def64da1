"""House rules a reader relies on: the tests wait for events, never for fixed sleeps
(DEVELOPERS.md), every reference in code and docs leads somewhere, and every
declared dependency is used.

A sleep whose length is a number written in the test (`time.sleep(0.5)`,
`await asyncio.sleep(2)`) outside a loop is a guess: it makes a test slow, or
flaky, or unable to fail (sleep, then assert that nothing happened). A sleep
inside a `while`/`for` (a wait loop polling for the event, with a bound) or
one of a configured length (a fake API server's `self.delay`) is not one.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def fixed_sleeps(source: str) -> list[tuple[int, str]]:
    """(line, call) of each `sleep(<number>)` that is not inside a loop of its function."""
    tree = ast.parse(source)
    parent: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "sleep" or not node.args:
            continue
        arg = node.args[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, int | float)):
            continue
        if arg.value == 0:  # `sleep(0)`: yield to the event loop, not a wait
            continue
        up: ast.AST | None = parent.get(node)
        while up is not None and not isinstance(
            up, ast.While | ast.For | ast.AsyncFor | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            up = parent.get(up)
        if not isinstance(up, ast.While | ast.For | ast.AsyncFor):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_rule_finds_a_fixed_sleep_and_passes_a_wait_loop() -> None:
    source = (
        "import asyncio, time\n"
        "async def t():\n"
        "    await asyncio.sleep(0.5)\n"  # a guess
        "    while not done():\n"
        "        time.sleep(0.05)\n"  # polling, bounded by the loop
        "    await asyncio.sleep(0)\n"  # a yield
        "    await asyncio.sleep(self.delay)\n"  # configured
        "    if x:\n"
        "        time.sleep(2)\n"  # a guess
    )
    assert fixed_sleeps(source) == [(3, "asyncio.sleep(0.5)"), (9, "time.sleep(2)")]


def test_no_test_waits_on_a_fixed_sleep() -> None:
    found = {
        f"{path.relative_to(TESTS.parent)}:{line}: {call}"
        for path in sorted(TESTS.rglob("*.py"))
        if "upstream" not in path.parts
        for line, call in fixed_sleeps(path.read_text(encoding="utf-8"))
    }
    assert not found, "wait for the event instead:\n" + "\n".join(sorted(found))


# -- references a reader can follow ------------------------------------------------------

REPO = TESTS.parent
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_DOC = re.compile(r"(?<![\w/])docs/[A-Za-z0-9_-]+\.md")
# What a newcomer cannot open: the team's notes outside this repository, design
# numbers and issue numbers.
_UNREACHABLE = re.compile(r"\bARCHITECTURE\.md\b|\b[Dd]esign[ /-]?0\d\d\b|\b[Ii]ssue #?\d+")
# A folder beside the checkout that a workspace may hold and a clone does not: cite the
# repository's own copies (tests/upstream/ and its SOURCES.md) or the upstream project.
_OUTSIDE = re.compile(r"\.\./shared\b")


def _tracked(*suffixes: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", *(f"*{s}" for s in suffixes)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO / p for p in out if not p.startswith("tests/upstream/")]


def dangling(path: Path, text: str) -> list[str]:
    """Links of a Markdown file, and docs/*.md names anywhere, that lead nowhere; and
    references to what is not in the repository."""
    found = [m.group(0) for m in _UNREACHABLE.finditer(text)]
    found += [m.group(0) for m in _OUTSIDE.finditer(text)]
    found += [d for d in _DOC.findall(text) if not (REPO / d).is_file()]
    if path.suffix == ".md":
        for target in _LINK.findall(text):
            file = target.split("#", 1)[0]
            if file and not re.match(r"[a-z]+:", file) and not (path.parent / file).exists():
                found.append(target)
    return found


def test_the_rule_finds_what_leads_nowhere() -> None:
    readme = REPO / "README.md"
    text = "see [a](docs/architecture.md), [b](docs/gone.md#x), [c](https://x.io), design 005"
    assert dangling(readme, text) == ["design 005", "docs/gone.md", "docs/gone.md#x"]
    assert dangling(REPO / "x.py", "# docs/webhook.md and docs/nope.md, issue #12") == [
        "issue #12",
        "docs/nope.md",
    ]
    assert dangling(REPO / "examples/x.yaml", "# after ../shared/upstream/lws/x.yaml") == [
        "../shared"
    ]


def test_every_reference_in_code_and_docs_leads_somewhere() -> None:
    found = [
        f"{path.relative_to(REPO)}: {ref}"
        for path in _tracked(".py", ".md", ".yaml", ".toml", "Makefile", "Dockerfile")
        if path != Path(__file__)  # its samples lead nowhere
        for ref in dangling(path, path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


# -- every declared dependency is used ----------------------------------------------------

PACKAGES = ("aibom_core", "aibom_edge", "aibom_rollup", "webhook", "annotator", "certs")


def imported_distributions(sources: list[str]) -> set[str]:
    """The installed distributions (normalised names) whose modules these sources import."""
    owners = importlib.metadata.packages_distributions()
    out: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.update(_norm(d) for d in owners.get(name.split(".")[0], ()))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [_norm(re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0]) for d in project["dependencies"]]


def test_the_rule_maps_imports_to_distributions() -> None:
    used = imported_distributions(["import yaml\nfrom packageurl import PackageURL\nimport os\n"])
    assert used == {"pyyaml", "packageurl-python"}


def test_every_declared_dependency_is_imported_by_the_product() -> None:
    sources = [
        path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    ]
    unused = set(_declared()) - imported_distributions(sources)
    assert not unused, f"declared in pyproject.toml, imported by no product module: {unused}"


def test_the_processes_the_tests_start_keep_their_bytecode() -> None:
    """tests/conftest.py: a child started by a test writes and reuses ``__pycache__``
    even when the image sets PYTHONDONTWRITEBYTECODE (ours does)."""
    probe = "import sys; print(sys.dont_write_bytecode)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert out.stdout.strip() == "False"
