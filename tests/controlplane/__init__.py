"""A real Kubernetes control plane for the integration tests and the local demo.

The binaries (etcd, kube-apiserver, kube-controller-manager, kubectl) are built
from the Go module in this folder (see ``go.mod`` and ``README.md``) and cached
outside the repository under ``${AIBOM_CACHE_DIR:-~/.cache/aibom-rollup}/
controlplane/<key>/bin``, keyed by a hash of ``go.mod`` (whose ``tool``
directives name upstream's own main packages) and ``go.sum``.
:class:`ControlPlane` runs them on 127.0.0.1 with random free ports, fresh
certificates and a fresh data directory. Nothing here fakes the API: every
call goes to the real kube-apiserver, and Kubernetes' own controllers
(deployment, replicaset, job, cronjob, garbage collector, namespace,
serviceaccount, serviceaccount-token, ...) run in the kube-controller-manager.
There is no scheduler and no kubelet: Pods stay Pending.

Public API (pytest users: the fixtures ``control_plane``, ``kubectl`` and
``namespace`` in ``tests/integration/conftest.py`` wrap it)::

    ensure_binaries() -> Path         # build unless cached; return the bin/ folder
    kubectl_path() -> Path            # the version-matched kubectl (builds if needed)
    shared_dir() -> Path              # $AIBOM_SHARED_DIR or the vendored <repo>/tests/upstream
    child_env() -> dict[str, str]     # os.environ without proxy vars, NO_PROXY=loopback,
                                      # no KUBECONFIG: use it for processes you start
    K8S_VERSION, ETCD_VERSION         # "v1.36.3", "v3.6.8"
    DEFAULT_CRD_FILES                 # what install_crds() installs (under shared_dir())

    with ControlPlane() as cp:        # or cp = ControlPlane().start(); ...; cp.stop()
        cp.server                     # "https://127.0.0.1:PORT"
        cp.kubeconfig                 # admin kubeconfig path (user aibom-admin,
        cp.admin_kubeconfig           #   group system:masters); the same path
        cp.admin_cert_file, cp.admin_key_file   # the admin's PEM client cert and key
        cp.ca_file                    # PEM path of the cluster CA (trust it for cp.server)
        cp.ca_pem, cp.ca_bundle       # the CA as PEM bytes / base64 (for caBundle)
        cp.request("GET", "/version", identity=None)  # -> ApiResponse(status, body,
                                      #   headers, .json(), .ok); stdlib HTTPS
        cp.ssl_context(identity=None) # ssl.SSLContext trusting the CA, with a client cert
        cp.kubectl("get", "ns", kubeconfig=None, input=None, check=True)
        cp.issue_identity("alice", ["team-a"]) -> ClientIdentity(user, groups,
                                      #   cert_file, key_file, kubeconfig)
        cp.restricted_kubeconfig("alice", ["team-a"]) -> Path  # no roles bound
        cp.service_account_kubeconfig(ns, name, path, seconds) -> Path  # run as that
                                      #   ServiceAccount (a TokenRequest token)
        cp.issue_serving_cert("hook", dns_names=("localhost",),
                              ip_addresses=("127.0.0.1",)) -> ServingCert(cert_file,
                                      #   key_file, ca_file): for a webhook on loopback
        cp.restart_apiserver()            # same flags/port/data; back when /readyz answers
        cp.restart_apiserver()            # same flags, port and data; back when /readyz answers
        cp.install_crds(files=None) -> list[str]  # server-side apply, wait Established
        cp.install_crd(path) -> list[str]         # one more CRD, later
        cp.delete_crd(name, wait=True)            # and away again
        cp.crd_established(name) -> bool
        cp.pids, cp.log_files, cp.data_dir, cp.running, cp.ports

    # The real LeaderWorkerSet controller (sigs.k8s.io/lws LWS_VERSION, module lws/):
    ensure_lws() -> Path              # build unless cached: bin/lws-controller, release.yaml
    ControlPlane(lws=True)            # start() also runs it, or:
    cp.start_lws() -> LwsController   # release CRDs/RBAC, its ServiceAccount, its webhooks
        .user, .kubeconfig, .log_path, .webhook_port, .started_in, ...
    cp.lws_controller                 # the running one, or None
    cp.stop_lws()                     # stop it, delete its webhook configurations

The API server can call admission webhooks at ``https://127.0.0.1:PORT/...``
(``MutatingAdmissionWebhook`` is on by default; no egress selector, proxy
variables cleared for every child process).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import datetime as _dt
import fcntl
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Protocol

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from certs import pki

__all__ = [
    "BINARIES",
    "DEFAULT_CRD_FILES",
    "ETCD_VERSION",
    "K8S_VERSION",
    "LWS_MODULE_DIR",
    "LWS_NAMESPACE",
    "LWS_SERVICE_ACCOUNT",
    "LWS_VERSION",
    "MODULE_DIR",
    "REPO_ROOT",
    "ApiResponse",
    "BuildError",
    "ClientIdentity",
    "ControlPlane",
    "ControlPlaneError",
    "Kubectl",
    "LwsController",
    "ServingCert",
    "binaries_dir",
    "bind_rules",
    "build_key",
    "cache_dir",
    "child_env",
    "ensure_binaries",
    "ensure_lws",
    "kubectl_path",
    "lws_build_key",
    "running_control_plane",
    "shared_dir",
]

#: The Kubernetes release every binary is built from (k8s.io/kubernetes in go.mod).
K8S_VERSION: Final = "v1.36.3"
#: The etcd server release (go.etcd.io/etcd/server/v3 in go.mod).
ETCD_VERSION: Final = "v3.6.8"
#: The binaries ``ensure_binaries`` builds, each from upstream's main package
#: (a ``tool`` of go.mod: no main is copied into this repository).
MAINS: Final = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
}
BINARIES: Final = tuple(MAINS)

MODULE_DIR: Final = Path(__file__).resolve().parent
REPO_ROOT: Final = MODULE_DIR.parent.parent

#: The CRDs ``install_crds`` installs, relative to :func:`shared_dir`.
#: Dynamo comes from ``crds-standin/``: the real Dynamo CRDs name Dynamo's
#: conversion webhook, so without the Dynamo operator any v1alpha1 read or
#: write fails; the stand-ins serve v1alpha1 and v1beta1 with no conversion.
DEFAULT_CRD_FILES: Final = (
    "lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "lws/crds/disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
    "grove/crds/grove.io_podcliquesets.yaml",
    "grove/crds/grove.io_podcliquescalinggroups.yaml",
    "grove/crds/grove.io_podcliques.yaml",
    "grove/crds/scheduler.grove.io_podgangs.yaml",
    "dynamo/crds-standin/nvidia.com_dynamographdeployments.minimal.yaml",
    "dynamo/crds-standin/nvidia.com_dynamocomponentdeployments.minimal.yaml",
    "nim-operator/crds/apps.nvidia.com_nimservices.yaml",
    "nim-operator/crds/apps.nvidia.com_nimcaches.yaml",
    "k8s-aibom/crds/external/serving.kserve.io_inferenceservices.yaml",
)

# Bump when the way binaries are built changes (flags, layout), to rebuild.
_BUILD_RECIPE: Final = "3"
_SERVICE_CLUSTER_IP_RANGE: Final = "10.0.0.0/24"
_SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or a call to it failed."""


class BuildError(ControlPlaneError):
    """The Go build of the control-plane binaries failed."""


def _log(msg: str) -> None:
    print(f"[controlplane] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- paths


def cache_dir() -> Path:
    """``$AIBOM_CACHE_DIR`` or ``~/.cache/aibom-rollup``, plus ``controlplane/``."""
    base = os.environ.get("AIBOM_CACHE_DIR") or str(Path.home() / ".cache" / "aibom-rollup")
    return Path(base).expanduser() / "controlplane"


def shared_dir() -> Path:
    """The upstream data folder: ``$AIBOM_SHARED_DIR``, else the vendored ``tests/upstream``.

    ``tests/upstream`` is a copy of the CRDs and examples of ``../shared/upstream``
    that the tests use (see its SOURCES.md), so a clone runs anywhere.
    """
    env = os.environ.get("AIBOM_SHARED_DIR")
    return Path(env).expanduser() if env else REPO_ROOT / "tests" / "upstream"


def _module_digest(module_dir: Path, *, recipe: str, ldflags: str) -> str:
    """16 hex of a SHA-256 over a Go module's go.mod (with the ``tool`` mains it
    names), its go.sum, the build flags and a recipe number."""
    digest = hashlib.sha256(f"recipe={recipe}\nldflags={ldflags}\n".encode())
    for name in ("go.mod", "go.sum"):
        digest.update(name.encode() + b"\0" + (module_dir / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_key() -> str:
    """``<k8s-version>-<hash>`` (`_module_digest`): any change to what is built
    gives a new cache folder."""
    return f"{K8S_VERSION}-{_module_digest(MODULE_DIR, recipe=_BUILD_RECIPE, ldflags=_ldflags())}"


def binaries_dir() -> Path:
    """Where the binaries of the current build key live (they may not exist yet)."""
    return cache_dir() / build_key() / "bin"


def _have_binaries(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in BINARIES)


# --------------------------------------------------------------------------- build


def go_ldflags(variables: Mapping[str, Mapping[str, str]]) -> str:
    """``go build -ldflags`` for a release build: no symbol table or DWARF
    (``-s -w``), and each package's string variables set (``-X package.name=value``),
    in the order given: the control plane's, LWS's, the Go tools' and the bench's
    peer's."""
    settings = (
        f"-X {package}.{name}={value}"
        for package, values in variables.items()
        for name, value in values.items()
    )
    return " ".join(["-s -w", *settings])


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


def _find_go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise BuildError(
            "the Go toolchain ('go') is not on PATH; it is needed to build the control plane"
        )
    return go


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(data[-lines:])


def ensure_binaries(*, progress_interval: float = 15.0) -> Path:
    """Build the binaries unless cached; return their directory.

    A cached build costs a hash of a few files (about 0.1 s). A cold build
    (empty Go caches) took about 4.5 minutes on 2 cores, plus 0.6 GB of
    module cache and 3 GB of build cache; progress goes to stderr every ``progress_interval``
    seconds, and the full ``go build -v`` output to ``<cache>/<key>/build.log``.
    Concurrent callers wait on a file lock and reuse the first one's build.
    """
    key_dir = cache_dir() / build_key()
    _build_once(key_dir, lambda: _have_binaries(key_dir / "bin"), _build, progress_interval)
    return key_dir / "bin"


def _build_once(
    key_dir: Path,
    have: Callable[[], bool],
    build: Callable[[Path, float], None],
    progress_interval: float,
) -> None:
    """Run ``build(key_dir, progress_interval)`` unless ``have()``, under ``<key_dir>/.lock``."""
    if have():
        return
    key_dir.mkdir(parents=True, exist_ok=True)
    with open(key_dir / ".lock", "w") as lock:
        if not _try_lock(lock):
            _log(f"another process is building {key_dir.name}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if have():
            return
        build(key_dir, progress_interval)


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _build(key_dir: Path, progress_interval: float) -> None:
    staging = _go_build(
        MODULE_DIR,
        list(MAINS.values()),
        ldflags=_ldflags(),
        key_dir=key_dir,
        progress_interval=progress_interval,
        what=f"{', '.join(BINARIES)} ({K8S_VERSION}, etcd {ETCD_VERSION})",
        estimate="about 5 min",
    )
    for name, package in MAINS.items():
        _name_after(staging, package, name)
    _install(
        staging, key_dir, binary="kube-apiserver", version_args=["--version"], expect=K8S_VERSION
    )


def _go_build(
    module_dir: Path,
    packages: Sequence[str],
    *,
    ldflags: str,
    key_dir: Path,
    progress_interval: float,
    what: str,
    estimate: str,
    tags: Sequence[str] = (),
    verify: bool = True,
) -> Path:
    """``go build`` of ``packages`` of ``module_dir`` (with ``-tags``) into a fresh
    staging folder under ``key_dir`` (returned); the log goes to
    ``<key_dir>/build.log``. The control plane, the LWS controller and the
    tools of :mod:`tests.controlplane.gotools` all build through here."""
    go = _find_go()
    staging = Path(tempfile.mkdtemp(prefix="bin.", dir=key_dir))
    log_path = key_dir / "build.log"
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    # go.sum is committed: never let the build rewrite go.mod/go.sum.
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    tag_args = ["-tags", ",".join(tags)] if tags else []
    cmd = [go, "build", "-v", "-trimpath", *tag_args, "-ldflags", ldflags]
    cmd += ["-o", str(staging) + os.sep, *packages]
    total = 0
    _log(
        f"building {what} into {key_dir};"
        f" a cold build takes {estimate} on 2 cores (log: {log_path})"
    )
    start = time.monotonic()
    # Resolving the graph downloads the pinned modules (checked against
    # go.sum) on a cold module cache; `go mod verify` then re-checks them all
    # (not for the tools: their module graphs are mostly never downloaded).
    steps = [[go, "list", "-deps", *tag_args, *packages]]
    steps += [[go, "mod", "verify"]] if verify else []
    _log(f"resolving the package graph ({', '.join(' '.join(p[1:3]) for p in steps)})")
    for pre in steps:
        res = subprocess.run(
            pre, cwd=module_dir, env=env, capture_output=True, text=True, check=False
        )
        if res.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildError(
                f"{' '.join(pre[1:])} failed (exit {res.returncode}):\n{res.stderr[-4000:]}"
            )
        if pre[1] == "list":
            total = len(res.stdout.split())
    _log(f"{total} packages to compile ({time.monotonic() - start:.0f} s so far)")
    count = 0
    last = ""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=module_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        lock = threading.Lock()

        def pump(stream: IO[str]) -> None:
            for line in stream:
                log.write(line)
                log.flush()
                with lock:
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
                with lock:
                    count += len(lines)
                    last = lines[-1] if lines else last
                    lines.clear()
                done = f"{count}/~{total}" if total else str(count)
                _log(
                    f"still building: {time.monotonic() - start:.0f} s, {done} packages"
                    f" compiled; last: {last}"
                )
        except BaseException:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            shutil.rmtree(staging, ignore_errors=True)
            raise
        reader.join(timeout=10)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(
            f"go build failed (exit {proc.returncode}) after {elapsed:.0f} s; "
            f"last lines of {log_path}:\n{_tail(log_path)}"
        )
    _log(f"built in {elapsed:.0f} s: {', '.join(packages)}")
    return staging


def _name_after(staging: Path, package: str, name: str) -> None:
    """Rename the binary ``go build -o staging/`` wrote for ``package`` to ``name``
    (go names it after the package path's last element, or the one before a
    major-version suffix: go.etcd.io/etcd/server/v3 gives ``server``)."""
    parts = package.split("/")
    last = parts[-2] if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]
    if last != name:
        (staging / last).rename(staging / name)


def _install(
    staging: Path, key_dir: Path, *, binary: str, version_args: Sequence[str], expect: str
) -> Path:
    """Move ``staging`` to ``<key_dir>/bin`` once ``binary version_args`` prints
    ``expect`` (else remove it: BuildError); return the bin directory."""
    out = subprocess.run(
        [str(staging / binary), *version_args], capture_output=True, text=True, check=False
    )
    if expect not in out.stdout + out.stderr:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"built {binary} reports {out.stdout.strip()!r}, not {expect}")
    bin_dir = key_dir / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    staging.rename(bin_dir)
    return bin_dir


def kubectl_path() -> Path:
    """The kubectl built from the same release as the API server (builds if needed)."""
    return ensure_binaries() / "kubectl"


# --------------------------------------------------------------------------- LWS build

#: The LeaderWorkerSet release whose controller ``start_lws`` runs (lws/go.mod).
LWS_VERSION: Final = "v0.9.0"
#: The commit of tag v0.9.0 (the module proxy's ``.info`` Origin.Hash): the module
#: zip has no git metadata, so it is pinned here for ``lws-controller --version``.
LWS_COMMIT: Final = "f056f611ae7721f9983ac35f26bfbae8547fd9f3"
#: The Go module that builds ``lws-controller`` (its own go.mod and go.sum).
LWS_MODULE_DIR: Final = MODULE_DIR / "lws"
#: Upstream's main package of the controller manager (a ``tool`` of lws/go.mod).
LWS_MAIN: Final = "sigs.k8s.io/lws/cmd"
#: Where the release manifests put the controller, and as whom it runs.
LWS_NAMESPACE: Final = "lws-system"
LWS_SERVICE_ACCOUNT: Final = "lws-controller-manager"
# Bump when the way the LWS controller is built or its release rendered changes.
_LWS_RECIPE: Final = "2"


def _lws_ldflags() -> str:
    # The upstream Makefile sets the same three; BuildDate stays empty so the
    # binary is the same bytes on every rebuild.
    version = {"GitVersion": LWS_VERSION, "GitCommit": LWS_COMMIT, "BuildDate": ""}
    return go_ldflags({"sigs.k8s.io/lws/pkg/version": version})


def lws_build_key() -> str:
    """``lws-<version>-<hash>`` (`_module_digest` of lws/): any change gives a new
    cache folder, next to the control plane's."""
    digest = _module_digest(LWS_MODULE_DIR, recipe=_LWS_RECIPE, ldflags=_lws_ldflags())
    return f"lws-{LWS_VERSION}-{digest}"


def _have_lws(key_dir: Path) -> bool:
    return (
        os.access(key_dir / "bin" / "lws-controller", os.X_OK)
        and (key_dir / "release.yaml").is_file()
    )


def ensure_lws() -> Path:
    """Build the LWS controller unless cached; return its folder.

    ``<folder>/bin/lws-controller`` is upstream's main package ``sigs.k8s.io/lws/cmd``
    (a ``tool`` of lws/go.mod) at :data:`LWS_VERSION`, and ``<folder>/release.yaml`` is
    the release's own manifests (``kubectl kustomize config/default`` of the
    same module: CRDs, ServiceAccount, RBAC, webhook configurations). Same
    cache, lock and progress output as :func:`ensure_binaries`; a cold build
    took about 1.5 min on 2 cores, a cache hit costs a hash.
    """
    key_dir = cache_dir() / lws_build_key()
    _build_once(key_dir, lambda: _have_lws(key_dir), _build_lws, 15.0)
    return key_dir


def _build_lws(key_dir: Path, progress_interval: float) -> None:
    kubectl = ensure_binaries() / "kubectl"  # renders the release's kustomization
    staging = _go_build(
        LWS_MODULE_DIR,
        (LWS_MAIN,),
        ldflags=_lws_ldflags(),
        key_dir=key_dir,
        progress_interval=progress_interval,
        what=f"the LeaderWorkerSet controller (sigs.k8s.io/lws {LWS_VERSION})",
        estimate="about 1.5 min",
    )
    _name_after(staging, LWS_MAIN, "lws-controller")
    try:
        out = subprocess.run(
            [str(staging / "lws-controller"), "--version"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if f"Version: {LWS_VERSION}" not in out.stdout:
            raise BuildError(f"built lws-controller reports {out.stdout.strip()!r}")
        env = dict(os.environ, GOFLAGS="-mod=readonly")
        res = subprocess.run(
            [_find_go(), "mod", "download", "-json", "sigs.k8s.io/lws"],
            cwd=LWS_MODULE_DIR, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise BuildError(f"go mod download sigs.k8s.io/lws failed: {res.stderr[-2000:]}")
        source = Path(json.loads(res.stdout)["Dir"])
        res = subprocess.run(
            [str(kubectl), "kustomize", str(source / "config" / "default")],
            env=child_env(), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise BuildError(f"kubectl kustomize {source}/config/default failed: {res.stderr}")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    bin_dir = key_dir / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    staging.rename(bin_dir)
    release = key_dir / "release.yaml"
    tmp = release.with_suffix(".tmp")
    tmp.write_text(
        f"# kubectl kustomize config/default of sigs.k8s.io/lws@{LWS_VERSION} ({source})\n"
        + res.stdout
    )
    tmp.replace(release)


# --------------------------------------------------------------------------- certificates


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


@dataclass(frozen=True)
class _CA:
    """A test CA (``certs.pki``, the code ``aibom-rollup certs`` uses) and what it issues."""

    pair: pki.KeyPair

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        return self.pair.key

    @property
    def cert(self) -> x509.Certificate:
        return self.pair.cert

    @classmethod
    def create(cls, common_name: str) -> _CA:
        # path_length None: kube-controller-manager signs with it too.
        now = _dt.datetime.now(_dt.UTC)
        return cls(pki.new_ca(common_name=common_name, now=now, days=3650, path_length=None))

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        leaf = pki.issue(
            self.pair,
            common_name=common_name,
            now=_dt.datetime.now(_dt.UTC),
            days=365,
            organizations=organizations,
            server=server,
            client=client,
            dns_names=dns_names,
            ips=ip_addresses,
        )
        return leaf.key, leaf.cert


@dataclass(frozen=True)
class WebhookCaller:
    """The identity kube-apiserver presents to an admission webhook, and its config.

    Give the webhook ``client_ca_file`` (``--client-ca-file``) and/or
    ``token_file`` (``--client-token-file``); start the control plane with
    ``ControlPlane(admission_config_file=caller.config_file)``.
    """

    client_ca_file: Path
    cert_file: Path
    key_file: Path
    token_file: Path | None
    kubeconfig: Path
    config_file: Path


def webhook_caller(directory: Path, *, webhook_host: str, token: bool = True) -> WebhookCaller:
    """Write what makes kube-apiserver authenticate to the webhook at ``webhook_host``.

    A fresh client CA and a client certificate (CN ``kube-apiserver-webhook-client``)
    signed by it, optionally a random bearer token, a kubeconfig whose user entry
    is named ``webhook_host`` (``host:port`` of the webhook's URL, the name the
    API server looks up), and the AdmissionConfiguration pointing the
    MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins at it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = _CA.create("aibom-test-webhook-client-ca")
    key, cert = ca.issue("kube-apiserver-webhook-client", client=True)
    ca_file = _write(directory / "client-ca.crt", _pem_cert(ca.cert), 0o644)
    cert_file = _write(directory / "apiserver-client.crt", _pem_cert(cert), 0o644)
    key_file = _write(directory / "apiserver-client.key", _pem_key(key))
    user: dict[str, str] = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    token_file = None
    if token:
        value = secrets.token_urlsafe(32)
        token_file = _write(directory / "token", value.encode())
        user["token"] = value
    kubeconfig = _write(
        directory / "webhook-kubeconfig.yaml",
        json.dumps(
            {"apiVersion": "v1", "kind": "Config", "users": [{"name": webhook_host, "user": user}]}
        ).encode(),
    )
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    config = _write(
        directory / "admission-config.yaml",
        json.dumps(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {"name": "MutatingAdmissionWebhook", "configuration": plugin},
                    {"name": "ValidatingAdmissionWebhook", "configuration": plugin},
                ],
            }
        ).encode(),
        0o644,
    )
    return WebhookCaller(ca_file, cert_file, key_file, token_file, kubeconfig, config)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- processes


_PROXY_VARS: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _status_of_get(conn: http.client.HTTPConnection, path: str) -> int:
    """The status of `GET path` on `conn` (closed afterwards)."""
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    return resp.status


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The controller ownerReference a controller writes on a child of ``owner``
    (the demo, the benchmarks and the tests make their ownership chains with it)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a control-plane process or a client of it.

    Proxy variables are removed and ``NO_PROXY`` covers loopback: the API
    server must reach admission webhooks at ``https://127.0.0.1:PORT`` and
    clients must reach the API server directly, never through a proxy.
    """
    env = dict(os.environ if base is None else base)
    for var in _PROXY_VARS:
        env.pop(var, None)
        env.pop(var.lower(), None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    env.pop("KUBECONFIG", None)
    return env


_LIBC_PRCTL: Callable[..., int] | None = None


def _resolve_prctl() -> Callable[..., int] | None:
    # Resolved in the parent: the child, between fork and exec, must not dlopen.
    global _LIBC_PRCTL  # noqa: PLW0603
    if _LIBC_PRCTL is None:
        with contextlib.suppress(OSError, AttributeError):
            _LIBC_PRCTL = ctypes.CDLL(None, use_errno=True).prctl
    return _LIBC_PRCTL


def _pdeathsig_hook() -> Callable[[], None] | None:
    """A preexec_fn: if the Python parent dies without cleaning up (even by
    SIGKILL), the kernel sends the child SIGKILL, so no stray control plane
    outlives its owner (PR_SET_PDEATHSIG; Linux only). SIGKILL, not SIGTERM:
    the data is throwaway, and a kube-apiserver whose etcd got SIGTERM at the
    same moment was seen to hang in its graceful shutdown forever."""
    prctl = _resolve_prctl()
    if prctl is None:
        return None

    def hook() -> None:  # runs in the child between fork and exec
        prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG

    return hook


@dataclass
class _Process:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self, *, pdeathsig: bool) -> None:
        # PDEATHSIG fires when the *thread* that forked exits, so it is only
        # set when starting from the main thread (which lives as long as we do).
        hook = _pdeathsig_hook() if pdeathsig else None
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env if self.env is not None else child_env(),
                preexec_fn=hook,  # noqa: PLW1509 (it only calls prctl, resolved beforehand)
            )

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"last lines of {self.log_path}:\n{self.tail()}"
            )

    def tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def stop(self, grace: float) -> None:
        if self.popen is None:
            return
        pgid = self.popen.pid  # start_new_session: the child leads its own group
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                self.popen.wait()
        # Anything the process left behind in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class ApiResponse:
    """One HTTP response from the API server."""

    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate signed by the cluster CA, and a kubeconfig using it."""

    user: str
    groups: tuple[str, ...]
    cert_file: Path
    key_file: Path
    kubeconfig: Path


@dataclass(frozen=True)
class ServingCert:
    """A server certificate and key signed by the cluster CA (``ca_file``)."""

    cert_file: Path
    key_file: Path
    ca_file: Path


def _kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "aibom",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": "aibom", "context": {"cluster": "aibom", "user": user}}],
        "current-context": "aibom",
        "preferences": {},
    }
    return json.dumps(doc, indent=2) + "\n"  # JSON is valid YAML


class Kubectl(Protocol):
    """The shape of :meth:`ControlPlane.kubectl` (and the ``kubectl`` fixture)."""

    def __call__(
        self,
        *args: str,
        kubeconfig: Path | None = ...,
        input: str | None = ...,
        check: bool = ...,
        timeout: float = ...,
    ) -> subprocess.CompletedProcess[str]: ...


def bind_rules(
    kubectl: Kubectl,
    user: str,
    name: str,
    rules: Sequence[dict[str, Any]],
    *,
    namespace: str | None = None,
) -> None:
    """Grant `user` exactly `rules`: a ClusterRole and binding named `name`, or a Role and
    RoleBinding in `namespace`. Applied with `kubectl` (the admin's, normally)."""
    kind = "Role" if namespace else "ClusterRole"
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "rules": list(rules),
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    docs = {"apiVersion": "v1", "kind": "List", "items": [role, binding]}
    kubectl("apply", "-f", "-", input=json.dumps(docs))


# --------------------------------------------------------------------------- LWS runtime

#: What ``start_lws`` applies from the release: not its Deployment, Services,
#: ConfigMap or cert Secret (the controller runs here as a local process).
_LWS_APPLIED_KINDS: Final = frozenset(
    {"Namespace", "CustomResourceDefinition", "ServiceAccount", "Role", "ClusterRole",
     "RoleBinding", "ClusterRoleBinding"}
)  # fmt: skip
_LWS_CRD_FILE_PREFIXES: Final = ("leaderworkerset.x-k8s.io_", "disaggregatedset.x-k8s.io_")
_LWS_TOKEN_SECONDS: Final = 7 * 24 * 3600


def copy_json(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON-like document."""
    result: dict[str, Any] = json.loads(json.dumps(obj))
    return result


def _token_kubeconfig(server: str, ca_pem: bytes, token: str, user: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "aibom", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "aibom", "context": {"cluster": "aibom", "user": user}}],
        "current-context": "aibom",
    }  # fmt: skip
    return json.dumps(doc, indent=2) + "\n"


@dataclass
class LwsController:
    """The running LeaderWorkerSet controller (see :meth:`ControlPlane.start_lws`)."""

    process: _Process
    kubeconfig: Path  # its ServiceAccount token, not admin
    config_file: Path  # its Configuration (config.lws.x-k8s.io/v1alpha1)
    user: str  # system:serviceaccount:lws-system:lws-controller-manager
    webhook_port: int
    health_port: int
    metrics_port: int
    webhook_configurations: tuple[tuple[str, str], ...]  # (kind, name)
    dist_dir: Path  # bin/lws-controller and release.yaml
    started_in: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def ready(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=2)
        return _status_of_get(conn, "/readyz") == 200

    def workers_started(self) -> bool:
        """Its LeaderWorkerSet and Pod controllers logged ``Starting workers``."""
        text = self.log_path.read_text(errors="replace")
        started = {
            m.group(1) for m in re.finditer(r'Starting workers.*?"controller": "([a-z]+)"', text)
        }
        return {"leaderworkerset", "pod"} <= started


# --------------------------------------------------------------------------- control plane

_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cp in list(_LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


_DATA_DIR_PREFIX: Final = "aibom-cp-"
_OWNER_FILE: Final = ".owner-pid"


def _sweep_stale_data_dirs() -> None:
    """Remove data dirs left in the temp folder by an owner that was killed
    (SIGKILL leaves no chance to clean up; its processes died with it)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_DATA_DIR_PREFIX}*"):
        try:
            pid = int((path / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass


@dataclass
class _Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int

    @classmethod
    def pick(cls) -> _Ports:
        ports: set[int] = set()
        while len(ports) < 4:
            ports.add(_free_port())
        a, b, c, d = sorted(ports)
        return cls(a, b, c, d)


@dataclass(frozen=True)
class OidcIssuer:
    """A JWT issuer kube-apiserver trusts (`ControlPlane(oidc=...)`), e.g. a test's IdP.

    Written as structured authentication (`--authentication-config`,
    apiserver.config.k8s.io/v1): the issuer `url` (https) must equal the
    tokens' `iss` and its discovery's `issuer`; `ca_pem` verifies its TLS;
    `audience` is the client id; the username is `username_prefix` + the
    `username_claim`. The harness's client certificates and ServiceAccount
    tokens keep working beside it.
    """

    url: str
    ca_pem: bytes
    audience: str
    username_claim: str = "sub"
    username_prefix: str = "oidc:"

    def authentication_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [
                {
                    "issuer": {
                        "url": self.url,
                        "certificateAuthority": self.ca_pem.decode(),
                        "audiences": [self.audience],
                    },
                    "claimMappings": {
                        "username": {"claim": self.username_claim, "prefix": self.username_prefix}
                    },
                }
            ],
        }


@dataclass(eq=False)  # identity semantics: hashable, kept in a WeakSet
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. The
    admin kubeconfig (user ``aibom-admin`` in group ``system:masters``) is
    :attr:`kubeconfig`; the data directory (certs, etcd data, one log per
    process) is :attr:`data_dir` and is removed by :meth:`stop` unless it was
    passed in by the caller or ``keep_data_dir`` is set.
    """

    data_dir: Path | None = None
    bin_dir: Path | None = None
    startup_timeout: float = 90.0
    stop_grace: float = 10.0
    keep_data_dir: bool = False
    extra_apiserver_args: Sequence[str] = ()
    extra_controller_manager_args: Sequence[str] = ()
    # An AdmissionConfiguration for kube-apiserver (--admission-control-config-file),
    # e.g. `webhook_caller(...).config_file`: how it authenticates to webhooks.
    admission_config_file: Path | None = None
    #: Also run the real LeaderWorkerSet controller (:meth:`start_lws`) once started.
    lws: bool = False
    #: Trust this OIDC issuer's JWTs too (structured authentication), opt-in.
    oidc: OidcIssuer | None = None

    server: str = field(init=False, default="")
    kubeconfig: Path = field(init=False, default=Path())
    ca_file: Path = field(init=False, default=Path())
    admin: ClientIdentity | None = field(init=False, default=None)
    etcd_url: str = field(init=False, default="")
    ports: _Ports | None = field(init=False, default=None)
    _procs: list[_Process] = field(init=False, default_factory=list)
    _ca: _CA | None = field(init=False, default=None)
    _owns_data_dir: bool = field(init=False, default=False)
    _identities: int = field(init=False, default=0)
    _contexts: dict[Path, ssl.SSLContext] = field(init=False, default_factory=dict)
    _lws: LwsController | None = field(init=False, default=None)

    # ----------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.alive() for p in self._procs)

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self._procs if p.pid is not None}

    @property
    def log_files(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in self._procs}

    def _admin(self) -> ClientIdentity:
        if self.admin is None:
            raise ControlPlaneError("control plane not started")
        return self.admin

    @property
    def admin_kubeconfig(self) -> Path:
        """The admin kubeconfig (same as :attr:`kubeconfig`)."""
        return self._admin().kubeconfig

    @property
    def admin_cert_file(self) -> Path:
        """PEM client certificate of the admin (CN aibom-admin, O system:masters)."""
        return self._admin().cert_file

    @property
    def admin_key_file(self) -> Path:
        """PEM private key of :attr:`admin_cert_file`."""
        return self._admin().key_file

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA certificate (PEM): it signs the API server's serving
        cert, every client cert and :meth:`issue_serving_cert`'s certs."""
        if self._ca is None:
            raise ControlPlaneError("control plane not started")
        return _pem_cert(self._ca.cert)

    @property
    def ca_bundle(self) -> str:
        """:attr:`ca_pem` base64-encoded, as a webhook ``clientConfig.caBundle`` wants it."""
        return base64.b64encode(self.ca_pem).decode()

    def start(self) -> ControlPlane:
        """Start all three processes and wait until they are ready."""
        if self._procs:
            raise ControlPlaneError("control plane already started")
        bin_dir = self.bin_dir or ensure_binaries()
        self.bin_dir = bin_dir
        _LIVE.add(self)  # stopped at exit, whatever happens below
        _sweep_stale_data_dirs()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix=_DATA_DIR_PREFIX))
            (self.data_dir / _OWNER_FILE).write_text(f"{os.getpid()}\n")
            self._owns_data_dir = True
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        try:
            for attempt in range(3):
                try:
                    self._start_once(bin_dir, self.data_dir)
                    break
                except ControlPlaneError as exc:
                    self._stop_processes()
                    if "address already in use" not in str(exc) or attempt == 2:
                        raise
                    _log("a port was taken meanwhile; retrying with new ports")
        except BaseException:
            self.stop()
            raise
        elapsed = time.monotonic() - began
        _log(f"control plane {K8S_VERSION} ready at {self.server} in {elapsed:.1f} s")
        if self.lws:
            try:
                self.start_lws()
            except BaseException:
                self.stop()
                raise
        return self

    def _start_once(self, bin_dir: Path, data: Path) -> None:
        ports = self.ports = _Ports.pick()
        pki = data / "pki"
        pki.mkdir(exist_ok=True)
        ca = self._ca = self._ca or _CA.create("aibom-test-ca")
        self.ca_file = _write(pki / "ca.crt", _pem_cert(ca.cert), 0o644)
        ca_key = _write(pki / "ca.key", _pem_key(ca.key))
        skey, scert = ca.issue(
            "kube-apiserver",
            server=True,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
        )
        serving_crt = _write(pki / "apiserver.crt", _pem_cert(scert), 0o644)
        serving_key = _write(pki / "apiserver.key", _pem_key(skey))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key = _write(pki / "sa.key", _pem_key(sa))
        sa_pub = _write(
            pki / "sa.pub",
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )
        self.server = f"https://127.0.0.1:{ports.apiserver}"
        self.etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
        self.admin = self._issue("aibom-admin", ("system:masters",), data / "admin")
        self.kubeconfig = self.admin.kubeconfig
        cm = self._issue("system:kube-controller-manager", (), data / "controller-manager")
        logs = data / "logs"
        logs.mkdir(exist_ok=True)
        main_thread = threading.current_thread() is threading.main_thread()

        etcd_dir = data / "etcd"
        shutil.rmtree(etcd_dir, ignore_errors=True)
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        etcd = _Process(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # throwaway data: skip fsync, much faster on shared disks
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        self._procs.append(etcd)
        etcd.start(pdeathsig=main_thread)
        self._wait(etcd, "etcd /health", self._etcd_healthy, 30.0)

        apiserver = _Process(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports.apiserver}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={serving_crt}",
                f"--tls-private-key-file={serving_key}",
                f"--client-ca-file={self.ca_file}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={_SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-cluster-ip-range={_SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *self.extra_apiserver_args,
                *(
                    [f"--authentication-config={_write(pki / 'authn.json', authn, 0o644)}"]
                    if (authn := self._oidc_config())
                    else []
                ),
                *(
                    [f"--admission-control-config-file={self.admission_config_file}"]
                    if self.admission_config_file is not None
                    else []
                ),
            ],
            logs / "kube-apiserver.log",
        )
        self._procs.append(apiserver)
        apiserver.start(pdeathsig=main_thread)
        self._wait(apiserver, "kube-apiserver /readyz", self._apiserver_ready, self.startup_timeout)

        cm_dir = data / "controller-manager"
        controller_manager = _Process(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={cm.kubeconfig}",
                f"--authentication-kubeconfig={cm.kubeconfig}",
                f"--authorization-kubeconfig={cm.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.controller_manager}",
                f"--cert-dir={cm_dir}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={ca_key}",
                f"--service-cluster-ip-range={_SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
                "--v=1",
                *self.extra_controller_manager_args,
            ],
            logs / "kube-controller-manager.log",
        )
        self._procs.append(controller_manager)
        controller_manager.start(pdeathsig=main_thread)
        self._wait(
            controller_manager,
            "kube-controller-manager /healthz and the default ServiceAccount",
            self._controller_manager_ready,
            self.startup_timeout,
        )

    def _oidc_config(self) -> bytes:
        return json.dumps(self.oidc.authentication_config()).encode() if self.oidc else b""

    def _wait(self, proc: _Process, what: str, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            proc.check_alive()
            for other in self._procs:
                other.check_alive()
            try:
                if ready():
                    return
            except (OSError, http.client.HTTPException, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {timeout:.0f} s waiting for {what}"
                    f"{' (' + last_error + ')' if last_error else ''}; "
                    f"last lines of {proc.log_path}:\n{proc.tail()}"
                )
            time.sleep(0.25)

    def _etcd_healthy(self) -> bool:
        assert self.ports is not None
        conn = http.client.HTTPConnection("127.0.0.1", self.ports.etcd_client, timeout=2)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        return resp.status == 200 and json.loads(body).get("health") == "true"

    def _apiserver_ready(self) -> bool:
        return self.request("GET", "/readyz", timeout=5).status == 200

    def _controller_manager_ready(self) -> bool:
        assert self.ports is not None
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert of the controller-manager
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.ports.controller_manager, timeout=2, context=ctx
        )
        if _status_of_get(conn, "/healthz") != 200:
            return False
        # Proof that the controllers run: the serviceaccount controller made this.
        return (
            self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default").status == 200
        )

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again: same flags, port, certificates, etcd data.

        For tests of what clients do when the API server goes away (watches
        must resume); returns once /readyz answers again.
        """
        apiserver = next((p for p in self._procs if p.name == "kube-apiserver"), None)
        if apiserver is None:
            raise ControlPlaneError("restart_apiserver: the control plane is not running")
        apiserver.stop(self.stop_grace)
        apiserver.start(pdeathsig=threading.current_thread() is threading.main_thread())
        self._wait(apiserver, "kube-apiserver /readyz", self._apiserver_ready, self.startup_timeout)

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after ``stop_grace``) and clean up."""
        self._stop_processes()
        _LIVE.discard(self)
        if self.data_dir is not None and self._owns_data_dir and not self.keep_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_processes(self) -> None:
        for proc in reversed(self._procs):
            proc.stop(self.stop_grace)
        self._procs.clear()
        self._contexts.clear()
        self._lws = None

    # ----------------------------------------------------------- identities
    def _issue(self, user: str, groups: Iterable[str], directory: Path) -> ClientIdentity:
        if self._ca is None or not self.server:
            raise ControlPlaneError("control plane not started")
        groups = tuple(groups)
        directory.mkdir(parents=True, exist_ok=True)
        key, cert = self._ca.issue(user, organizations=groups, client=True)
        cert_pem, key_pem = _pem_cert(cert), _pem_key(key)
        cert_file = _write(directory / "client.crt", cert_pem, 0o644)
        key_file = _write(directory / "client.key", key_pem)
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(
            _kubeconfig(self.server, _pem_cert(self._ca.cert), cert_pem, key_pem, user)
        )
        kubeconfig.chmod(0o600)
        return ClientIdentity(user, groups, cert_file, key_file, kubeconfig)

    def issue_identity(self, user: str, groups: Iterable[str] = ()) -> ClientIdentity:
        """A client certificate for ``user`` in ``groups``, signed by the cluster CA.

        It has no permissions beyond what RBAC grants the user, its groups and
        ``system:authenticated`` (discovery, self-subject reviews).
        """
        if self.data_dir is None:
            raise ControlPlaneError("control plane not started")
        self._identities += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", user)[:40]
        return self._issue(
            user, groups, self.data_dir / "identities" / f"{self._identities:03d}-{safe}"
        )

    def restricted_kubeconfig(self, user: str, groups: Iterable[str] = ()) -> Path:
        """Path of a kubeconfig for a fresh client certificate of ``user``/``groups``.

        No role is bound to it: every request is ``Forbidden`` until the test
        grants exactly what it wants with a (Cluster)Role and binding.
        """
        return self.issue_identity(user, groups).kubeconfig

    def issue_serving_cert(
        self,
        name: str = "webhook",
        *,
        dns_names: Sequence[str] = ("localhost",),
        ip_addresses: Sequence[str] = ("127.0.0.1",),
    ) -> ServingCert:
        """A TLS serving certificate signed by the cluster CA, with IP/DNS SANs.

        For an admission webhook on 127.0.0.1: serve with ``cert_file`` and
        ``key_file`` and put :attr:`ca_bundle` in ``clientConfig.caBundle``
        (the API server refuses certs without a SAN for the address it dials).
        """
        if self._ca is None or self.data_dir is None:
            raise ControlPlaneError("control plane not started")
        self._identities += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
        directory = self.data_dir / "serving" / f"{self._identities:03d}-{safe}"
        directory.mkdir(parents=True, exist_ok=True)
        key, cert = self._ca.issue(
            name, server=True, dns_names=dns_names, ip_addresses=ip_addresses
        )
        return ServingCert(
            cert_file=_write(directory / "tls.crt", _pem_cert(cert), 0o644),
            key_file=_write(directory / "tls.key", _pem_key(key)),
            ca_file=self.ca_file,
        )

    # ----------------------------------------------------------- clients
    def ssl_context(self, identity: ClientIdentity | None = None) -> ssl.SSLContext:
        """A TLS context trusting the cluster CA, presenting ``identity`` (default: admin).

        For an anonymous client, build a context from :attr:`ca_file` alone.
        """
        who = identity or self.admin
        if who is None:
            raise ControlPlaneError("control plane not started")
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(who.cert_file), str(who.key_file))
        return ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        identity: ClientIdentity | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> ApiResponse:
        """One HTTPS request to the API server (``body`` dict/list is sent as JSON)."""
        if self.ports is None:
            raise ControlPlaneError("control plane not started")
        data: bytes | None
        if body is None or isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        hdrs = {"Accept": "application/json"}
        if data is not None:
            hdrs["Content-Type"] = content_type
        hdrs.update(headers or {})
        who = identity or self._admin()
        ctx = self._contexts.get(who.cert_file)
        if ctx is None:
            ctx = self._contexts[who.cert_file] = self.ssl_context(who)
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.ports.apiserver, timeout=timeout, context=ctx
        )
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            payload = resp.read()
            return ApiResponse(resp.status, payload, {k.lower(): v for k, v in resp.getheaders()})
        finally:
            conn.close()

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the version-matched kubectl (admin kubeconfig unless given)."""
        if not self.server:
            raise ControlPlaneError("control plane not started")
        bin_dir = self.bin_dir or ensure_binaries()
        cmd = [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        env = child_env()
        env["KUBERC"] = "off"  # the user's ~/.kube/kuberc must not change behaviour
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()}"
            )
        return result

    # ----------------------------------------------------------- CRDs
    def install_crds(
        self, files: Iterable[Path | str] | None = None, *, timeout: float = 180.0
    ) -> list[str]:
        """Install CRDs (default :data:`DEFAULT_CRD_FILES`) and wait until Established.

        Uses ``kubectl apply --server-side``: several of these CRDs are bigger
        than the 256 KiB ``last-applied-configuration`` annotation that a
        client-side apply would write (``metadata.annotations: Too long``).
        Server-side apply also makes a second install of the same file a
        no-op. Relative paths are taken under :func:`shared_dir`. Returns the
        CRD names, in the order applied.
        """
        rels = DEFAULT_CRD_FILES if files is None else tuple(files)
        paths = [p if (p := Path(rel)).is_absolute() else shared_dir() / p for rel in rels]
        if self._lws is not None:  # its release's CRDs stand while the LWS controller runs
            paths = [p for p in paths if not p.name.startswith(_LWS_CRD_FILE_PREFIXES)]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ControlPlaneError(f"CRD files not found (set AIBOM_SHARED_DIR?): {missing}")
        args = [
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=aibom-controlplane",
            "-o",
            "name",
        ]
        for p in paths:
            args += ["-f", str(p)]
        out = self.kubectl(*args, timeout=timeout).stdout.split()
        prefix = "customresourcedefinition.apiextensions.k8s.io/"
        names = [line.removeprefix(prefix) for line in out if line.startswith(prefix)]
        if names:
            self.kubectl(
                "wait",
                "--for=condition=Established",
                f"--timeout={int(timeout)}s",
                *[f"crd/{n}" for n in names],
                timeout=timeout + 10,
            )
        return names

    def install_crd(self, path: Path | str, *, timeout: float = 60.0) -> list[str]:
        """Install one CRD file (absolute, or relative to :func:`shared_dir`) and
        wait until it is Established; returns its CRD name(s). For tests that
        add a kind while a controller is already watching."""
        return self.install_crds([path], timeout=timeout)

    def delete_crd(self, name: str, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Delete the CRD ``name`` (e.g. ``leaderworkersets.leaderworkerset.x-k8s.io``).

        With ``wait``, return once it is gone: the API server first deletes
        every object of the kind (the ``customresourcecleanup`` finalizer).
        Deleting a CRD that does not exist is not an error.
        """
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        resp = self.request("DELETE", path)
        if resp.status == 404:
            return
        if not resp.ok:
            raise ControlPlaneError(f"DELETE crd {name}: {resp.status} {resp.body[:500]!r}")
        deadline = time.monotonic() + timeout
        while wait and self.request("GET", path).status != 404:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRD {name} still exists after {timeout:.0f} s")
            time.sleep(0.2)

    def crd_established(self, name: str) -> bool:
        """Whether the CRD ``name`` exists and has condition Established=True."""
        resp = self.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )
        if resp.status != 200:
            return False
        conditions = resp.json().get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    # ----------------------------------------------------------- LeaderWorkerSet controller
    @property
    def lws_controller(self) -> LwsController | None:
        """The running LWS controller (:meth:`start_lws`), or None."""
        return self._lws

    def start_lws(self, *, timeout: float = 120.0) -> LwsController:
        """Run the real LeaderWorkerSet controller (sigs.k8s.io/lws :data:`LWS_VERSION`).

        From its release manifests (``ensure_lws()``'s ``release.yaml``) it
        applies the Namespace ``lws-system``, the CRDs, the ServiceAccount
        ``lws-controller-manager`` and every Role/ClusterRole and binding;
        the controller then runs as that ServiceAccount (a TokenRequest token
        in its own kubeconfig), never as admin. Its webhooks serve on
        127.0.0.1 with a certificate from the cluster CA; the release's
        webhook configurations are applied with ``clientConfig.url`` pointing
        there and that CA as ``caBundle`` (its config's
        ``internalCertManagement.enable: false``, the release's cert-manager
        mode, where the certificate comes from outside). Leader election is
        off (one replica, like the controller-manager here). Returns once
        /readyz answers, a dry-run LeaderWorkerSet has been defaulted by its
        mutating webhook, and its LeaderWorkerSet and Pod controllers run.
        Idempotent.
        """
        if self._lws is not None:
            return self._lws
        if self.data_dir is None or not self.server:
            raise ControlPlaneError("start_lws: the control plane is not running")
        dist = ensure_lws()
        began = time.monotonic()
        docs = [d for d in yaml.safe_load_all((dist / "release.yaml").read_text()) if d]
        base = [copy_json(d) for d in docs if d["kind"] in _LWS_APPLIED_KINDS]
        for doc in base:
            if doc["kind"] == "CustomResourceDefinition":
                # The release routes conversion to its webhook Service; only v1 is
                # served, so the API server never converts, and v0.9.0 registers
                # no /convert handler: no conversion, nothing to route.
                doc["spec"]["conversion"] = {"strategy": "None"}
        self._apply_list(base)
        crds = [
            f"crd/{d['metadata']['name']}" for d in base if d["kind"] == "CustomResourceDefinition"
        ]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds, timeout=70)
        _log(
            f"LWS {LWS_VERSION}: release applied (CRDs Established, {LWS_SERVICE_ACCOUNT},"
            f" RBAC) in {time.monotonic() - began:.1f} s; starting the controller"
        )

        directory = self.data_dir / "lws"
        directory.mkdir(parents=True, exist_ok=True)
        user = f"system:serviceaccount:{LWS_NAMESPACE}:{LWS_SERVICE_ACCOUNT}"
        kubeconfig = self.service_account_kubeconfig(
            LWS_NAMESPACE, LWS_SERVICE_ACCOUNT, directory / "kubeconfig", _LWS_TOKEN_SECONDS
        )
        serving = self.issue_serving_cert("lws-webhook")  # tls.crt and tls.key, as it expects
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(_free_port())
        webhook_port, health_port, metrics_port = sorted(ports)
        config = directory / "controller_manager_config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port,
                        "certDir": str(serving.cert_file.parent)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        }, indent=2) + "\n")  # fmt: skip
        assert self.data_dir is not None
        proc = _Process(
            "lws-controller",
            [str(dist / "bin" / "lws-controller"), f"--config={config}",
             f"--kubeconfig={kubeconfig}", "--zap-log-level=2"],  # the release's level
            self.data_dir / "logs" / "lws-controller.log",
        )  # fmt: skip
        self._procs.append(proc)
        proc.start(pdeathsig=threading.current_thread() is threading.main_thread())
        hooks = [copy_json(d) for d in docs if d["kind"].endswith("WebhookConfiguration")]
        for doc in hooks:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{webhook_port}{path}",
                    "caBundle": self.ca_bundle,
                }
        lws = LwsController(
            process=proc,
            kubeconfig=kubeconfig,
            config_file=config,
            user=user,
            webhook_port=webhook_port,
            health_port=health_port,
            metrics_port=metrics_port,
            webhook_configurations=tuple((d["kind"], d["metadata"]["name"]) for d in hooks),
            dist_dir=dist,
        )
        try:
            self._apply_list(hooks)
            self._wait(proc, "lws-controller /readyz", lws.ready, timeout)
            _log(
                f"LWS controller /readyz after {time.monotonic() - began:.1f} s; checking webhooks"
            )
            self._wait(
                proc, "the LWS mutating webhook (a server dry-run create)",
                self._lws_webhook_defaults, timeout,
            )  # fmt: skip
            self._wait(proc, "the LWS controllers' workers", lws.workers_started, timeout)
        except BaseException:
            self._lws = lws
            self.stop_lws()
            raise
        lws.started_in = time.monotonic() - began
        self._lws = lws
        _log(f"LeaderWorkerSet controller {LWS_VERSION} ready as {user} in {lws.started_in:.1f} s")
        return lws

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path, seconds: int
    ) -> Path:
        """Write to `path` a kubeconfig with a TokenRequest token (`seconds` long) of the
        ServiceAccount `namespace/name`: a process then runs as that ServiceAccount."""
        user = f"system:serviceaccount:{namespace}:{name}"
        resp = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}},
        )  # fmt: skip
        if not resp.ok:
            raise ControlPlaneError(f"TokenRequest for {user}: {resp.status} {resp.body[:300]!r}")
        path.write_text(
            _token_kubeconfig(self.server, self.ca_pem, resp.json()["status"]["token"], user)
        )
        path.chmod(0o600)
        return path

    def _apply_list(self, items: list[dict[str, Any]]) -> None:
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=aibom-controlplane",
            "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )  # fmt: skip

    def _lws_webhook_defaults(self) -> bool:
        probe = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "aibom-lws-probe", "namespace": "default"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {
                "spec": {"containers": [{"name": "c", "image": "registry.example/probe:1"}]}}}},
        }  # fmt: skip
        resp = self.request(
            "POST",
            "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets?dryRun=All",
            probe,
        )
        if not resp.ok:
            return False
        # Set by the webhook's Default(), not by a CRD default.
        spec = resp.json()["spec"]
        return bool(spec.get("networkConfig", {}).get("subdomainPolicy"))

    def stop_lws(self) -> None:
        """Stop the LWS controller and delete its webhook configurations (so LWS
        objects and Pods can be written again without it). Its CRDs, RBAC and
        the objects it made stay. A no-op when it is not running."""
        lws, self._lws = self._lws, None
        if lws is None:
            return
        for kind, name in lws.webhook_configurations:
            self.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        lws.process.stop(self.stop_grace)
        with contextlib.suppress(ValueError):
            self._procs.remove(lws.process)


@contextlib.contextmanager
def running_control_plane(*, crds: bool = True, lws: bool = False) -> Iterator[ControlPlane]:
    """``with running_control_plane() as cp``: started, CRDs installed, stopped after;
    with ``lws``, the real LeaderWorkerSet controller runs too (after the CRDs)."""
    with ControlPlane() as cp:
        if crds:
            cp.install_crds()
        if lws:
            cp.start_lws()
        yield cp
