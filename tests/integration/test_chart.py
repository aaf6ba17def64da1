"""The Helm chart: generated from the kustomize base, linted, rendered, dry-run on the real
API server; the alert rules checked and unit-tested with promtool.

helm (helm.sh/helm/v4) and promtool (github.com/prometheus/prometheus) are
built from their Go modules (tests/controlplane/gotools.py), like the control
plane. What is checked:

- drift: the committed chart is exactly what `python -m tools.chart` makes
  from today's `manifests/`;
- a new object in the base (a policy, a Secret made from a file, a Role)
  flows into the chart unchanged;
- `helm template` with the default values renders the objects of
  `kubectl kustomize manifests`, field for field, but for what the chart
  templates (Helm's labels, the generated TLS material, the Namespace that
  Helm's `--create-namespace` makes);
- `helm lint`, and a server-side dry-run (`kubectl apply --dry-run=server`)
  of the default render and of `ci/all-on-values.yaml` in each certificate
  mode, in a release namespace that is not the base's;
- the certificate modes: `generate` gives a serving certificate for the
  Service that verifies against the caBundle; `provided` carries the files of
  `aibom-rollup certs`;
- `promtool check rules` and `promtool test rules` on the alert rules.

The ServiceMonitor, PrometheusRule, Certificate and Issuer kinds are served
by STAND-IN CRDs (tests/integration/chart_crds/: the right group, version,
names and scope, but a schema that keeps every field): the upstream CRDs are
not vendored in this repository, so the dry-run proves that those objects
reach a served kind in the right namespace, not that their fields are valid.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from tests.controlplane import ControlPlane, Kubectl, child_env, kubectl_path
from tests.controlplane.gotools import ensure_tool
from tools import chart

pytestmark = [pytest.mark.integration, pytest.mark.gotools("helm", "promtool")]

Doc = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "aibom-rollup"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
RULES = CHART / "rules" / "aibom-rollup.rules.yaml"
RULE_TESTS = REPO / "tests" / "prometheus" / "aibom-rollup.rules.test.yaml"
STANDIN_CRDS = sorted((Path(__file__).parent / "chart_crds").glob("*.yaml"))
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    yield Helm(ensure_tool("helm"), tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_tool("promtool")


class Helm:
    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = child_env()
        for var in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
            self.env[var] = str(home / var.lower())
        self.env.pop("KUBECONFIG", None)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stderr}{proc.stdout}"
        return proc

    def template(
        self,
        *,
        chart_dir: Path = CHART,
        namespace: str = "aibom-system",
        values: Sequence[Path] = (),
        sets: Sequence[str] = (),
        set_files: Sequence[str] = (),
    ) -> tuple[str, list[Doc]]:
        args = ["template", "aibom-rollup", str(chart_dir), "--namespace", namespace]
        for v in values:
            args += ["-f", str(v)]
        for s in sets:
            args += ["--set", s]
        for s in set_files:
            args += ["--set-file", s]
        out = self.run(*args).stdout
        return out, [d for d in yaml.safe_load_all(out) if d]


def _by_id(docs: list[Doc]) -> dict[str, Doc]:
    out = {chart.ident(d): d for d in docs}
    assert len(out) == len(docs), "two objects with the same kind and name"
    return out


def _dry_run(kubectl: Kubectl, manifest: str) -> str:
    proc = kubectl("apply", "--dry-run=server", "-f", "-", input=manifest, check=False)
    assert proc.returncode == 0, f"server-side dry-run refused:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def release_namespace(kubectl: Kubectl) -> Iterator[str]:
    """A namespace that is not the base's: the chart must not hard-code aibom-system."""
    name = f"aibom-chart-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def standin_crds(control_plane: ControlPlane) -> None:
    for path in STANDIN_CRDS:
        control_plane.install_crd(path)


# --------------------------------------------------------------------------- generation


def test_the_committed_chart_is_a_fresh_generation() -> None:
    problems = chart.diff(chart.generate(kubectl_path()))
    assert not problems, (
        "the chart drifted from manifests/: run `.venv/bin/python -m tools.chart`\n"
        + "\n".join(problems[:80])
    )


def _chart_from(files: dict[str, str], dest: Path) -> Path:
    """A chart directory: the hand-written files of CHART plus generated `files`."""
    shutil.copytree(CHART, dest, ignore=shutil.ignore_patterns("generated"))
    prefix = str(CHART.relative_to(REPO)) + "/"
    for rel, content in files.items():
        if rel.startswith(prefix):
            path = dest / rel.removeprefix(prefix)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return dest


EXTRA_POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: aibom-rollup-test-guard
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [deployments]
  validations:
    - expression: >-
        !has(object.metadata.annotations)
        || !('aibom.dev/rollup' in object.metadata.annotations)
        || request.userInfo.username == 'system:serviceaccount:aibom-system:aibom-rollup-annotator'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: aibom-rollup-test-guard
spec:
  policyName: aibom-rollup-test-guard
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {aibom.dev/enabled: "true"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: aibom-rollup-test-extra
  namespace: aibom-system
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: ["{{ not-a-template }}"]
    verbs: [get]
"""


def test_new_objects_of_the_base_flow_into_the_chart(tmp_path: Path, helm: Helm) -> None:
    base = tmp_path / "manifests"
    shutil.copytree(chart.MANIFESTS, base, ignore=shutil.ignore_patterns("tls"))
    (base / "extra").mkdir()
    (base / "extra" / "policy.yaml").write_text(EXTRA_POLICY)
    (base / "extra" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [policy.yaml]\n"
    )
    kfile = base / "kustomization.yaml"
    k = yaml.safe_load(kfile.read_text())
    k["resources"].append("extra")
    k["secretGenerator"].append(
        {
            "name": "aibom-rollup-test-key",
            "namespace": "aibom-system",
            "files": ["test.key=tls/test.key"],
            "options": {"disableNameSuffixHash": True},
        }
    )
    kfile.write_text(yaml.safe_dump(k, sort_keys=False))

    files = chart.generate(kubectl_path(), base)
    generated = [p for p in files if "/generated/" in p]
    for name in (
        "validatingadmissionpolicy-aibom-rollup-test-guard.yaml",
        "validatingadmissionpolicybinding-aibom-rollup-test-guard.yaml",
        "role-aibom-rollup-test-extra.yaml",
        "secret-aibom-rollup-test-key.yaml",
    ):
        assert any(p.endswith("/" + name) for p in generated), name
    values = yaml.safe_load(files[str(CHART.relative_to(REPO) / "values.yaml")])
    assert values["admissionPolicies"]["aibom-rollup-test-guard"] is True

    chart_dir = _chart_from(files, tmp_path / "chart")
    built, _ = chart.build_base(kubectl_path(), base)
    want = _by_id(built)
    _, docs = helm.template(
        chart_dir=chart_dir, sets=["generatedSecrets.aibom-rollup-test-key.test\\.key=s3cret"]
    )
    got = _by_id(docs)
    for key in (
        "ValidatingAdmissionPolicy/aibom-rollup-test-guard",
        "Role/aibom-rollup-test-extra",
    ):
        assert _strip_helm_labels(got[key]) == _strip_helm_labels(want[key]), key
    binding = got["ValidatingAdmissionPolicyBinding/aibom-rollup-test-guard"]
    assert (
        binding["spec"] == want["ValidatingAdmissionPolicyBinding/aibom-rollup-test-guard"]["spec"]
    )
    secret = got["Secret/aibom-rollup-test-key"]
    assert base64.b64decode(secret["data"]["test.key"]) == b"s3cret"
    # Without its data the render fails and says which value to set.
    proc = helm.run("template", "x", str(chart_dir), check=False)
    assert proc.returncode != 0
    assert "generatedSecrets: set the data of Secret aibom-rollup-test-key" in proc.stderr
    # The policy is templated like the rest: off with one value, prefix followed.
    _, docs = helm.template(
        chart_dir=chart_dir,
        sets=[
            "admissionPolicies.aibom-rollup-test-guard=false",
            "generatedSecrets.aibom-rollup-test-key.test\\.key=x",
        ],
    )
    assert "ValidatingAdmissionPolicy/aibom-rollup-test-guard" not in _by_id(docs)
    assert "ValidatingAdmissionPolicyBinding/aibom-rollup-test-guard" not in _by_id(docs)
    _, docs = helm.template(
        chart_dir=chart_dir,
        namespace="platform",
        sets=["annotationPrefix=ex.io/", "generatedSecrets.aibom-rollup-test-key.test\\.key=x"],
    )
    expr = _by_id(docs)["ValidatingAdmissionPolicy/aibom-rollup-test-guard"]["spec"]["validations"][
        0
    ]["expression"]
    assert "'ex.io/rollup' in" in expr
    assert "system:serviceaccount:platform:aibom-rollup-annotator" in expr


# --------------------------------------------------------------------------- rendering


def _strip_helm_labels(doc: Doc) -> Doc:
    doc = copy.deepcopy(doc)
    labels = doc["metadata"].get("labels") or {}
    for k in HELM_LABELS:
        labels.pop(k, None)
    if not labels:  # the chart adds Helm's labels to objects that had none
        doc["metadata"].pop("labels", None)
    return doc


def _is_placeholder(b64: str) -> bool:
    return base64.b64decode(b64).startswith(chart.PLACEHOLDER.encode())


def test_default_render_is_the_kustomize_base(helm: Helm) -> None:
    built, _ = chart.build_base(kubectl_path())
    base = _by_id(built)
    _, docs = helm.template()
    got = _by_id(docs)
    assert set(got) == set(base) - {"Namespace/aibom-system"}
    for key, doc in got.items():
        assert set(doc["metadata"]["labels"]) >= HELM_LABELS, key
    tls = got["Secret/aibom-rollup-webhook-tls"]
    bundles = {
        w["clientConfig"].pop("caBundle")
        for w in got["MutatingWebhookConfiguration/aibom-rollup"]["webhooks"]
    }
    assert bundles == {tls["data"]["ca.crt"]}
    for w in base["MutatingWebhookConfiguration/aibom-rollup"]["webhooks"]:
        w["clientConfig"].pop("caBundle")
    # Secrets the base makes from files (placeholders here) the chart makes
    # itself: same keys, its own data.
    for key, doc in base.items():
        if doc["kind"] != "Secret":
            continue
        data = doc.get("data") or {}
        made = {k for k, v in data.items() if _is_placeholder(v)}
        if made:
            assert set(got[key]["data"]) == set(data), key
            for k in made:
                assert got[key]["data"][k], f"{key}: {k} is empty"
                data.pop(k)
                got[key]["data"].pop(k)
    for key, doc in got.items():
        assert _strip_helm_labels(doc) == base[key], f"{key} differs from the base"


def _verify(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )


def test_generated_certificate_serves_the_service_under_the_ca_bundle(helm: Helm) -> None:
    _, docs = helm.template(namespace="platform")
    got = _by_id(docs)
    data = got["Secret/aibom-rollup-webhook-tls"]["data"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    _verify(cert, ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "aibom-rollup-webhook.platform.svc" in sans.get_values_for_type(x509.DNSName)
    for w in got["MutatingWebhookConfiguration/aibom-rollup"]["webhooks"]:
        assert w["clientConfig"]["caBundle"] == data["ca.crt"]
        assert w["clientConfig"]["service"]["namespace"] == "platform"


def test_provided_certificates_are_the_files_of_aibom_rollup_certs(
    tmp_path: Path, helm: Helm
) -> None:
    out = tmp_path / "tls"
    subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "certs", "--out-dir", str(out), "--no-config"],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    _, docs = helm.template(
        sets=["certs.mode=provided"],
        set_files=[
            f"certs.provided.caCrt={out / 'ca.crt'}",
            f"certs.provided.tlsCrt={out / 'tls.crt'}",
            f"certs.provided.tlsKey={out / 'tls.key'}",
        ],
    )
    got = _by_id(docs)
    data = got["Secret/aibom-rollup-webhook-tls"]["data"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert base64.b64decode(data[key]) == (out / key).read_bytes(), key
    for w in got["MutatingWebhookConfiguration/aibom-rollup"]["webhooks"]:
        assert base64.b64decode(w["clientConfig"]["caBundle"]) == (out / "ca.crt").read_bytes()
    proc = helm.run("template", "x", str(CHART), "--set", "certs.mode=provided", check=False)
    assert proc.returncode != 0 and "certs.provided.caCrt" in proc.stderr


def test_all_on_values_render_every_option(helm: Helm) -> None:
    _, docs = helm.template(values=[ALL_ON], namespace="platform")
    got = _by_id(docs)
    for key in (
        "Namespace/platform",
        "Issuer/aibom-rollup-selfsigned",
        "Certificate/aibom-rollup-webhook",
        "ServiceMonitor/aibom-rollup-webhook",
        "ServiceMonitor/aibom-rollup-annotator",
        "Service/aibom-rollup-annotator-metrics",
        "PrometheusRule/aibom-rollup",
        "ConfigMap/aibom-rollup-dashboard",
        "ConfigMap/aibom-rollup-kinds",
    ):
        assert key in got, key
    assert "Secret/aibom-rollup-webhook-tls" not in got  # cert-manager writes it
    mwc = got["MutatingWebhookConfiguration/aibom-rollup"]
    assert mwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "platform/aibom-rollup-webhook"
    }
    for w in mwc["webhooks"]:
        assert "caBundle" not in w["clientConfig"]
        assert w["namespaceSelector"]["matchExpressions"][0] == {
            "key": "example.com/aibom",
            "operator": "In",
            "values": ["on"],
        }
        assert "example.com/rollup" in w["matchConditions"][0]["expression"]
        assert "aibom.dev/" not in w["matchConditions"][0]["expression"]
        # Extra rules where the values give some (a custom resource's status write
        # changes nothing but its status: the status webhook gets none).
        extra = yaml.safe_load(ALL_ON.read_text())["mutatingWebhook"]["extraRules"]
        if extra.get(w["name"].split(".", 1)[0]):
            assert w["rules"][-1]["apiGroups"] == ["example.com"]
    for component in ("webhook", "annotator"):
        dep = got[f"Deployment/aibom-rollup-{component}"]
        assert dep["spec"]["replicas"] == 3
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["image"] == "registry.example.com/aibom-rollup:0.1.0-test"
        assert c["imagePullPolicy"] == "IfNotPresent"
        assert "--annotation-prefix=example.com/" in c["args"]
        assert "--kinds=/etc/aibom-rollup/kinds.yaml" in c["args"]
        assert {"name": "aibom-rollup-kinds", "configMap": {"name": "aibom-rollup-kinds"}} in pod[
            "volumes"
        ]
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert pod["priorityClassName"] == "system-cluster-critical"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        role = got[f"ClusterRole/aibom-rollup-{component}"]
        assert role["rules"][-1]["apiGroups"] == ["example.com"]
    annotator_args = got["Deployment/aibom-rollup-annotator"]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--namespace-label=example.com/aibom=on" in annotator_args
    # The audit trail's export: the registry, its credentials Secret and CA, mounted.
    assert [a for a in annotator_args if a.startswith("--export-")] == [
        "--export-registry=registry.example.com:5000/aibom",
        "--export-registry-credentials=/etc/aibom-rollup/export/.dockerconfigjson",
        "--export-ca-file=/etc/aibom-rollup/export/ca.crt",
    ]
    annotator_pod = got["Deployment/aibom-rollup-annotator"]["spec"]["template"]["spec"]
    assert {
        "name": "aibom-rollup-export-registry",
        "secret": {"secretName": "platform-registry-push", "defaultMode": 0o440},
    } in annotator_pod["volumes"]
    assert {
        "name": "aibom-rollup-export-registry",
        "mountPath": "/etc/aibom-rollup/export",
        "readOnly": True,
    } in annotator_pod["containers"][0]["volumeMounts"]
    kinds = yaml.safe_load(got["ConfigMap/aibom-rollup-kinds"]["data"]["kinds.yaml"])
    assert kinds["tracked"] == [{"group": "example.com", "kind": "InferenceGraph"}]
    rule = got["PrometheusRule/aibom-rollup"]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert got["ConfigMap/aibom-rollup-dashboard"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert got["ConfigMap/aibom-rollup-dashboard"]["data"]["aibom-rollup.json"] == (
        CHART / "dashboards" / "aibom-rollup.json"
    ).read_text().rstrip("\n")
    sm = got["ServiceMonitor/aibom-rollup-webhook"]["spec"]["endpoints"][0]
    assert sm["tlsConfig"]["serverName"] == "aibom-rollup-webhook.platform.svc"


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["default", "all-on"])
def test_helm_lint(helm: Helm, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    proc = helm.run(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


# --------------------------------------------------------------------------- the API server


def test_default_render_passes_a_server_side_dry_run(
    helm: Helm, kubectl: Kubectl, release_namespace: str
) -> None:
    manifest, docs = helm.template(namespace=release_namespace)
    out = _dry_run(kubectl, manifest)
    assert out.count("(server dry run)") == len(docs)


@pytest.mark.parametrize("mode", ["cert-manager", "generate", "provided"])
def test_all_on_render_passes_a_server_side_dry_run(
    helm: Helm, kubectl: Kubectl, standin_crds: None, mode: str, tmp_path: Path
) -> None:
    namespace = f"aibom-chart-{uuid.uuid4().hex[:6]}"  # the chart makes it (namespace.create)
    sets = [f"certs.mode={mode}"]
    set_files: list[str] = []
    if mode == "provided":
        subprocess.run(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "certs",
                "--out-dir",
                str(tmp_path),
                "--no-config",
            ],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        set_files += [
            f"certs.provided.caCrt={tmp_path / 'ca.crt'}",
            f"certs.provided.tlsCrt={tmp_path / 'tls.crt'}",
            f"certs.provided.tlsKey={tmp_path / 'tls.key'}",
        ]
    manifest, docs = helm.template(
        namespace=namespace, values=[ALL_ON], sets=sets, set_files=set_files
    )
    # The Namespace first (as `helm install` orders it), then everything in it.
    ns_doc = [d for d in docs if d["kind"] == "Namespace"]
    assert [d["metadata"]["name"] for d in ns_doc] == [namespace]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(ns_doc[0]))
    try:
        out = _dry_run(kubectl, manifest)
        assert out.count("(server dry run)") == len(docs)
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)


# --------------------------------------------------------------------------- promtool


def test_promtool_checks_the_rules(promtool: Path) -> None:
    proc = subprocess.run(
        [str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_unit_tests_of_the_alerts(promtool: Path) -> None:
    proc = subprocess.run(
        [str(promtool), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_install_then_upgrade_keeps_the_generated_certificate(
    helm: Helm, control_plane: ControlPlane, kubectl: Kubectl
) -> None:
    """A real `helm install` and `helm upgrade` on the API server (no kubelet: the
    Pods stay Pending, nothing waits for them). `certs.mode=generate` must find
    its Secret on upgrade (lookup) and keep the CA, so the caBundle does not
    change under the API server. The opt-in label is one no namespace has, so
    the installed webhook configuration matches nothing of the other tests."""
    namespace = f"aibom-chart-{uuid.uuid4().hex[:6]}"
    release = f"r-{uuid.uuid4().hex[:6]}"
    common = [
        str(CHART),
        "--namespace",
        namespace,
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "--set",
        "namespaceSelector.label=aibom-chart-test.example/never",
    ]

    def tls_state() -> tuple[dict[str, str], set[str]]:
        secret = yaml.safe_load(
            kubectl(
                "get", "secret", "-n", namespace, "aibom-rollup-webhook-tls", "-o", "yaml"
            ).stdout
        )
        mwc = yaml.safe_load(
            kubectl("get", "mutatingwebhookconfiguration", "aibom-rollup", "-o", "yaml").stdout
        )
        return secret["data"], {w["clientConfig"]["caBundle"] for w in mwc["webhooks"]}

    def secrets() -> dict[str, Any]:
        """Every Secret the chart made (the TLS pair; the provenance key)."""
        listed = yaml.safe_load(
            kubectl(
                "get",
                "secret",
                "-n",
                namespace,
                "-l",
                "app.kubernetes.io/name=aibom-rollup",
                "-o",
                "yaml",
            ).stdout
        )
        return {s["metadata"]["name"]: s["data"] for s in listed["items"]}

    helm.run("install", release, *common, "--create-namespace")
    try:
        data, bundles = tls_state()
        assert bundles == {data["ca.crt"]}
        made = secrets()
        assert "aibom-rollup-webhook-tls" in made
        helm.run("upgrade", release, *common, "--set", "webhook.replicas=3")
        after, bundles_after = tls_state()
        assert after == data, "helm upgrade replaced the serving certificate"
        assert bundles_after == bundles
        assert secrets() == made, "helm upgrade replaced a generated Secret"
        dep = yaml.safe_load(
            kubectl("get", "deploy", "-n", namespace, "aibom-rollup-webhook", "-o", "yaml").stdout
        )
        assert dep["spec"]["replicas"] == 3
    finally:
        helm.run(
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--kubeconfig",
            str(control_plane.kubeconfig),
            check=False,
        )
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
