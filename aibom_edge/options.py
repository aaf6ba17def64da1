"""The options every command shares, and the error that makes a command exit 2.

The command line (`aibom_rollup.cli`), the webhook, the annotator and certs
all read their kind registry, annotation prefix, walk depth and provenance key
through these functions, so a flag means the same thing in every process.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from aibom_core.kinds import KindRegistry, RegistryError, default_registry, registry_from_config
from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE, parse_label
from aibom_core.provenance import ProvenanceKeyError, parse_key
from aibom_core.stamp import DEFAULT_PREFIX, Keys
from aibom_core.walk import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT
from aibom_edge.logs import FORMATS

LOG_LEVELS = ("debug", "info", "warning", "error")
_N = TypeVar("_N", int, float)
_M = TypeVar("_M", bound=BaseModel)


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


def add_provenance_key_option(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, *, help_text: str
) -> None:
    """--provenance-key FILE (`provenance_key_of` reads it); each command says what it is for."""
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
    if not 1 <= depth <= MAX_DEPTH_LIMIT:
        raise UsageError(f"--max-depth must be between 1 and {MAX_DEPTH_LIMIT}, got {depth}")
    return depth


def positive_int(text: str) -> int:
    """An argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    return _positive(value, text)


def _positive(value: _N, text: str) -> _N:
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def flags_in_bounds(model: type[_M], args: argparse.Namespace) -> _M:
    """`args` checked against `model`, whose field `write_qps` is the flag `--write-qps`.

    UsageError naming the first flag out of its bounds; a model validator's
    ValueError (flags that do not fit together) is shown as its message,
    which names the flags itself.
    """
    try:
        return model.model_validate(vars(args))
    except ValidationError as exc:
        error = exc.errors()[0]
        if not error["loc"]:
            raise UsageError(error["msg"].removeprefix("Value error, ")) from None
        flag = "--" + str(error["loc"][0]).replace("_", "-")
        why = error["msg"].replace("Input should be", "must be")
        raise UsageError(f"{flag} {why}, got {error['input']!r}") from None


def command_parser(
    prog: str, *, description: str | None, epilog: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]]:
    """A console script's parser (--version, --debug) and its required subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog)
    parser.add_argument("--version", action="version", version=f"{prog} {tool_version()}")
    parser.add_argument("--debug", action="store_true", help="show a traceback on internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    return parser, sub


def add_seconds(
    group: argparse._ActionsContainer,
    flag: str,
    default: float,
    help: str,
    *,
    whole: bool = False,
) -> None:
    """A duration flag in seconds (whole seconds with `whole`): its default is given once
    and stated at the end of its help."""
    group.add_argument(
        flag,
        type=int if whole else float,
        default=default,
        metavar="SECONDS",
        help=f"{help} (default: {default:g})",
    )


def add_cluster_options(group: argparse._ArgumentGroup) -> None:
    """--kubeconfig and --context, as every command that talks to a cluster reads them
    (`aibom_edge.kube.Kube.from_kubeconfig`)."""
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, else the in-cluster "
        "service account)",
    )
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: current)")


def add_namespace_label_option(group: argparse._ArgumentGroup, *, help_text: str) -> None:
    """--namespace-label KEY=VALUE (`namespace_label_of` reads it; `aibom_core.opt_in`)."""
    group.add_argument(
        "--namespace-label",
        default=f"{OPT_IN_LABEL}={OPT_IN_VALUE}",
        metavar="KEY=VALUE",
        help=f"{help_text} (default: %(default)s)",
    )


def namespace_label_of(args: argparse.Namespace) -> tuple[str, str]:
    """The (key, value) of --namespace-label; UsageError when its key is empty."""
    try:
        return parse_label(args.namespace_label)
    except ValueError as exc:
        raise UsageError(f"--namespace-label: {exc}") from None


def add_log_options(
    group: argparse._ArgumentGroup,
    *,
    formats: Sequence[str] = FORMATS,
    level_help: str = "(default: %(default)s)",
) -> None:
    """--log-level and --log-format (`aibom_edge.logs.configure` takes both)."""
    group.add_argument("--log-level", choices=LOG_LEVELS, default="info", help=level_help)
    group.add_argument(
        "--log-format",
        choices=tuple(formats),
        default="json",
        help=f"log line format: {', '.join(formats)} (default: %(default)s)",
    )


def read_input(path: str) -> bytes:
    """The bytes of FILE, or of stdin for `-`; UsageError when unreadable."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None


def exit_code(
    call: Callable[[], int],
    *,
    prefix: str,
    debug: bool,
    failures: tuple[type[Exception], ...] = (),
    interrupted: str | None = "interrupted",
) -> int:
    """Run a command; map what it raises to an exit code and one line on stderr.

    UsageError: 2; one of `failures` (the cluster could not answer, ...): 1;
    Ctrl-C: 130; a closed pipe: 0; anything else is a bug: 1 with a request to
    report it (the traceback with --debug).
    """
    try:
        return call()
    except UsageError as exc:
        print(f"{prefix}error: {exc}", file=sys.stderr)
        return 2
    except failures as exc:
        print(f"{prefix}error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if interrupted:
            print(f"{prefix}{interrupted}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if debug:
            raise
        print(
            f"{prefix}error: internal error: {type(exc).__name__}: {exc} (rerun with --debug "
            "for a traceback, and please report it)",
            file=sys.stderr,
        )
        return 1
