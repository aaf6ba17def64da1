"""What every test process shares: Python's bytecode caches are kept.

The image this project is built on, and our own Dockerfile, set
``PYTHONDONTWRITEBYTECODE=1``. Under it no ``__pycache__`` is ever written, so
every process the tests start (each annotator, webhook, CLI and ``kubectl
aibom`` call, and each pytest-xdist worker) compiled our modules from source
again: 66 of them for an annotator, about 0.2 s of CPU per start, and the
integration tests start hundreds (BENCHMARKS.md, "`make test`": "Bytecode").
The test run keeps the caches (``__pycache__/`` is ignored by git): this
process writes them, and its environment, which the workers and every child
inherit, no longer forbids it.
"""

from __future__ import annotations

import os
import sys

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # In the controller before the xdist workers are spawned (they inherit this
    # environment), and in each worker for the test modules it rewrites itself.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
