"""Where the harness finds things: the repository, the build cache, the upstream data
and the upstream source trees. No process is started here."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

#: This package (its Go modules live in ``modules/``).
PACKAGE_DIR: Final = Path(__file__).resolve().parent
#: The Go modules the harness builds: one folder each (``go.mod`` and ``go.sum``).
MODULES_DIR: Final = PACKAGE_DIR / "modules"
REPO_ROOT: Final = PACKAGE_DIR.parent.parent


def log(msg: str) -> None:
    """One progress line on stderr (builds and starts print these)."""
    print(f"[controlplane] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """``$AIBOM_CACHE_DIR`` or ``~/.cache/aibom-rollup``, plus ``controlplane/``."""
    base = os.environ.get("AIBOM_CACHE_DIR") or str(Path.home() / ".cache" / "aibom-rollup")
    return Path(base).expanduser() / "controlplane"


def shared_dir() -> Path:
    """The upstream data folder: ``$AIBOM_SHARED_DIR``, else the vendored ``tests/upstream``.

    ``tests/upstream`` is a copy of the upstream CRDs and examples the tests use
    (see its SOURCES.md), so a clone runs anywhere.
    """
    env = os.environ.get("AIBOM_SHARED_DIR")
    return Path(env).expanduser() if env else REPO_ROOT / "tests" / "upstream"


def upstream_source_dirs() -> list[Path]:
    """Where upstream *source trees* may be (operators the Go module proxy does not
    serve), most specific first: ``$AIBOM_UPSTREAM_SRC``, then ``shared/upstream``
    beside this checkout or beside its parent folder (a worktree's layout).

    Only a build on a cache miss reads them: a cache key never depends on them.
    """
    env = os.environ.get("AIBOM_UPSTREAM_SRC")
    found = [Path(env).expanduser()] if env else []
    found += [base / "shared" / "upstream" for base in REPO_ROOT.parents[:2]]
    return found
