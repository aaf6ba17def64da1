"""An import-linter contract for what imports cannot show: calls to the world.

The forbidden contract keeps I/O and clock modules (os, pathlib, socket,
time, ...) out of the pure core, but a module may be pure by its imports and
still read the clock (`datetime.now()`), the environment (`os.environ` through
an object handed in), a file (the `open` builtin) or the console (`print`).
This contract reads the source of every module of `source_modules` and refuses
those names: the clock, the environment and files are the edges' business and
are passed in (docs/architecture.md).

pyproject.toml registers it as `contract_types = ["no_effects: ..."]`.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from typing import cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.imports import Module

# Builtins that reach outside the process (or run code the contracts cannot see).
FORBIDDEN_CALLS = frozenset({"open", "input", "print", "breakpoint", "exec", "eval", "__import__"})
# Attributes that read a clock, the environment or randomness, whatever their object.
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "now",
        "utcnow",
        "today",
        "environ",
        "getenv",
        "urandom",
        "uuid1",
        "uuid4",
    }
)


@dataclass(frozen=True, order=True)
class Effect:
    module: str
    line: int
    what: str


def effects_in(module: str, source: str) -> list[Effect]:
    """Every forbidden name `source` (the text of `module`) uses."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(Effect(module, node.lineno, f"{node.func.id}()"))
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(Effect(module, node.lineno, f".{node.attr}"))
    return sorted(found)


class NoEffectsContract(Contract):
    """No module of `source_modules` names a clock, the environment, a file or the console."""

    source_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        found: list[Effect] = []
        for source in cast("list[Module]", self.source_modules):
            modules = {source.name} | graph.find_descendants(source.name)
            for module in sorted(modules):
                spec = importlib.util.find_spec(module)
                if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
                    continue
                with open(spec.origin, encoding="utf-8") as fh:
                    found += effects_in(module, fh.read())
        return ContractCheck(
            kept=not found,
            metadata={"effects": [(e.module, e.line, e.what) for e in found]},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, line, what in check.metadata["effects"]:
            output.print_error(f"{module}:{line} uses {what}", bold=False)
        output.new_line()
