"""No import circle anywhere in the repository: product, tools, tests, bench, demo.

Two modules that import each other (even lazily, inside a function) cannot be
read, tested or changed one at a time. The graph is built from the source (every
``import`` and ``from ... import`` of a first-party module, at any depth, except
under ``if TYPE_CHECKING:``, which only the type checker runs); the bench's
scripts import each other by bare name (``import annotator_bench``), so those
names are mapped to ``bench/<name>.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("aibom_core", "aibom_edge", "aibom_rollup", "webhook", "annotator", "certs", "tools")
SCRIPT_DIRS = ("bench", "demo")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in (*PACKAGES, "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    for folder in SCRIPT_DIRS:
        for path in sorted((ROOT / folder).glob("*.py")):
            found[path.stem] = path  # imported by bare name (sys.path)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str) -> Iterator[str]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports(child, package))
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        yield from _imports(node, package)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for imported in _imports(ast.parse(path.read_text()), package):
            # `from a.b import c`: c may be a module, else the nearest module above.
            probe = imported
            while probe and probe not in modules:
                probe = probe.rpartition(".")[0]
            if probe and probe != name:
                targets.add(probe)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph(_modules())
    # A package's __init__ importing its own submodules is how a package exports
    # them, not a circle: drop the edges from a submodule up to its package.
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    assert cycles(graph) == []


def test_the_rule_finds_a_circle_even_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    import b\nif TYPE_CHECKING:\n    import c\n")
    assert list(_imports(tree, "")) == ["b"]
