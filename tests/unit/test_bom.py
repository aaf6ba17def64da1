"""The document: what it says about each root, and that it says it deterministically."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from cyclonedx.model.bom import Bom
from cyclonedx.output.json import JsonV1Dot6

from aibom_core import jcs
from aibom_core.bom import (
    EPOCH,
    FORMAT_VERSION,
    MAX_POD_EVIDENCE,
    Document,
    RootView,
    build_document,
    canonical_facts,
    document_json,
    facts_of,
    input_hash,
    render,
    serial_number,
    validate,
)
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj

REG = default_registry()
TOOL = "0.1.0"
UPSTREAM = Path(
    os.environ.get("AIBOM_SHARED_DIR")
    or Path(__file__).resolve().parents[1] / "upstream"  # vendored upstream files: SOURCES.md there
)
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
QWEN = "Qwen/Qwen3-0.6B"


def upstream(path: str, kind: str) -> Obj:
    docs = [d for d in yaml.safe_load_all((UPSTREAM / path).read_text()) if d]
    (obj,) = [d for d in docs if d["kind"] == kind]
    assert isinstance(obj, dict)
    return obj


def view(
    root: Obj,
    *,
    owned: tuple[Obj, ...] = (),
    pods: tuple[Obj, ...] = (),
    status: str = "root",
    reason: str | None = None,
) -> RootView:
    return RootView(root=root, status=status, reason=reason, owned=owned, pods=pods)


def build(v: RootView, *, tool_version: str = TOOL) -> Document:
    doc = build_document(v, REG, tool_version=tool_version)
    validate(doc.json_bytes)
    return doc


def parsed(doc: Document) -> Obj:
    out = json.loads(doc.json_bytes)
    assert isinstance(out, dict)
    return out


def components(doc: Document, kind: str) -> list[Obj]:
    return [c for c in parsed(doc)["components"] if c["type"] == kind]


def props(component: Obj, name: str) -> list[str]:
    return [p["value"] for p in component.get("properties", []) if p["name"] == name]


def prop(component: Obj, name: str) -> str:
    (value,) = props(component, name)
    return value


def by_ref(doc: Document) -> dict[str, Obj]:
    return {c["bom-ref"]: c for c in parsed(doc)["components"]}


def depends(doc: Document) -> dict[str, list[str]]:
    return {d["ref"]: d.get("dependsOn", []) for d in parsed(doc)["dependencies"]}


def deployment(
    name: str = "web",
    *,
    containers: list[Obj] | None = None,
    volumes: list[Obj] | None = None,
    annotations: dict[str, str] | None = None,
    kind: str = "Deployment",
    api_version: str = "apps/v1",
) -> Obj:
    spec: Obj = {"containers": containers or [{"name": "app", "image": "reg.io/app:1"}]}
    if volumes:
        spec["volumes"] = volumes
    meta: Obj = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{kind}-{name}",
        "creationTimestamp": "2026-10-01T12:00:00Z",
    }
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": meta,
            "spec": {"template": {"metadata": {}, "spec": spec}}}  # fmt: skip


def pod_of(workload: Obj, name: str, statuses: list[tuple[str, str, str]], *, uid: str = "") -> Obj:
    """A pod with the workload's template spec and the given (name, image, imageID) statuses."""
    spec = copy.deepcopy(workload["spec"]["template"]["spec"])
    spec.setdefault("volumes", []).append({"name": f"kube-api-access-{name}", "projected": {}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                     "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Running", "containerStatuses": [
            {"name": n, "image": i, "imageID": d, "restartCount": 0, "ready": True}
            for n, i, d in statuses]},
    }  # fmt: skip


# --- what a person reading the upstream YAML would name -------------------------------

DYN = "nvcr.io/nvidia/ai-dynamo"


@pytest.mark.parametrize(
    ("path", "kind", "images", "models", "runtimes", "data"),
    [
        ("dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment",
         [f"{DYN}/vllm-runtime:1.3.1"],
         [(QWEN, "declared")],
         [("dynamo-frontend", "1.3.1", "declared"), ("dynamo-worker", "1.3.1", "declared"),
          ("vllm", None, "inferred")], []),
        ("dynamo/examples/vllm-disagg.yaml", "DynamoGraphDeployment",
         [f"{DYN}/vllm-runtime:my-tag"],
         [(QWEN, "declared")],
         [("dynamo-frontend", None, "declared"), ("dynamo-worker", None, "declared"),
          ("vllm", None, "inferred")], []),
        ("dynamo/examples/vllm-v1alpha1-disagg.yaml", "DynamoGraphDeployment",
         [f"{DYN}/vllm-runtime:${{VERSION}}"],
         [(QWEN, "declared")],
         [("dynamo-frontend", None, "declared"), ("dynamo-worker", None, "declared"),
          ("vllm", None, "inferred")], []),
        ("dynamo/examples/sglang-v1beta1-disagg-multinode.yaml", "DynamoGraphDeployment",
         [f"{DYN}/sglang-runtime:1.3.1"],
         [(QWEN, "declared")],
         [("dynamo-frontend", "1.3.1", "declared"), ("dynamo-worker", "1.3.1", "declared"),
          ("sglang", None, "declared")], []),
        ("lws/examples/sglang_lws.yaml", "LeaderWorkerSet",
         ["docker.io/lmsysorg/sglang:latest"],
         [("meta-llama/Meta-Llama-3.1-8B-Instruct", "declared")],
         [("sglang", None, "inferred")], []),
        # The model is in the leader's `sh -c` string; workers get it over Ray.
        ("lws/examples/vllm-gpu-lws.yaml", "LeaderWorkerSet",
         ["docker.io/vllm/vllm-openai:v0.8.5"],
         [("meta-llama/Llama-3.1-405B-Instruct", "inferred")],
         [("vllm", "0.8.5", "inferred")], []),
        ("lws/examples/leaderworkerset_v1_leaderworkerset.yaml", "LeaderWorkerSet",
         ["docker.io/nginxinc/nginx-unprivileged:1.27"], [], [], []),
        ("lws/examples/leaderworkerset_multi_template.yaml", "LeaderWorkerSet",
         ["docker.io/nginxinc/nginx-unprivileged:1.27"], [], [], []),
        ("lws/examples/disaggregatedset_v1_disaggregatedset.yaml", "DisaggregatedSet",
         ["docker.io/library/nginx:latest"], [], [], []),
        ("nim-operator/examples/standalone-basic-llm.yaml", "NIMService",
         ["nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"],
         [("meta/llama-3.2-1b-instruct", "inferred")],
         [("nim", "1.12.0", "declared")],
         ["nimcache/meta-llama-3-2-1b-instruct"]),
        ("nim-operator/examples/kserve-standard-llm.yaml", "NIMService",
         ["nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"],
         [("meta/llama-3.2-1b-instruct", "inferred")],
         [("nim", "1.12.0", "declared")],
         ["nimcache/meta-llama-3-2-1b-instruct"]),
        # NIM_USE_SGLANG=1 selects the SGLang backend inside the NIM.
        ("nim-operator/examples/multi-node-nimservice.yaml", "NIMService",
         ["nvcr.io/nim/deepseek-ai/deepseek-r1:1.7.3"],
         [("deepseek-ai/deepseek-r1", "inferred")],
         [("nim", "1.7.3", "declared"), ("sglang", None, "inferred")],
         ["nimcache/deepseek-r1-nimcache"]),
        *[
            (f"grove/examples/{name}", "PodCliqueSet", ["docker.io/library/nginx:latest"],
             [], [], [])
            for name in ("simple1.yaml", "single-node-aggregated.yaml",
                         "multi-node-disaggregated.yaml")
        ],
    ],
)  # fmt: skip
def test_upstream_examples(
    *,
    path: str,
    kind: str,
    images: list[str],
    models: list[tuple[str, str]],
    runtimes: list[tuple[str, str | None, str]],
    data: list[str],
) -> None:
    doc = build(view(upstream(path, kind)))
    assert list(doc.images) == images
    assert [prop(c, "aibom.image.reference") for c in components(doc, "container")] == images
    assert [(c["name"], prop(c, "aibom.confidence"))
            for c in components(doc, "machine-learning-model")] == models  # fmt: skip
    assert [(c["name"], c.get("version"), prop(c, "aibom.confidence"))
            for c in components(doc, "framework")] == runtimes  # fmt: skip
    assert [c["name"] for c in components(doc, "data")] == data
    assert list(doc.models) == sorted(m for m, _ in models)


def test_models_link_to_the_runtime_container_that_serves_them() -> None:
    doc = build(view(upstream("dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment")))
    image = f"image:{DYN}/vllm-runtime:1.3.1"
    deps = depends(doc)
    assert deps[image] == [
        f"model:{QWEN}",
        "runtime:dynamo-frontend@1.3.1",
        "runtime:dynamo-worker@1.3.1",
        "runtime:vllm",
    ]
    root_ref = parsed(doc)["metadata"]["component"]["bom-ref"]
    assert deps[root_ref] == [image]
    model = by_ref(doc)[f"model:{QWEN}"]
    assert model["purl"] == "pkg:huggingface/Qwen/Qwen3-0.6B"
    assert props(model, "aibom.evidence.spec") == [
        "DynamoGraphDeployment/vllm-agg#/spec/components/1/podTemplate/spec/containers/0/args/1"
    ]
    assert model["evidence"]["occurrences"] == [
        {"location": props(model, "aibom.evidence.spec")[0], "additionalContext": "spec"}
    ]


def test_nim_model_is_loaded_from_its_cache() -> None:
    nim = upstream("nim-operator/examples/standalone-basic-llm.yaml", "NIMService")
    nim["status"] = {"model": {"name": "meta/llama-3.2-1b-instruct"}}
    doc = build(view(nim))
    model = by_ref(doc)["model:meta/llama-3.2-1b-instruct"]
    assert prop(model, "aibom.confidence") == "verified"  # status.model observed it
    assert "purl" not in model  # an NGC id, not a Hugging Face one
    assert props(model, "aibom.evidence.status") == [
        "NIMService/meta-llama-3-2-1b-instruct#/status/model/name"
    ]
    assert depends(doc)["model:meta/llama-3.2-1b-instruct"] == [
        "data:nimcache/meta-llama-3-2-1b-instruct"
    ]


# --- roll-up: merged, never double counted --------------------------------------------


def _dynamo_chain() -> tuple[Obj, Obj, Obj, list[Obj]]:
    dgd = upstream("dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment")
    dgd["metadata"].update(namespace="ns", uid="uid-dgd", creationTimestamp="2026-10-01T00:00:00Z")
    dcd = {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoComponentDeployment",
        "metadata": {"name": "vllm-agg-vllmdecodeworker", "namespace": "ns", "uid": "uid-dcd"},
        "spec": copy.deepcopy(dgd["spec"]["components"][1]),
    }
    rt = f"{DYN}/vllm-runtime:1.3.1"
    container = copy.deepcopy(dgd["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0])
    dep = deployment("vllm-agg-vllmdecodeworker", containers=[container])
    pods = [
        pod_of(dep, f"vllm-agg-vllmdecodeworker-abc-{i}", [("main", rt, f"{rt}@{d}")])
        for i, d in enumerate((D1, D1, D2))
    ]
    return dgd, dcd, dep, pods


def test_one_image_one_component_with_every_locator() -> None:
    dgd, dcd, dep, pods = _dynamo_chain()
    doc = build(view(dgd, owned=(dcd, dep), pods=tuple(pods)))
    (image,) = components(doc, "container")
    assert image["name"] == f"{DYN}/vllm-runtime"
    assert props(image, "aibom.evidence.spec") == [
        "Deployment/vllm-agg-vllmdecodeworker#/spec/template/spec/containers/0/image",
        "DynamoComponentDeployment/vllm-agg-vllmdecodeworker"
        "#/spec/podTemplate/spec/containers/0/image",
        "DynamoGraphDeployment/vllm-agg#/spec/components/0/podTemplate/spec/containers/0/image",
        "DynamoGraphDeployment/vllm-agg#/spec/components/1/podTemplate/spec/containers/0/image",
    ]
    # A rolling update left two digests for one tag: both listed, none chosen.
    assert props(image, "aibom.image.digest") == [D1, D2]
    assert image["hashes"] == [{"alg": "SHA-256", "content": d[7:]} for d in (D1, D2)]
    assert image["purl"] == (f"pkg:oci/vllm-runtime?repository_url={DYN}/vllm-runtime&tag=1.3.1")
    assert prop(image, "aibom.confidence") == "verified"
    assert props(image, "aibom.evidence.pod-status") == [
        f"Pod/vllm-agg-vllmdecodeworker-abc-{i}#/status/containerStatuses/0/imageID"
        for i in range(3)
    ]
    assert doc.digests == (D1, D2)
    (model,) = components(doc, "machine-learning-model")
    assert len(props(model, "aibom.evidence.spec")) == 3  # DGD, DCD, Deployment
    assert props(model, "aibom.evidence.pod-status") == []
    root = parsed(doc)["metadata"]["component"]
    assert props(root, "aibom.rollup.owned.0") == ["Deployment/vllm-agg-vllmdecodeworker"]
    assert props(root, "aibom.rollup.owned.1") == [
        "DynamoComponentDeployment/vllm-agg-vllmdecodeworker"
    ]


def test_single_digest_goes_into_the_purl() -> None:
    dep = deployment(containers=[{"name": "app", "image": "reg.io/app:1"}])
    pods = (pod_of(dep, "web-1", [("app", "reg.io/app:1", f"reg.io/app@{D1}")]),)
    (image,) = components(build(view(dep, pods=pods)), "container")
    assert image["purl"] == f"pkg:oci/app@{D1}?repository_url=reg.io/app&tag=1"


def test_pod_status_of_another_image_is_not_this_images_digest() -> None:
    dep = deployment(containers=[{"name": "app", "image": "reg.io/app:2"}])
    stale = pod_of(dep, "web-1", [("app", "reg.io/app:1", f"reg.io/app@{D1}")])
    other = pod_of(dep, "web-2", [("sidecar", "reg.io/app:2", f"reg.io/app@{D2}")])
    doc = build(view(dep, pods=(stale, other)))
    (image,) = components(doc, "container")
    assert "hashes" not in image
    assert prop(image, "aibom.confidence") == "declared"
    assert doc.digests == ()


@pytest.mark.parametrize(
    "image_id",
    [
        "reg.io/app@sha256:" + "A" * 64,  # uppercase hex
        "reg.io/app@SHA256:" + "1" * 64,  # uppercase algorithm
        "reg.io/app@sha256:" + "1" * 63,  # wrong length
        "reg.io/app@sha512:" + "1" * 64,  # sha512 of sha256's length
    ],
)
def test_an_invalid_status_digest_is_evidence_not_a_digest(image_id: str) -> None:
    dep = deployment(containers=[{"name": "app", "image": "reg.io/app:1"}])
    pods = (pod_of(dep, "web-1", [("app", "reg.io/app:1", image_id)]),)
    doc = build(view(dep, pods=pods))
    (image,) = components(doc, "container")
    assert "hashes" not in image
    assert props(image, "aibom.image.digest") == []
    assert props(image, "aibom.image.digest.invalid") == [image_id.rpartition("@")[2]]
    assert props(image, "aibom.evidence.pod-status") == [
        "Pod/web-1#/status/containerStatuses/0/imageID"
    ]
    assert prop(image, "aibom.confidence") == "declared"  # never verified by it
    assert image["purl"] == "pkg:oci/app?repository_url=reg.io/app&tag=1"
    assert doc.digests == ()


@pytest.mark.parametrize(
    ("image_id", "alg", "content"),
    [
        (f"reg.io/app@{D1}", "SHA-256", "1" * 64),
        ("reg.io/app@sha512:" + "a" * 128, "SHA-512", "a" * 128),
    ],
)
def test_a_valid_status_digest_is_a_verified_hash(image_id: str, alg: str, content: str) -> None:
    dep = deployment(containers=[{"name": "app", "image": "reg.io/app:1"}])
    pods = (pod_of(dep, "web-1", [("app", "reg.io/app:1", image_id)]),)
    doc = build(view(dep, pods=pods))
    (image,) = components(doc, "container")
    assert image["hashes"] == [{"alg": alg, "content": content}]
    assert prop(image, "aibom.confidence") == "verified"
    assert props(image, "aibom.image.digest.invalid") == []


def test_an_invalid_spec_digest_is_evidence_not_a_digest() -> None:
    bad = "reg.io/app@sha256:" + "A" * 64
    dep = deployment(containers=[{"name": "app", "image": bad}])
    doc = build(view(dep))
    (image,) = components(doc, "container")
    assert image["name"] == bad  # not a reference: kept as written
    assert "hashes" not in image and "purl" not in image
    assert props(image, "aibom.image.digest.invalid") == ["sha256:" + "A" * 64]
    assert props(image, "aibom.evidence.spec") == [
        "Deployment/web#/spec/template/spec/containers/0/image"
    ]
    assert doc.digests == ()


def test_pod_only_images_are_reported_with_pod_evidence() -> None:
    dep = deployment()
    pods = []
    for i in range(MAX_POD_EVIDENCE + 2):
        p = pod_of(dep, f"web-{i}", [("istio-proxy", "istio/proxyv2:1.22", f"istio@{D3}")])
        p["spec"]["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2:1.22"})
        pods.append(p)
    doc = build(view(dep, pods=tuple(reversed(pods))))
    proxy = by_ref(doc)["image:docker.io/istio/proxyv2:1.22"]
    # Alike pods say the same: the first (by name) names the spec, and digests
    # name at most MAX_POD_EVIDENCE pods.
    assert props(proxy, "aibom.evidence.spec") == ["Pod/web-0#/spec/containers/1/image"]
    assert props(proxy, "aibom.evidence.pod-status") == [
        f"Pod/web-{i}#/status/containerStatuses/0/imageID" for i in range(MAX_POD_EVIDENCE)
    ]
    assert props(proxy, "aibom.image.digest") == [D3]


def test_owned_indexes_follow_kind_then_name() -> None:
    owned = tuple(deployment(f"d{i:02d}") for i in reversed(range(12)))
    lws = deployment("root", kind="LeaderWorkerSet", api_version="leaderworkerset.x-k8s.io/v1")
    doc = build(view(lws, owned=owned))
    root = parsed(doc)["metadata"]["component"]
    for i in range(12):
        assert props(root, f"aibom.rollup.owned.{i}") == [f"Deployment/d{i:02d}"]
    assert [p["name"] for p in root["properties"]][-12:] == [
        f"aibom.rollup.owned.{i}" for i in range(12)
    ]


def test_walk_only_objects_are_never_listed_as_owned() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"}}
    pcs = {"apiVersion": "grove.io/v1alpha1", "kind": "PodClique", "metadata": {"name": "pc"}}
    doc = build(view(deployment(), owned=(rs, pcs, deployment("child"))))
    root = parsed(doc)["metadata"]["component"]
    assert [p["value"] for p in root["properties"] if "rollup" in p["name"]] == ["Deployment/child"]


def test_unresolved_root_says_why() -> None:
    doc = build(view(deployment(), status="unresolved", reason="Forbidden apps/ReplicaSet/x"))
    root = parsed(doc)["metadata"]["component"]
    assert props(root, "aibom.rollup.unresolved") == ["Forbidden apps/ReplicaSet/x"]


def test_a_root_without_descendants_renders_as_without_rollup() -> None:
    dep = deployment()
    plain = build(view(dep)).json_bytes
    assert build(view(dep, reason="ignored: status is root")).json_bytes == plain
    assert build_document(view(dep), default_registry(), tool_version=TOOL).json_bytes == plain
    names = [p["name"] for p in json.loads(plain)["metadata"]["component"]["properties"]]
    assert not [n for n in names if n.startswith("aibom.rollup")]


# --- models: absent, unresolved, linked ---------------------------------------------


def test_absent_model_is_unresolved_never_invented() -> None:
    dep = deployment(containers=[{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5"}])
    doc = build(view(dep))
    assert doc.models == ()
    (model,) = components(doc, "machine-learning-model")
    assert model["name"] == "unresolved"
    assert prop(model, "aibom.confidence") == "unresolved"
    assert prop(model, "aibom.model.unresolved") == "no model is named in the spec for vllm"
    assert "purl" not in model
    assert "identity" not in model["evidence"]
    assert model["bom-ref"] in depends(doc)["image:docker.io/vllm/vllm-openai:v0.8.5"]


def test_model_from_a_secret_is_unresolved_with_its_reason() -> None:
    c = {
        "name": "tgi",
        "image": "ghcr.io/huggingface/text-generation-inference:2.0.4",
        "env": [{"name": "MODEL_ID", "valueFrom": {"secretKeyRef": {"name": "s", "key": "m"}}}],
    }
    doc = build(view(deployment(containers=[c])))
    (model,) = components(doc, "machine-learning-model")
    assert prop(model, "aibom.model.unresolved") == "env MODEL_ID is set from a secretKeyRef"
    assert props(model, "aibom.evidence.spec") == [
        "Deployment/web#/spec/template/spec/containers/0/env/0"
    ]  # fmt: skip


def test_no_runtime_no_model_no_claim() -> None:
    doc = build(view(deployment(containers=[{"name": "web", "image": "nginx"}])))
    assert [c["type"] for c in parsed(doc)["components"]] == ["container"]


def test_annotation_model_and_pvc_model_source() -> None:
    c = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.8.5",
        "args": ["--model", "/models/llama-3-8b"],
        "volumeMounts": [
            {"name": "weights", "mountPath": "/models"},
            {"name": "logs", "mountPath": "/logs"},
        ],
    }
    dep = deployment(
        containers=[c],
        volumes=[{"name": "weights", "persistentVolumeClaim": {"claimName": "llama-weights"}},
                 {"name": "logs", "hostPath": {"path": "/var/log/x"}}],
        annotations={"model.aibom.dev/name": "meta-llama/Meta-Llama-3-8B",
                     "model.aibom.dev/revision": "62bd457"},
    )  # fmt: skip
    doc = build(view(dep))
    refs = by_ref(doc)
    ann = refs["model:meta-llama/Meta-Llama-3-8B@62bd457"]
    assert ann["purl"] == "pkg:huggingface/meta-llama/Meta-Llama-3-8B@62bd457"
    assert ann["version"] == "62bd457"
    assert props(ann, "aibom.evidence.annotation") == [
        "Deployment/web#/metadata/annotations/model.aibom.dev~1name"
    ]
    # A directory is where a model lies, not which: unresolved, the path kept.
    assert "model:/models/llama-3-8b" not in refs
    local = refs["model:unresolved:docker.io/vllm/vllm-openai:v0.8.5"]
    assert prop(local, "aibom.model.path") == "/models/llama-3-8b"
    assert prop(local, "aibom.model.unresolved") == (
        "--model /models/llama-3-8b: a local path, not a model identity"
    )
    assert depends(doc)[local["bom-ref"]] == ["data:pvc/llama-weights"]
    assert doc.models == ("meta-llama/Meta-Llama-3-8B",)
    assert prop(refs["data:pvc/llama-weights"], "aibom.data.mount-path") == "/models"
    assert "data:hostpath//var/log/x" in refs  # mounted by a serving container
    assert depends(doc)["model:meta-llama/Meta-Llama-3-8B@62bd457"] == []


def test_a_web_apps_volume_is_no_model_source() -> None:
    c = {"name": "web", "image": "nginx", "volumeMounts": [{"name": "v", "mountPath": "/d"}]}
    dep = deployment(containers=[c], volumes=[{"name": "v", "persistentVolumeClaim": {
        "claimName": "static"}}])  # fmt: skip
    assert components(build(view(dep)), "data") == []


def test_a_bare_mention_joins_the_only_revision() -> None:
    c = {"name": "vllm", "image": "vllm/vllm-openai:v0.8.5", "args": ["--model", QWEN]}
    dep = deployment(containers=[c], annotations={
        "model.aibom.dev/name": QWEN, "model.aibom.dev/revision": "abc"})  # fmt: skip
    (model,) = components(build(view(dep)), "machine-learning-model")
    assert (model["name"], model["version"]) == (QWEN, "abc")
    assert sorted(props(model, "aibom.model.named-by")) == ["--model", "annotation"]


# --- determinism and the input hash ---------------------------------------------------


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


def test_same_input_same_bytes() -> None:
    dgd, dcd, dep, pods = _dynamo_chain()
    first = build(view(dgd, owned=(dcd, dep), pods=tuple(pods)))
    again = build(view(copy.deepcopy(dgd), owned=(dep, dcd), pods=tuple(reversed(pods))))
    assert first == again
    rnd = random.Random(5)
    for _ in range(5):
        shuffled = build(
            view(
                _shuffled(dgd, rnd),
                owned=tuple(_shuffled(o, rnd) for o in (dcd, dep)),
                pods=tuple(_shuffled(p, rnd) for p in pods),
            )
        )
        assert shuffled.json_bytes == first.json_bytes
        assert shuffled.input_hash == first.input_hash


def test_ignored_fields_do_not_change_the_hash() -> None:
    dgd, dcd, dep, pods = _dynamo_chain()
    base = facts_of(view(dgd, owned=(dcd, dep), pods=tuple(pods)), REG)
    noisy = [copy.deepcopy(o) for o in (dgd, dcd, dep, *pods)]
    for o in noisy:
        o["metadata"].update(resourceVersion="999", generation=7, managedFields=[{"m": 1}])
        o.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
    for p in noisy[3:]:
        p["status"]["containerStatuses"][0]["restartCount"] = 4
        p["status"]["startTime"] = "2026-10-02T00:00:00Z"
    again = facts_of(view(noisy[0], owned=tuple(noisy[1:3]), pods=tuple(noisy[3:])), REG)
    assert input_hash(again) == input_hash(base)
    assert render(again, tool_version=TOOL) == render(base, tool_version=TOOL)


def test_the_hash_follows_what_is_rendered() -> None:
    dep = deployment()
    base = facts_of(view(dep), REG)
    h = input_hash(base, tool_version=TOOL)
    assert input_hash(base, tool_version="0.2.0") != h
    changed = copy.deepcopy(dep)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "reg.io/app:2"
    assert input_hash(facts_of(view(changed), REG), tool_version=TOOL) != h
    assert input_hash(facts_of(view(dep, owned=(deployment("c"),)), REG), tool_version=TOOL) != h
    doc = build(view(dep))
    assert doc.input_hash == h
    assert parsed(doc)["serialNumber"] == serial_number(h)
    assert build(view(dep), tool_version="0.2.0").json_bytes != doc.json_bytes


def _canonical_form(value: Any) -> Any:
    """The facts as JSON data, written apart from bom.py: dataclasses by field name
    (`mismatched` only when not empty: docs/aibom-format.md)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _canonical_form(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "mismatched" or getattr(value, f.name)
        }
    if isinstance(value, tuple | list):
        return [_canonical_form(v) for v in value]
    return str(value) if isinstance(value, str) else value  # an enum: its value


HOSTILE = 'q"\\ \x01\x1f\x7f \u2028\u2029 \u00fc \U0001f600 </script>'


def _hostile_facts() -> list[Any]:
    dgd, dcd, dep, pods = _dynamo_chain()
    main = {"name": "main", "image": "reg.io/vllm/vllm-openai:v0.8.5",
            "args": ["--model", f"org/m{HOSTILE}"]}  # fmt: skip
    odd = deployment("odd", containers=[main], annotations={"model.aibom.dev/name": HOSTILE})
    base = facts_of(view(dgd, owned=(dcd, dep), pods=tuple(pods)), REG)
    return [
        base,
        dataclasses.replace(base, unproven=("Pod/x", f"Pod/{HOSTILE}"), guarded=False),
        dataclasses.replace(base, guarded=True),
        dataclasses.replace(base, mismatched=(f"Pod/{HOSTILE}",)),
        facts_of(view(odd, status="unresolved", reason=f"NotFound {HOSTILE}"), REG),
    ]


def test_the_input_hash_is_sha256_over_the_jcs_bytes_of_the_facts() -> None:
    # Over a canonical serialization (RFC 8785), not Python's repr.
    seen = set()
    for facts in _hostile_facts():
        for tool in (TOOL, None):
            expected = jcs.canonicalize(
                {"facts": _canonical_form(facts), "format": FORMAT_VERSION, "tool": tool or ""}
            )
            assert canonical_facts(facts, tool_version=tool) == expected
            digest = "sha256:" + hashlib.sha256(expected).hexdigest()
            assert input_hash(facts, tool_version=tool) == digest
            seen.add(digest)
    # unproven, guarded, mismatched and the tool version each change it
    assert len(seen) == 10


def test_render_writes_the_bytes_of_the_stdlib_encoder() -> None:
    # orjson must not change a byte: sorted keys, compact, UTF-8.
    for facts in _hostile_facts():
        doc = document_json(facts, tool_version=TOOL)
        stdlib = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert render(facts, tool_version=TOOL) == stdlib.encode()


def test_serial_number_is_the_uuid5_of_the_hash() -> None:
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, "https://aibom.dev/aibom-rollup/serial")
    for digest in (D1, D2, "sha256:" + "f" * 64, "", "\u00fc\U0001f600"):
        assert serial_number(digest) == f"urn:uuid:{uuid.uuid5(namespace, digest)}"


def test_a_string_that_is_not_unicode_is_a_value_error() -> None:
    facts = facts_of(view(deployment("bad\ud800")), REG)
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        render(facts, tool_version=TOOL)
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        input_hash(facts, tool_version=TOOL)


@pytest.mark.parametrize(
    ("created", "timestamp"),
    [
        ("2026-10-01T12:00:00Z", "2026-10-01T12:00:00Z"),
        ("2026-10-01T14:00:00+02:00", "2026-10-01T12:00:00Z"),
        ("2026-10-01T12:00:00.123Z", "2026-10-01T12:00:00Z"),
        ("2026-13-01T12:00:00Z", EPOCH),
        ("2024-02-29T23:59:59Z", "2024-02-29T23:59:59Z"),
        ("2023-02-29T12:00:00Z", EPOCH),
        ("2026-10-01T24:00:00Z", EPOCH),
        ("0999-10-01T12:00:00Z", "0999-10-01T12:00:00Z"),
        ("0999-10-01T14:00:00.5+02:00", "0999-10-01T12:00:00Z"),
        ("0001-01-01T00:00:00+02:00", EPOCH),
        ("yesterday", EPOCH),
        (None, EPOCH),
        (12, EPOCH),
    ],
)
def test_timestamp_comes_from_the_root(created: Any, timestamp: str) -> None:
    dep = deployment()
    dep["metadata"]["creationTimestamp"] = created
    assert parsed(build(view(dep)))["metadata"]["timestamp"] == timestamp


def test_metadata() -> None:
    doc = parsed(build(view(deployment())))
    assert doc["specVersion"] == "1.6"
    assert doc["version"] == 1
    assert doc["metadata"]["tools"] == {
        "components": [{"type": "application", "name": "aibom-rollup", "version": TOOL}]
    }
    root = doc["metadata"]["component"]
    assert root["bom-ref"] == "workload:Deployment/ns/web@uid-Deployment-web"
    assert root["type"] == "application"
    assert [(p["name"], p["value"]) for p in root["properties"]] == [
        ("aibom.k8s.apiVersion", "apps/v1"),
        ("aibom.k8s.kind", "Deployment"),
        ("aibom.k8s.namespace", "ns"),
        ("aibom.k8s.uid", "uid-Deployment-web"),
    ]


# --- the library agrees -------------------------------------------------------------


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_normalised(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value


def _all_documents() -> list[Document]:
    docs = []
    for path in sorted(UPSTREAM.glob("*/examples/*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj["kind"] not in ("Service", "NIMCache"):
                docs.append(build(view(obj)))
    dgd, dcd, dep, pods = _dynamo_chain()
    docs.append(build(view(dgd, owned=(dcd, dep), pods=tuple(pods), status="unresolved",
                           reason="NotFound nvidia.com/X/y")))  # fmt: skip
    return docs


def test_cyclonedx_python_lib_reads_every_document_back_unchanged() -> None:
    for doc in _all_documents():
        ours = parsed(doc)
        theirs = json.loads(JsonV1Dot6(Bom.from_json(ours)).output_as_string())  # type: ignore[attr-defined]
        # The library writes the same instant as +00:00; everything else is equal.
        theirs["metadata"]["timestamp"] = theirs["metadata"]["timestamp"].replace("+00:00", "Z")
        assert _normalised(theirs) == _normalised(ours)


def test_validate_rejects_invalid_documents() -> None:
    good = parsed(build(view(deployment())))
    bad = copy.deepcopy(good)
    bad["components"][0]["type"] = "not-a-type"
    with pytest.raises(ValueError, match="strict validation"):
        validate(json.dumps(bad).encode())
    with pytest.raises(ValueError):
        validate(b"\xff")


# --- odd input ----------------------------------------------------------------------


WEIRD: list[Any] = [None, "", "x", 0, 1.5, True, [], {}, [None], {"a": None}, ["--model"],
                    [{"name": None}], "a/b", "$(X)", "sh", [1, 2]]  # fmt: skip


def _mutate(value: Any, rnd: random.Random) -> None:
    if isinstance(value, dict):
        for key in list(value):
            r = rnd.random()
            if r < 0.08:
                value[key] = rnd.choice(WEIRD)
            elif r < 0.1:
                del value[key]
            else:
                _mutate(value[key], rnd)
    elif isinstance(value, list):
        for i in range(len(value)):
            if rnd.random() < 0.08:
                value[i] = rnd.choice(WEIRD)
            else:
                _mutate(value[i], rnd)


def test_odd_input_gives_a_valid_document_never_a_traceback() -> None:
    objs = [d for p in sorted(UPSTREAM.glob("*/examples/*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d]  # fmt: skip
    dgd, dcd, dep, pods = _dynamo_chain()
    objs += [dgd, dcd, dep, *pods]
    rnd = random.Random(7)
    for _ in range(400):
        root, owned = copy.deepcopy(rnd.choice(objs)), copy.deepcopy(rnd.choice(objs))
        some_pods = copy.deepcopy(pods)
        for value in (root, owned, *some_pods):
            _mutate(value, rnd)
        build(view(root, owned=(owned,), pods=tuple(some_pods),
                   status=rnd.choice(["root", "unresolved"])))  # fmt: skip


@pytest.mark.parametrize("root", [{}, {"kind": "Deployment"}, {"metadata": "x"}, {"spec": 1}])
def test_a_root_with_almost_nothing(root: Obj) -> None:
    doc = build(view(root, owned=(None, "x", 3), pods=(None, [], {"kind": "Pod"})))  # type: ignore[arg-type]
    assert doc.images == ()
