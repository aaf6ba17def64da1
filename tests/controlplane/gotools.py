"""helm and promtool, built from their Go modules like the control plane.

Each tool has its own Go module beside the control plane's (``helm/go.mod``,
``promtool/go.mod``, each with a ``tool`` directive and a complete, committed
``go.sum``), so neither changes the control plane's build key. The binary is
cached under ``${AIBOM_CACHE_DIR:-~/.cache/aibom-rollup}/controlplane/tools/
<name>-<version>-<hash>/bin/<name>``, the hash over that module's go.mod,
go.sum, the ldflags and a recipe number; a file lock makes concurrent callers
wait for one build; progress goes to stderr, the ``go build -v`` log to
``build.log`` next to ``bin/``. Binaries never go into the repository.

    ensure_tool("helm") -> Path        # build unless cached; the binary
    ensure_tool("promtool") -> Path

From a shell: ``python -m tests.controlplane.gotools helm promtool``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.controlplane import (
    MODULE_DIR,
    BuildError,
    _build_once,
    _go_build,
    _install,
    _name_after,
    cache_dir,
    go_ldflags,
)

_RECIPE: Final = "1"


@dataclass(frozen=True)
class GoTool:
    name: str
    module_dir: Path
    package: str
    version: str
    ldflags: str
    #: arguments that print the version, and the text it must contain
    version_args: tuple[str, ...]
    #: go build -tags
    tags: tuple[str, ...] = ()
    #: what the version_args output must contain (default: the version without its "v");
    #: for a binary with no version flag, a text of its --help
    expect: str | None = None


HELM_VERSION: Final = "v4.3.2"
PROMETHEUS_VERSION: Final = "v0.316.0"

HELM_STAMP: Final = {"version": HELM_VERSION, "metadata": "", "gitTreeState": "clean"}
PROMETHEUS_STAMP: Final = {"Version": PROMETHEUS_VERSION.lstrip("v"), "Branch": "module"}

TOOLS: Final = {
    tool.name: tool
    for tool in (
        GoTool(
            name="helm",
            module_dir=MODULE_DIR / "helm",
            package="helm.sh/helm/v4/cmd/helm",
            version=HELM_VERSION,
            ldflags=go_ldflags({"helm.sh/helm/v4/internal/version": HELM_STAMP}),
            version_args=("version", "--short"),
        ),
        GoTool(
            name="promtool",
            module_dir=MODULE_DIR / "promtool",
            package="github.com/prometheus/prometheus/cmd/promtool",
            version=PROMETHEUS_VERSION,
            ldflags=go_ldflags({"github.com/prometheus/common/version": PROMETHEUS_STAMP}),
            version_args=("--version",),
            # Prometheus's own switch: leave out the cloud service-discovery
            # plugins (AWS, Azure, GCE, ... SDKs: 246 of 1363 packages, most of the
            # build time). `promtool check rules` / `test rules` do not use them.
            tags=("remove_all_sd",),
        ),
    )
}


def tool_key(tool: GoTool) -> str:
    digest = hashlib.sha256(
        f"recipe={_RECIPE}\nldflags={tool.ldflags}\ntags={','.join(tool.tags)}\n".encode()
    )
    for name in ("go.mod", "go.sum"):
        digest.update(name.encode() + b"\0" + (tool.module_dir / name).read_bytes() + b"\0")
    return f"{tool.name}-{tool.version}-{digest.hexdigest()[:16]}"


def tool_path(name: str) -> Path:
    """Where the binary of the current key lives (it may not exist yet)."""
    tool = TOOLS[name]
    return cache_dir() / "tools" / tool_key(tool) / "bin" / tool.name


def ensure_tool(name: str | GoTool, *, progress_interval: float = 15.0) -> Path:
    """Build `name` (helm or promtool, or a GoTool of the caller's) unless cached; return
    the binary."""
    tool = TOOLS[name] if isinstance(name, str) else name
    key_dir = cache_dir() / "tools" / tool_key(tool)
    binary = key_dir / "bin" / tool.name

    def build(key_dir: Path, progress_interval: float) -> None:
        staging = _go_build(
            tool.module_dir,
            [tool.package],
            ldflags=tool.ldflags,
            key_dir=key_dir,
            progress_interval=progress_interval,
            what=f"{tool.name} {tool.version}",
            estimate="minutes",
            tags=tool.tags,
            verify=False,
        )
        _name_after(staging, tool.package, tool.name)
        _install(
            staging,
            key_dir,
            binary=tool.name,
            version_args=tool.version_args,
            expect=tool.version.lstrip("v") if tool.expect is None else tool.expect,
        )

    _build_once(key_dir, lambda: os.access(binary, os.X_OK), build, progress_interval)
    return binary


def main(argv: list[str]) -> int:
    for name in argv or list(TOOLS):
        if name not in TOOLS:
            print(f"unknown tool {name!r}; known: {', '.join(TOOLS)}", file=sys.stderr)
            return 2
        try:
            print(ensure_tool(name))
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
