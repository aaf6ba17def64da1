"""OPA Gatekeeper: the real controller manager, as the release runs it (webhook + audit).

Built from ``modules/gatekeeper`` (``tool`` directives naming upstream's main
package, the module root ``github.com/open-policy-agent/gatekeeper/v3``, and
``cmd/gator``, which ``gotools.py`` builds as the tool ``gator``). The build keeps
the release's manifest beside the binaries: ``deploy/gatekeeper.yaml`` of the same
module (what ``kubectl apply -f .../deploy/gatekeeper.yaml`` installs).

:meth:`Gatekeeper.start` applies from it the Namespace, CRDs, the
ServiceAccount ``gatekeeper-admin`` and its Role/ClusterRole and bindings, then
runs the manager twice, as the release's two Deployments do, each as
``gatekeeper-system/gatekeeper-admin`` (a TokenRequest token) with that
Deployment's arguments: ``gatekeeper-controller-manager`` (``--operation=webhook
--operation=mutation-webhook``) serving its webhooks on 127.0.0.1 with a
serving certificate of the cluster CA (``--disable-cert-rotation``, the
release's external-certificate mode), and ``gatekeeper-audit`` (audit, status,
mutation-status, generate). The release's two webhook configurations are
applied pointed there (:meth:`Component.webhooks_on_loopback`), unchanged
otherwise (``failurePolicy: Ignore`` for admission, as released). The status
writers own their status objects by the manager's Pod, so the Pod each
Deployment would have made is created (Pending: there is no kubelet).

Local settings that differ from the release: the audit runs every
:data:`AUDIT_INTERVAL` seconds (the release: 60) so that a test waits seconds for
it; its API cache folder (the release's emptyDir) is the component's own, and each
manager's Prometheus port a free one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane import enginepins
from tests.controlplane.component import (
    Component,
    module_file,
    register,
    release_container,
    release_deployment,
    rendered,
    with_flags,
)
from tests.controlplane.gobuild import GoBuild, module_dir
from tests.controlplane.process import child_env, free_ports, http_ok

#: The Gatekeeper release (modules/gatekeeper/go.mod).
VERSION: Final = enginepins.GATEKEEPER_VERSION
MODULE: Final = enginepins.GATEKEEPER_MODULE
#: What upstream's Makefile sets (LDFLAGS), plus -s -w.
LDFLAGS: Final = enginepins.GATEKEEPER_LDFLAGS
NAMESPACE: Final = "gatekeeper-system"
SERVICE_ACCOUNT: Final = "gatekeeper-admin"
WEBHOOK: Final = "gatekeeper-controller-manager"
AUDIT: Final = "gatekeeper-audit"
#: Seconds between audits here (the release: 60).
AUDIT_INTERVAL: Final = 5
RELEASE_FILE: Final = "deploy/gatekeeper.yaml"


BUILD: Final = GoBuild(
    name="gatekeeper",
    version=VERSION,
    mains={"manager": MODULE},
    module=module_dir("gatekeeper"),
    ldflags=LDFLAGS,
    verify=True,
    estimate="10-20 min",
    render=module_file(module_dir("gatekeeper"), MODULE, RELEASE_FILE),
    outputs=("release.yaml",),
)


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    return rendered(BUILD, "release.yaml")


@register
class Gatekeeper(Component):
    name: ClassVar[str] = "gatekeeper"
    go_build: ClassVar[GoBuild | None] = BUILD
    summary: ClassVar[str] = f"OPA Gatekeeper {VERSION} (controller manager: webhook, audit)"

    #: Seconds between audits (the benchmark sets the release's 60 before starting it).
    audit_interval: ClassVar[int] = AUDIT_INTERVAL

    webhook_port = 0
    health_port = 0

    def start(self) -> None:
        began = self.began()
        docs = release()
        self.apply_release(docs)
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        serving = self.plane.issue_serving_cert("gatekeeper-webhook")
        self.webhook_port, self.health_port, audit_health = free_ports(3)
        self._manager(
            docs, WEBHOOK, kubeconfig,
            port=str(self.webhook_port), host="127.0.0.1",
            # The certificate comes from outside (the release rotates its own).
            **{"cert-dir": str(serving.cert_file.parent), "disable-cert-rotation": "true",
               "health-addr": f"127.0.0.1:{self.health_port}"},
        )  # fmt: skip
        hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
        self.plane.apply(self.webhooks_on_loopback(hooks, self.webhook_port))
        self.wait("the webhook manager's /readyz", lambda: http_ok(self.health_port, "/readyz"))
        audit_dir = self.work_dir / "audit-cache"  # the release: an emptyDir
        audit_dir.mkdir(exist_ok=True)
        self._manager(
            docs, AUDIT, kubeconfig,
            # The release mounts the same certificate Secret into both Deployments.
            **{"cert-dir": str(serving.cert_file.parent),
               "health-addr": f"127.0.0.1:{audit_health}",
               "audit-interval": str(self.audit_interval), "api-cache-dir": str(audit_dir)},
        )  # fmt: skip
        self.wait("the audit manager's /readyz", lambda: http_ok(audit_health, "/readyz"))
        self.ready_after(began)

    def _manager(
        self, docs: list[dict[str, Any]], deployment: str, kubeconfig: Path, **flags: str
    ) -> None:
        """The release Deployment ``deployment`` as a process: its arguments (``flags``
        replace or add some) and environment, as ``gatekeeper-admin``."""
        args, env = release_container(docs, deployment)
        pod = f"{deployment}-local"
        self._pod_object(docs, deployment, pod)
        child = child_env()
        child.update(env)
        # What the Deployment takes from its Pod's fields.
        child.update(POD_NAME=pod, POD_NAMESPACE=NAMESPACE, NAMESPACE=NAMESPACE,
                     KUBECONFIG=str(kubeconfig))  # fmt: skip
        # Its Prometheus exporter listens on every address (upstream has no host flag),
        # on a port of its own here: two managers, and other tests' on the machine.
        (prometheus,) = free_ports(1)
        args = with_flags(args, **{"prometheus-port": str(prometheus), **flags})
        self.spawn(deployment, [str(self.dist_dir / "bin" / "manager"), *args], env=child)

    def _pod_object(self, docs: list[dict[str, Any]], deployment: str, name: str) -> None:
        """The Pod the release's Deployment would have created (its pod template): the
        manager sets it as the owner of its status objects."""
        template = release_deployment(docs, deployment)["spec"]["template"]
        meta = {**template.get("metadata", {}), "name": name, "namespace": NAMESPACE}
        self.plane.apply(
            [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}]
        )
