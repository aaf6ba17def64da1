"""The shape of a component: a real program run beside the control plane.

An operator, a policy engine, a registry, a scheduler: each is one short module of
``tests/controlplane/components/`` with one :class:`Component` subclass that says

- **what to build**: :attr:`Component.go_build` (a :class:`~tests.controlplane.gobuild.GoBuild`
  that :meth:`Component.build` makes through the one builder; cached, locked,
  with progress), called before any test starts so that no build counts
  against a test's timeout; :attr:`Component.dist_dir` is its folder and
  :func:`rendered` reads the release it rendered;
- **how to start it**: :meth:`Component.start`, which applies what its release
  applies (CRDs, Namespace, ServiceAccount, RBAC), runs it as **its own
  ServiceAccount** (:meth:`Component.run_as`: a TokenRequest token, never admin),
  serves its webhooks on loopback with a ``caBundle`` (:meth:`Component.webhooks_on_loopback`),
  and returns once it is ready;
- **how to know it is ready**, inside ``start`` (:meth:`Component.wait`);
- **how to stop it**: :meth:`Component.stop` (its processes; the webhook
  configurations it registered, so that nothing refuses writes once it is gone).

Components register themselves by name (:func:`register`); a control plane
starts one with ``plane.start_component(name)`` (its ``requires`` first), the
pytest fixture ``components`` starts the ones a test module names with
``pytest.mark.components(...)``, and ``python -m tests.controlplane up --with
a,b`` starts them for the demo and by hand. The benches use the same calls.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

import yaml

from tests.controlplane.gobuild import GoBuild, ensure, module_source
from tests.controlplane.paths import log
from tests.controlplane.process import Process

if TYPE_CHECKING:
    from tests.controlplane.plane import ControlPlane

#: Every known component class, by name (filled by :func:`register`).
REGISTRY: dict[str, type[Component]] = {}

#: How long a ServiceAccount token of a component lasts (a test session, a demo).
TOKEN_SECONDS = 7 * 24 * 3600

#: What :meth:`Component.apply_release` applies of a release by default: what its
#: installer puts in the cluster for the operator itself, less its Deployment,
#: Services, Secrets and webhook configurations (the operator is a local process;
#: its webhooks are registered by :meth:`Component.webhooks_on_loopback`).
RELEASE_KINDS: Final = frozenset(
    {"Namespace", "CustomResourceDefinition", "ServiceAccount", "Role", "ClusterRole",
     "RoleBinding", "ClusterRoleBinding"}
)  # fmt: skip


def rendered(build: GoBuild, name: str) -> list[dict[str, Any]]:
    """The YAML documents of a file the build's render step wrote (``release.yaml``,
    ``samples/x.yaml``), built and rendered unless cached."""
    text = (ensure(build) / name).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def register(cls: type[Component]) -> type[Component]:
    """Class decorator: make ``cls`` startable by its ``name``."""
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise ValueError(f"two components are named {cls.name!r}")
    REGISTRY[cls.name] = cls
    return cls


class Component:
    """Base class: subclasses set the class attributes and implement :meth:`start`."""

    #: How tests, ``up --with`` and the demo name it.
    name: ClassVar[str]
    #: One line for ``--help``: what it is, at which version.
    summary: ClassVar[str]
    #: Components that must run before this one (started first, by name).
    requires: ClassVar[tuple[str, ...]] = ()
    #: CRD files of :data:`DEFAULT_CRD_FILES` (by file-name prefix) whose CRDs its
    #: release installs instead: ``plane.install_crds()`` leaves them alone while it runs,
    #: and ``plane.stop_component()`` puts the stand-ins back after.
    owns_crd_files: ClassVar[tuple[str, ...]] = ()
    #: What it runs, through the one builder (None: nothing to build).
    go_build: ClassVar[GoBuild | None] = None

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.processes: list[Process] = []
        self.webhook_configurations: list[tuple[str, str]] = []  # (kind, name)
        self.started_in = 0.0
        self.user = ""
        self.kubeconfig = Path()

    # ---------------------------------------------------------------- the interface
    @classmethod
    def build(cls) -> None:
        """Build what it runs, unless cached (a no-op for what needs no build)."""
        if cls.go_build is not None:
            ensure(cls.go_build)

    @property
    def dist_dir(self) -> Path:
        """Its build's folder: ``bin/`` and what the build rendered beside it."""
        assert self.go_build is not None, f"{self.name} has no build"
        return ensure(self.go_build)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Delete the webhook configurations it registered, then stop its processes."""
        for kind, name in self.webhook_configurations:
            self.plane.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        self.webhook_configurations.clear()
        for proc in reversed(self.processes):
            proc.stop(self.plane.stop_grace)
        self.processes.clear()

    def info(self) -> dict[str, Any]:
        """What ``up`` writes to its state file and prints."""
        return {
            "summary": self.summary,
            "user": self.user,
            "logs": [str(p.log_path) for p in self.processes],
            "started_in": round(self.started_in, 1),
        }

    # ---------------------------------------------------------------- helpers
    @property
    def work_dir(self) -> Path:
        """A folder of its own under the control plane's data folder."""
        assert self.plane.data_dir is not None
        path = self.plane.data_dir / "components" / self.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def log_path(self) -> Path:
        """The log of its (first) process."""
        return self.processes[0].log_path

    @property
    def pid(self) -> int | None:
        return self.processes[0].pid if self.processes else None

    def run_as(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig of the ServiceAccount (a TokenRequest token): the identity the
        component runs as, bound only by its release's RBAC. Sets :attr:`user`."""
        self.user = f"system:serviceaccount:{namespace}:{service_account}"
        self.kubeconfig = self.plane.service_account_kubeconfig(
            namespace, service_account, self.work_dir / "kubeconfig", TOKEN_SECONDS
        )
        return self.kubeconfig

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Process:
        """Start one of its processes (log in the control plane's log folder)."""
        assert self.plane.data_dir is not None
        proc = Process(name, args, self.plane.data_dir / "logs" / f"{name}.log", env=env, cwd=cwd)
        self.processes.append(proc)
        return proc.start()

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 120.0) -> None:
        """Wait for ``ready()``; fail early when one of its processes exits."""
        first, *others = self.processes
        first.wait_ready(f"{self.name}: {what}", ready, timeout, also=others)

    def apply_release(
        self, docs: Iterable[dict[str, Any]], kinds: Iterable[str] = RELEASE_KINDS
    ) -> list[dict[str, Any]]:
        """Apply (as the installer would, admin) the release's objects of ``kinds``;
        return once its CRDs are Established. Returns what was applied."""
        wanted = frozenset(kinds)
        base = [d for d in docs if d["kind"] in wanted]
        self.plane.apply(base)
        self.plane.wait_established(
            d["metadata"]["name"] for d in base if d["kind"] == "CustomResourceDefinition"
        )
        return base

    def controller_runtime_certs(self) -> dict[str, str]:
        """A serving certificate (cluster CA, IP SAN 127.0.0.1) where a controller-runtime
        webhook server with no ``CertDir`` looks: ``$TMPDIR/k8s-webhook-server/serving-certs``.
        Returns the environment that points it there (``TMPDIR``)."""
        serving = self.plane.issue_serving_cert(f"{self.name}-webhook")
        tmp = self.work_dir / "tmp"
        certs = tmp / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(serving.cert_file, certs / "tls.crt")
        shutil.copyfile(serving.key_file, certs / "tls.key")
        return {"TMPDIR": str(tmp)}

    def workers_started(self, *controllers: str) -> bool:
        """Each of these controller-runtime controllers (lowercase names) logged
        ``Starting workers``: its informers synced, it acts on what is created from
        now on. The name is the line's ``controller`` key, or its ``logger``'s
        ``controllers.<Name>`` where an operator names loggers that way (KubeRay)."""
        started = set()
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "Starting workers" in line:
                names = re.findall(r'"controller":\s*"([A-Za-z0-9_-]+)"', line)
                names += re.findall(r'"logger":\s*"controllers\.([A-Za-z0-9_-]+)"', line)
                started |= {n.lower() for n in names}
        return set(controllers) <= started

    def webhooks_on_loopback(
        self, docs: Iterable[dict[str, Any]], port: int
    ) -> list[dict[str, Any]]:
        """Its release's webhook configurations with each ``clientConfig.service``
        replaced by ``url: https://127.0.0.1:<port><path>`` and the cluster CA as
        ``caBundle``; remembered, so :meth:`stop` deletes them."""
        hooks = []
        for original in docs:
            doc = json.loads(json.dumps(original))
            for hook in doc.get("webhooks", []):
                service = hook["clientConfig"].get("service") or {}
                path = service.get("path", "/")
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": self.plane.ca_bundle,
                }
            hooks.append(doc)
            self.webhook_configurations.append((doc["kind"], doc["metadata"]["name"]))
        return hooks

    def controllers_started(self) -> set[str]:
        """The controllers that logged controller-runtime's ``Starting workers`` (JSON or
        console log lines: the ``"controller"`` value of the same line)."""
        text = self.log_path.read_text(errors="replace")
        return set(re.findall(r'Starting workers.*?"controller":\s*"([^"]+)"', text))

    def began(self) -> float:
        return time.monotonic()

    def ready_after(self, began: float) -> None:
        self.started_in = time.monotonic() - began
        log(f"{self.summary} ready as {self.user or 'itself'} in {self.started_in:.1f} s")


def release_deployment(docs: Iterable[dict[str, Any]], name: str) -> dict[str, Any]:
    """The release's Deployment ``name`` (how its operator would run in a cluster)."""
    found: dict[str, Any] = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name
    )
    return found


def release_container(
    docs: Iterable[dict[str, Any]], deployment: str
) -> tuple[list[str], dict[str, str]]:
    """The arguments and literal environment (not what comes from the Pod's own fields)
    of the first container of a release's Deployment: how the component runs it."""
    container = release_deployment(docs, deployment)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return list(container.get("args", [])), env


def with_flags(args: Iterable[str], **values: str) -> list[str]:
    """``args`` with every ``--name=...`` named in ``values`` replaced by its value
    (appended), the rest (repeated flags included) kept in order."""
    kept = [a for a in args if a.split("=", 1)[0].lstrip("-") not in values]
    return kept + [f"--{name}={value}" for name, value in values.items()]


def module_file(module_folder: Path, module: str, path: str) -> Callable[[Path, Path], None]:
    """A build's ``render`` step: ``release.yaml`` is the file ``path`` of ``module``
    at the version our module in ``module_folder`` pins (a release's own rendered
    manifest), under a first line saying where it came from."""

    def render(_cwd: Path, staging: Path) -> None:
        source = module_source(module_folder, module)
        header = f"# {path} of {module} ({source})\n"
        (staging / "release.yaml").write_text(header + (source / path).read_text())

    return render
