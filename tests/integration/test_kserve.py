"""KServe InferenceService on the real control plane, with the upstream v1beta1 CRD:
an adoption KServe never does.

KServe's own chain, made by its real controller manager, is in
test_kserve_operator.py. This module plays what the controller never does:
a predictor-shaped Deployment (its `kserve-container`, the storage-initializer
init container) created without an owner and adopted later, by a controller
ownerReference the test writes. Kubernetes' own deployment controller makes the
ReplicaSet and Pods. The real webhook stamps at admission and the real
annotator writes the documents.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl
from tests.integration.support import (
    LABEL_KEY,
    StartAnnotator,
    apply,
    docs,
    document,
    get,
    meta,
    owned,
    owner_ref,
    running_webhook,
    wait_doc,
    wait_for,
    wait_registered,
)

pytestmark = pytest.mark.integration

# Vendored in tests/upstream only (SOURCES.md): read from there whatever AIBOM_SHARED_DIR says.
KSERVE = REPO_ROOT / "tests" / "upstream" / "kserve"
CRD = KSERVE / "crds" / "serving.kserve.io_inferenceservices.yaml"
SERVER = "kserve/huggingfaceserver:v0.15.2"
INIT = "kserve/storage-initializer:v0.15.2"
MODEL = "meta-llama/Llama-2-7b-chat-hf"


def isvc(namespace: str) -> Obj:
    """The upstream sample `docs/samples/storage/hf/hf_isvc.yaml`, in RawDeployment mode."""
    obj: Obj = yaml.safe_load((KSERVE / "examples" / "hf_isvc.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "RawDeployment"}
    return obj


def predictor_deployment(namespace: str, name: str, owner: Obj | None) -> Obj:
    """The Deployment KServe's RawDeployment reconciler makes for a predictor."""
    labels = {"app": f"isvc.{name}", "serving.kserve.io/inferenceservice": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(namespace, name, owner),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "initContainers": [
                        {"name": "storage-initializer", "image": INIT,
                         "args": [f"hf://{MODEL}", "/mnt/models"]},
                    ],
                    "containers": [
                        {"name": "kserve-container", "image": SERVER,
                         "args": ["--model_name=llama2", "--model_dir=/mnt/models",
                                  "--backend=huggingface"]},
                    ],
                },
            },
        },
    }  # fmt: skip


def stamp(cp: ControlPlane, path: str) -> dict[str, str]:
    obj = get(cp, path) or {}
    ann = obj.get("metadata", {}).get("annotations") or {}
    # The four stamp keys; the proofs (aibom.dev/*edge-proof) belong to provenance.
    return {
        k: v for k, v in ann.items() if k.startswith("aibom.dev/") and not k.endswith("edge-proof")
    }


def test_inference_service_is_a_root_with_its_raw_deployment_rolled_up(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    assert control_plane.install_crd(CRD) == ["inferenceservices.serving.kserve.io"]
    with running_webhook(
        control_plane,
        kubectl,
        tmp_path,
        user="aibom-webhook-kserve",
        name="aibom-rollup-kserve-test",
        selector={LABEL_KEY: ns},
    ):
        probe = isvc(ns)
        probe["metadata"]["name"] = "probe"
        wait_registered(kubectl, ns, probe, "root")
        a = start()
        root = apply(kubectl, isvc(ns))
        name = root["metadata"]["name"]
        root_uid = root["metadata"]["uid"]
        # The webhook stamped the InferenceService as a root at admission.
        assert root["metadata"]["annotations"]["aibom.dev/rollup"] == "root"
        assert root["metadata"]["annotations"]["aibom.dev/root"] == f"InferenceService/{name}"

        # Its document: model from storageUri, runtime from the model format.
        cm = wait_doc(control_plane, ns, f"aibom-inferenceservice-{name}", containing=(MODEL,))
        doc = document(cm)
        models = [c for c in doc["components"] if c["type"] == "machine-learning-model"]
        assert [(m["name"], m.get("purl")) for m in models] == [(MODEL, f"pkg:huggingface/{MODEL}")]
        assert [c["name"] for c in doc["components"] if c["type"] == "framework"] == [
            "kserve-huggingfaceserver"
        ]

        # The predictor Deployment, as KServe's RawDeployment reconciler makes it:
        # controller-owned by the InferenceService from its creation.
        predictor = f"{name}-predictor"
        apply(kubectl, predictor_deployment(ns, predictor, root))
        # A second one made before its owner reference was set (an adoption):
        # first its own root with its own document, then rolled up, the document gone.
        late = f"{name}-late"
        apply(kubectl, predictor_deployment(ns, late, None))
        wait_doc(control_plane, ns, f"aibom-deployment-{late}")
        kubectl(
            "patch", "-n", ns, f"deployment/{late}", "--type=merge",
            "-p", json.dumps({"metadata": {"ownerReferences": [owner_ref(root)]}}),
        )  # fmt: skip
        cm = wait_doc(
            control_plane,
            ns,
            f"aibom-inferenceservice-{name}",
            containing=(f"Deployment/{predictor}", f"Deployment/{late}"),
        )
        wait_for(
            "only the InferenceService's document",
            lambda: set(docs(control_plane, ns)) == {f"aibom-inferenceservice-{name}"},
        )
        doc = document(cm)
        assert owned(doc) == [f"Deployment/{late}", f"Deployment/{predictor}"]
        images = sorted(c["name"] for c in doc["components"] if c["type"] == "container")
        assert images == [
            "docker.io/kserve/huggingfaceserver",
            "docker.io/kserve/storage-initializer",
        ]
        # The init container's hf:// argument does not make a second model.
        models = [c["name"] for c in doc["components"] if c["type"] == "machine-learning-model"]
        assert models == [MODEL]
        assert a.metric("aibom_annotator_documents_deleted_total", {"reason": "rolled_up"}) >= 1

        # Stamps: everything under the InferenceService rolls up to it.
        want = {
            "aibom.dev/rollup": "rolled-up",
            "aibom.dev/root": f"InferenceService/{name}",
            "aibom.dev/root-uid": root_uid,
        }

        def observed() -> dict[str, dict[str, str]]:
            out: dict[str, dict[str, str]] = {}
            for path in (
                f"/apis/apps/v1/namespaces/{ns}/deployments",
                f"/apis/apps/v1/namespaces/{ns}/replicasets",
                f"/api/v1/namespaces/{ns}/pods",
            ):
                for o in (get(control_plane, path) or {}).get("items", []):
                    ann = o["metadata"].get("annotations") or {}
                    key = f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']}"
                    # The four stamp keys (proofs, aibom.dev/*edge-proof, belong to provenance).
                    out[key] = {
                        k: v
                        for k, v in ann.items()
                        if k.startswith("aibom.dev/") and not k.endswith("edge-proof")
                    }
            return out

        def predictor_tree() -> dict[str, dict[str, str]]:
            return {k: v for k, v in observed().items() if f"/{predictor}" in k}

        try:
            wait_for(
                "the predictor Deployment, its ReplicaSet and Pod stamped rolled-up",
                lambda: len(t := predictor_tree()) == 3 and all(v == want for v in t.values()),
                90,
            )
            late_path = f"/apis/apps/v1/namespaces/{ns}/deployments/{late}"
            wait_for(
                "the adopted Deployment restamped", lambda: stamp(control_plane, late_path) == want
            )
        except BaseException:
            print("stamps:", json.dumps(observed(), indent=1, sort_keys=True))
            print([r for r in a.records() if "stamp" in json.dumps(r)][-20:])
            raise
        isvc_path = f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices/{name}"
        wait_for(
            "the InferenceService's root-uid",
            lambda: stamp(control_plane, isvc_path).get("aibom.dev/root-uid") == root_uid,
        )
        assert stamp(control_plane, isvc_path)["aibom.dev/rollup"] == "root"
