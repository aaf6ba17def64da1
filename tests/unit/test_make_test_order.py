"""`make test` hands the integration files to workers longest first.

tests/integration/conftest.py orders the files (LONGEST_FIRST); tests/run.py's
command must keep that order through pytest-xdist, which by default reorders
files by their number of tests (a 1-test, 3-minute file then started last).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import LONGEST_FIRST
from tests.run import integration_command

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def test_every_longest_first_name_is_an_integration_file() -> None:
    missing = [name for name in LONGEST_FIRST if not (INTEGRATION / name).is_file()]
    assert not missing, f"LONGEST_FIRST names files that do not exist: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_integration_command_keeps_the_collection_order(tmp_path: Path) -> None:
    # Two files: the conftest puts `test_long` (1 test) before `test_many` (3
    # tests); one worker runs them in the order xdist hands them out.
    order = tmp_path / "order.txt"
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'integration: x')\n"
        "def pytest_collection_modifyitems(items):\n"
        "    items.sort(key=lambda i: i.path.name != 'test_long.py')\n"
    )
    body = (
        "import pytest\n"
        "pytestmark = pytest.mark.integration\n"
        "def record(name):\n"
        f"    open({str(order)!r}, 'a').write(name + '\\n')\n"
    )
    (tmp_path / "test_many.py").write_text(
        body + "".join(f"def test_{i}():\n    record('many')\n" for i in range(3))
    )
    (tmp_path / "test_long.py").write_text(body + "def test_0():\n    record('long')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = integration_command([str(tmp_path)], 2, None)
    cmd[cmd.index("-n") + 1] = "1"  # one worker: one total order
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *cmd[1:]],  # the venv's pytest
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert order.read_text().split() == ["long", "many", "many", "many"]
