"""Dynamo: the real operator (github.com/ai-dynamo/dynamo/deploy/operator), as its own
ServiceAccount.

Built from upstream's source through the one builder: the module proxy first
(``github.com/ai-dynamo/dynamo/deploy/operator`` at the pseudo-version of
commit df888f68, 2026-04-21), else the source tree ``dynamo-operator-src/``
beside the checkout (the proxy here refuses it), with one small patch kept in
``tests/controlplane/patches/dynamo-namespace-from-env.patch`` (out of cluster
it reads its namespace from ``POD_NAMESPACE``, as its Deployment sets it, where
a Pod has a file: the patch says why); three modules the proxy may refuse
(``emperror.dev/errors``, ``volcano.sh/apis``,
``github.com/ai-dynamo/grove/operator/api``) come from ``go-deps/`` through
``replace`` directives of a copy of its go.mod (``-modfile=``) where it does
(here it serves them at the versions go.mod requires).

The build also renders the release, ``release.yaml``: every CRD of
``deploy/operator/config/crd/bases`` (v1alpha1 DynamoGraphDeployment and
DynamoComponentDeployment at this commit, no conversion webhook), then
``kubectl kustomize config/default`` (its ServiceAccount, the ClusterRole of
``config/rbac/role.yaml``, the leader-election Role, the bindings).

:meth:`Dynamo.start` applies those (see :data:`MISSING_RULES` for the rules
``role.yaml`` lacks at this commit, and why), writes the OperatorConfiguration
the Helm chart renders (:func:`operator_configuration`), runs the operator as
``dynamo-kubernetes-operator-system/dynamo-kubernetes-operator-controller-manager``
with ``--operator-version`` the chart's appVersion, registers the chart's
webhook configurations (:data:`WEBHOOKS`) pointed at 127.0.0.1 with the
cluster CA, and returns once ``/readyz`` answers (webhooks registered), a
dry-run DynamoGraphDeployment comes back stamped by its defaulting webhook,
and the graph and component controllers started their workers.

It requires the Grove component: with Grove's API present the chart renders
``orchestrators.grove.enabled: true`` (``global.grove.enabled``), so a graph
becomes a PodCliqueSet unless it says ``nvidia.com/enable-grove: "false"``,
and then one DynamoComponentDeployment per service, each a Deployment.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Final

import yaml

from tests.controlplane.component import Component, register
from tests.controlplane.gobuild import BuildError, GoBuild, SourceTree, ensure
from tests.controlplane.kubernetes import kubectl_path
from tests.controlplane.paths import PACKAGE_DIR
from tests.controlplane.process import child_env, free_ports, http_ok

#: The commit of the source tree (upstream main #8374, 2026-04-21 18:35:51 UTC,
#: as the public fork snapshot zinuga/dynamo holds it) and its Go pseudo-version.
COMMIT: Final = "df888f6860e247b5a16039d659db61cd64a9d2d7"
VERSION: Final = "v0.0.0-20260421183551-df888f6860e2"
MODULE: Final = "github.com/ai-dynamo/dynamo/deploy/operator"
#: The Helm chart's appVersion at that commit: what its Deployment passes as
#: ``--operator-version`` (the default "unknown" is not semver and exits).
APP_VERSION: Final = "1.1.0"
#: Where ``kubectl kustomize config/default`` puts it (namespace + namePrefix).
NAMESPACE: Final = "dynamo-kubernetes-operator-system"
SERVICE_ACCOUNT: Final = "dynamo-kubernetes-operator-controller-manager"
CLUSTER_ROLE: Final = "dynamo-kubernetes-operator-manager-role"
#: The Helm chart's release names, for the names its OperatorConfiguration renders.
CHART_RELEASE: Final = "dynamo-platform"
CHART_FULLNAME: Final = f"{CHART_RELEASE}-dynamo-operator"
CHART_NAMESPACE: Final = "dynamo-system"

SOURCE: Final = SourceTree(
    module=MODULE,
    version=VERSION,
    commit=COMMIT,
    tree="dynamo-operator-src",
    build_dir="deploy/operator",
    patch=PACKAGE_DIR / "patches" / "dynamo-namespace-from-env.patch",
    replaces={
        "emperror.dev/errors": "go-deps/emperror-errors-v0.8.1",
        "volcano.sh/apis": "go-deps/volcano-apis-v1.12.2",
        "github.com/ai-dynamo/grove/operator/api": "go-deps/grove-v0.1.0-alpha.6/operator/api",
    },
    # deploy/operator/go.mod: replace .../deploy/snapshot => ../snapshot
    siblings={"../snapshot": f"github.com/ai-dynamo/dynamo/deploy/snapshot@{VERSION}"},
)

_RELEASE_KINDS: Final = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


def source_facts(main: Path) -> dict[str, list[str]]:
    """What this module spells out from the Helm chart (not in the source tree), as
    the operator's own source has it: the webhook paths it registers
    (internal/webhook) and the JSON keys of its OperatorConfiguration
    (api/config/v1alpha1/types.go). A test checks :data:`WEBHOOKS` and
    :func:`operator_configuration` against them."""
    paths = set()
    for go in sorted((main / "internal" / "webhook").rglob("*.go")):
        if not go.name.endswith("_test.go"):
            paths |= set(re.findall(r'"(/(?:validate|mutate)-[a-z0-9-]+)"', go.read_text()))
    types = (main / "api" / "config" / "v1alpha1" / "types.go").read_text()
    keys = set(re.findall(r'json:"([A-Za-z0-9]+)[,"]', types))
    return {"webhookPaths": sorted(paths), "configKeys": sorted(keys)}


def _render(main: Path, staging: Path) -> None:
    """``release.yaml``: every CRD of config/crd/bases, then the RBAC of
    ``kubectl kustomize config/default`` (its Deployment is left out); and
    ``source-facts.json`` (:func:`source_facts`)."""
    (staging / "source-facts.json").write_text(json.dumps(source_facts(main), indent=1) + "\n")
    res = subprocess.run(
        [str(kubectl_path()), "kustomize", str(main / "config" / "default")],
        env=child_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise BuildError(f"kubectl kustomize {main}/config/default failed: {res.stderr}")
    rbac = [d for d in yaml.safe_load_all(res.stdout) if d and d["kind"] in _RELEASE_KINDS]
    parts = [f"# The release of {MODULE}@{VERSION} (commit {COMMIT})\n"]
    for path in sorted((main / "config" / "crd" / "bases").glob("*.yaml")):
        parts.append(f"---\n# config/crd/bases/{path.name}\n{path.read_text()}")
    parts.append("---\n# kubectl kustomize config/default (RBAC)\n")
    parts.append(yaml.safe_dump_all(rbac, sort_keys=False))
    (staging / "release.yaml").write_text("".join(parts))


BUILD: Final = GoBuild(
    name="dynamo",
    version=VERSION,
    mains={"dynamo-operator": "./cmd"},
    source=SOURCE,
    # The operator has no version variable to set: its version is a flag.
    check=("dynamo-operator", ("--help",), "-operator-version"),
    estimate="about 2 min (more when the machine is loaded)",
    render=_render,
    outputs=("release.yaml", "source-facts.json"),
)

#: Rules ``config/rbac/role.yaml`` lacks at this commit although the code needs
#: them, each found by running the operator with role.yaml alone (the exact
#: errors are in tests/controlplane/README.md). The Helm chart of this commit
#: does not have the problem because its manager role grants ``*`` on ``*``
#: (cluster-admin in all but name), which this harness does not run an operator
#: as; upstream later added most of these to role.yaml itself.
MISSING_RULES: Final = (
    # cmd/main.go syncs a cluster-wide Secret informer before the manager starts
    # (the docker-secret index); a graph reconcile makes ServiceAccounts.
    {"apiGroups": [""], "resources": ["secrets", "serviceaccounts"],
     "verbs": ["create", "get", "list", "update", "watch"]},
    # The graph and component controllers Own() PersistentVolumeClaims: a watch.
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["watch"]},
    # The planner's RoleBinding, and the Kubernetes-discovery Role and RoleBinding
    # of every graph (internal/discovery).
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
     "verbs": ["create", "delete", "get", "list", "update", "watch"]},
    # The planner ClusterRole is looked up (and watched) before it is bound...
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
     "verbs": ["get", "list", "watch"]},
    # ...and a RoleBinding to it is refused unless the binder holds every rule of
    # it or may `bind` it: the narrower of the two.
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
     "verbs": ["bind"], "resourceNames": [f"{CHART_FULLNAME}-planner"]},
    # The discovery Role grants these: RBAC refuses a Role granting what its
    # author does not hold.
    {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["nvidia.com"], "resources": ["dynamoworkermetadatas"],
     "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
)  # fmt: skip

#: The chart's planner ClusterRole (templates/planner.yaml, cluster-wide mode),
#: which every graph's reconcile binds to its planner ServiceAccount.
PLANNER_ROLE: Final = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": f"{CHART_FULLNAME}-planner"},
    "rules": [
        {"apiGroups": ["nvidia.com"],
         "resources": ["dynamocomponentdeployments", "dynamographdeployments"],
         "verbs": ["get", "list", "create", "update", "patch"]},
        {"apiGroups": ["nvidia.com"],
         "resources": ["dynamographdeploymentscalingadapters/scale"], "verbs": ["patch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["nvidia.com"], "resources": ["dynamoworkermetadatas"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    ],
}  # fmt: skip

#: The chart's webhook configurations (deploy/helm/charts/platform/components/
#: operator/templates/webhook-configuration.yaml at this commit): (configuration
#: kind, webhook name, path, resource, version, operations). The chart is not
#: part of the source tree, so they are spelled out here; each path is the one
#: the operator registers (internal/webhook, checked by a test).
WEBHOOKS: Final = (
    ("ValidatingWebhookConfiguration", "vdynamocomponentdeployment.kb.io",
     "/validate-nvidia-com-v1alpha1-dynamocomponentdeployment", "dynamocomponentdeployments",
     "v1alpha1", ("CREATE", "UPDATE")),
    ("ValidatingWebhookConfiguration", "vdynamographdeployment.kb.io",
     "/validate-nvidia-com-v1alpha1-dynamographdeployment", "dynamographdeployments",
     "v1alpha1", ("CREATE", "UPDATE")),
    ("ValidatingWebhookConfiguration", "vdynamomodel.kb.io",
     "/validate-nvidia-com-v1alpha1-dynamomodel", "dynamomodels", "v1alpha1",
     ("CREATE", "UPDATE")),
    ("ValidatingWebhookConfiguration", "vdynamographdeploymentrequest.kb.io",
     "/validate-nvidia-com-v1beta1-dynamographdeploymentrequest",
     "dynamographdeploymentrequests", "v1beta1", ("CREATE", "UPDATE")),
    ("MutatingWebhookConfiguration", "mdynamographdeployment.kb.io",
     "/mutate-nvidia-com-v1alpha1-dynamographdeployment", "dynamographdeployments",
     "v1alpha1", ("CREATE",)),
    ("MutatingWebhookConfiguration", "mdynamographdeploymentrequestv1beta1.kb.io",
     "/mutate-nvidia-com-v1beta1-dynamographdeploymentrequest",
     "dynamographdeploymentrequests", "v1beta1", ("CREATE",)),
)  # fmt: skip


def webhook_configurations() -> list[dict[str, Any]]:
    """The chart's two configurations, with ``clientConfig.service`` as it renders it
    (``failurePolicy: Fail``, ``timeoutSeconds: 10``: the chart's defaults)."""
    docs: dict[str, dict[str, Any]] = {}
    for kind, name, path, resource, version, operations in WEBHOOKS:
        suffix = "validating" if kind.startswith("Validating") else "mutating"
        doc = docs.setdefault(kind, {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": f"{CHART_FULLNAME}-{suffix}"}, "webhooks": []})  # fmt: skip
        doc["webhooks"].append({
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 10,
            "clientConfig": {"service": {"name": f"{CHART_FULLNAME}-webhook-service",
                                         "namespace": CHART_NAMESPACE, "path": path}},
            "rules": [{"apiGroups": ["nvidia.com"], "apiVersions": [version],
                       "operations": list(operations), "resources": [resource]}],
        })  # fmt: skip
    return list(docs.values())


def operator_configuration() -> dict[str, Any]:
    """What the chart's ``templates/operator-config.yaml`` renders with the platform
    chart's defaults, ``webhook.certificateSecret.external: true`` (manual
    certificates: ours) and ``global.grove.enabled: true`` (Grove runs)."""
    webhook = {
        "certProvisionMode": "manual",
        "secretName": "webhook-server-cert",
        "serviceName": f"{CHART_FULLNAME}-webhook-service",
    }
    return {
        "apiVersion": "operator.config.dynamo.nvidia.com/v1alpha1",
        "kind": "OperatorConfiguration",
        "server": {"metrics": {"bindAddress": "0.0.0.0", "secure": True}, "webhook": webhook},
        "leaderElection": {"enabled": True, "id": "dynamo.nvidia.com", "namespace": "kube-system"},
        "orchestrators": {
            "kaiScheduler": {"enabled": False},
            # platform values: dynamo-operator.dynamo.groveTerminationDelay: 4h
            "grove": {"enabled": True, "terminationDelay": "4h"},
        },
        "infrastructure": {
            "natsAddress": f"nats://{CHART_RELEASE}-nats.{CHART_NAMESPACE}.svc.cluster.local:4222"
        },
        "rbac": {
            "plannerClusterRoleName": f"{CHART_FULLNAME}-planner",
            "dgdrProfilingClusterRoleName": f"{CHART_FULLNAME}-dgdr-profiling",
            "eppClusterRoleName": f"{CHART_FULLNAME}-epp",
        },
        "mpi": {"sshSecretName": "mpi-run-ssh-secret", "sshSecretNamespace": CHART_NAMESPACE},
    }


def release() -> list[dict[str, Any]]:
    """The release's manifests (built and rendered unless cached)."""
    text = (ensure(BUILD) / "release.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def built_source_facts() -> dict[str, list[str]]:
    """:func:`source_facts` of the source tree it was built from (rendered with the build)."""
    facts: dict[str, list[str]] = json.loads((ensure(BUILD) / "source-facts.json").read_text())
    return facts


@register
class Dynamo(Component):
    name: ClassVar[str] = "dynamo"
    summary: ClassVar[str] = f"Dynamo operator {APP_VERSION} ({COMMIT[:8]})"
    requires: ClassVar[tuple[str, ...]] = ("grove",)
    #: Its release's CRDs stand while it runs: v1alpha1 only, where the stand-ins
    #: serve v1alpha1 and v1beta1 (put back by ``plane.stop_component``).
    owns_crd_files: ClassVar[tuple[str, ...]] = (
        "nvidia.com_dynamographdeployments",
        "nvidia.com_dynamocomponentdeployments",
    )

    webhook_port = 0
    health_port = 0

    @classmethod
    def build(cls) -> None:
        ensure(BUILD)

    def start(self) -> None:
        began = self.began()
        docs = release()
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        self._make_room_for(crds)
        rbac = [d for d in docs if d["kind"] in _RELEASE_KINDS]
        for doc in rbac:
            if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == CLUSTER_ROLE:
                doc["rules"] = [*doc["rules"], *MISSING_RULES]
        # Its own namespace (kustomize's), and the chart's release namespace, where the
        # chart would install it: the OperatorConfiguration names it for the MPI SSH
        # Secret every multinode graph needs (`mpi.sshSecretNamespace`), and the
        # operator creates the Secret there, not the namespace.
        namespaces = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            for name in (NAMESPACE, CHART_NAMESPACE)
        ]
        self.plane.apply([*namespaces, *crds, *rbac, PLANNER_ROLE])
        self.plane.wait_established(d["metadata"]["name"] for d in crds)
        kubeconfig = self.run_as(NAMESPACE, SERVICE_ACCOUNT)
        serving = self.plane.issue_serving_cert("dynamo-webhook")  # tls.crt and tls.key
        self.webhook_port, self.health_port, metrics_port = free_ports(3)
        config = operator_configuration()
        config["leaderElection"]["enabled"] = False  # one replica, like the controller-manager
        config["server"]["webhook"].update(
            host="127.0.0.1", port=self.webhook_port, certDir=str(serving.cert_file.parent)
        )
        config["server"]["healthProbe"] = {"bindAddress": "127.0.0.1", "port": self.health_port}
        config["server"]["metrics"].update(bindAddress="127.0.0.1", port=metrics_port)
        path = self.work_dir / "config.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        env = child_env()
        # The chart's Deployment sets these from the downward API.
        env.update(POD_SERVICE_ACCOUNT=SERVICE_ACCOUNT, POD_NAMESPACE=NAMESPACE,
                   KUBERNETES_CLUSTER_DOMAIN="cluster.local")  # fmt: skip
        self.spawn(
            "dynamo-operator",
            [str(ensure(BUILD) / "bin" / "dynamo-operator"), f"--config={path}",
             f"--operator-version={APP_VERSION}", f"--kubeconfig={kubeconfig}"],
            env=env,
        )  # fmt: skip
        self.plane.apply(self.webhooks_on_loopback(webhook_configurations(), self.webhook_port))
        self.wait("/readyz", lambda: http_ok(self.health_port, "/readyz"))
        self.wait("its defaulting webhook (a server dry-run create)", self._webhook_defaults)
        self.wait("the graph and component controllers' workers", self.workers)
        self.ready_after(began)

    def _make_room_for(self, crds: list[dict[str, Any]]) -> None:
        """The API server refuses a CRD whose versions drop one of its
        ``status.storedVersions``: a stand-in (storage v1beta1) must go first."""
        for crd in crds:
            name = crd["metadata"]["name"]
            resp = self.plane.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            if not resp.ok:
                continue
            stored = set(resp.json().get("status", {}).get("storedVersions", []))
            if stored - {v["name"] for v in crd["spec"]["versions"]}:
                self.plane.delete_crd(name)

    def _webhook_defaults(self) -> bool:
        probe = {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": {"name": "aibom-dynamo-probe", "namespace": "default"},
            "spec": {"services": {"Frontend": {"componentType": "frontend"}}},
        }
        resp = self.plane.request(
            "POST",
            "/apis/nvidia.com/v1alpha1/namespaces/default/dynamographdeployments?dryRun=All",
            probe,
        )
        annotations = resp.json()["metadata"].get("annotations", {}) if resp.ok else {}
        return annotations.get("nvidia.com/dynamo-operator-origin-version") == APP_VERSION

    def workers(self) -> bool:
        """Its graph and component controllers logged ``Starting workers``."""
        return self.controllers_started() >= {"DynamoGraphDeployment", "DynamoComponentDeployment"}
