"""`aibom-rollup ... --help` as a user gets it: a fresh interpreter through the entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def help_of(*command: str) -> str:
    """The help text of `aibom-rollup COMMAND...` (exit 0, or CalledProcessError)."""
    return subprocess.run(
        [sys.executable, "-m", "aibom_rollup", *command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
