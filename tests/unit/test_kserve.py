"""KServe InferenceService as a tracked root: model, storageUri, runtime, roll-up.

On the code before it was a tracked root, the InferenceService was walk-only: no document,
nothing read from its predictor; every test here fails there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.bom import RootView, build_document, validate
from aibom_core.evidence import Confidence
from aibom_core.graph import build_graph
from aibom_core.kinds import GroupKind, default_registry
from aibom_core.objects import Obj
from aibom_core.scrape import kserve_storage, scrape
from aibom_core.walk import Rollup
from tests.unit.kobj import uid_for

REG = default_registry()
UPSTREAM = Path(
    os.environ.get("AIBOM_SHARED_DIR") or Path(__file__).resolve().parents[1] / "upstream"
)
ISVC = "serving.kserve.io/v1beta1"
KNATIVE = "serving.knative.dev/v1"


# The KServe files are vendored in tests/upstream only (no other upstream data folder
# holds them): read them from there whatever AIBOM_SHARED_DIR says.
VENDORED = Path(__file__).resolve().parents[1] / "upstream"


def upstream(path: str, kind: str = "InferenceService") -> Obj:
    base = VENDORED if path.startswith("kserve/") else UPSTREAM
    (obj,) = [d for d in yaml.safe_load_all((base / path).read_text()) if d and d["kind"] == kind]
    assert isinstance(obj, dict)
    return obj


def document(root: Obj, *, owned: tuple[Obj, ...] = ()) -> Obj:
    root.setdefault("metadata", {}).setdefault("namespace", "ns")
    root["metadata"].setdefault("uid", "uid-root")
    view = RootView(root=root, status="root", reason=None, owned=owned, pods=())
    doc = build_document(view, REG, tool_version="0")
    validate(doc.json_bytes)
    again = build_document(view, REG, tool_version="0")
    assert again.json_bytes == doc.json_bytes  # byte-deterministic
    out = json.loads(doc.json_bytes)
    assert isinstance(out, dict)
    out["_models"] = list(doc.models)
    return out


def props(c: Obj, name: str) -> list[str]:
    return [p["value"] for p in c["properties"] if p["name"] == name]


def by_type(doc: Obj, kind: str) -> list[Obj]:
    return [c for c in doc["components"] if c["type"] == kind]


def test_inference_service_is_tracked_and_knative_is_walk_only() -> None:
    assert REG.is_tracked(GroupKind("serving.kserve.io", "InferenceService"))
    for kind in ("Service", "Configuration", "Revision"):
        gk = GroupKind("serving.knative.dev", kind)
        assert REG.is_known(gk) and not REG.is_tracked(gk)
    assert not REG.is_known(GroupKind("", "Service"))  # the core Service is not Knative's


# --- storageUri -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "model", "revision", "data"),
    [
        # Identities.
        ("hf://meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-chat-hf", None, None),
        ("hf://Qwen/Qwen3-0.6B:abc123", "Qwen/Qwen3-0.6B", "abc123", None),
        ("https://huggingface.co/org/m", "https://huggingface.co/org/m", None, None),
        ("oci://quay.io/org/modelcar:1.0", "oci://quay.io/org/modelcar:1.0", None, None),
        # Places: unresolved, the place a data component.
        ("pvc://s3-data/llama-31-8b-instruct", None, None, ("pvc", "s3-data")),
        ("s3://bucket/models/llama", None, None, ("storage-uri", "s3://bucket/models/llama")),
        ("gs://kfserving-examples/models/onnx", None, None,
         ("storage-uri", "gs://kfserving-examples/models/onnx")),
        ("https://github.com/x/y/model.joblib?raw=true", None, None,
         ("storage-uri", "https://github.com/x/y/model.joblib?raw=true")),
        # Not an hf identity: one segment, or three.
        ("hf://just-a-name", None, None, ("storage-uri", "hf://just-a-name")),
        ("hf://a/b/c", None, None, ("storage-uri", "hf://a/b/c")),
        ("/mnt/models", None, None, None),
    ],
)  # fmt: skip
def test_storage_uri(
    uri: str, model: str | None, revision: str | None, data: tuple[str, str] | None
) -> None:
    decl, volume = kserve_storage(uri, "/spec/predictor/model/storageUri")
    if model is None:
        assert decl.confidence is Confidence.UNRESOLVED and decl.reason is not None
        assert decl.detail == ("aibom.model.storage-uri", uri)
    else:
        assert (decl.id, decl.revision, decl.confidence) == (model, revision, Confidence.DECLARED)
    assert ((volume.kind, volume.name) if volume else None) == data


# --- the upstream samples ---------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "models", "runtimes", "unresolved", "data"),
    [
        ("kserve/examples/hf_isvc.yaml", ["meta-llama/Llama-2-7b-chat-hf"],
         [("kserve-huggingfaceserver", "inferred", "field kserve modelFormat huggingface")],
         [], []),
        ("kserve/examples/fluid-isvc.yaml", [],
         [("custom-kserve-huggingfaceserver", "declared",
           "field kserve runtime custom-kserve-huggingfaceserver")],
         ["pvc://s3-data/llama-31-8b-instruct"], ["data:pvc/s3-data"]),
        ("kserve/examples/sklearn-uri.yaml", [],
         [("kserve-sklearnserver", "inferred", "field kserve modelFormat sklearn")],
         ["https://github.com/tduffy000/kfserving-uri-examples/blob/master/sklearn/frozen/"
          "model.joblib?raw=true"],
         ["data:storage-uri/https://github.com/tduffy000/kfserving-uri-examples/blob/master/"
          "sklearn/frozen/model.joblib?raw=true"]),
        ("kserve/examples/onnx.yaml", [],
         [("triton", "inferred", "field kserve modelFormat onnx")],
         ["gs://kfserving-examples/models/onnx"],
         ["data:storage-uri/gs://kfserving-examples/models/onnx"]),
        # Custom containers: STORAGE_URI env on kserve-container; the transformer names none.
        ("kserve/examples/collocation.yaml", [],
         [("torchserve", "inferred", "image docker.io/pytorch/torchserve")],
         ["gs://kfserving-examples/models/torchserve/image_classifier/v1"], []),
    ],
)  # fmt: skip
def test_upstream_sample_documents(
    path: str, models: list[str], runtimes: list[Any], unresolved: list[str], data: list[str]
) -> None:
    doc = document(upstream(path))
    assert doc["_models"] == models
    assert [
        (c["name"], props(c, "aibom.confidence")[0], *props(c, "aibom.runtime.rule"))
        for c in by_type(doc, "framework")
    ] == [tuple(r) for r in runtimes]
    placeholders = [c for c in by_type(doc, "machine-learning-model") if c["name"] == "unresolved"]
    assert (
        sorted(v for c in placeholders for v in props(c, "aibom.model.storage-uri")) == unresolved
    )
    assert [c["bom-ref"] for c in by_type(doc, "data")] == data
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    root = doc["metadata"]["component"]["bom-ref"]
    # Every component hangs off the root (directly, or through an image or model).
    reached = set(deps[root])
    for ref in list(reached):
        reached |= set(deps.get(ref, []))
    assert {c["bom-ref"] for c in doc["components"]} <= reached


def test_hf_model_purl_format_and_evidence() -> None:
    doc = document(upstream("kserve/examples/hf_isvc.yaml"))
    (model,) = by_type(doc, "machine-learning-model")
    assert model["purl"] == "pkg:huggingface/meta-llama/Llama-2-7b-chat-hf"
    assert props(model, "aibom.model.format") == ["huggingface"]
    assert props(model, "aibom.model.named-by") == ["storageUri"]
    assert props(model, "aibom.evidence.spec") == [
        "InferenceService/huggingface-llama2#/spec/predictor/model/storageUri"
    ]


@pytest.mark.parametrize(
    ("model", "runtime"),
    [
        # Explicit runtime wins; KServe's own runtime names map to the software.
        ({"modelFormat": {"name": "onnx"}, "runtime": "kserve-tritonserver"},
         ("triton", "declared")),
        ({"modelFormat": {"name": "sklearn"}, "runtime": "kserve-mlserver"},
         ("mlserver", "declared")),
        ({"modelFormat": {"name": "huggingface"}, "runtime": "my-vllm"}, ("my-vllm", "declared")),
        # From the model format (inferred); the v2 protocol moves sklearn to MLServer.
        ({"modelFormat": {"name": "sklearn"}}, ("kserve-sklearnserver", "inferred")),
        ({"modelFormat": {"name": "sklearn"}, "protocolVersion": "v2"}, ("mlserver", "inferred")),
        ({"modelFormat": {"name": "pytorch"}}, ("torchserve", "inferred")),
        ({"modelFormat": {"name": "tensorflow"}}, ("tensorflow-serving", "inferred")),
        # Unknown format, no runtime: no claim.
        ({"modelFormat": {"name": "my-format"}}, None),
        ({}, None),
    ],
)  # fmt: skip
def test_runtime_of_the_predictor_model(model: Obj, runtime: tuple[str, str] | None) -> None:
    isvc = {"apiVersion": ISVC, "kind": "InferenceService", "metadata": {"name": "m"},
            "spec": {"predictor": {"model": {**model, "storageUri": "hf://org/m"}}}}  # fmt: skip
    doc = document(isvc)
    found = [(c["name"], props(c, "aibom.confidence")[0]) for c in by_type(doc, "framework")]
    assert found == ([runtime] if runtime else [])


def test_a_predictor_image_and_model_format_with_version() -> None:
    isvc = {
        "apiVersion": ISVC, "kind": "InferenceService", "metadata": {"name": "m"},
        "spec": {"predictor": {"model": {
            "modelFormat": {"name": "huggingface", "version": "1"},
            "storageUri": "oci://quay.io/org/modelcar@sha256:" + "a" * 64,
            "image": "kserve/huggingfaceserver:v0.15.2",
        }}},
    }  # fmt: skip
    doc = document(isvc)
    (model,) = by_type(doc, "machine-learning-model")
    assert model["purl"] == (
        f"pkg:oci/modelcar@sha256:{'a' * 64}?repository_url=quay.io/org/modelcar"
    )
    assert props(model, "aibom.model.format") == ["huggingface@1"]
    (image,) = by_type(doc, "container")
    assert image["name"] == "docker.io/kserve/huggingfaceserver"
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert model["bom-ref"] in deps[image["bom-ref"]]


def test_scrape_reads_every_component_and_the_worker_spec() -> None:
    isvc = {
        "apiVersion": ISVC, "kind": "InferenceService", "metadata": {"name": "m"},
        "spec": {
            "predictor": {
                "model": {"modelFormat": {"name": "huggingface"}, "storageUri": "hf://o/m"},
                "workerSpec": {"containers": [{"name": "worker-container", "image": "w:1"}]},
                "initContainers": [{"name": "i", "image": "busybox", "args": ["--model", "o/x"]}],
            },
            "transformer": {"containers": [{"name": "kserve-container", "image": "t:1"}]},
            "explainer": {"containers": [{"name": "kserve-container", "image": "e:1"}]},
        },
    }  # fmt: skip
    assert [(c.pointer, c.image, c.init) for c in scrape(isvc)] == [
        ("/spec/predictor/initContainers/0", "busybox", True),
        ("/spec/predictor/model", "", False),
        ("/spec/predictor/workerSpec/containers/0", "w:1", False),
        ("/spec/transformer/containers/0", "t:1", False),
        ("/spec/explainer/containers/0", "e:1", False),
    ]
    assert document(isvc)["_models"] == ["o/m"]  # the init container's o/x is not served


@pytest.mark.parametrize(
    "odd",
    [
        None,
        "x",
        [],
        {"predictor": None},
        {"predictor": {"model": 1}},
        {"predictor": {"model": {"storageUri": 5, "modelFormat": "x"}}},
    ],
)
def test_odd_specs_never_raise(odd: Any) -> None:
    isvc = {"apiVersion": ISVC, "kind": "InferenceService", "metadata": {"name": "m"}, "spec": odd}
    document(isvc)


# --- roll-up --------------------------------------------------------------------


def mk(api_version: str, kind: str, name: str, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": uid_for(kind, name)}
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True,
        }]  # fmt: skip
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def _raw() -> list[Obj]:
    isvc = mk(ISVC, "InferenceService", "llm")
    dep = mk("apps/v1", "Deployment", "llm-predictor", isvc)
    rs = mk("apps/v1", "ReplicaSet", "llm-predictor-abc", dep)
    return [isvc, dep, rs, mk("v1", "Pod", "llm-predictor-abc-1", rs)]


def _serverless() -> list[Obj]:
    isvc = mk(ISVC, "InferenceService", "llm")
    ksvc = mk(KNATIVE, "Service", "llm-predictor", isvc)
    cfg = mk(KNATIVE, "Configuration", "llm-predictor", ksvc)
    rev = mk(KNATIVE, "Revision", "llm-predictor-00001", cfg)
    dep = mk("apps/v1", "Deployment", "llm-predictor-00001-deployment", rev)
    rs = mk("apps/v1", "ReplicaSet", "llm-predictor-00001-deployment-abc", dep)
    return [isvc, ksvc, cfg, rev, dep, rs, mk("v1", "Pod", "llm-predictor-00001-x", rs)]


def _nim() -> list[Obj]:
    nim = mk("apps.nvidia.com/v1alpha1", "NIMService", "nim")
    isvc = mk(ISVC, "InferenceService", "nim", nim)
    dep = mk("apps/v1", "Deployment", "nim-predictor", isvc)
    return [nim, isvc, dep]


@pytest.mark.parametrize(
    ("objs", "expected"),
    [
        # RawDeployment: ISVC -> Deployment -> ReplicaSet -> Pod.
        (_raw(), {"InferenceService/llm": (Rollup.ROOT, "InferenceService/llm"),
                  "Deployment/llm-predictor": (Rollup.ROLLED_UP, "InferenceService/llm"),
                  "Pod/llm-predictor-abc-1": (Rollup.ROLLED_UP, "InferenceService/llm")}),
        # Serverless: through Knative's Service -> Configuration -> Revision (6 hops from the Pod).
        (_serverless(), {
            "Service/llm-predictor": (Rollup.ROLLED_UP, "InferenceService/llm"),
            "Revision/llm-predictor-00001": (Rollup.ROLLED_UP, "InferenceService/llm"),
            "Deployment/llm-predictor-00001-deployment":
                (Rollup.ROLLED_UP, "InferenceService/llm"),
            "Pod/llm-predictor-00001-x": (Rollup.ROLLED_UP, "InferenceService/llm")}),
        # NIMService with inferencePlatform: kserve still rolls up to the NIMService.
        (_nim(), {"NIMService/nim": (Rollup.ROOT, "NIMService/nim"),
                  "InferenceService/nim": (Rollup.ROLLED_UP, "NIMService/nim"),
                  "Deployment/nim-predictor": (Rollup.ROLLED_UP, "NIMService/nim")}),
    ],
)  # fmt: skip
def test_rollup(objs: list[Obj], expected: dict[str, tuple[Rollup, str]]) -> None:
    graph = build_graph(objs, REG)
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in objs}
    for name, (status, root) in expected.items():
        result = graph.resolve(by_name[name])
        assert (result.status, result.root.kind_name if result.root else None) == (status, root)


def test_nimservice_document_lists_its_inference_service() -> None:
    nim = upstream("nim-operator/examples/kserve-standard-llm.yaml", "NIMService")
    isvc = {"apiVersion": ISVC, "kind": "InferenceService",
            "metadata": {"name": nim["metadata"]["name"], "namespace": "ns"},
            "spec": {"predictor": {"containers": [
                {"name": "kserve-container", "image": "nvcr.io/nim/meta/llama-3.1-8b:1.8.3"},
            ]}}}  # fmt: skip
    doc = document(nim, owned=(isvc,))
    root = doc["metadata"]["component"]
    assert props(root, "aibom.rollup.owned.0") == [f"InferenceService/{nim['metadata']['name']}"]
