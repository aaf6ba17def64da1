"""What counts as the served model: serving containers only, never a directory.

Each rule has positive and negative rows. On the code before these rules, an init
container's `--model` was the served model, `MODEL_PATH=/models/x` was a model
identity, and a Triton `--model-repository` was ignored: those rows fail there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aibom_core.bom import RootView, build_document, validate
from aibom_core.evidence import Confidence
from aibom_core.kinds import default_registry
from aibom_core.models import is_sidecar, models_of
from aibom_core.objects import Obj
from aibom_core.scrape import scrape

QWEN = "Qwen/Qwen3-0.6B"
U = Confidence.UNRESOLVED
D = Confidence.DECLARED


def pod(containers: list[Obj], init: list[Obj] | None = None) -> Obj:
    spec: Obj = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def findings(obj: Obj) -> list[tuple[str, str | None, Confidence, str, tuple[str, str] | None]]:
    return [
        (c.name, m.id, m.confidence, m.via, m.detail) for c in scrape(obj) for m in models_of(c)
    ]


def c(name: str = "main", image: str = "reg.io/server:1", **kw: Any) -> Obj:
    return {"name": name, "image": image, **kw}


# --- serving containers only ----------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # An init container that downloads a model does not make the served model.
        (pod([c()], init=[c("fetch", command=["huggingface-cli", "download", QWEN])]), []),
        (pod([c()], init=[c("init", args=["--model", QWEN])]), []),
        (pod([c()], init=[c("init", env=[{"name": "MODEL_ID", "value": QWEN}])]), []),
        # A native sidecar is an init container with restartPolicy Always: the same.
        (pod([c()], init=[c("side", restartPolicy="Always", args=["--model", QWEN])]), []),
        # Known sidecars, by name or by image repository (any registry).
        (pod([c("istio-proxy", env=[{"name": "MODEL_ID", "value": QWEN}])]), []),
        (pod([c("queue-proxy", args=["--model", QWEN])]), []),
        (pod([c("proxy", image="docker.io/istio/proxyv2:1.22", args=["--model", QWEN])]), []),
        (pod([c("agent", image="kserve/agent:v0.14.0", args=["--model", QWEN])]), []),
        (pod([c("q", image="gcr.io/knative-releases/knative.dev/serving/cmd/queue@sha256:"
                 + "a" * 64, args=["--model", QWEN])]), []),
        # Negatives: the serving container, and names/images that only look like sidecars.
        (pod([c(args=["--model", QWEN])], init=[c("fetch")]),
         [("main", QWEN, D, "--model", None)]),
        (pod([c("istio-proxy-model", args=["--model", QWEN])]),
         [("istio-proxy-model", QWEN, D, "--model", None)]),
        (pod([c("x", image="myorg/proxyv2:1", args=["--model", QWEN])]),
         [("x", QWEN, D, "--model", None)]),
        (pod([c("x", image="myorg/istio-proxyv2:1", args=["--model", QWEN])]),
         [("x", QWEN, D, "--model", None)]),
    ],
)  # fmt: skip
def test_only_serving_containers_name_the_model(obj: Obj, expected: list[Any]) -> None:
    assert findings(obj) == expected


@pytest.mark.parametrize(
    ("name", "image", "sidecar"),
    [
        ("istio-proxy", "x", True),
        ("linkerd-proxy", "x", True),
        ("queue-proxy", "x", True),
        ("x", "cr.l5d.io/linkerd/proxy:stable-2.14", True),
        ("x", "envoyproxy/envoy:v1.31", True),
        ("x", "kserve/storage-initializer:v0.14.0", True),
        ("x", "otel/opentelemetry-collector-contrib:0.110.0", True),
        ("main", "vllm/vllm-openai:v0.8.5", False),
        ("proxy", "myorg/envoy:1", False),
        ("x", "envoyproxy/envoy-fork:1", False),
        ("istio", "x", False),
    ],
)
def test_is_sidecar(name: str, image: str, sidecar: bool) -> None:
    assert is_sidecar(name, image) is sidecar


# --- directories are not model identities --------------------------------------


def _path(via: str, path: str) -> tuple[str, None, Confidence, str, tuple[str, str]]:
    return ("main", None, U, via, ("aibom.model.path", path))


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (c(env=[{"name": "MODEL_PATH", "value": "/models/x"}]),
         [_path("env MODEL_PATH", "/models/x")]),
        (c(args=["--model", "/models/llama-3-8b"]), [_path("--model", "/models/llama-3-8b")]),
        (c(args=["--model-path=/mnt/models/"]), [_path("--model-path", "/mnt/models/")]),
        (c(args=["--model", "./weights"]), [_path("--model", "./weights")]),
        (c(args=["--model", "~/m"]), [_path("--model", "~/m")]),
        (c(command=["vllm", "serve", "/models/q"]), [_path("vllm serve", "/models/q")]),
        (c(command=["sh", "-c", "vllm serve /data/m --port 8000"]),
         [_path("vllm serve", "/data/m")]),
        # $(VAR) expanded from literal env first: still a path.
        (c(args=["--model", "$(DIR)"], env=[{"name": "DIR", "value": "/models/y"}]),
         [_path("--model", "/models/y")]),
        # Negatives: identities stay identities.
        (c(args=["--model", QWEN]), [("main", QWEN, D, "--model", None)]),
        (c(env=[{"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-8B"}]),
         [("main", "meta-llama/Llama-3.1-8B", D, "env MODEL_ID", None)]),
        (c(args=["--model", "hf://org/m"]), [("main", "org/m", D, "--model", None)]),
        (c(command=["ollama", "run", "llama3.2"]), [("main", "llama3.2", D, "ollama run", None)]),
    ],
)  # fmt: skip
def test_directories_are_never_model_identities(container: Obj, expected: list[Any]) -> None:
    assert findings(pod([container])) == expected


def test_a_served_name_beside_a_directory_is_the_model_name() -> None:
    found = findings(pod([c(args=["--model", "/models/q", "--served-model-name", "qwen"])]))
    assert found == [
        _path("--model", "/models/q"),
        ("main", "qwen", Confidence.INFERRED, "served-model-name", None),
    ]


# --- Triton model repositories ---------------------------------------------------

TRITON = "nvcr.io/nvidia/tritonserver:24.08-py3"


def _repo(via: str, value: str) -> tuple[str, None, Confidence, str, tuple[str, str]]:
    return ("main", None, U, via, ("aibom.model.repository", value))


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (c(image=TRITON, command=["tritonserver", "--model-repository=/models"]),
         [_repo("--model-repository", "/models")]),
        (c(image=TRITON, command=["tritonserver"],
           args=["--model-repository", "s3://bucket/triton-models"]),
         [_repo("--model-repository", "s3://bucket/triton-models")]),
        (c(image=TRITON, command=["sh", "-c", "tritonserver --model-repository=gs://b/m"]),
         [_repo("--model-repository", "gs://b/m")]),
        (c(command=["torchserve", "--start", "--model-store", "/home/model-server/store"]),
         [_repo("--model-store", "/home/model-server/store")]),
        # Not the only declaration: the named model wins, the repository is not added.
        (c(image=TRITON, command=["tritonserver", "--model-repository=/models"],
           env=[{"name": "MODEL_ID", "value": QWEN}]),
         [("main", QWEN, D, "env MODEL_ID", None)]),
        # No value, or another flag: nothing.
        (c(image=TRITON, command=["tritonserver", "--model-repository"]), []),
        (c(image=TRITON, command=["tritonserver", "--model-repository-x=/m"]), []),
    ],
)  # fmt: skip
def test_triton_model_repository(container: Obj, expected: list[Any]) -> None:
    assert findings(pod([container])) == expected


def _document(containers: list[Obj], init: list[Obj] | None = None, **spec: Any) -> Obj:
    tspec: Obj = {"containers": containers, **spec}
    if init:
        tspec["initContainers"] = init
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "uid": "u"},
        "spec": {"template": {"spec": tspec}},
    }
    view = RootView(root=dep, status="root", reason=None, owned=(), pods=())
    doc = build_document(view, default_registry(), tool_version="0")
    validate(doc.json_bytes)
    out = json.loads(doc.json_bytes)
    assert isinstance(out, dict)
    assert list(doc.models) == [
        x["name"]
        for x in out["components"]
        if x["type"] == "machine-learning-model" and x["name"] != "unresolved"
    ]
    return out


def _props(comp: Obj, name: str) -> list[str]:
    return [p["value"] for p in comp["properties"] if p["name"] == name]


def test_document_init_download_and_directory() -> None:
    """vLLM serving /models/q, fetched by an init container: the model stays unresolved."""
    doc = _document(
        [c(image="vllm/vllm-openai:v0.8.5", args=["--model", "/models/q"],
           volumeMounts=[{"name": "w", "mountPath": "/models"}])],
        init=[c("fetch", image="python:3.12",
                command=["huggingface-cli", "download", QWEN, "--local-dir", "/models/q"],
                volumeMounts=[{"name": "w", "mountPath": "/models"}])],
        volumes=[{"name": "w", "persistentVolumeClaim": {"claimName": "weights"}}],
    )  # fmt: skip
    models = [x for x in doc["components"] if x["type"] == "machine-learning-model"]
    assert [m["name"] for m in models] == ["unresolved"]
    (u,) = models
    assert _props(u, "aibom.model.path") == ["/models/q"]
    assert _props(u, "aibom.evidence.spec") == [
        "Deployment/d#/spec/template/spec/containers/0/args/1"
    ]
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert deps[u["bom-ref"]] == ["data:pvc/weights"]


def test_document_triton_repository_is_the_reason() -> None:
    doc = _document([c(image=TRITON, command=["tritonserver", "--model-repository=/models"])])
    (u,) = [x for x in doc["components"] if x["type"] == "machine-learning-model"]
    assert _props(u, "aibom.model.repository") == ["/models"]
    assert _props(u, "aibom.model.unresolved") == [
        "--model-repository /models: a model repository; the models in it are not in the spec"
    ]
