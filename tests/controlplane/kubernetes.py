"""The Kubernetes binaries: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kubectl, from one module of ours (``modules/kubernetes``),
whose ``tool`` directives name upstream's own main packages (see README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

from tests.controlplane.gobuild import BuildError, GoBuild, binary, ensure, go_ldflags, module_dir
from tests.controlplane.process import child_env

#: The Kubernetes release every binary is built from (k8s.io/kubernetes in go.mod).
K8S_VERSION: Final = "v1.36.3"
#: The etcd server release (go.etcd.io/etcd/server/v3 in go.mod, the one
#: k8s.io/kubernetes v1.36.3 itself requires).
ETCD_VERSION: Final = "v3.6.8"
#: Each binary from upstream's main package (a ``tool`` of go.mod).
MAINS: Final = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
}
BINARIES: Final = tuple(MAINS)


def _ldflags() -> str:
    major, minor, _ = K8S_VERSION.lstrip("v").split(".", 2)
    version = {
        "gitVersion": K8S_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        # The module zip has no git metadata; an empty commit beats the
        # "$Format:%H$" placeholder that `kubectl version` would print.
        "gitCommit": "",
    }
    return go_ldflags(
        {pkg: version for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")}
    )


BUILD: Final = GoBuild(
    name="kubernetes",
    version=K8S_VERSION,
    mains=MAINS,
    module=module_dir("kubernetes"),
    ldflags=_ldflags(),
    check=("kube-apiserver", ("--version",), K8S_VERSION),
    verify=True,
    estimate="about 7 min",
)


def ensure_binaries() -> Path:
    """Build the binaries unless cached; return their ``bin/`` folder.

    A cached build costs a hash of a few files (about 0.1 s); a cold build
    took about 7 minutes on 2 cores (325-409 s), plus 0.6 GB of module cache and 3 GB of
    build cache.
    """
    return ensure(BUILD) / "bin"


def kubectl_path() -> Path:
    """The kubectl built from the same release as the API server (builds if needed)."""
    return binary(BUILD, "kubectl")


def kustomize(directory: Path) -> str:
    """``kubectl kustomize DIRECTORY`` with that kubectl: how an operator's release
    manifests are rendered from its own ``config/`` (its Makefile runs kustomize)."""
    res = subprocess.run(
        [str(kubectl_path()), "kustomize", str(directory)],
        env=child_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise BuildError(f"kubectl kustomize {directory} failed: {res.stderr}")
    return res.stdout
