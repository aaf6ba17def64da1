"""The shipped manifests as documents, without kustomize (for the unit tests).

`components()` reads the kustomizations `manifests/kustomization.yaml`
composes (webhook/, annotator/) the way kustomize builds them: their
`resources` files in order, `namespace` set on every namespaced object. It
refuses any other kustomize feature, so this static view cannot silently
differ from the real build; tests/integration/test_manifests.py checks it
equals `kubectl kustomize manifests` (minus the generated Secret and caBundle).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from aibom_core.kinds import GroupKind
from aibom_rollup.cli import build_parser

Doc = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
# The directories the self-signed root and the cert-manager overlay compose.
COMPONENTS = ("webhook", "annotator", "provenance", "annotator-policy")
# The kustomize keys components() knows how to build.
_KNOWN_KEYS = {"apiVersion", "kind", "namespace", "resources"}
# Kinds kustomize's namespace transformer leaves alone (the built-in
# cluster-scoped ones we ship; anything else is treated as namespaced).
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
# Resource (plural) names of the registry's kinds and what else the processes
# touch. A kind added to the registry fails the tests until it is here (the
# integration test checks every plural against the API server's discovery).
PLURAL = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "DynamoGraphDeployment": "dynamographdeployments",
    "DynamoComponentDeployment": "dynamocomponentdeployments",
    "NIMService": "nimservices",
    "LeaderWorkerSet": "leaderworkersets",
    "ReplicaSet": "replicasets",
    "Pod": "pods",
    "PodCliqueSet": "podcliquesets",
    "PodCliqueScalingGroup": "podcliquescalinggroups",
    "PodClique": "podcliques",
    "DisaggregatedSet": "disaggregatedsets",
    "InferenceService": "inferenceservices",
    "RayService": "rayservices",
    "RayJob": "rayjobs",
    "RayCluster": "rayclusters",
    # Knative Serving (KServe Serverless mode); only serving.knative.dev's
    # Service is in the registry, never the core one.
    "Service": "services",
    "Configuration": "configurations",
    "Revision": "revisions",
}
WEBHOOK = "aibom-rollup-webhook"
ANNOTATOR = "aibom-rollup-annotator"
NAMESPACE = "aibom-system"


def resource_of(gk: GroupKind) -> tuple[str, str]:
    """(API group, plural resource) of a kind."""
    return gk.group, PLURAL[gk.kind]


def load_yaml_docs(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def build_static(directory: Path) -> list[Doc]:
    """What `kubectl kustomize DIRECTORY` gives for a plain resources+namespace kustomization."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    unknown = set(kust) - _KNOWN_KEYS
    if unknown:
        raise ValueError(
            f"{directory}/kustomization.yaml uses {sorted(unknown)}: extend "
            "tests/unit/manifest_docs.py to build it, or keep it to resources + namespace"
        )
    docs: list[Doc] = []
    for entry in kust.get("resources") or []:
        path = directory / entry
        if path.is_dir():
            docs.extend(build_static(path))
        else:
            docs.extend(load_yaml_docs(path.read_text(encoding="utf-8")))
    ns = kust.get("namespace")
    if ns:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = ns
    return docs


def components() -> list[Doc]:
    """Every object the manifests ship except the generated Secrets (and caBundle): the
    directories, then the kustomize Components of the root kustomization (signing)."""
    docs = [d for c in COMPONENTS for d in build_static(MANIFESTS / c)]
    root = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    for entry in root.get("components") or []:
        apply_component(docs, MANIFESTS / entry)
    return docs


def apply_component(docs: list[Doc], directory: Path) -> None:
    """A kustomize Component's JSON 6902 `add` patches, applied in place (what it uses)."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    if set(kust) - {"apiVersion", "kind", "patches"}:
        raise ValueError(f"{directory}: extend tests/unit/manifest_docs.py to build it")
    for patch in kust.get("patches") or []:
        target = patch["target"]
        doc = only(docs, target["kind"], target["name"])
        for op in yaml.safe_load(patch["patch"]):
            if op["op"] != "add":
                raise ValueError(f"{directory}: only `add` is built here, not {op['op']!r}")
            *parents, last = op["path"].strip("/").split("/")
            node: Any = doc
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if last == "-":
                node.append(op["value"])
            elif isinstance(node, list):
                node.insert(int(last), op["value"])
            else:
                node[last] = op["value"]


def only(docs: Iterable[Doc], kind: str, name: str | None = None) -> Doc:
    """The one document of `kind` (and `name`); fails loudly otherwise."""
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def of_kind(docs: Iterable[Doc], kind: str) -> Iterator[Doc]:
    return (d for d in docs if d.get("kind") == kind)


def containers(deployment: Doc) -> list[Doc]:
    spec: Doc = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def rules_by_resource(role: Doc) -> dict[tuple[str, str], set[str]]:
    """(group, resource) -> verbs, over every rule of a (Cluster)Role."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            for res in rule.get("resources") or []:
                out.setdefault((group, res), set()).update(rule.get("verbs") or [])
    return out


def webhook_rule_resources(config: Doc) -> dict[str, set[tuple[str, str]]]:
    """Webhook name -> the (group, resource) pairs its rules match."""
    return {
        hook["name"]: {
            (g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]
        }
        for hook in config["webhooks"]
    }


# -- container args, as the kubelet hands them to the image's ENTRYPOINT -----

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def env_values(container: Doc) -> dict[str, str]:
    """Container env: literal values, or `fieldRef:<path>` for the downward API."""
    out: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            out[var["name"]] = str(var["value"])
        else:
            field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            out[var["name"]] = f"fieldRef:{field}" if field else f"valueFrom:{var['name']}"
    return out


def expand_args(container: Doc) -> list[str]:
    """`args` with `$(VAR)` replaced the way the kubelet does; an undefined VAR fails."""
    env = env_values(container)

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        assert name in env, f"container {container['name']}: $({name}) is not in its env"
        return env[name]

    return [_VAR_REF.sub(sub, str(a)) for a in container.get("args") or []]


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """`aibom-rollup ARGV` through the real parser; a flag it lacks fails with its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        lines = err.getvalue().strip().splitlines() or ["exit " + str(exc.code)]
        raise AssertionError(f"aibom-rollup {' '.join(argv)}: {lines[-1]}") from exc
