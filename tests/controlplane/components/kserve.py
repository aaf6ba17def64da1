"""KServe: the real controller manager (github.com/kserve/kserve v0.20.0), as its own
ServiceAccount, in Standard (raw Deployment) mode.

Built from upstream's module as it is (``./cmd/manager`` with upstream's own
go.mod): from the Go module proxy where it serves ``github.com/kserve/kserve``
at v0.20.0 (it does here, for that exact version), else from the source tree
``kserve-src/`` beside the checkout. The build also renders the release as
KServe's Standard-mode installer applies it (``hack/setup/quick-install/
kserve-standard-mode-full-install-with-manifests.sh``): ``kubectl kustomize
config/overlays/standalone/kserve`` into ``release.yaml`` and ``config/runtimes``
(the ClusterServingRuntimes) into ``runtimes.yaml``, each with the release
script's ``s/:latest/:v0.20.0/`` (``hack/release/generate-install.sh``).

:meth:`Kserve.start` applies from it the Namespace, CRDs, ServiceAccount, RBAC,
the ``inferenceservice-config`` ConfigMap with ``deploy.defaultDeploymentMode``
set to ``Standard`` (what that installer's ``DEPLOYMENT_MODE=Standard`` does)
and the ClusterStorageContainer; runs the manager as
``kserve/kserve-controller-manager`` with its webhook server on a free port
(it binds every interface: v0.20.0 has a ``--webhook-port`` flag but no host)
and a cluster-CA serving certificate where controller-runtime looks for it
(``$TMPDIR/k8s-webhook-server/serving-certs``); registers the release's six
webhook configurations (the InferenceService defaulter and validator, the Pod
mutator, the ServingRuntime, ClusterServingRuntime, TrainedModel and
InferenceGraph validators) on loopback; then applies the ClusterServingRuntimes
through its own validating webhook, as the installer does once the controller
runs; and returns once ``/readyz`` answers, a dry-run InferenceService comes
back defaulted by its webhook, and the InferenceService controller's workers
started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register, rendered
from tests.controlplane.gobuild import GoBuild, SourceTree
from tests.controlplane.kubernetes import kustomize
from tests.controlplane.process import child_env, free_ports, http_ok

MODULE: Final = "github.com/kserve/kserve"
VERSION: Final = "v0.20.0"
#: The commit of tag v0.20.0 (the proxy's ``.info`` Origin.Hash; SOURCES.md's kserve-src).
COMMIT: Final = "1fb781055dd1567164358233e1125142ca6ef1fe"
#: Where the release puts the controller (``POD_NAMESPACE``), and as whom it runs.
NAMESPACE: Final = "kserve"
SERVICE_ACCOUNT: Final = "kserve-controller-manager"
CONFIGMAP: Final = "inferenceservice-config"


def _render(source: Path, staging: Path) -> None:
    """The release, as the Standard-mode installer applies it, with the release's tag."""
    for name, folder in (
        ("release.yaml", "config/overlays/standalone/kserve"),
        ("runtimes.yaml", "config/runtimes"),
    ):
        text = kustomize(source / folder).replace(":latest", f":{VERSION}")
        header = f"# kubectl kustomize {folder} of {MODULE}@{VERSION} (:latest -> :{VERSION})\n"
        (staging / name).write_text(header + text)


BUILD: Final = GoBuild(
    name="kserve",
    version=VERSION,
    mains={"kserve-manager": "./cmd/manager"},
    source=SourceTree(module=MODULE, version=VERSION, commit=COMMIT, tree="kserve-src"),
    # v0.20.0 has no version variable to set; its manager's flags prove the build.
    check=("kserve-manager", ("--help",), "-webhook-port"),
    estimate="about 3 min (10-20 under load)",
    render=_render,
    outputs=("release.yaml", "runtimes.yaml"),
)


def standard_mode(config: dict[str, Any]) -> dict[str, Any]:
    """The release's ``inferenceservice-config`` with ``deploy.defaultDeploymentMode:
    Standard``, as the Standard-mode installer's ``update_isvc_config`` writes it."""
    deploy = json.loads(config["data"]["deploy"])
    deploy["defaultDeploymentMode"] = "Standard"
    config["data"]["deploy"] = json.dumps(deploy, indent=2)
    return config


@register
class Kserve(Component):
    name: ClassVar[str] = "kserve"
    summary: ClassVar[str] = f"KServe controller manager {VERSION} (Standard mode)"
    go_build: ClassVar[GoBuild | None] = BUILD
    #: Its release's CRDs stand while it runs (the vendored InferenceService CRDs,
    #: k8s-aibom's minimal one and v0.15.2's, are left alone).
    owns_crd_files: ClassVar[tuple[str, ...]] = ("serving.kserve.io_",)

    webhook_port = 0
    health_port = 0

    def start(self) -> None:
        began = self.began()
        docs = rendered(BUILD, "release.yaml")
        self.apply_release(docs)
        config = next(
            d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == CONFIGMAP
        )
        self.plane.apply([standard_mode(config)])
        self.plane.apply([d for d in docs if d["kind"] == "ClusterStorageContainer"])
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        self.webhook_port, self.health_port, metrics_port = free_ports(3)
        env = child_env()
        env.update(self.controller_runtime_certs())
        env.update(KUBECONFIG=str(kubeconfig), POD_NAMESPACE=NAMESPACE)
        self.spawn(
            "kserve-manager",
            [str(self.dist_dir / "bin" / "kserve-manager"),
             f"--metrics-addr=127.0.0.1:{metrics_port}",
             f"--health-probe-addr=127.0.0.1:{self.health_port}",
             f"--webhook-port={self.webhook_port}"],
            env=env,
        )  # fmt: skip
        hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
        self.plane.apply(self.webhooks_on_loopback(hooks, self.webhook_port))
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("its InferenceService defaulter (a server dry-run create)", self._defaults)
        self.wait("the InferenceService controller's workers",
                  lambda: self.workers_started("inferenceservice"))  # fmt: skip
        # Validated by its own ClusterServingRuntime webhook, as in a real install.
        self.plane.apply(rendered(BUILD, "runtimes.yaml"))
        self.ready_after(began)

    def _defaults(self) -> bool:
        probe = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "aibom-kserve-probe", "namespace": "default"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"},
                                             "storageUri": "gs://probe/model"}}},
        }  # fmt: skip
        resp = self.plane.request(
            "POST",
            "/apis/serving.kserve.io/v1beta1/namespaces/default/inferenceservices?dryRun=All",
            probe,
        )
        # Set by the webhook's Default() from the ConfigMap's defaultDeploymentMode:
        # proof of both (the CRD defaults no annotation).
        annotations = resp.json()["metadata"].get("annotations", {}) if resp.ok else {}
        return bool(annotations.get("serving.kserve.io/deploymentMode") == "Standard")
