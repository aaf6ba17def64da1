"""What a process loads before it does anything: the heavy libraries only where used.

The ORAS SDK imports jsonschema's format checkers, and with ``rfc3987-syntax``
installed (cyclonedx-python-lib's ``json-validation`` extra brings it) those
build an RFC 3987 grammar at import: about 1.5 s of CPU, paid by every
annotator start and every CLI call that loaded it (BENCHMARKS.md, "`make
test`"). Only the export to a registry and the trail's reads need the SDK;
schema validation only tests and ``validate`` need.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("oras", "jsonschema", "rfc3987_syntax")


def loaded_after(statement: str) -> set[str]:
    """The HEAVY modules in ``sys.modules`` of a fresh interpreter after ``statement``."""
    probe = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import annotator.main",
        "import webhook.main",
        "import aibom_rollup.cli",
        "import aibom_rollup.kubectl_aibom",
    ],
)
def test_starting_a_process_does_not_load_the_registry_sdk(statement: str) -> None:
    assert loaded_after(statement) == set()


def test_the_probe_sees_a_heavy_import() -> None:
    """The check above can fail: the export client does load the SDK."""
    assert "oras" in loaded_after("import aibom_edge.oci_client")
