"""LeaderWorkerSet: the real controller (sigs.k8s.io/lws), as its own ServiceAccount.

Built from ``modules/lws`` (a ``tool`` directive naming upstream's
``sigs.k8s.io/lws/cmd``); the build also renders the release's own manifests
(``kubectl kustomize config/default`` of the same module) into
``release.yaml``. :meth:`Lws.start` applies from it the Namespace, CRDs,
ServiceAccount and every Role/ClusterRole and binding (not its Deployment,
Services, ConfigMap or cert Secret: the controller is a local process), runs
the controller as ``lws-system/lws-controller-manager`` with leader election
off and its webhooks on 127.0.0.1, applies the release's two webhook
configurations pointed there, and returns once ``/readyz`` answers, a dry-run
LeaderWorkerSet comes back defaulted by its webhook, and its controllers run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register, rendered
from tests.controlplane.gobuild import GoBuild, go_ldflags, module_dir, module_source
from tests.controlplane.kubernetes import kustomize
from tests.controlplane.process import free_ports, http_ok

#: The LeaderWorkerSet release (modules/lws/go.mod).
VERSION: Final = "v0.9.0"
#: The commit of tag v0.9.0 (the module proxy's ``.info`` Origin.Hash): the module
#: zip has no git metadata, so it is pinned here for ``lws-controller --version``.
COMMIT: Final = "f056f611ae7721f9983ac35f26bfbae8547fd9f3"
MAIN: Final = "sigs.k8s.io/lws/cmd"
#: Where the release puts the controller, and as whom it runs.
NAMESPACE: Final = "lws-system"
SERVICE_ACCOUNT: Final = "lws-controller-manager"


def _render(_module: Path, staging: Path) -> None:
    """``release.yaml``: ``kubectl kustomize config/default`` of the same module."""
    source = module_source(module_dir("lws"), "sigs.k8s.io/lws")
    header = f"# kubectl kustomize config/default of sigs.k8s.io/lws@{VERSION} ({source})\n"
    (staging / "release.yaml").write_text(header + kustomize(source / "config" / "default"))


BUILD: Final = GoBuild(
    name="lws",
    version=VERSION,
    mains={"lws-controller": MAIN},
    module=module_dir("lws"),
    # The upstream Makefile sets the same three; BuildDate stays empty so the
    # binary is the same bytes on every rebuild.
    ldflags=go_ldflags(
        {
            "sigs.k8s.io/lws/pkg/version": {
                "GitVersion": VERSION,
                "GitCommit": COMMIT,
                "BuildDate": "",
            }
        }
    ),
    check=("lws-controller", ("--version",), f"Version: {VERSION}"),
    verify=True,
    estimate="about 1.5 min",
    render=_render,
    outputs=("release.yaml",),
)


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    return rendered(BUILD, "release.yaml")


@register
class Lws(Component):
    name: ClassVar[str] = "lws"
    summary: ClassVar[str] = f"LeaderWorkerSet controller {VERSION}"
    go_build: ClassVar[GoBuild | None] = BUILD
    #: Its release's CRDs stand while it runs (v0.9.0's LeaderWorkerSet CRD differs
    #: from the vendored one of LWS main only by a later bound on replicas).
    owns_crd_files: ClassVar[tuple[str, ...]] = (
        "leaderworkerset.x-k8s.io_",
        "disaggregatedset.x-k8s.io_",
    )

    webhook_port = 0
    health_port = 0

    def start(self) -> None:
        began = self.began()
        docs = release()
        for doc in docs:
            if doc["kind"] == "CustomResourceDefinition":
                # The release routes conversion to its webhook Service; only v1 is
                # served, so the API server never converts, and v0.9.0 registers
                # no /convert handler: no conversion, nothing to route.
                doc["spec"]["conversion"] = {"strategy": "None"}
        self.apply_release(docs)
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        serving = self.plane.issue_serving_cert("lws-webhook")  # tls.crt and tls.key
        self.webhook_port, self.health_port, metrics_port = free_ports(3)
        config = self.work_dir / "controller_manager_config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            # The release's cert-manager mode: the certificate comes from outside.
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(serving.cert_file.parent)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        }, indent=2) + "\n")  # fmt: skip
        self.spawn(
            "lws-controller",
            [str(self.dist_dir / "bin" / "lws-controller"), f"--config={config}",
             f"--kubeconfig={kubeconfig}", "--zap-log-level=2"],  # the release's level
        )  # fmt: skip
        hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
        self.plane.apply(self.webhooks_on_loopback(hooks, self.webhook_port))
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("its mutating webhook (a server dry-run create)", self._webhook_defaults)
        self.wait(
            "the LeaderWorkerSet and Pod controllers' workers",
            lambda: self.workers_started("leaderworkerset", "pod"),
        )
        self.ready_after(began)

    def _webhook_defaults(self) -> bool:
        probe = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "aibom-lws-probe", "namespace": "default"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {
                "spec": {"containers": [{"name": "c", "image": "registry.example/probe:1"}]}}}},
        }  # fmt: skip
        resp = self.plane.request(
            "POST",
            "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets?dryRun=All",
            probe,
        )
        # Set by the webhook's Default(), not by a CRD default.
        return resp.ok and bool(resp.json()["spec"].get("networkConfig", {}).get("subdomainPolicy"))
