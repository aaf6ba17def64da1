"""The tests wait for events, never for fixed sleeps (DEVELOPERS.md).

A sleep whose length is a number written in the test (`time.sleep(0.5)`,
`await asyncio.sleep(2)`) outside a loop is a guess: it makes a test slow, or
flaky, or unable to fail (sleep, then assert that nothing happened). A sleep
inside a `while`/`for` (a wait loop polling for the event, with a bound) or
one of a configured length (a fake API server's `self.delay`) is not one.
"""

from __future__ import annotations

import ast
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
