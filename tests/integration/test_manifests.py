"""manifests/ builds with the real kustomize and the real API server accepts it.

- The self-signed root (`manifests/`) builds once `aibom-rollup certs` has
  filled manifests/tls/ (done in a copy of the tree here, exactly as the
  kustomization's comment tells a user), carries the Secret and the CA in both
  webhooks' caBundle, and passes a server-side dry-run apply against the real
  kube-apiserver (schema, CEL matchConditions, RBAC objects, PDB, ...).
- The cert-manager overlay builds; its Certificate names the Service and the
  Secret the Deployment mounts, the inject-ca-from annotation names it; all
  but the cert-manager kinds (their CRDs are not installed) pass a dry-run.
- RBAC, as built: least privilege, parsed; every resource named in a rule or
  a webhook rule is one the API server serves (a misspelt plural would grant
  nothing and match nothing, silently).
- The static view the unit tests check is this build.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from aibom_core.kinds import default_registry
from certs.pki import service_dns_names
from tests.controlplane import ControlPlane, Kubectl, child_env, kubectl_path
from tests.unit.manifest_docs import (
    ANNOTATOR,
    MANIFESTS,
    NAMESPACE,
    WEBHOOK,
    Doc,
    components,
    load_yaml_docs,
    of_kind,
    only,
    resource_of,
    rules_by_resource,
    webhook_rule_resources,
)

pytestmark = pytest.mark.integration

CERT_MANAGER = MANIFESTS / "overlays" / "cert-manager"
READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete", "deletecollection"}
# Verbs nobody here needs, whose grant is a privilege escalation.
DANGEROUS = {"escalate", "bind", "impersonate", "approve", "sign", "*"}


def kustomize(directory: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl kustomize DIR` with the kustomize built into the release's kubectl."""
    proc = subprocess.run(
        [str(kubectl_path()), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    if check:
        assert proc.returncode == 0, f"kubectl kustomize {directory}: {proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of manifests/ with tls/ filled by `aibom-rollup certs`, as a user does."""
    root = tmp_path_factory.mktemp("manifests") / "manifests"
    shutil.copytree(MANIFESTS, root, ignore=shutil.ignore_patterns("tls"))
    certs = ["certs", "--out-dir", str(root / "tls"), "--no-config"]
    proc = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", *certs],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture(scope="module")
def built(self_signed: Path) -> list[Doc]:
    return load_yaml_docs(kustomize(self_signed).stdout)


@pytest.fixture(scope="module")
def cert_manager_built(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    """The overlay in a copy of manifests/, with the provenance key its comment says to write."""
    root = tmp_path_factory.mktemp("cm") / "manifests"
    shutil.copytree(MANIFESTS, root, ignore=shutil.ignore_patterns("tls", "provenance.key"))
    overlay = root / "overlays" / "cert-manager"
    (overlay / "provenance.key").write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    return load_yaml_docs(kustomize(overlay).stdout)


@pytest.fixture(scope="module")
def system_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """aibom-system exists: a dry-run creates no Namespace for the objects in it."""
    resp = control_plane.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    assert resp.status in (201, 409), resp.body
    yield NAMESPACE
    if resp.status == 201:
        control_plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")


def _dry_run(kubectl: Kubectl, docs: list[Doc]) -> str:
    proc = kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=aibom-rollup-test",
        "-f",
        "-",
        input=yaml.safe_dump_all(docs),
        check=False,
    )
    assert proc.returncode == 0, f"server-side dry-run refused the manifests:\n{proc.stderr}"
    return proc.stdout


def _canonical(docs: list[Doc]) -> set[str]:
    return {json.dumps(d, sort_keys=True) for d in docs}


# -- the self-signed root ----------------------------------------------------


def test_root_needs_the_certs_folder_and_says_so(tmp_path: Path) -> None:
    """A fresh checkout: the build fails on the missing folder the comment names."""
    root = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, root, ignore=shutil.ignore_patterns("tls"))
    proc = kustomize(root, check=False)
    assert proc.returncode != 0
    assert "tls/tls.crt" in proc.stderr
    assert (
        "aibom-rollup certs --out-dir manifests/tls"
        in (MANIFESTS / "kustomization.yaml").read_text()
    )


def test_root_carries_the_certs_files(self_signed: Path, built: list[Doc]) -> None:
    tls = self_signed / "tls"
    secret = only(built, "Secret", f"{WEBHOOK}-tls")
    assert secret["metadata"] == {
        "name": f"{WEBHOOK}-tls",
        "namespace": NAMESPACE,
        "labels": {
            "app.kubernetes.io/name": "aibom-rollup",
            "app.kubernetes.io/component": "webhook",
        },
    }
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {
        "tls.crt": (tls / "tls.crt").read_bytes(),
        "tls.key": (tls / "tls.key").read_bytes(),
        "ca.crt": (tls / "ca.crt").read_bytes(),
    }
    # The CA's private key never goes into the cluster.
    assert b"PRIVATE KEY" not in data["ca.crt"]
    # The edge-proof key (docs/provenance-guard.md): certs wrote it, both Deployments mount it.
    key_secret = only(built, "Secret", "aibom-rollup-provenance-key")
    assert (
        base64.b64decode(key_secret["data"]["provenance.key"])
        == (tls / "provenance.key").read_bytes()
    )
    for name in (WEBHOOK, "aibom-rollup-annotator"):
        volumes = only(built, "Deployment", name)["spec"]["template"]["spec"]["volumes"]
        assert {"name": "provenance", "secret": {"secretName": "aibom-rollup-provenance-key"}} in (
            volumes
        ), name
    # The Deployment mounts that Secret by its fixed name (no hash suffix).
    dep = only(built, "Deployment", WEBHOOK)
    volumes = dep["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": secret["metadata"]["name"]}} in volumes
    config = only(built, "MutatingWebhookConfiguration")
    assert len(config["webhooks"]) == 3  # tracked kinds, intermediates, status writes
    for hook in config["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == data["ca.crt"]


def test_static_view_is_the_build(built: list[Doc]) -> None:
    """What tests/unit/test_manifests_static.py checks is what ships."""
    shipped = []
    for doc in copy.deepcopy(built):
        if doc["kind"] == "Secret":
            continue
        if doc["kind"] == "MutatingWebhookConfiguration":
            for hook in doc["webhooks"]:
                del hook["clientConfig"]["caBundle"]
        shipped.append(doc)
    # Compared as data: kustomize reorders keys and documents, never values.
    assert _canonical(shipped) == _canonical(components())


def test_root_passes_a_server_side_dry_run(
    self_signed: Path, kubectl: Kubectl, system_namespace: str
) -> None:
    # Through -k, as a user applies it.
    proc = kubectl(
        "apply", "--server-side", "--dry-run=server", "-k", str(self_signed), check=False
    )
    assert proc.returncode == 0, f"server-side dry-run refused manifests/:\n{proc.stderr}"
    applied = {line.split(" ")[0] for line in proc.stdout.splitlines()}
    for name in (
        f"deployment.apps/{WEBHOOK}",
        f"deployment.apps/{ANNOTATOR}",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/aibom-rollup",
        f"networkpolicy.networking.k8s.io/{WEBHOOK}",
        f"poddisruptionbudget.policy/{WEBHOOK}",
        f"secret/{WEBHOOK}-tls",
        # The provenance guard (docs/provenance-guard.md): the API server compiled its CEL.
        "validatingadmissionpolicy.admissionregistration.k8s.io/aibom-rollup-provenance",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/aibom-rollup-provenance",
    ):
        assert name in applied, proc.stdout


# -- the cert-manager overlay -------------------------------------------------


def test_cert_manager_overlay_wires_the_certificate(cert_manager_built: list[Doc]) -> None:
    docs = cert_manager_built
    # cert-manager writes the TLS Secret, not kustomize; kustomize only makes the
    # provenance key's (not a certificate).
    secrets = [d["metadata"]["name"] for d in of_kind(docs, "Secret")]
    assert secrets == ["aibom-rollup-provenance-key"], secrets
    svc = only(docs, "Service", WEBHOOK)
    ns = svc["metadata"]["namespace"]
    certs = {c["metadata"]["name"]: c for c in of_kind(docs, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in of_kind(docs, "Issuer")}
    serving = [c for c in certs.values() if "server auth" in c["spec"].get("usages", ())]
    assert len(serving) == 1
    cert = serving[0]
    spec = cert["spec"]
    # The names the API server dials for the Service, as `aibom-rollup certs` issues them.
    assert spec["dnsNames"] == service_dns_names(svc["metadata"]["name"], ns)
    assert f"{svc['metadata']['name']}.{ns}.svc" in spec["dnsNames"]
    assert "server auth" in spec["usages"]
    # The Secret the Deployment mounts.
    dep = only(docs, "Deployment", WEBHOOK)
    mounted = {
        v["secret"]["secretName"]
        for v in dep["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    assert mounted == {spec["secretName"], "aibom-rollup-provenance-key"}
    # Issued by a CA Issuer whose CA is a Certificate from a self-signed Issuer,
    # so that renewals of the serving certificate keep the caBundle.
    ca_issuer = issuers[spec["issuerRef"]["name"]]
    assert spec["issuerRef"]["kind"] == "Issuer"
    ca_cert = next(
        c
        for c in certs.values()
        if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    )
    assert ca_cert["spec"]["isCA"] is True
    assert issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}
    for obj in [*certs.values(), *issuers.values()]:
        assert obj["metadata"]["namespace"] == ns
    # The CA injector fills the caBundle of both webhooks from that Certificate.
    config = only(docs, "MutatingWebhookConfiguration")
    annotations = config["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{ns}/{cert['metadata']['name']}"
    for hook in config["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]
        assert hook["clientConfig"]["service"]["name"] == svc["metadata"]["name"]
        assert hook["clientConfig"]["service"]["namespace"] == ns


def test_cert_manager_overlay_answers_only_the_api_servers_certificate(
    cert_manager_built: list[Doc],
) -> None:
    """Only the API server: the webhook requires a client certificate of the serving CA, and the
    overlay issues the API server's one from that same CA."""
    dep = only(cert_manager_built, "Deployment", WEBHOOK)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-ca-file=/tls/ca.crt" in args
    certs = {c["metadata"]["name"]: c for c in of_kind(cert_manager_built, "Certificate")}
    client = certs["aibom-rollup-apiserver-client"]["spec"]
    serving = certs[WEBHOOK]["spec"]
    assert "client auth" in client["usages"] and "server auth" not in client["usages"]
    assert client["issuerRef"] == serving["issuerRef"]  # the CA in /tls/ca.crt


def test_cert_manager_overlay_is_the_root_but_the_certificate(
    built: list[Doc], cert_manager_built: list[Doc]
) -> None:
    def strip(docs: list[Doc]) -> list[Doc]:
        out = []
        for doc in copy.deepcopy(docs):
            if doc["kind"] in ("Secret", "Certificate", "Issuer"):
                continue
            if doc["kind"] == "MutatingWebhookConfiguration":
                doc["metadata"].pop("annotations", None)
                for hook in doc["webhooks"]:
                    hook["clientConfig"].pop("caBundle", None)
            if doc["kind"] == "Deployment":
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    c["args"] = [
                        a for a in c.get("args", []) if a != "--client-ca-file=/tls/ca.crt"
                    ]
            out.append(doc)
        return out

    assert _canonical(strip(cert_manager_built)) == _canonical(strip(built))


def test_cert_manager_overlay_passes_a_dry_run_but_for_cert_manager_kinds(
    cert_manager_built: list[Doc], kubectl: Kubectl, system_namespace: str
) -> None:
    plain = [d for d in cert_manager_built if not d["apiVersion"].startswith("cert-manager.io/")]
    # the Issuers and Certificates: 2 issuers, the CA, the serving and client
    # certificates, and the document-signing key (components/signing-cert-manager)
    assert len(plain) == len(cert_manager_built) - 6
    _dry_run(kubectl, plain)


# -- RBAC ---------------------------------------------------------------------


def _identity_roles(docs: list[Doc], sa: str) -> list[Doc]:
    """Every (Cluster)Role bound to the ServiceAccount, through any binding in the build."""
    roles = []
    for binding in [*of_kind(docs, "ClusterRoleBinding"), *of_kind(docs, "RoleBinding")]:
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NAMESPACE
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        roles.append(only(docs, ref["kind"], ref["name"]))
    return roles


def test_rbac_is_least_privilege(built: list[Doc]) -> None:
    registry = default_registry()
    stamped = {resource_of(gk) for gk in registry.tracked | registry.walk_only}
    for role in [*of_kind(built, "ClusterRole"), *of_kind(built, "Role")]:
        name = role["metadata"]["name"]
        assert not role.get("aggregationRule"), name
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), f"{name}: wildcard {key}"
            assert not rule.get("nonResourceURLs"), f"{name}: nonResourceURLs"
            assert not set(rule["verbs"]) & DANGEROUS, f"{name}: {rule['verbs']}"
            assert not any("/" in r for r in rule["resources"]), f"{name}: subresources"
            assert ("", "secrets") not in {
                (g, r) for g in rule["apiGroups"] for r in rule["resources"]
            }

    # The webhook reads (get; list/watch for its owner index) and
    # nothing else; provenance adds SubjectAccessReviews (create: they read
    # nothing). It does not read whether a namespace is guarded: that proves
    # no edge (docs/provenance-guard.md).
    provenance = {
        ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
    }
    webhook_roles = _identity_roles(built, WEBHOOK)
    assert [r["kind"] for r in webhook_roles] == ["ClusterRole"]
    for res, verbs in rules_by_resource(webhook_roles[0]).items():
        if res in provenance:
            assert verbs == provenance[res], f"webhook: {sorted(verbs)} on {res}"
            continue
        assert verbs <= READ, f"webhook: {sorted(verbs)} on {res}"
        assert res in stamped, f"webhook: reads {res}, which it never walks"

    # The annotator: read what it watches; writes only where its job is.
    allowed_writes: dict[tuple[str, str], set[str]] = {
        ("", "configmaps"): {"create", "patch", "update", "delete"},
        ("events.k8s.io", "events"): {"create", "patch"},
        ("", "events"): {"create", "patch"},
        ("coordination.k8s.io", "leases"): {"create", "update", "patch"},
        **{res: {"patch"} for res in stamped},
    }
    annotator_roles = _identity_roles(built, ANNOTATOR)
    assert sorted(r["kind"] for r in annotator_roles) == ["ClusterRole", "Role"]
    for role in annotator_roles:
        for res, verbs in rules_by_resource(role).items():
            writes = verbs & WRITE
            assert writes <= allowed_writes.get(res, set()), f"annotator: {sorted(writes)} on {res}"
            assert verbs <= READ | WRITE, f"annotator: {sorted(verbs)} on {res}"
            if res == ("coordination.k8s.io", "leases"):
                # Leases only in its own namespace; update only its own Lease.
                assert role["kind"] == "Role" and role["metadata"]["namespace"] == NAMESPACE
    lease = only(annotator_roles, "Role")
    for rule in lease["rules"]:
        if set(rule["verbs"]) & {"update", "patch", "delete"}:
            assert rule.get("resourceNames") == [ANNOTATOR], rule


def test_every_named_resource_is_served(built: list[Doc], kubectl: Kubectl) -> None:
    """A misspelt plural grants nothing and matches nothing, silently: ask the API server."""
    out = kubectl("api-resources", "-o", "name").stdout.split()
    served = {(name.partition(".")[2], name.partition(".")[0]) for name in out}
    named: set[tuple[str, str]] = set()
    for role in [*of_kind(built, "ClusterRole"), *of_kind(built, "Role")]:
        named |= set(rules_by_resource(role))
    for resources in webhook_rule_resources(only(built, "MutatingWebhookConfiguration")).values():
        # A status rule's resource: its subresource is served with it.
        named |= {(g, r.partition("/")[0]) for g, r in resources}
    # The provenance guard's matched resources (their /status subresources too).
    guard = only(built, "ValidatingAdmissionPolicy", "aibom-rollup-provenance")
    for rule in guard["spec"]["matchConstraints"]["resourceRules"]:
        named |= {(g, r.partition("/")[0]) for g in rule["apiGroups"] for r in rule["resources"]}
    # Knative's plurals (KServe Serverless, walk-only) are checked by name in
    # tests/unit/test_kinds.py: no Knative CRD is vendored to serve them here.
    missing = {(g, r) for g, r in named - served if g != "serving.knative.dev"}
    assert not missing, f"not served by the API server (with the CRDs installed): {sorted(missing)}"
