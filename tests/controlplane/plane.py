"""The control plane: etcd, kube-apiserver and kube-controller-manager on 127.0.0.1,
plus the components (operators, engines, registries) started on it by name.

Nothing here fakes the API: every call goes to the real kube-apiserver, and
Kubernetes' own controllers run in the kube-controller-manager. There is no
kubelet (Pods stay Pending unless a component, such as kwok, plays the nodes).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol

from tests.controlplane.apiserver import KubeApiServer, OidcIssuer
from tests.controlplane.component import REGISTRY, Component
from tests.controlplane.controllermanager import KubeControllerManager
from tests.controlplane.etcd import Etcd
from tests.controlplane.identity import (
    CA,
    ClientIdentity,
    ServingCert,
    cert_credentials,
    kubeconfig,
    pem_cert,
    pem_key,
    write,
)
from tests.controlplane.kubernetes import K8S_VERSION, ensure_binaries
from tests.controlplane.paths import log, shared_dir
from tests.controlplane.process import (
    ControlPlaneError,
    Process,
    free_ports,
    kubectl_env,
)

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
    "kuberay/crds/ray.io_rayclusters.yaml",
    "kuberay/crds/ray.io_rayjobs.yaml",
    "kuberay/crds/ray.io_rayservices.yaml",
)

_DATA_DIR_PREFIX: Final = "aibom-cp-"
_OWNER_FILE: Final = ".owner-pid"
_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cp in list(_LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


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
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(*free_ports(4))


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


@dataclass(eq=False)  # identity semantics: hashable, kept in a WeakSet
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, and components.

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
    #: An AdmissionConfiguration for kube-apiserver (--admission-control-config-file),
    #: e.g. ``webhook_caller(...).config_file``: how it authenticates to webhooks.
    admission_config_file: Path | None = None
    #: Trust this OIDC issuer's JWTs too (structured authentication), opt-in.
    oidc: OidcIssuer | None = None
    #: Components to start (by name, :data:`component.REGISTRY`) once the core runs.
    components: Sequence[str] = ()

    server: str = field(init=False, default="")
    kubeconfig: Path = field(init=False, default=Path())
    ca_file: Path = field(init=False, default=Path())
    admin: ClientIdentity | None = field(init=False, default=None)
    etcd_url: str = field(init=False, default="")
    ports: Ports | None = field(init=False, default=None)
    _etcd: Etcd | None = field(init=False, default=None)
    _apiserver: KubeApiServer | None = field(init=False, default=None)
    _procs: list[Process] = field(init=False, default_factory=list)
    _ca: CA | None = field(init=False, default=None)
    _owns_data_dir: bool = field(init=False, default=False)
    _identities: int = field(init=False, default=0)
    _contexts: dict[Path, ssl.SSLContext] = field(init=False, default_factory=dict)
    _running: dict[str, Component] = field(init=False, default_factory=dict)

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
        procs = [*self._procs, *(p for c in self._running.values() for p in c.processes)]
        return {p.name: p.pid for p in procs if p.pid is not None}

    @property
    def log_files(self) -> dict[str, Path]:
        procs = [*self._procs, *(p for c in self._running.values() for p in c.processes)]
        return {p.name: p.log_path for p in procs}

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
        return self._ca.pem

    @property
    def ca_bundle(self) -> str:
        """:attr:`ca_pem` base64-encoded, as a webhook ``clientConfig.caBundle`` wants it."""
        return base64.b64encode(self.ca_pem).decode()

    def start(self) -> ControlPlane:
        """Start the three core processes, wait until they are ready, then start
        :attr:`components`."""
        if self._procs:
            raise ControlPlaneError("control plane already started")
        bin_dir = self.bin_dir = self.bin_dir or ensure_binaries()
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
                    self._start_core(bin_dir, self.data_dir)
                    break
                except ControlPlaneError as exc:
                    self._stop_processes()
                    if "address already in use" not in str(exc) or attempt == 2:
                        raise
                    log("a port was taken meanwhile; retrying with new ports")
            log(
                f"control plane {K8S_VERSION} ready at {self.server}"
                f" in {time.monotonic() - began:.1f} s"
            )
            for name in self.components:
                self.start_component(name)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_core(self, bin_dir: Path, data: Path) -> None:
        ports = self.ports = Ports.pick()
        pki = data / "pki"
        pki.mkdir(exist_ok=True)
        ca = self._ca = self._ca or CA.create("aibom-test-ca")
        self.ca_file = write(pki / "ca.crt", ca.pem, 0o644)
        ca_key = write(pki / "ca.key", pem_key(ca.key))
        logs = data / "logs"
        etcd = self._etcd = Etcd(bin_dir, data / "etcd", logs, ports.etcd_client, ports.etcd_peer)
        self.etcd_url = etcd.url
        apiserver = self._apiserver = KubeApiServer(
            bin_dir, pki, logs, ports.apiserver, etcd.url, ca, self.ca_file,
            extra_args=self.extra_apiserver_args, oidc=self.oidc,
            admission_config_file=self.admission_config_file,
        )  # fmt: skip
        apiserver.write_pki()
        self.server = apiserver.url
        self.admin = self._issue("aibom-admin", ("system:masters",), data / "admin")
        self.kubeconfig = self.admin.kubeconfig
        cm = self._issue("system:kube-controller-manager", (), data / "controller-manager")
        manager = KubeControllerManager(
            bin_dir, data / "controller-manager", logs, ports.controller_manager, cm.kubeconfig,
            self.ca_file, ca_key, apiserver.sa_key_file,
            extra_args=self.extra_controller_manager_args,
        )  # fmt: skip
        self._procs.append(etcd.start())
        assert apiserver.process is None
        self._procs.append(
            apiserver.start(self.ssl_context(), timeout=self.startup_timeout, also=self._procs)
        )
        # Proof that the controllers run: the serviceaccount controller made this.
        default_sa = "/api/v1/namespaces/default/serviceaccounts/default"
        self._procs.append(
            manager.start(
                lambda: self.request("GET", default_sa).status == 200,
                timeout=self.startup_timeout,
                also=self._procs,
            )
        )

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again: same flags, port, certificates, etcd data.

        For tests of what clients do when the API server goes away (watches
        must resume); returns once /readyz answers again.
        """
        if self._apiserver is None or self._apiserver.process is None:
            raise ControlPlaneError("restart_apiserver: the control plane is not running")
        self._apiserver.process.stop(self.stop_grace)
        others = [p for p in self._procs if p is not self._apiserver.process]
        self._apiserver.start(self.ssl_context(), timeout=self.startup_timeout, also=others)

    def stop(self) -> None:
        """Stop every component and process (SIGTERM, then SIGKILL after ``stop_grace``)
        and clean up."""
        self._stop_processes()
        _LIVE.discard(self)
        if self.data_dir is not None and self._owns_data_dir and not self.keep_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_processes(self) -> None:
        for name in reversed(list(self._running)):
            with contextlib.suppress(Exception):
                self._running.pop(name).stop()
        for proc in reversed(self._procs):
            proc.stop(self.stop_grace)
        self._procs.clear()
        self._contexts.clear()
        self._apiserver = None

    # ----------------------------------------------------------- components
    def start_component(self, name: str) -> Component:
        """Start the component ``name`` (its ``requires`` first) unless it runs; return it."""
        if name in self._running:
            return self._running[name]
        if self.data_dir is None or not self.server:
            raise ControlPlaneError(f"start_component({name!r}): the control plane is not running")
        try:
            cls = REGISTRY[name]
        except KeyError:
            known = ", ".join(sorted(REGISTRY))
            raise ControlPlaneError(f"no component named {name!r}; known: {known}") from None
        for needed in cls.requires:
            self.start_component(needed)
        cls.build()
        component = cls(self)
        try:
            component.start()
        except BaseException:
            component.stop()
            raise
        self._running[name] = component
        return component

    def component(self, name: str) -> Component | None:
        """The running component ``name``, or None."""
        return self._running.get(name)

    @property
    def running_components(self) -> tuple[str, ...]:
        """The names of the running components, in the order they were started (each
        after what it ``requires``)."""
        return tuple(self._running)

    def stop_component(self, name: str) -> None:
        """Stop the component ``name`` (a no-op when it does not run), then put back
        the stand-in CRDs its release replaced (its ``owns_crd_files``): what runs
        later on this control plane finds the kinds as :meth:`install_crds` left
        them (LWS v0.9.0's DisaggregatedSet has no ``spec.slices``, and a later
        module's object lost it to pruning)."""
        component = self._running.pop(name, None)
        if component is None:
            return
        component.stop()
        owned = component.owns_crd_files
        stand_ins = [f for f in DEFAULT_CRD_FILES if owned and Path(f).name.startswith(owned)]
        if stand_ins and self.running:
            self.install_crds(stand_ins)

    # ----------------------------------------------------------- identities
    def _issue(self, user: str, groups: Iterable[str], directory: Path) -> ClientIdentity:
        if self._ca is None or not self.server:
            raise ControlPlaneError("control plane not started")
        groups = tuple(groups)
        directory.mkdir(parents=True, exist_ok=True)
        key, cert = self._ca.issue(user, organizations=groups, client=True)
        cert_pem, key_pem = pem_cert(cert), pem_key(key)
        cert_file = write(directory / "client.crt", cert_pem, 0o644)
        key_file = write(directory / "client.key", key_pem)
        config = kubeconfig(self.server, self._ca.pem, user, cert_credentials(cert_pem, key_pem))
        path = write(directory / "kubeconfig", config.encode())
        return ClientIdentity(user, groups, cert_file, key_file, path)

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
        token = resp.json()["status"]["token"]
        return write(path, kubeconfig(self.server, self.ca_pem, user, {"token": token}).encode())

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
        Both live in one folder as ``tls.crt`` and ``tls.key``, the names
        controller-runtime's webhook server looks for.
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
            cert_file=write(directory / "tls.crt", pem_cert(cert), 0o644),
            key_file=write(directory / "tls.key", pem_key(key)),
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
        config = kubeconfig or self.kubeconfig
        cmd = [str(bin_dir / "kubectl"), f"--kubeconfig={config}", *args]
        env = kubectl_env(config)  # its cache this control plane's; no ~/.kube/kuberc
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()}"
            )
        return result

    def apply(
        self, items: Sequence[dict[str, Any]], *, manager: str = "aibom-controlplane"
    ) -> None:
        """Server-side apply of ``items`` (one ``kubectl apply`` of a List), as admin:
        what a release's installer (helm, kubectl) applies for an operator."""
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", f"--field-manager={manager}",
            "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}),
        )  # fmt: skip

    def wait_established(self, names: Iterable[str], timeout: float = 120.0) -> None:
        """Wait until each CRD of ``names`` is Established: a LIST, then a WATCH from
        its resourceVersion until the last one turns Established.

        Not ``kubectl wait --for=condition=Established``: on a CRD the server
        has not yet given a status it fails at once (``.status.conditions
        accessor error: <nil> is of the type <nil>``), which a loaded machine hits.
        """
        pending = set(names)
        if not pending:
            return
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        deadline = time.monotonic() + timeout
        while pending:
            listing = self.request("GET", base)
            if listing.status != 200:
                raise ControlPlaneError(f"list CRDs: HTTP {listing.status}: {listing.body[:200]!r}")
            body = listing.json()
            pending -= {c["metadata"]["name"] for c in body["items"] if _established(c)}
            left = deadline - time.monotonic()
            if not pending:
                return
            if left <= 0:
                raise ControlPlaneError(
                    f"CRDs not Established in {timeout:.0f} s: {sorted(pending)}"
                )
            rv = body["metadata"]["resourceVersion"]
            for event in self._watch(f"{base}?watch=1&resourceVersion={rv}", left):
                if event.get("type") in ("ADDED", "MODIFIED") and _established(event["object"]):
                    pending.discard(event["object"]["metadata"]["name"])
                    if not pending:
                        return
            # the watch ended (server timeout, 410 Gone): list again

    def _watch(self, path: str, timeout: float) -> Iterator[dict[str, Any]]:
        """The events of one WATCH request, as admin, for at most ``timeout`` seconds."""
        if self.ports is None:
            raise ControlPlaneError("control plane not started")
        who = self._admin()
        ctx = self._contexts.get(who.cert_file)
        if ctx is None:
            ctx = self._contexts[who.cert_file] = self.ssl_context(who)
        seconds = max(1, int(timeout))
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.ports.apiserver, timeout=timeout + 5, context=ctx
        )
        try:
            conn.request(
                "GET", f"{path}&timeoutSeconds={seconds}", headers={"Accept": "application/json"}
            )
            resp = conn.getresponse()
            if resp.status != 200:
                return
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    # ----------------------------------------------------------- CRDs
    def install_crds(
        self, files: Iterable[Path | str] | None = None, *, timeout: float = 180.0
    ) -> list[str]:
        """Install CRDs (default :data:`DEFAULT_CRD_FILES`) and wait until Established.

        Uses ``kubectl apply --server-side``: several of these CRDs are bigger
        than the 256 KiB ``last-applied-configuration`` annotation that a
        client-side apply would write (``metadata.annotations: Too long``).
        Server-side apply also makes a second install of the same file a
        no-op. Relative paths are taken under :func:`shared_dir`. A running
        component's own CRDs (its ``owns_crd_files``) are left alone. Returns
        the CRD names, in the order applied.
        """
        rels = DEFAULT_CRD_FILES if files is None else tuple(files)
        paths = [p if (p := Path(rel)).is_absolute() else shared_dir() / p for rel in rels]
        owned = tuple(pre for c in self._running.values() for pre in c.owns_crd_files)
        paths = [p for p in paths if not (owned and p.name.startswith(owned))]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ControlPlaneError(f"CRD files not found (set AIBOM_SHARED_DIR?): {missing}")
        if not paths:
            return []
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=aibom-controlplane"]
        args += ["-o", "name"]
        for p in paths:
            args += ["-f", str(p)]
        out = self.kubectl(*args, timeout=timeout).stdout.split()
        prefix = "customresourcedefinition.apiextensions.k8s.io/"
        names = [line.removeprefix(prefix) for line in out if line.startswith(prefix)]
        self.wait_established(names, timeout)
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
        return _established(resp.json())


def _established(crd: dict[str, Any]) -> bool:
    """Whether a CRD object carries condition Established=True."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@contextlib.contextmanager
def running_control_plane(
    *, crds: bool = True, components: Sequence[str] = ()
) -> Iterator[ControlPlane]:
    """``with running_control_plane() as cp``: started, CRDs installed, ``components``
    started (after the CRDs), all stopped after."""
    with ControlPlane() as cp:
        if crds:
            cp.install_crds()
        for name in components:
            cp.start_component(name)
        yield cp
