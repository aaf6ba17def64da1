"""One child process of the harness: started in its own process group with a log file,
killed with its owner, stopped SIGTERM-then-SIGKILL; and waiting for it to be ready."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.controlplane.gobuild import tail


class ControlPlaneError(RuntimeError):
    """The control plane (or a component) could not be started, or a call to it failed."""


_PROXY_VARS: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@functools.cache
def _private_kubectl_cache() -> str:
    """This process's own kubectl cache folder, removed at exit."""
    path = tempfile.mkdtemp(prefix="aibom-kubectl-cache-")
    atexit.register(shutil.rmtree, path, True)
    return path


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a control-plane process or a client of it.

    Proxy variables are removed and ``NO_PROXY`` covers loopback: the API
    server must reach admission webhooks at ``https://127.0.0.1:PORT`` and
    clients must reach the API server directly, never through a proxy.

    ``KUBECACHEDIR``: kubectl keeps what discovery said on disk for hours, by
    ``host_port``; control planes reuse loopback ports, so the shared
    ``~/.kube/cache`` served one control plane's API versions to another (the
    demo's ``kubectl get dynamographdeployment`` asked for a version its API
    server did not serve: "could not find the requested resource"). Here each
    process has its own, and :func:`kubectl_env` one per control plane.
    """
    env = dict(os.environ if base is None else base)
    for var in _PROXY_VARS:
        env.pop(var, None)
        env.pop(var.lower(), None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    env.pop("KUBECONFIG", None)
    env["KUBECACHEDIR"] = _private_kubectl_cache()
    return env


def kubectl_env(kubeconfig: Path | str) -> dict[str, str]:
    """:func:`child_env` for kubectl against one control plane as one identity:
    ``KUBECONFIG``, and kubectl's cache beside that kubeconfig (it goes with the
    control plane's data folder); the user's ``~/.kube/kuberc`` off."""
    env = child_env()
    env["KUBECONFIG"] = str(kubeconfig)
    env["KUBECACHEDIR"] = str(Path(kubeconfig).parent / "kubectl-cache")
    env["KUBERC"] = "off"
    return env


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, ascending (each may be taken again later:
    a start that meets ``address already in use`` picks new ones)."""
    ports: set[int] = set()
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            ports.add(int(sock.getsockname()[1]))
    return sorted(ports)


def status_of_get(conn: http.client.HTTPConnection, path: str) -> int:
    """The status of ``GET path`` on ``conn`` (closed afterwards)."""
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    return resp.status


def http_ok(port: int, path: str) -> bool:
    """``GET http://127.0.0.1:port/path`` answers 200 (a health or readiness probe)."""
    return status_of_get(http.client.HTTPConnection("127.0.0.1", port, timeout=2), path) == 200


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
class Process:
    """A child process: its own session (process group), output to ``log_path``."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        # PDEATHSIG fires when the *thread* that forked exits, so it is only
        # set when starting from the main thread (which lives as long as we do).
        main = threading.current_thread() is threading.main_thread()
        hook = _pdeathsig_hook() if main else None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.cwd,
                env=self.env if self.env is not None else child_env(),
                preexec_fn=hook,  # noqa: PLW1509 (it only calls prctl, resolved beforehand)
            )
        return self

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
        return tail(self.log_path, lines)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to its group, SIGKILL after ``grace`` seconds; a no-op when stopped."""
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

    def wait_ready(
        self,
        what: str,
        ready: Callable[[], bool],
        timeout: float,
        *,
        also: Iterable[Process] = (),
        interval: float = 0.1,
    ) -> None:
        """Poll ``ready()`` until true; fail at once when this process (or one of
        ``also``) exits, and after ``timeout`` with the last lines of its log."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            self.check_alive()
            for other in also:
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
                    f"last lines of {self.log_path}:\n{self.tail()}"
                )
            time.sleep(interval)
