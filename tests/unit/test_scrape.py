"""Per-kind scrapers: every container where the CRDs and examples put it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.evidence import Confidence, Source
from aibom_core.scrape import Container, nim_image, pod_signature, scrape

UPSTREAM = Path(
    os.environ.get("AIBOM_SHARED_DIR")
    or Path(__file__).resolve().parents[1] / "upstream"  # vendored upstream files: SOURCES.md there
)


def upstream(path: str, kind: str) -> dict[str, Any]:
    """The one object of `kind` in an upstream example file."""
    docs = [d for d in yaml.safe_load_all((UPSTREAM / path).read_text()) if d]
    (obj,) = [d for d in docs if d["kind"] == kind]
    assert isinstance(obj, dict)
    return obj


def where(containers: tuple[Container, ...]) -> list[tuple[str, str, str]]:
    return [(c.pointer, c.name, c.image) for c in containers]


DGD_C = "/spec/components/{}/podTemplate/spec/containers/0"
ALPHA = "/spec/services/{}/extraPodSpec/mainContainer"
LWT = "/spec/leaderWorkerTemplate/{}Template/spec/containers/0"
VLLM_RT = "nvcr.io/nvidia/ai-dynamo/vllm-runtime"
SGLANG_RT = "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1"
NGINX_U = "nginxinc/nginx-unprivileged:1.27"


@pytest.mark.parametrize(
    ("path", "kind", "expected"),
    [
        ("dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment", [
            (DGD_C.format(0), "main", f"{VLLM_RT}:1.3.1"),
            (DGD_C.format(1), "main", f"{VLLM_RT}:1.3.1"),
        ]),
        ("dynamo/examples/vllm-disagg.yaml", "DynamoGraphDeployment", [
            (DGD_C.format(i), "main", f"{VLLM_RT}:my-tag") for i in range(3)
        ]),
        ("dynamo/examples/sglang-v1beta1-disagg-multinode.yaml", "DynamoGraphDeployment", [
            (DGD_C.format(i), "main", SGLANG_RT) for i in range(3)
        ]),
        # v1alpha1 services are a map: read in key order, never dict order.
        ("dynamo/examples/vllm-v1alpha1-disagg.yaml", "DynamoGraphDeployment", [
            (ALPHA.format(s), "main", f"{VLLM_RT}:${{VERSION}}")
            for s in ("Frontend", "VllmDecodeWorker", "VllmPrefillWorker")
        ]),
        ("lws/examples/leaderworkerset_v1_leaderworkerset.yaml", "LeaderWorkerSet", [
            (LWT.format("worker"), "nginx", NGINX_U),
        ]),
        ("lws/examples/leaderworkerset_multi_template.yaml", "LeaderWorkerSet", [
            (LWT.format("leader"), "nginx2", NGINX_U),
            (LWT.format("worker"), "nginx", NGINX_U),
        ]),
        ("lws/examples/sglang_lws.yaml", "LeaderWorkerSet", [
            (LWT.format("leader"), "sglang-leader", "lmsysorg/sglang:latest"),
            (LWT.format("worker"), "sglang-worker", "lmsysorg/sglang:latest"),
        ]),
        ("lws/examples/vllm-gpu-lws.yaml", "LeaderWorkerSet", [
            (LWT.format("leader"), "vllm-leader", "vllm/vllm-openai:v0.8.5"),
            (LWT.format("worker"), "vllm-worker", "vllm/vllm-openai:v0.8.5"),
        ]),
        ("lws/examples/disaggregatedset_v1_disaggregatedset.yaml", "DisaggregatedSet", [
            (f"/spec/roles/{r}/spec/leaderWorkerTemplate/{t}Template/spec/containers/0",
             "worker", "nginx:latest")
            for r in (0, 1) for t in ("leader", "worker")
        ]),
        ("nim-operator/examples/standalone-basic-llm.yaml", "NIMService", [
            ("/spec", "", "nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"),
        ]),
        ("nim-operator/examples/kserve-standard-llm.yaml", "NIMService", [
            ("/spec", "", "nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"),
        ]),
        ("nim-operator/examples/multi-node-nimservice.yaml", "NIMService", [
            ("/spec", "", "nvcr.io/nim/deepseek-ai/deepseek-r1:1.7.3"),
        ]),
        ("grove/examples/single-node-aggregated.yaml", "PodCliqueSet", [
            ("/spec/template/cliques/0/spec/podSpec/containers/0", "model-worker", "nginx:latest"),
        ]),
        ("grove/examples/simple1.yaml", "PodCliqueSet", [
            (f"/spec/template/cliques/{i}/spec/podSpec/containers/0", n, "nginx:latest")
            for i, n in enumerate(("pca", "pcb", "pcc", "pcd"))
        ]),
    ],
)  # fmt: skip
def test_upstream_examples(path: str, kind: str, expected: list[tuple[str, str, str]]) -> None:
    assert where(scrape(upstream(path, kind))) == expected


def test_upstream_pointers_resolve() -> None:
    """Every pointer a scraper records points at the value it read (RFC 6901)."""

    def resolve(obj: Any, ptr: str) -> Any:
        for raw in ptr.split("/")[1:]:
            token = raw.replace("~1", "/").replace("~0", "~")
            obj = obj[int(token)] if isinstance(obj, list) else obj[token]
        return obj

    for path in sorted(UPSTREAM.glob("*/examples/*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            for c in scrape(obj):
                resolve(obj, c.pointer)
                if obj["kind"] != "NIMService" and c.image:
                    # (a KServe predictor `model` may name no image: its runtime does)
                    assert resolve(obj, c.image_pointer) == c.image
                for decl in c.models:
                    if decl.source is Source.SPEC:
                        assert resolve(obj, decl.pointer)
                for i, word in enumerate(c.args):
                    assert str(resolve(obj, f"{c.args_pointer}/{i}")) == word
                for var in c.env:
                    assert resolve(obj, var.pointer)["name"] == var.name


def _template(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {}, "spec": {"containers": list(containers), **spec}}


C = {"name": "app", "image": "reg.io/app:1"}
# The shape of KubeRay's config/samples (ray-service.sample.yaml), two worker groups.
RAY_SPEC = {
    "rayVersion": "2.46.0",
    "headGroupSpec": {"rayStartParams": {}, "template": _template(
        {"name": "ray-head", "image": "rayproject/ray:2.46.0"})},
    "workerGroupSpecs": [
        {"groupName": "small-group", "replicas": 1, "rayStartParams": {},
         "template": _template({"name": "ray-worker", "image": "ray-w:1"})},
        {"groupName": "gpu-group", "replicas": 1, "rayStartParams": {},
         "template": _template({"name": "gpu", "image": "ray-g:1"})},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        *[
            ({"apiVersion": "apps/v1", "kind": k, "metadata": {"name": "x"},
              "spec": {"template": _template(C)}},
             [("/spec/template/spec/containers/0", "app", "reg.io/app:1")])
            for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")
        ],
        ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
          "spec": {"template": _template(C, initContainers=[{"name": "i", "image": "init:1"}])}},
         [("/spec/template/spec/initContainers/0", "i", "init:1"),
          ("/spec/template/spec/containers/0", "app", "reg.io/app:1")]),
        ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"},
          "spec": {"jobTemplate": {"spec": {"template": _template(C)}}}},
         [("/spec/jobTemplate/spec/template/spec/containers/0", "app", "reg.io/app:1")]),
        ({"apiVersion": "grove.io/v1alpha1", "kind": "PodClique", "metadata": {"name": "x"},
          "spec": {"podSpec": {"containers": [C]}}},
         [("/spec/podSpec/containers/0", "app", "reg.io/app:1")]),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
          "spec": {"containers": [C], "initContainers": [{"name": "i", "image": "init:1"}]}},
         [("/spec/initContainers/0", "i", "init:1"),
          ("/spec/containers/0", "app", "reg.io/app:1")]),
        # A kind added by configuration, scraped by the shape it has.
        ({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"},
          "spec": {"template": _template(C)}},
         [("/spec/template/spec/containers/0", "app", "reg.io/app:1")]),
        # A same-named kind of another group is not read as the apps shape.
        ({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "x"},
          "spec": {"podSpec": {"containers": [C]}}},
         [("/spec/podSpec/containers/0", "app", "reg.io/app:1")]),
        # DCD, v1beta1: the component spec at top level.
        ({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoComponentDeployment",
          "metadata": {"name": "g-worker"},
          "spec": {"name": "worker", "type": "worker", "backendFramework": "vllm",
                   "modelRef": {"name": "Qwen/Qwen3-0.6B", "revision": "main"},
                   "podTemplate": {"spec": {"containers": [
                       {"name": "main", "image": f"{VLLM_RT}:1.3.1"},
                       {"name": "side", "image": "busybox"}]}}}},
         [("/spec/podTemplate/spec/containers/0", "main", f"{VLLM_RT}:1.3.1"),
          ("/spec/podTemplate/spec/containers/1", "side", "busybox")]),
        # DCD, v1alpha1: extraPodSpec at top level, plus a frontend sidecar object.
        ({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
          "metadata": {"name": "g-fe"},
          "spec": {"componentType": "frontend",
                   "extraPodSpec": {"mainContainer": {"image": "rt:1"},
                                    "containers": [{"name": "log", "image": "fluentbit:3"}]},
                   "frontendSidecar": {"image": "fe:1", "args": ["--x"]}}},
         [("/spec/extraPodSpec/containers/0", "log", "fluentbit:3"),
          ("/spec/extraPodSpec/mainContainer", "main", "rt:1"),
          ("/spec/frontendSidecar", "", "fe:1")]),
        ({"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService", "metadata": {"name": "n"},
          "spec": {"image": {"repository": "nvcr.io/nim/meta/llama3-8b-instruct", "tag": 1.0},
                   "initContainers": [
                       {"name": "i", "image": {"repository": "busybox", "tag": "1"}}],
                   "sidecarContainers": [
                       {"name": "s", "image": {"repository": "envoy", "tag": "v1"}}]}},
         [("/spec", "", "nvcr.io/nim/meta/llama3-8b-instruct:1.0"),
          ("/spec/initContainers/0", "i", "busybox:1"),
          ("/spec/sidecarContainers/0", "s", "envoy:v1")]),
        # KubeRay v1: a RayClusterSpec (head group, worker groups), alone or inside.
        ({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
          "spec": RAY_SPEC},
         [("/spec/headGroupSpec/template/spec/containers/0", "ray-head", "rayproject/ray:2.46.0"),
          ("/spec/workerGroupSpecs/0/template/spec/containers/0", "ray-worker", "ray-w:1"),
          ("/spec/workerGroupSpecs/1/template/spec/containers/0", "gpu", "ray-g:1")]),
        ({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "r"},
          "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": RAY_SPEC}},
         [("/spec/rayClusterConfig/headGroupSpec/template/spec/containers/0", "ray-head",
           "rayproject/ray:2.46.0"),
          ("/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/containers/0", "ray-worker",
           "ray-w:1"),
          ("/spec/rayClusterConfig/workerGroupSpecs/1/template/spec/containers/0", "gpu",
           "ray-g:1")]),
        ({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
          "spec": {"entrypoint": "python x.py", "rayClusterSpec": RAY_SPEC,
                   "submitterPodTemplate": _template({"name": "submit", "image": "sub:1"})}},
         [("/spec/rayClusterSpec/headGroupSpec/template/spec/containers/0", "ray-head",
           "rayproject/ray:2.46.0"),
          ("/spec/rayClusterSpec/workerGroupSpecs/0/template/spec/containers/0", "ray-worker",
           "ray-w:1"),
          ("/spec/rayClusterSpec/workerGroupSpecs/1/template/spec/containers/0", "gpu",
           "ray-g:1"),
          ("/spec/submitterPodTemplate/spec/containers/0", "submit", "sub:1")]),
        # A RayJob that runs on an existing cluster (clusterSelector): nothing of its own.
        ({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
          "spec": {"entrypoint": "python x.py", "clusterSelector": {"ray.io/cluster": "c"}}},
         []),
    ],
)  # fmt: skip
def test_kinds(obj: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert where(scrape(obj)) == expected


def _main(obj: dict[str, Any]) -> Container:
    (main,) = [c for c in scrape(obj) if c.name == "main"]
    return main


def test_dynamo_structured_hints_reach_the_main_container() -> None:
    dcd = {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoComponentDeployment",
        "metadata": {"name": "g-worker"},
        "spec": {
            "type": "decode",
            "backendFramework": "sglang",
            "modelRef": {"name": "Qwen/Qwen3-0.6B", "revision": "abc"},
            "frontendSidecar": "fe",
            "podTemplate": {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "rt:1"},
                        {"name": "fe", "image": "rt:1"},
                    ]
                }
            },
        },
    }
    main = _main(dcd)
    assert [(m.id, m.revision, m.via, m.pointer) for m in main.models] == [
        ("Qwen/Qwen3-0.6B", "abc", "modelRef", "/spec/modelRef/name")
    ]
    assert [(r.runtime, r.pointer) for r in main.runtimes] == [
        ("dynamo-worker", "/spec/type"),
        ("sglang", "/spec/backendFramework"),
    ]
    (fe,) = [c for c in scrape(dcd) if c.name == "fe"]
    assert [(r.runtime, r.pointer) for r in fe.runtimes] == [
        ("dynamo-frontend", "/spec/frontendSidecar")
    ]
    assert fe.models == ()


def test_dynamo_graph_env_is_merged_behind_the_containers_own() -> None:
    dgd = upstream("dynamo/examples/sglang-v1beta1-disagg-multinode.yaml", "DynamoGraphDeployment")
    decode = scrape(dgd)[1]
    assert [(e.name, e.value, e.value_from, e.pointer) for e in decode.env] == [
        ("HF_TOKEN", None, "secretKeyRef", "/spec/env/0"),
        ("GLOO_SOCKET_IFNAME", "eth0", None, "/spec/env/1"),
    ]


def test_dynamo_v1alpha1_pvc_mounts() -> None:
    dgd = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g"},
        "spec": {
            "pvcs": [{"name": "model-cache", "create": True}],
            "services": {
                "Worker": {
                    "componentType": "worker",
                    "modelRef": {"name": "m"},
                    "volumeMounts": [{"name": "model-cache", "mountPoint": "/models"}],
                    "extraPodSpec": {"mainContainer": {"image": "rt:1"}},
                }
            },
        },
    }
    main = _main(dgd)
    assert [(v.kind, v.name, v.mount_path, v.pointer) for v in main.volumes] == [
        ("pvc", "model-cache", "/models", "/spec/pvcs/0")
    ]
    assert [m.pointer for m in main.models] == ["/spec/services/Worker/modelRef/name"]


def test_nim_storage_and_status() -> None:
    nim = upstream("nim-operator/examples/standalone-basic-llm.yaml", "NIMService")
    nim["spec"]["storage"]["nimCache"]["profile"] = "tensorrt_llm-h100-fp8-tp1"
    nim["spec"]["storage"]["hostPath"] = "/mnt/nim"
    nim["status"] = {"model": {"name": "meta/llama-3.2-1b-instruct", "clusterEndpoint": "x"}}
    (main,) = scrape(nim)
    assert [(v.kind, v.name, v.profile, v.pointer) for v in main.volumes] == [
        ("nimcache", "meta-llama-3-2-1b-instruct", "tensorrt_llm-h100-fp8-tp1",
         "/spec/storage/nimCache"),
        ("hostpath", "/mnt/nim", None, "/spec/storage/hostPath"),
    ]  # fmt: skip
    assert [(m.id, m.confidence, m.source, m.pointer) for m in main.models] == [
        ("meta/llama-3.2-1b-instruct", Confidence.VERIFIED, Source.STATUS, "/status/model/name")
    ]
    assert [(r.runtime, r.confidence) for r in main.runtimes] == [("nim", Confidence.DECLARED)]


@pytest.mark.parametrize(
    ("image", "reference"),
    [
        ({"repository": "nvcr.io/nim/a/b", "tag": "1.0"}, "nvcr.io/nim/a/b:1.0"),
        ({"repository": "nvcr.io/nim/a/b", "tag": 2}, "nvcr.io/nim/a/b:2"),
        ({"repository": "nvcr.io/nim/a/b"}, "nvcr.io/nim/a/b"),
        ({"repository": "r", "tag": "sha256:" + "c" * 64}, "r@sha256:" + "c" * 64),
        ({"tag": "1"}, ""),
        ("nvcr.io/nim/a/b:1", ""),
        (None, ""),
    ],
)
def test_nim_image(image: Any, reference: str) -> None:
    assert nim_image(image) == reference


def test_annotations_name_the_model_for_every_serving_container() -> None:
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "d",
            "annotations": {"model.aibom.dev/name": "org/m", "model.aibom.dev/revision": "r1"},
        },
        "spec": {
            "template": {
                "metadata": {"annotations": {"model.aibom.dev/name": "org/other"}},
                "spec": {
                    "initContainers": [{"name": "i", "image": "init"}],
                    "containers": [{"name": "a", "image": "a"}],
                },
            }
        },
    }
    init, app = scrape(dep)
    assert init.models == ()
    assert [(m.id, m.revision, m.source, m.pointer) for m in app.models] == [
        ("org/m", "r1", Source.ANNOTATION, "/metadata/annotations/model.aibom.dev~1name"),
        (
            "org/other",
            None,
            Source.ANNOTATION,
            "/spec/template/metadata/annotations/model.aibom.dev~1name",
        ),
    ]


def test_pod_volumes_only_pvc_and_hostpath() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "llama"}},
                {"name": "host", "hostPath": {"path": "/data/models"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "kube-api-access-abcde", "projected": {"sources": []}},
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "volumeMounts": [
                        {"name": n, "mountPath": f"/{n}"}
                        for n in ("models", "host", "shm", "kube-api-access-abcde", "missing")
                    ],
                }
            ],
        },
    }
    (c,) = scrape(pod)
    assert c.in_pod
    assert [(v.kind, v.name, v.mount_path, v.pointer) for v in c.volumes] == [
        ("pvc", "llama", "/models", "/spec/volumes/0"),
        ("hostpath", "/data/models", "/host", "/spec/volumes/1"),
    ]


def _pod(token_volume: str, image: str = "i") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": token_volume, "uid": token_volume},
        "spec": {
            "volumes": [{"name": token_volume, "projected": {}}],
            "containers": [{"name": "c", "image": image, "volumeMounts": [{"name": token_volume}]}],
        },
        "status": {"phase": token_volume},
    }


def test_pod_signature_ignores_identity_and_token_volumes() -> None:
    assert pod_signature(_pod("kube-api-access-a")) == pod_signature(_pod("kube-api-access-b"))
    assert pod_signature(_pod("a")) != pod_signature(_pod("a", image="other"))


ODD: list[Any] = [
    None,
    "Deployment",
    [],
    {},
    {"kind": "Deployment"},
    {"apiVersion": "apps/v1", "kind": "Deployment", "spec": None},
    {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": "x"}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": []}}},
    {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": None}},
    {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [None, "x", 3]}},
    {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
     "spec": {"components": {"a": 1}, "services": [1, 2]}},
    {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
     "spec": {"services": {"a": None, "b": {"extraPodSpec": "x"}, 3: {"componentType": 1}}}},
    {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
     "spec": {"image": "nvcr.io/nim/a/b:1", "storage": {"nimCache": "x"}}, "status": []},
    {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
     "spec": {"leaderWorkerTemplate": {"leaderTemplate": None, "workerTemplate": 5}}},
    {"apiVersion": "ray.io/v1", "kind": "RayCluster",
     "spec": {"headGroupSpec": [], "workerGroupSpecs": {"a": 1}}},
    {"apiVersion": "ray.io/v1", "kind": "RayJob",
     "spec": {"rayClusterSpec": {"workerGroupSpecs": [None, {"template": 3}]},
              "submitterPodTemplate": "x"}},
    {"apiVersion": "ray.io/v1", "kind": "RayService", "spec": {"rayClusterConfig": None}},
]  # fmt: skip


@pytest.mark.parametrize("obj", ODD)
def test_odd_input_never_raises(obj: Any) -> None:
    for c in scrape(obj):
        assert isinstance(c.image, str)


def test_odd_values_keep_what_can_be_read() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": 7},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "args": ["--port", 8000, None, True, {"x": 1}],
                    "env": [{"name": "A", "value": 1}, {"value": "no name"}, "junk"],
                    "volumeMounts": "junk",
                }
            ]
        },
    }
    (c,) = scrape(pod)
    assert c.subject == "Pod/7"
    assert c.args == ("--port", "8000")
    assert [(e.name, e.value) for e in c.env] == [("A", "1")]
