"""The options every command shares, and the error that makes a command exit 2.

The command line (`aibom_rollup.cli`), the webhook, the annotator and certs
all read their kind registry, annotation prefix, walk depth and provenance key
through these functions, so a flag means the same thing in every process.
"""

from __future__ import annotations

import argparse
from importlib import metadata as importlib_metadata
from pathlib import Path

from aibom_core.kinds import KindRegistry, RegistryError, default_registry, registry_from_config
from aibom_core.provenance import ProvenanceKeyError, parse_key
from aibom_core.stamp import DEFAULT_PREFIX, Keys
from aibom_core.walk import DEFAULT_MAX_DEPTH


class UsageError(Exception):
    """Bad input or usage: one line on stderr, exit 2."""


def tool_version() -> str:
    try:
        return importlib_metadata.version("aibom-rollup")
    except importlib_metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def add_core_options(p: argparse.ArgumentParser) -> None:
    """Options every command that resolves roots shares."""
    p.add_argument(
        "--kinds",
        metavar="FILE",
        help="YAML kind registry to merge with the built-in one "
        "(`replace: true` in the file replaces it); see `aibom-rollup kinds`",
    )
    p.add_argument(
        "--max-depth",
        type=int,
        default=DEFAULT_MAX_DEPTH,
        metavar="N",
        help=f"owner hops the walk may take (default {DEFAULT_MAX_DEPTH}: "
        "worker Pod up to a DynamoGraphDeployment over a LeaderWorkerSet is 6)",
    )
    p.add_argument(
        "--annotation-prefix",
        default=DEFAULT_PREFIX,
        metavar="PREFIX",
        help=f"prefix of the stamp annotations (default {DEFAULT_PREFIX})",
    )


def add_provenance_key_option(p: argparse.ArgumentParser, *, help_text: str) -> None:
    p.add_argument("--provenance-key", metavar="FILE", help=help_text)


def provenance_key_of(args: argparse.Namespace) -> bytes | None:
    """The key of `--provenance-key FILE` (None without it); UsageError when unreadable."""
    path = getattr(args, "provenance_key", None)
    if not path:
        return None
    return load_provenance_key(path)


def load_provenance_key(path: str | Path) -> bytes:
    """The edge-proof key in the file at `path`; UsageError when unreadable or not a key."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --provenance-key {path}: {exc.strerror}") from None
    try:
        return parse_key(data, source=f"--provenance-key {path}")
    except ProvenanceKeyError as exc:
        raise UsageError(str(exc)) from None


def registry_of(args: argparse.Namespace) -> KindRegistry:
    path = getattr(args, "kinds", None)
    if not path:
        return default_registry()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--kinds {path}: {exc.strerror or exc}") from None
    try:
        return registry_from_config(text, source=path)
    except RegistryError as exc:
        raise UsageError(str(exc)) from None


def keys_of(args: argparse.Namespace) -> Keys:
    try:
        return Keys(getattr(args, "annotation_prefix", DEFAULT_PREFIX))
    except ValueError as exc:
        raise UsageError(f"--annotation-prefix: {exc}") from None


def max_depth_of(args: argparse.Namespace) -> int:
    depth = int(args.max_depth)
    if not 1 <= depth <= 64:
        raise UsageError(f"--max-depth must be between 1 and 64, got {depth}")
    return depth
