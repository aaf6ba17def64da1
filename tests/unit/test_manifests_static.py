"""The shipped manifests, checked without a cluster.

Security contexts, availability (replicas, PodDisruptionBudget, rollout,
preStop, probes), that the numbers which must agree do (ports, deadlines,
grace periods, Lease name), that the webhook's rules cover the kind registry,
and that each ClusterRole covers what its process reads. The least-privilege
side of RBAC and the API server's view are in
tests/integration/test_manifests.py.
"""

from __future__ import annotations

import posixpath

import pytest
import yaml

from aibom_core.kinds import default_registry
from tests.unit.manifest_docs import (
    ANNOTATOR,
    COMPONENTS,
    MANIFESTS,
    NAMESPACE,
    WEBHOOK,
    Doc,
    components,
    containers,
    expand_args,
    of_kind,
    only,
    parse_cli,
    resource_of,
    rules_by_resource,
    webhook_rule_resources,
)

DOCS = components()
DEPLOYMENTS = {d["metadata"]["name"]: d for d in of_kind(DOCS, "Deployment")}
REGISTRY = default_registry()
STAMPED = {resource_of(gk) for gk in REGISTRY.tracked | REGISTRY.walk_only}


def _pod_labels(dep: Doc) -> dict[str, str]:
    return dict(dep["spec"]["template"]["metadata"]["labels"])


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _container(dep: Doc) -> Doc:
    (c,) = containers(dep)
    return c


def _port(container: Doc, name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
    assert name in ports, f"container {container['name']} has no port named {name}"
    return int(ports[name])


def _pdb_for(dep: Doc) -> Doc:
    labels = _pod_labels(dep)
    pdbs = [
        p
        for p in of_kind(DOCS, "PodDisruptionBudget")
        if _selects(p["spec"]["selector"]["matchLabels"], labels)
    ]
    assert len(pdbs) == 1, f"{dep['metadata']['name']}: {len(pdbs)} PodDisruptionBudgets"
    return pdbs[0]


# -- what is there -----------------------------------------------------------


def test_every_manifest_file_is_composed() -> None:
    """A YAML file added beside the others but not listed would silently not ship."""
    for comp in COMPONENTS:
        kust = yaml.safe_load((MANIFESTS / comp / "kustomization.yaml").read_text())
        files = {p.name for p in (MANIFESTS / comp).glob("*.yaml")} - {"kustomization.yaml"}
        assert files == set(kust["resources"]), comp
    root = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert root["resources"] == list(COMPONENTS)


def test_one_namespace_separate_identities() -> None:
    ns = only(DOCS, "Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    namespaced = [d for d in DOCS if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {NAMESPACE}
    sas = {d["metadata"]["name"] for d in of_kind(DOCS, "ServiceAccount")}
    assert sas == {WEBHOOK, ANNOTATOR}
    for name, dep in DEPLOYMENTS.items():
        assert dep["spec"]["template"]["spec"]["serviceAccountName"] == name
    for binding in [*of_kind(DOCS, "ClusterRoleBinding"), *of_kind(DOCS, "RoleBinding")]:
        sa = binding["metadata"]["name"].removesuffix("-lease")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ], binding["metadata"]["name"]
    assert set(DEPLOYMENTS) == {WEBHOOK, ANNOTATOR}


# -- pod security ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_pod_security(name: str) -> None:
    spec = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    pod = spec.get("securityContext") or {}
    assert pod.get("runAsNonRoot") is True
    assert isinstance(pod.get("runAsUser"), int) and pod["runAsUser"] > 0
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(host)
    for c in containers(DEPLOYMENTS[name]):
        sc = c.get("securityContext") or {}
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert not sc.get("privileged"), c["name"]
        assert sc.get("capabilities") == {"drop": ["ALL"]}, c["name"]
        seccomp = sc.get("seccompProfile") or pod.get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}, c["name"]
        assert sc.get("runAsUser", pod["runAsUser"]) > 0
        assert c.get("resources", {}).get("requests"), f"{c['name']}: no resource requests"
        assert c.get("resources", {}).get("limits", {}).get("memory"), c["name"]


@pytest.mark.parametrize(
    "name",
    [
        WEBHOOK,
        ANNOTATOR,
    ],
)
def test_home_is_a_writable_volume(name: str) -> None:
    """The root filesystem is read-only and the image sets HOME=/tmp: /tmp must be a volume."""
    spec = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for c in containers(DEPLOYMENTS[name]):
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts") or []}
        assert "/tmp" in mounts, c["name"]
        assert not mounts["/tmp"].get("readOnly")
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


# -- the webhook -------------------------------------------------------------


def _webhook_args() -> tuple[Doc, list[str]]:
    c = _container(DEPLOYMENTS[WEBHOOK])
    return c, expand_args(c)


def test_webhook_availability() -> None:
    dep = DEPLOYMENTS[WEBHOOK]
    replicas = dep["spec"]["replicas"]
    assert replicas >= 2
    strategy = dep["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    assert strategy["rollingUpdate"]["maxSurge"] >= 1  # else a rollout could not progress
    pdb = _pdb_for(dep)["spec"]
    # Keeps one serving during a node drain, and lets the drain proceed.
    if "minAvailable" in pdb:
        assert 1 <= pdb["minAvailable"] < replicas
    else:
        assert 1 <= pdb["maxUnavailable"] < replicas


def test_webhook_drains_within_its_grace_period() -> None:
    dep = DEPLOYMENTS[WEBHOOK]
    c, argv = _webhook_args()
    args = parse_cli(argv)
    pre_stop = c["lifecycle"]["preStop"]
    assert pre_stop["sleep"]["seconds"] >= 3  # Endpoints removal must reach every API server
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop["sleep"]["seconds"] + args.shutdown_grace < grace


def test_webhook_probes_and_ports_line_up() -> None:
    c, argv = _webhook_args()
    args = parse_cli(argv)
    port = _port(c, "https")
    assert args.port == port
    # Readiness is gated on the certificate (and the API client) being loaded.
    ready = c["readinessProbe"]["httpGet"]
    assert (ready["path"], ready["scheme"]) == ("/readyz", "HTTPS")
    live = c["livenessProbe"]["httpGet"]
    assert (live["path"], live["scheme"]) == ("/healthz", "HTTPS")
    for probe in (ready, live):
        assert probe["port"] in ("https", port)

    svc = only(DOCS, "Service", WEBHOOK)
    assert _selects(svc["spec"]["selector"], _pod_labels(DEPLOYMENTS[WEBHOOK]))
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] in ("https", port)

    config = only(DOCS, "MutatingWebhookConfiguration")
    for hook in config["webhooks"]:
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["port"], ref["path"]) == (
            WEBHOOK,
            NAMESPACE,
            svc_port["port"],
            "/mutate",
        )
        # The caBundle comes from the overlay, cert-manager or a patch, never from here.
        assert "caBundle" not in hook["clientConfig"]
        # The walk gives up (and stamps Timeout) before the API server gives up on us.
        assert args.walk_deadline < hook["timeoutSeconds"]
        assert hook["failurePolicy"] == "Ignore"


def test_webhook_serves_the_mounted_secret() -> None:
    dep = DEPLOYMENTS[WEBHOOK]
    c, argv = _webhook_args()
    args = parse_cli(argv)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for path in (args.cert_file, args.key_file):
        mount = mounts[posixpath.dirname(path)]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        assert secret["secretName"] == f"{WEBHOOK}-tls"
        assert posixpath.basename(path) in ("tls.crt", "tls.key")


def test_network_policy_admits_only_the_webhook_port() -> None:
    c = _container(DEPLOYMENTS[WEBHOOK])
    labels = _pod_labels(DEPLOYMENTS[WEBHOOK])
    pols = list(of_kind(DOCS, "NetworkPolicy"))
    (pol,) = [p for p in pols if _selects(p["spec"]["podSelector"]["matchLabels"], labels)]
    spec = pol["spec"]
    assert "Ingress" in spec["policyTypes"]
    assert spec["ingress"], "an empty ingress list would refuse the API server too"
    for rule in spec["ingress"]:
        # Every rule names the port; no rule opens the whole Pod.
        assert rule.get("ports") == [{"protocol": "TCP", "port": _port(c, "https")}]


def test_network_policy_limits_the_webhooks_egress_to_the_api_and_dns() -> None:
    """Only the API server: what can be restricted is; the API server's address cannot be pinned."""
    labels = _pod_labels(DEPLOYMENTS[WEBHOOK])
    (pol,) = [
        p
        for p in of_kind(DOCS, "NetworkPolicy")
        if _selects(p["spec"]["podSelector"]["matchLabels"], labels)
    ]
    spec = pol["spec"]
    assert "Egress" in spec["policyTypes"]
    ports = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"]}
    assert ports == {("TCP", 443), ("TCP", 6443), ("UDP", 53), ("TCP", 53)}
    assert all(rule.get("ports") for rule in spec["egress"]), "no rule opens every port"


def test_webhook_rules_cover_the_registry() -> None:
    config = only(DOCS, "MutatingWebhookConfiguration")
    hooks = webhook_rule_resources(config)
    tracked = {resource_of(gk) for gk in REGISTRY.tracked}
    walk_only = {resource_of(gk) for gk in REGISTRY.walk_only}
    assert hooks["tracked.stamp.aibom.dev"] == tracked
    assert hooks["intermediates.stamp.aibom.dev"] == walk_only
    assert {("apps", "replicasets"), ("", "pods")} <= walk_only
    # Status writes of the built-in kinds whose status strategy keeps annotations
    # (a custom resource's status write changes nothing but its status).
    assert hooks["status.stamp.aibom.dev"] == {
        (g, f"{r}/status") for g, r in tracked | walk_only if g in ("", "apps", "batch")
    }
    for hook in config["webhooks"]:
        status = hook["name"] == "status.stamp.aibom.dev"
        for rule in hook["rules"]:
            assert set(rule["operations"]) == ({"UPDATE"} if status else {"CREATE", "UPDATE"})
            assert rule["scope"] == "Namespaced"
            assert all(("/" in r) is status for r in rule["resources"]), rule
        selector = hook["namespaceSelector"]["matchExpressions"]
        # Never its own namespace: its own Pods must be admitted while it is down.
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", NAMESPACE],
        } in selector


def test_webhook_role_reads_every_kind_it_walks() -> None:
    granted = rules_by_resource(only(DOCS, "ClusterRole", WEBHOOK))
    for res in STAMPED:
        assert "get" in granted.get(res, set()), f"webhook cannot GET {res}"


# -- the annotator -----------------------------------------------------------


def test_annotator_is_two_replicas_with_leader_election() -> None:
    dep = DEPLOYMENTS[ANNOTATOR]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"].get("strategy", {}).get("type", "RollingUpdate") == "RollingUpdate"
    c = _container(dep)
    args = parse_cli(expand_args(c))
    assert args.command == "annotator" and args.leader_elect is True
    # Each replica its own identity; the Lease in the Pod's namespace, the one
    # the Role lets it update.
    assert args.identity == "fieldRef:metadata.name"
    assert args.lease_namespace == "fieldRef:metadata.namespace"
    role = only(DOCS, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [args.lease_name] == [n for r in named for n in r["resourceNames"]]
    pdb = _pdb_for(dep)["spec"]
    assert pdb.get("maxUnavailable") == 1 or pdb.get("minAvailable") == 1


def test_annotator_probes_and_ports_line_up() -> None:
    c = _container(DEPLOYMENTS[ANNOTATOR])
    args = parse_cli(expand_args(c))
    assert args.metrics_port == _port(c, "metrics")
    assert args.health_port == _port(c, "health")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and get["port"] in ("health", args.health_port)
    annotations = DEPLOYMENTS[ANNOTATOR]["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in annotations:
        assert int(annotations["prometheus.io/port"]) == args.metrics_port


def test_annotator_role_reads_what_it_watches() -> None:
    granted = rules_by_resource(only(DOCS, "ClusterRole", ANNOTATOR))
    for res in {*STAMPED, ("", "namespaces"), ("", "configmaps")}:
        assert {"list", "watch"} <= granted.get(res, set()), f"annotator cannot list+watch {res}"
    # Stamp repair: patch on every kind the webhook stamps (through the main
    # resource: the webhook's status rules stamp the same kinds).
    stamped_by_webhook = {
        (g, r)
        for resources in webhook_rule_resources(only(DOCS, "MutatingWebhookConfiguration")).values()
        for g, r in resources
        if "/" not in r
    }
    for res in stamped_by_webhook:
        assert "patch" in granted.get(res, set()), f"annotator cannot repair stamps on {res}"
