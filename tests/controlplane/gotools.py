"""helm and promtool, built from their Go modules like the control plane (issue 19).

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

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from tests.controlplane import (
    MODULE_DIR,
    BuildError,
    _find_go,
    _log,
    _tail,
    _try_lock,
    cache_dir,
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

TOOLS: Final = {
    "helm": GoTool(
        name="helm",
        module_dir=MODULE_DIR / "helm",
        package="helm.sh/helm/v4/cmd/helm",
        version=HELM_VERSION,
        ldflags=(
            "-s -w"
            f" -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}"
            " -X helm.sh/helm/v4/internal/version.metadata="
            " -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
        ),
        version_args=("version", "--short"),
    ),
    "promtool": GoTool(
        name="promtool",
        module_dir=MODULE_DIR / "promtool",
        package="github.com/prometheus/prometheus/cmd/promtool",
        version=PROMETHEUS_VERSION,
        ldflags=(
            "-s -w"
            f" -X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION.lstrip('v')}"
            " -X github.com/prometheus/common/version.Branch=module"
        ),
        version_args=("--version",),
        # Prometheus's own switch: leave out the cloud service-discovery
        # plugins (AWS, Azure, GCE, ... SDKs: 246 of 1363 packages, most of the
        # build time). `promtool check rules` / `test rules` do not use them.
        tags=("remove_all_sd",),
    ),
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
    if os.access(binary, os.X_OK):
        return binary
    key_dir.mkdir(parents=True, exist_ok=True)
    with open(key_dir / ".lock", "w") as lock:
        if not _try_lock(lock):
            _log(f"another process is building {key_dir.name}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(binary, os.X_OK):
            _build(tool, key_dir, progress_interval)
    return binary


def _build(tool: GoTool, key_dir: Path, progress_interval: float) -> None:
    go = _find_go()
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    staging = Path(tempfile.mkdtemp(prefix="bin.", dir=key_dir))
    log_path = key_dir / "build.log"
    start = time.monotonic()
    tags = ["-tags", ",".join(tool.tags)] if tool.tags else []
    res = subprocess.run(
        [go, "list", "-deps", *tags, tool.package],
        cwd=tool.module_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"go list {tool.package} failed:\n{res.stderr[-4000:]}")
    total = len(res.stdout.split())
    cmd = [go, "build", "-v", "-trimpath", *tags, "-ldflags", tool.ldflags]
    cmd += ["-o", str(staging / tool.name)]  # the tool's name, whatever its package's
    cmd.append(tool.package)
    _log(
        f"building {tool.name} {tool.version} ({total} packages) into {key_dir}; "
        f"minutes on a cold Go cache (log: {log_path})"
    )
    count = 0
    last = ""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd,
            cwd=tool.module_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        guard = threading.Lock()

        def pump(stream: IO[str]) -> None:
            for line in stream:
                log.write(line)
                log.flush()
                with guard:
                    lines.append(line.rstrip("\n"))

        reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            while True:
                try:
                    proc.wait(timeout=progress_interval)
                    break
                except subprocess.TimeoutExpired:
                    pass
                with guard:
                    count += len(lines)
                    last = lines[-1] if lines else last
                    lines.clear()
                _log(
                    f"still building {tool.name}: {time.monotonic() - start:.0f} s, "
                    f"{count}/~{total} packages; last: {last}"
                )
        except BaseException:
            proc.kill()
            proc.wait()
            shutil.rmtree(staging, ignore_errors=True)
            raise
        reader.join(timeout=10)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(
            f"go build {tool.package} failed (exit {proc.returncode}); last lines of "
            f"{log_path}:\n{_tail(log_path)}"
        )
    out = subprocess.run(
        [str(staging / tool.name), *tool.version_args], capture_output=True, text=True, check=False
    )
    expect = tool.version.lstrip("v") if tool.expect is None else tool.expect
    if expect not in out.stdout + out.stderr:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"built {tool.name} reports {out.stdout.strip()!r}, not {expect!r}")
    bin_dir = key_dir / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    staging.rename(bin_dir)
    _log(f"built {tool.name} in {time.monotonic() - start:.0f} s: {bin_dir / tool.name}")


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
