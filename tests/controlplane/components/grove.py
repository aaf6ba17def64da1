"""Grove: the real operator (github.com/ai-dynamo/grove/operator), as its own ServiceAccount.

Built from upstream's source at the commit our Grove CRDs come from, through
the one builder: the module proxy first (``github.com/ai-dynamo/grove/operator``
at its pseudo-version), else the source tree ``grove-src/`` beside the
checkout (the proxy here refuses the module), with one small patch kept in
``tests/controlplane/patches/grove-no-kai-volcano.patch`` (the KAI and Volcano
scheduler backends import two modules the proxy refuses; the default ``kube``
backend needs neither: the patch says why).

The build also renders the release, ``release.yaml``: the CRDs the operator
ships (``operator/api/core/v1alpha1/crds`` and the scheduler's PodGang CRD,
which the PodCliqueSet controller writes) and ``helm template`` of its chart
(``operator/charts``) with the cached helm of :mod:`tests.controlplane.gotools`,
with two values changed from the chart's defaults: the scheduler profiles
(``default-scheduler`` only: the KAI backend is not built) and
``certProvisionMode: manual`` (the certificate comes from outside, as with
cert-manager; ``auto`` would mint one for the in-cluster Service name only).

:meth:`Grove.start` applies from it the CRDs, the Namespace the chart is
installed into, the ServiceAccount, the ClusterRole ``grove:system:grove-operator``
(which grants no ``*/finalizers``: why the provenance rule also counts `update`
on the owner itself), the lease Role and their bindings; writes the chart's
OperatorConfiguration with what running out of cluster needs (leader election
off, servers on 127.0.0.1, the serving certificate's folder); runs the
operator as ``grove-system/grove-operator`` (``KUBECONFIG``: the binary has no
``--kubeconfig`` flag) with the chart's environment; applies the chart's
three webhook configurations (PodCliqueSet defaulting and validation,
ClusterTopologyBinding validation; the authorizer webhook is off in the
chart's defaults) pointed at 127.0.0.1 with the cluster CA; and returns once
``/readyz`` answers, a dry-run PodCliqueSet comes back defaulted by its
mutating webhook, and the three workload controllers started their workers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Final

import yaml

from tests.controlplane.component import Component, register
from tests.controlplane.gobuild import BuildError, GoBuild, SourceTree, ensure, go_ldflags
from tests.controlplane.gotools import ensure_tool
from tests.controlplane.paths import PACKAGE_DIR
from tests.controlplane.process import child_env, free_ports, http_ok

#: The upstream commit (main, 2026-08-19): the one the vendored Grove CRDs come from.
COMMIT: Final = "fcc3b3bbbc5e6a2a797cd080bdbc6983b1ccec24"
#: Its Go pseudo-version: the newest tag below it is ``operator/v0.1.0-alpha.12-rc1``
#: (the same for ``operator/api`` and ``scheduler/api``), committed 2026-08-19 09:50:09 UTC.
VERSION: Final = "v0.1.0-alpha.12-rc1.0.20260819095009-fcc3b3bbbc5e"
MODULE: Final = "github.com/ai-dynamo/grove/operator"
#: Where the chart installs it (Grove's own scripts and e2e setup use this
#: namespace), its Helm release name, and the ServiceAccount of its values.yaml.
NAMESPACE: Final = "grove-system"
RELEASE: Final = "grove-operator"
SERVICE_ACCOUNT: Final = "grove-operator"
CLUSTER_ROLE: Final = "grove:system:grove-operator"
PATCH: Final = PACKAGE_DIR / "patches" / "grove-no-kai-volcano.patch"

SOURCE: Final = SourceTree(
    module=MODULE,
    version=VERSION,
    commit=COMMIT,
    tree="grove-src",
    build_dir="operator",
    patch=PATCH,
    # operator/go.mod replaces both with relative paths (./api, ../scheduler/api);
    # they are separate modules, so the proxy route downloads them beside it.
    siblings={
        "api": f"{MODULE}/api@{VERSION}",
        "../scheduler/api": f"github.com/ai-dynamo/grove/scheduler/api@{VERSION}",
    },
)

#: Chart values changed from its defaults (see the module docstring).
CHART_VALUES: Final = {
    "config": {
        "scheduler": {"profiles": [{"name": "default-scheduler"}]},
        "server": {"webhooks": {"certProvisionMode": "manual"}},
    },
}


def _crd_files(main: Path) -> list[Path]:
    """The CRDs the release installs: the operator's four and the PodGang CRD."""
    ours = sorted((main / "api" / "core" / "v1alpha1" / "crds").glob("*.yaml"))
    podgang = main.parent / "scheduler" / "api" / "core" / "v1alpha1" / "crds"
    return [*ours, podgang / "scheduler.grove.io_podgangs.yaml"]


def _render(main: Path, staging: Path) -> None:
    """``release.yaml``: the release's CRDs, then ``helm template`` of its chart."""
    values = staging / "values.json"
    values.write_text(json.dumps(CHART_VALUES))
    res = subprocess.run(
        [str(ensure_tool("helm")), "template", RELEASE, str(main / "charts"),
         "--namespace", NAMESPACE, "--values", str(values)],
        env=child_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    values.unlink()
    if res.returncode != 0:
        raise BuildError(f"helm template {main / 'charts'} failed: {res.stderr[-2000:]}")
    parts = [f"# The release of {MODULE}@{VERSION} (commit {COMMIT})\n"]
    for path in _crd_files(main):
        parts.append(f"---\n# {path.relative_to(main.parent)}\n{path.read_text()}")
    parts.append(f"---\n# helm template {RELEASE} operator/charts\n{res.stdout}")
    (staging / "release.yaml").write_text("".join(parts))


BUILD: Final = GoBuild(
    name="grove",
    version=VERSION,
    mains={"grove-operator": "./cmd"},
    source=SOURCE,
    # What operator/hack/build-operator.sh sets through ld-flags.sh; the build
    # date stays fixed so that every rebuild gives the same bytes.
    ldflags=go_ldflags(
        {
            f"{MODULE}/internal/version": {
                "gitVersion": VERSION,
                "gitCommit": COMMIT,
                "gitTreeState": "clean",
                "buildDate": "1970-01-01T00:00:00Z",
            }
        }
    ),
    check=("grove-operator", ("--version",), VERSION),
    estimate="about 4 min (more when the machine is loaded)",
    render=_render,
    outputs=("release.yaml",),
)

#: What ``start`` applies from the release (not the Deployment, Service or
#: ConfigMap: the operator is a local process; the webhooks come after it runs).
_APPLIED_KINDS: Final = frozenset(
    {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
     "Role", "RoleBinding"}
)  # fmt: skip
#: The controllers that make the chains (their names in the operator's logs).
CONTROLLERS: Final = frozenset(
    {"podcliqueset-controller", "podclique-controller", "podcliquescalinggroup-controller"}
)


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    text = (ensure(BUILD) / "release.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def operator_configuration(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The OperatorConfiguration the chart renders into its ConfigMap."""
    for doc in docs:
        if doc["kind"] == "ConfigMap" and "config.yaml" in doc.get("data", {}):
            config: dict[str, Any] = yaml.safe_load(doc["data"]["config.yaml"])
            return config
    raise BuildError("the rendered Grove chart has no ConfigMap with config.yaml")


def deployment_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The operator container's environment as the chart's Deployment sets it (the
    downward-API ``spec.serviceAccountName`` resolved to the chart's ServiceAccount)."""
    for doc in docs:
        if doc["kind"] == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            env = {}
            for var in container.get("env", []):
                field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                if field == "spec.serviceAccountName":
                    env[var["name"]] = doc["spec"]["template"]["spec"]["serviceAccountName"]
                elif "value" in var:
                    env[var["name"]] = var["value"]
                else:
                    raise BuildError(f"Grove chart: env {var['name']} has an unknown source")
            return env
    raise BuildError("the rendered Grove chart has no Deployment")


@register
class Grove(Component):
    name: ClassVar[str] = "grove"
    summary: ClassVar[str] = f"Grove operator {COMMIT[:8]} ({VERSION})"
    #: Its release's CRDs stand while it runs (the same commit as the vendored ones).
    owns_crd_files: ClassVar[tuple[str, ...]] = ("grove.io_", "scheduler.grove.io_")

    webhook_port = 0
    health_port = 0

    @classmethod
    def build(cls) -> None:
        ensure(BUILD)

    def start(self) -> None:
        began = self.began()
        docs = release()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        base = [d for d in docs if d["kind"] in _APPLIED_KINDS]
        self.plane.apply([namespace, *base])  # what `helm install --create-namespace` makes
        self.plane.wait_established(
            d["metadata"]["name"] for d in base if d["kind"] == "CustomResourceDefinition"
        )
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        serving = self.plane.issue_serving_cert("grove-webhook")  # tls.crt and tls.key
        self.webhook_port, self.health_port, metrics_port = free_ports(3)
        config = operator_configuration(docs)
        config["leaderElection"]["enabled"] = False  # one replica, like the controller-manager
        config["server"]["webhooks"].update(
            bindAddress="127.0.0.1", port=self.webhook_port,
            serverCertDir=str(serving.cert_file.parent),
        )  # fmt: skip
        config["server"]["healthProbes"] = {"bindAddress": "127.0.0.1", "port": self.health_port}
        config["server"]["metrics"] = {"bindAddress": "127.0.0.1", "port": metrics_port}
        path = self.work_dir / "config.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        env = child_env()
        env.update(deployment_env(docs))
        env["KUBECONFIG"] = str(kubeconfig)
        self.spawn(
            "grove-operator",
            [str(ensure(BUILD) / "bin" / "grove-operator"), f"--config={path}"],
            env=env,
        )
        hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
        self.plane.apply(self.webhooks_on_loopback(hooks, self.webhook_port))
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("its defaulting webhook (a server dry-run create)", self._webhook_defaults)
        self.wait("the PodCliqueSet, PodClique and PodCliqueScalingGroup workers", self.workers)
        self.ready_after(began)

    def _webhook_defaults(self) -> bool:
        probe = {
            "apiVersion": "grove.io/v1alpha1",
            "kind": "PodCliqueSet",
            "metadata": {"name": "aibom-grove-probe", "namespace": "default"},
            "spec": {"replicas": 1, "template": {"cliques": [{
                "name": "c", "spec": {"replicas": 1, "podSpec": {
                    "containers": [{"name": "c", "image": "registry.example/probe:1"}]}}}]}},
        }  # fmt: skip
        resp = self.plane.request(
            "POST", "/apis/grove.io/v1alpha1/namespaces/default/podcliquesets?dryRun=All", probe
        )
        # Set by the webhook's defaulting (the CRD has no default for it).
        spec = resp.json()["spec"] if resp.ok else {}
        return bool(spec.get("template", {}).get("terminationDelay"))

    def workers(self) -> bool:
        """Its three workload controllers logged ``Starting workers``."""
        return self.controllers_started() >= CONTROLLERS
