"""Kyverno: the real admission controller and reports controller, each as its own ServiceAccount.

Built from ``modules/kyverno`` (``tool`` directives naming upstream's
``cmd/kyverno`` and ``cmd/reports-controller``, and the CLI
``cmd/cli/kubectl-kyverno``, which ``gotools.py`` builds as the tool
``kyverno``; the module repeats Kyverno's own ``replace`` of
``k8s.io/pod-security-admission`` by its fork). The build keeps the release's
manifests beside the binaries: ``config/install-latest-testing.yaml`` of the same
module, upstream's ``helm template`` of its chart (``charts/kyverno``, with the
chart's dependencies) that upstream's CI regenerates and compares at every
commit. The chart itself cannot be rendered from the module: three of its
dependencies (``kyverno-api``, ``openreports``, ``reports-server``) live in
remote chart repositories, and helm refuses ("found in Chart.yaml, but missing
in charts/ directory").

:meth:`Kyverno.start` applies from it the Namespace, CRDs, ServiceAccounts,
Roles/ClusterRoles and bindings and the ``kyverno`` ConfigMaps; puts a serving
certificate of the cluster CA (IP SAN 127.0.0.1) into the two Secrets the
admission controller reads, the CA Secret holding the CA certificate only
(``--disableCertManagerController``: the chart's mode where certificates come
from outside); and runs each controller with the arguments and environment of
its release Deployment, as that Deployment's ServiceAccount, plus what runs it
outside a Pod: loopback ports, a kubeconfig, and for the admission controller
``--serverIP=127.0.0.1:<port>``, upstream's out-of-cluster mode, in which the
webhook configurations Kyverno writes itself name ``url:
https://127.0.0.1:<port>/...`` instead of its Service. Kyverno registers its
webhooks itself (its webhook controller derives them from the policies, with
the CA Secret as ``caBundle``), so they are registered as the release registers
them by construction; :meth:`Kyverno.stop` deletes whatever it registered.
"""

from __future__ import annotations

import http.client
import re
import ssl
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane import enginepins
from tests.controlplane.component import (
    RELEASE_KINDS,
    TOKEN_SECONDS,
    Component,
    module_file,
    register,
    release_container,
    rendered,
    with_flags,
)
from tests.controlplane.gobuild import GoBuild, module_dir
from tests.controlplane.process import child_env, free_ports

#: The Kyverno release (modules/kyverno/go.mod).
VERSION: Final = enginepins.KYVERNO_VERSION
MODULE: Final = enginepins.KYVERNO_MODULE
#: What upstream's Makefile sets (LD_FLAGS): the version the binaries report.
LDFLAGS: Final = enginepins.KYVERNO_LDFLAGS
NAMESPACE: Final = "kyverno"
#: Two of the release's Deployments (and their ServiceAccounts, of the same names).
ADMISSION: Final = "kyverno-admission-controller"
REPORTS: Final = "kyverno-reports-controller"
#: The Secrets the release's admission controller reads (``--caSecretName``,
#: ``--tlsSecretName``); the CA's ``tls.crt`` is the caBundle of its webhooks.
CA_SECRET: Final = "kyverno-svc.kyverno.svc.kyverno-tls-ca"
TLS_SECRET: Final = "kyverno-svc.kyverno.svc.kyverno-tls-pair"
#: The release, rendered by upstream, in the module (see the module docstring).
RELEASE_FILE: Final = "config/install-latest-testing.yaml"
#: The label on every webhook configuration Kyverno writes.
MANAGED_BY: Final = "webhook.kyverno.io/managed-by=kyverno"


BUILD: Final = GoBuild(
    name="kyverno",
    version=VERSION,
    mains={
        "kyverno": f"{MODULE}/cmd/kyverno",
        "reports-controller": f"{MODULE}/cmd/reports-controller",
    },
    module=module_dir("kyverno"),
    ldflags=LDFLAGS,
    verify=True,
    estimate="15-30 min (about 3,400 packages)",
    render=module_file(module_dir("kyverno"), MODULE, RELEASE_FILE),
    outputs=("release.yaml",),
)


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    return rendered(BUILD, "release.yaml")


@register
class Kyverno(Component):
    name: ClassVar[str] = "kyverno"
    go_build: ClassVar[GoBuild | None] = BUILD
    summary: ClassVar[str] = f"Kyverno {VERSION} (admission controller, reports controller)"

    webhook_port = 0

    def start(self) -> None:
        began = self.began()
        docs = release()
        self.apply_release(docs, RELEASE_KINDS | {"ConfigMap"})
        self._serving_secrets()
        self.webhook_port, metrics, runtime_metrics, reports_metrics = free_ports(4)
        self._controller(
            docs, ADMISSION, "kyverno", self.run_as(NAMESPACE, ADMISSION),
            serverIP=f"127.0.0.1:{self.webhook_port}",
            webhookServerHost="127.0.0.1",
            webhookServerPort=str(self.webhook_port),
            metricsPort=str(metrics),
            controllerRuntimeMetricsAddress=f"127.0.0.1:{runtime_metrics}",
            disableCertManagerController="true",
        )  # fmt: skip
        self.wait("its webhook server (/health/readiness)", self._serving, timeout=180)
        self.wait("the webhook configurations it registers", self._registered, timeout=180)
        reports = self.plane.service_account_kubeconfig(
            NAMESPACE, REPORTS, self.work_dir / "reports.kubeconfig", TOKEN_SECONDS
        )
        self._controller(docs, REPORTS, "reports-controller", reports,
                         metricsPort=str(reports_metrics))  # fmt: skip
        self.wait("the reports controller's background scan", self._scanning, timeout=180)
        self.ready_after(began)

    def _controller(
        self, docs: list[dict[str, Any]], name: str, binary: str, kubeconfig: Path, **flags: str
    ) -> None:
        """The release Deployment ``name`` as a process: its arguments (``flags``
        replace or add some) and environment, as its ServiceAccount (``kubeconfig``)."""
        args, env = release_container(docs, name)
        child = child_env()
        child.update(env)
        # What the Deployment takes from its Pod (the name is the leader-election identity).
        child.update(KYVERNO_NAMESPACE=NAMESPACE, KYVERNO_POD_NAME=f"{name}-local",
                     TUF_ROOT=str(self.work_dir / "sigstore"))  # fmt: skip
        args = with_flags(args, kubeconfig=str(kubeconfig), metricsHost="127.0.0.1", **flags)
        self.spawn(name, [str(self.dist_dir / "bin" / binary), *args], env=child)

    def _serving_secrets(self) -> None:
        """The two Secrets the admission controller reads: the CA (its certificate only,
        never a key) and a serving pair it signed, for 127.0.0.1."""
        serving = self.plane.issue_serving_cert("kyverno-webhook")
        pair = {"tls.crt": serving.cert_file.read_text(), "tls.key": serving.key_file.read_text()}
        self.plane.apply([
            _secret(CA_SECRET, "Opaque", {"tls.crt": self.plane.ca_pem.decode()}),
            _secret(TLS_SECRET, "kubernetes.io/tls", pair),
        ])  # fmt: skip

    def _serving(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.plane.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.webhook_port, timeout=2, context=ctx)
        try:
            conn.request("GET", "/health/readiness")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def registered(self) -> list[tuple[str, str]]:
        """The webhook configurations Kyverno has written, as (kind, name)."""
        out = self.plane.kubectl(
            "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            "-l", MANAGED_BY,
            "-o", "jsonpath={range .items[*]}{.kind} {.metadata.name}{'\\n'}{end}",
            check=False,
        )  # fmt: skip
        pairs = (line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
        return [(kind, name) for kind, name in pairs]

    def _registered(self) -> bool:
        # The resource webhooks come with the first policy; these two, at start.
        names = {name for _, name in self.registered()}
        return {
            "kyverno-policy-validating-webhook-cfg",
            "kyverno-exception-validating-webhook-cfg",
        } <= names

    def _scanning(self) -> bool:
        text = self.processes[-1].log_path.read_text(errors="replace")
        # A leader controller: it starts once the reports controller leads.
        return bool(re.search(r"starting controller.*background-scan-controller", text))

    def stop(self) -> None:
        # The processes first: its webhook controller re-creates a configuration
        # deleted under it. Then whatever it registered goes, including those of the
        # policies applied since it started (their failurePolicy Fail would refuse).
        for proc in reversed(self.processes):
            proc.stop(self.plane.stop_grace)
        self.processes.clear()
        if self.plane.server:
            self.webhook_configurations = self.registered()
        super().stop()


def _secret(name: str, kind: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": data,
    }
