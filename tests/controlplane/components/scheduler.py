"""kube-scheduler: binds Pods to Nodes, as ``system:kube-scheduler``.

Built with the control plane (``kubernetes.BUILD``: ``k8s.io/kubernetes/cmd/kube-scheduler``
at the same release as the API server), so nothing more is built for it. The core
starts no scheduler (no Node would take a Pod); the ``kwok`` component requires this
one, so that the Pods the controllers create are bound to kwok's fake Nodes.

It runs as Kubernetes runs it: a client certificate of the cluster CA for the user
``system:kube-scheduler``, which the API server's bootstrap RBAC policy binds to the
ClusterRoles ``system:kube-scheduler`` and ``system:volume-scheduler`` and, in
``kube-system``, to the Role ``extension-apiserver-authentication-reader``: nothing is
granted here. The default profile (``default-scheduler``) in a
KubeSchedulerConfiguration, leader election off (one replica, like the
controller-manager here), secure serving on a loopback port with a self-signed
certificate (``--cert-dir``); ready once ``/readyz`` answers (its informers synced
and its handlers installed). :func:`serve` also runs the ``volcano`` component's
second scheduler (one profile named ``volcano``).
"""

from __future__ import annotations

import http.client
import json
import ssl
from typing import ClassVar, Final

from tests.controlplane.component import Component, register
from tests.controlplane.gobuild import GoBuild, ensure
from tests.controlplane.kubernetes import BUILD, K8S_VERSION
from tests.controlplane.process import free_ports, status_of_get

#: Who it is: the user the bootstrap RBAC policy binds the scheduler's roles to.
USER: Final = "system:kube-scheduler"


def serve(component: Component, process: str, profiles: list[str]) -> int:
    """Run kube-scheduler for ``component`` as :data:`USER` with one profile per
    scheduler name (a KubeSchedulerConfiguration: its kubeconfig, leader election
    off); return its secure port once ``/readyz`` answers."""
    identity = component.plane.issue_identity(USER)
    component.user, component.kubeconfig = identity.user, identity.kubeconfig
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(identity.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": name} for name in profiles],
    }
    path = component.work_dir / f"{process}.yaml"
    path.write_text(json.dumps(config, indent=1) + "\n")
    (port,) = free_ports(1)
    certs = component.work_dir / f"{process}-serving"
    certs.mkdir(exist_ok=True)
    component.spawn(
        process,
        [str(ensure(BUILD) / "bin" / "kube-scheduler"), f"--config={path}",
         f"--authentication-kubeconfig={identity.kubeconfig}",
         f"--authorization-kubeconfig={identity.kubeconfig}",
         "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={certs}",
         "--profiling=false", "--v=1"],
    )  # fmt: skip
    component.wait("/readyz", lambda: ready(port))
    return port


def ready(port: int) -> bool:
    """``/readyz`` (an always-allowed path) answers 200."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
    return status_of_get(conn, "/readyz") == 200


@register
class KubeScheduler(Component):
    name: ClassVar[str] = "kube-scheduler"
    summary: ClassVar[str] = f"kube-scheduler {K8S_VERSION} (default profile)"
    go_build: ClassVar[GoBuild | None] = BUILD

    port = 0

    def start(self) -> None:
        began = self.began()
        self.port = serve(self, "kube-scheduler", ["default-scheduler"])
        self.ready_after(began)
