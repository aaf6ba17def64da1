"""helm, promtool and the policy engines' CLIs: Go tools the tests run (not components:
nothing to start).

Each is built from a module of ours (``modules/helm``, ``modules/promtool``:
a ``tool`` directive and a complete, committed ``go.sum``) through the one
builder, :mod:`tests.controlplane.gobuild`, so none changes another build's key.
The engines' CLIs come from the engines' own modules (``modules/kyverno``,
``modules/gatekeeper``), pinned with the engines: ``kyverno-cli`` (``kyverno test``)
and ``gator`` (``gator verify``).

    ensure_tool("helm") -> Path        # build unless cached; the binary
    ensure_tool("promtool") -> Path
    ensure_tool("kyverno-cli") -> Path  # the binary `kyverno`
    ensure_tool("gator") -> Path

From a shell: ``python -m tests.controlplane.gotools helm promtool kyverno-cli gator``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from tests.controlplane import enginepins as pins
from tests.controlplane.gobuild import BuildError, GoBuild, binary, go_ldflags, module_dir

HELM_VERSION: Final = "v4.3.2"
PROMETHEUS_VERSION: Final = "v0.316.0"

HELM_STAMP: Final = {"version": HELM_VERSION, "metadata": "", "gitTreeState": "clean"}
PROMETHEUS_STAMP: Final = {"Version": PROMETHEUS_VERSION.lstrip("v"), "Branch": "module"}

TOOLS: Final = {
    build.name: build
    for build in (
        GoBuild(
            name="helm",
            version=HELM_VERSION,
            mains={"helm": "helm.sh/helm/v4/cmd/helm"},
            module=module_dir("helm"),
            ldflags=go_ldflags({"helm.sh/helm/v4/internal/version": HELM_STAMP}),
            check=("helm", ("version", "--short"), HELM_VERSION.lstrip("v")),
        ),
        GoBuild(
            name="promtool",
            version=PROMETHEUS_VERSION,
            mains={"promtool": "github.com/prometheus/prometheus/cmd/promtool"},
            module=module_dir("promtool"),
            ldflags=go_ldflags({"github.com/prometheus/common/version": PROMETHEUS_STAMP}),
            # Prometheus's own switch: leave out the cloud service-discovery
            # plugins (AWS, Azure, GCE, ... SDKs: 246 of 1363 packages, most of the
            # build time). `promtool check rules` / `test rules` do not use them.
            tags=("remove_all_sd",),
            check=("promtool", ("--version",), PROMETHEUS_VERSION.lstrip("v")),
        ),
        GoBuild(
            name="kyverno-cli",
            version=pins.KYVERNO_VERSION,
            mains={"kyverno": f"{pins.KYVERNO_MODULE}/cmd/cli/kubectl-kyverno"},
            module=module_dir("kyverno"),
            ldflags=pins.KYVERNO_LDFLAGS,
            check=("kyverno", ("version",), f"Version: {pins.KYVERNO_VERSION}"),
        ),
        GoBuild(
            name="gator",
            version=pins.GATEKEEPER_VERSION,
            mains={"gator": f"{pins.GATEKEEPER_MODULE}/cmd/gator"},
            module=module_dir("gatekeeper"),
            ldflags=pins.GATEKEEPER_LDFLAGS,
            check=("gator", ("--version",), pins.GATEKEEPER_VERSION),
        ),
    )
}


def ensure_tool(name: str) -> Path:
    """Build the tool ``name`` (a key of :data:`TOOLS`) unless cached; return the binary."""
    return binary(TOOLS[name])


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
