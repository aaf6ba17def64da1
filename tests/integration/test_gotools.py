"""tests.controlplane.gotools builds a Go tool whose package is not named after it.

`go build -o DIR/` names the binary after the package's last element
(`./cmd/manager` -> `manager`); the cache holds it under the tool's name. A
real `go build` of a one-file module, into a temporary cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.controlplane.gotools import GoTool, ensure_tool

pytestmark = pytest.mark.integration


def test_a_tool_is_cached_under_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "src"
    (module / "cmd" / "manager").mkdir(parents=True)
    (module / "go.mod").write_text("module example.com/hello\n\ngo 1.22\n")
    (module / "go.sum").write_text("")  # the cache key hashes it
    (module / "cmd" / "manager" / "main.go").write_text(
        'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello-tool v0.0.1") }\n'
    )
    monkeypatch.setenv("AIBOM_CACHE_DIR", str(tmp_path / "cache"))
    tool = GoTool(
        name="hello-tool",
        module_dir=module,
        package="./cmd/manager",
        version="v0.0.1",
        ldflags="-s -w",
        version_args=(),
        expect="hello-tool",
    )
    binary = ensure_tool(tool, progress_interval=5)
    assert binary.name == "hello-tool"
    assert os.access(binary, os.X_OK)
    assert not (binary.parent / "manager").exists()
    assert ensure_tool(tool) == binary  # the second call is a cache hit
