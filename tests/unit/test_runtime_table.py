"""The runtime table: one test per image row and per command rule, lookalikes refused.

Detection is an exact table (aibom_core/runtime.py, docs/aibom-format.md), never
a substring: every positive row below has a negative neighbour that a
substring match would have taken.
"""

from __future__ import annotations

from typing import Any

import pytest

from aibom_core.bom import RootView, build_document, validate
from aibom_core.evidence import Confidence
from aibom_core.images import parse_image
from aibom_core.kinds import default_registry
from aibom_core.runtime import (
    IMAGE_RULES,
    MODULES,
    NAMED_IMAGES,
    PROGRAMS,
    SUBCOMMANDS,
    match_image,
    runtimes_of,
)
from aibom_core.scrape import Container, scrape
from tests.unit.kobj import bare_pod, container_spec
from tests.unit.test_model_rules import _document

I = Confidence.INFERRED  # noqa: E741


def container(
    image: str = "reg.io/custom:1",
    command: list[str] | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Container:
    listed = [{"name": k, "value": v} for k, v in env.items()] if env else None
    pod = bare_pod(container_spec(image, command=command, args=args, env=listed))
    (out,) = scrape(pod)
    return out


def found(c: Container) -> list[tuple[str, str | None, str]]:
    return sorted({(r.runtime, r.version, r.rule) for r in runtimes_of(c)})


DYN = "nvcr.io/nvidia/ai-dynamo"


# One row per IMAGE_RULES entry (test_every_image_rule_is_tested keeps it so).
@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("vllm/vllm-openai:v0.8.5", [("vllm", "0.8.5", "image docker.io/vllm/vllm-openai")]),
        ("vllm/vllm-tpu:v0.9.1", [("vllm", "0.9.1", "image docker.io/vllm/vllm-tpu")]),
        ("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521", [("vllm", None, "image docker.io/rocm/vllm")]),
        ("lmsysorg/sglang:v0.4.6.post1-cu124",
         [("sglang", "0.4.6.post1", "image docker.io/lmsysorg/sglang")]),
        ("lmsysorg/sglang-cpu:v0.4.10",
         [("sglang", "0.4.10", "image docker.io/lmsysorg/sglang-cpu")]),
        ("nvcr.io/nvidia/tensorrt-llm/release:0.21.0",
         [("tensorrt-llm", "0.21.0", "image nvcr.io/nvidia/tensorrt-llm/*")]),
        ("nvcr.io/nvidia/tritonserver:24.08-py3",
         [("triton", "24.08", "image nvcr.io/nvidia/tritonserver")]),
        ("nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3",
         [("tensorrt-llm", None, "image nvcr.io/nvidia/tritonserver"),
          ("triton", "24.08", "image nvcr.io/nvidia/tritonserver")]),
        # A bundled backend is a whole tag token, not a substring.
        ("nvcr.io/nvidia/tritonserver:24.08-trtllmx-py3",
         [("triton", "24.08", "image nvcr.io/nvidia/tritonserver")]),
        ("nvcr.io/nvidia/tritonserver:25.01-vllm-python-py3",
         [("triton", "25.01", "image nvcr.io/nvidia/tritonserver"),
          ("vllm", None, "image nvcr.io/nvidia/tritonserver")]),
        ("ghcr.io/huggingface/text-generation-inference:3.0.1",
         [("tgi", "3.0.1", "image ghcr.io/huggingface/text-generation-inference")]),
        ("ghcr.io/huggingface/tgi-gaudi:2.0.6",
         [("tgi", "2.0.6", "image ghcr.io/huggingface/tgi-gaudi")]),
        ("ghcr.io/huggingface/text-embeddings-inference:1.5",
         [("tei", "1.5", "image ghcr.io/huggingface/text-embeddings-inference")]),
        ("ghcr.io/huggingface/text-embeddings-inference:cpu-1.5.1",
         [("tei", "1.5.1", "image ghcr.io/huggingface/text-embeddings-inference")]),
        ("ghcr.io/huggingface/text-embeddings-inference:89-1.7.0",
         [("tei", "1.7.0", "image ghcr.io/huggingface/text-embeddings-inference")]),
        ("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.12.0",
         [("nim", "1.12.0", "image nvcr.io/nim/*")]),
        (f"{DYN}/vllm-runtime:1.3.1", [("vllm", None, f"image {DYN}/vllm-runtime")]),
        # Dynamo's nightly vLLM runtime: a nightly's tag is no release version.
        (f"{DYN}/vllm-runtime-nightly:2025-10-01",
         [("vllm", None, f"image {DYN}/vllm-runtime-nightly")]),
        (f"{DYN}/sglang-runtime:1.3.1", [("sglang", None, f"image {DYN}/sglang-runtime")]),
        (f"{DYN}/tensorrtllm-runtime:1.3.1",
         [("tensorrt-llm", None, f"image {DYN}/tensorrtllm-runtime")]),
        ("rayproject/ray:2.40.0-py311-gpu", [("ray", "2.40.0", "image docker.io/rayproject/ray")]),
        ("rayproject/ray-ml:2.9.3", [("ray", "2.9.3", "image docker.io/rayproject/ray-ml")]),
        ("rayproject/ray-llm:2.46.0-py311-cu124",
         [("ray", "2.46.0", "image docker.io/rayproject/ray-llm"),
          ("ray-serve", "2.46.0", "image docker.io/rayproject/ray-llm")]),
        ("anyscale/ray:2.44.1", [("ray", "2.44.1", "image docker.io/anyscale/ray")]),
        ("anyscale/ray-llm:2.44.1",
         [("ray", "2.44.1", "image docker.io/anyscale/ray-llm"),
          ("ray-serve", "2.44.1", "image docker.io/anyscale/ray-llm")]),
        ("openmmlab/lmdeploy:v0.6.0-cu12",
         [("lmdeploy", "0.6.0", "image docker.io/openmmlab/lmdeploy")]),
        ("ghcr.io/ggml-org/llama.cpp:server-cuda-b5200",
         [("llama.cpp", "b5200", "image ghcr.io/ggml-org/llama.cpp")]),
        ("ghcr.io/ggerganov/llama.cpp:server",
         [("llama.cpp", None, "image ghcr.io/ggerganov/llama.cpp")]),
        ("ollama/ollama:0.3.12", [("ollama", "0.3.12", "image docker.io/ollama/ollama")]),
        ("kserve/huggingfaceserver:v0.15.2",
         [("kserve-huggingfaceserver", "0.15.2", "image docker.io/kserve/huggingfaceserver")]),
        ("kserve/huggingfaceserver:latest-gpu",
         [("kserve-huggingfaceserver", None, "image docker.io/kserve/huggingfaceserver")]),
        ("kserve/sklearnserver:v0.15.2",
         [("kserve-sklearnserver", "0.15.2", "image docker.io/kserve/sklearnserver")]),
        ("kserve/xgbserver:latest",
         [("kserve-xgbserver", None, "image docker.io/kserve/xgbserver")]),
        ("kserve/lgbserver:latest",
         [("kserve-lgbserver", None, "image docker.io/kserve/lgbserver")]),
        ("kserve/pmmlserver:latest",
         [("kserve-pmmlserver", None, "image docker.io/kserve/pmmlserver")]),
        ("kserve/paddleserver:latest",
         [("kserve-paddleserver", None, "image docker.io/kserve/paddleserver")]),
        ("pytorch/torchserve-kfs:0.9.0",
         [("torchserve", "0.9.0", "image docker.io/pytorch/torchserve-kfs")]),
        ("pytorch/torchserve:0.9.0-cpu",
         [("torchserve", "0.9.0", "image docker.io/pytorch/torchserve")]),
        ("docker.io/seldonio/mlserver:1.5.0",
         [("mlserver", "1.5.0", "image docker.io/seldonio/mlserver")]),
        ("tensorflow/serving:2.6.2",
         [("tensorflow-serving", "2.6.2", "image docker.io/tensorflow/serving")]),
        # A mirror: the same repository path, whole segments, on another registry.
        ("harbor.corp/mirror/vllm/vllm-openai:v0.8.5",
         [("vllm", "0.8.5", "image-mirror */vllm/vllm-openai")]),
        ("registry.local:5000/lmsysorg/sglang:latest",
         [("sglang", None, "image-mirror */lmsysorg/sglang")]),
        ("docker.io/huggingface/text-generation-inference:2.4.0",
         [("tgi", "2.4.0", "image docker.io/huggingface/text-generation-inference")]),
    ],
)  # fmt: skip
def test_image_rule(image: str, expected: list[tuple[str, str | None, str]]) -> None:
    assert found(container(image)) == expected


@pytest.mark.parametrize(
    "image",
    [
        # Lookalikes: a substring match would have claimed every one.
        "some-mirror/sglang-but-different:v0.4.6",
        "some-mirror/sglang:v0.4.6",
        "lmsysorg/sglang-router:0.1.4",
        "my-vllm-proxy:1.0",
        "vllm/vllm-openai-fork:v0.8.5",
        "example/notvllm/vllm-openai-ish:1",
        "xvllm/vllm-openai:v0.8.5",
        # By name, only the whole last path segment `vllm` (NAMED_IMAGES).
        "ghcr.io/acme/vllm-proxy:1",
        "ghcr.io/acme/myvllm:1",
        "ghcr.io/acme/vllm/router:1",
        "reg.io/team/trtllm-tools:1",
        "reg.io/tensorrt-llm-helper:1",
        "reg.io/nvidia/tensorrt-llm/release:0.21.0",  # nvcr.io namespace, elsewhere
        "nvcr.io/nvidia/tritonserver-client:24.08",
        "reg.io/tritonserver-sdk:24.08",
        "nvcr.io/nvidia/tritonserver:24.08-py3-sdk",  # the client SDK image, no server
        "huggingface/text-generation-inference-client:1",
        "ghcr.io/huggingface/text-embeddings-inference-proxy:1",
        "reg.io/nim/meta/llama:1",
        "nvcr.io/nvidia/nim-tools:1",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime-dev:1.3.1",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime-nightly-tools:1",
        "lmsysorg/sglang-cpu-builder:1",
        "nvcr.io/nvidia/ai-dynamo/foo-runtime:1.3.1",
        "rayproject/raylet:2.9",
        "openmmlab/lmdeploy-builder:1",
        "ghcr.io/ggml-org/llama.cpp-tools:1",
        "ollama/ollama-webui:1",
        "kserve/storage-initializer:v0.15.2",
        "kserve/huggingfaceserver-proxy:1",
        "tensorflow/tensorflow:2.16.1",
        "ollamaproxy/ollama-x:1",
        "nginx:1.27",
    ],
)
def test_lookalike_images_are_not_runtimes(image: str) -> None:
    assert found(container(image)) == []


@pytest.mark.parametrize(
    ("image", "command", "expected"),
    [
        # vLLM built by an organisation of its own, under its own name: named by the
        # image's last path segment (the tag is that build's, no vLLM version).
        ("ghcr.io/acme/vllm:v0.8.5", None, [("vllm", None, "image-name */vllm")]),
        ("myorg/vllm:0.8.5", None, [("vllm", None, "image-name */vllm")]),
        ("registry.corp:5000/ml/serving/vllm:latest", None, [("vllm", None, "image-name */vllm")]),
        # ... or by its entrypoint: both say vLLM.
        ("ghcr.io/acme/vllm:v0.8.5", ["vllm", "serve", "m"],
         [("vllm", None, "command vllm serve"), ("vllm", None, "image-name */vllm")]),
        # A command that names another runtime makes the name ambiguous: only the command.
        ("ghcr.io/acme/vllm:v0.8.5", ["python", "-m", "sglang.launch_server"],
         [("sglang", None, "command python -m sglang")]),
        # A row of the table wins over the name (its version is the tag's).
        ("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521", None,
         [("vllm", None, "image docker.io/rocm/vllm")]),
    ],
)  # fmt: skip
def test_an_image_named_after_its_runtime_where_unambiguous(
    image: str, command: list[str] | None, expected: list[tuple[str, str | None, str]]
) -> None:
    assert found(container(image, command=command)) == expected


@pytest.mark.parametrize(
    ("image", "command"),
    [
        ("rayproject/ray:2.40.0-py311-gpu", ["serve", "run", "app:main"]),
        ("rayproject/ray:2.40.0-py311-gpu",
         ["sh", "-c", "ray start --head && serve deploy s.yaml"]),
        ("rayproject/ray-ml:2.40.0", ["serve", "run", "config.yaml"]),
        ("anyscale/ray:2.40.0", ["serve", "run", "config.yaml"]),
    ],
)  # fmt: skip
def test_a_ray_image_serving_through_ray_serve_is_named_ray_serve_with_rays_version(
    image: str, command: list[str]
) -> None:
    """Ray Serve ships inside Ray: a Ray release image that runs a Serve entrypoint is
    Ray Serve of that release (and still a Ray cluster)."""
    got = {(r, v) for r, v, _ in found(container(image, command=command))}
    assert got == {("ray", "2.40.0"), ("ray-serve", "2.40.0")}


def test_a_ray_image_without_serve_is_no_ray_serve() -> None:
    got = found(container("rayproject/ray:2.40.0", command=["ray", "start", "--head"]))
    assert got == [("ray", "2.40.0", "image docker.io/rayproject/ray")]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["vllm", "serve", "Qwen/Qwen3-0.6B"], [("vllm", None, "command vllm serve")]),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"],
         [("vllm", None, "command python -m vllm")]),
        (["python", "-m", "sglang.launch_server"], [("sglang", None, "command python -m sglang")]),
        (["python3.11", "-m", "tensorrt_llm.commands.serve"],
         [("tensorrt-llm", None, "command python -m tensorrt_llm")]),
        (["trtllm-serve", "m"], [("tensorrt-llm", None, "command trtllm-serve")]),
        (["/opt/tritonserver/bin/tritonserver"], [("triton", None, "command tritonserver")]),
        (["text-generation-launcher"], [("tgi", None, "command text-generation-launcher")]),
        (["python", "-m", "text_generation_server.cli"],
         [("tgi", None, "command python -m text_generation_server")]),
        (["text-embeddings-router", "--model-id", "BAAI/bge-m3"],
         [("tei", None, "command text-embeddings-router")]),
        (["lmdeploy", "serve", "api_server", "internlm/internlm2_5-7b-chat"],
         [("lmdeploy", None, "command lmdeploy serve")]),
        (["python", "-m", "lmdeploy", "serve"], [("lmdeploy", None, "command python -m lmdeploy")]),
        (["/app/llama-server", "-m", "/models/x.gguf"],
         [("llama.cpp", None, "command llama-server")]),
        (["python3", "-m", "llama_cpp.server"],
         [("llama.cpp", None, "command python -m llama_cpp.server")]),
        (["ollama", "serve"], [("ollama", None, "command ollama serve")]),
        (["serve", "run", "config.yaml"], [("ray-serve", None, "command serve run")]),
        (["serve", "deploy", "config.yaml"], [("ray-serve", None, "command serve deploy")]),
        (["python", "-m", "dynamo.vllm"],
         [("dynamo-worker", None, "command python -m dynamo.vllm"),
          ("vllm", None, "command python -m dynamo.vllm")]),
        (["python3", "-m", "dynamo.sglang"],
         [("dynamo-worker", None, "command python -m dynamo.sglang"),
          ("sglang", None, "command python -m dynamo.sglang")]),
        (["python3", "-m", "dynamo.trtllm"],
         [("dynamo-worker", None, "command python -m dynamo.trtllm"),
          ("tensorrt-llm", None, "command python -m dynamo.trtllm")]),
        (["python", "-m", "dynamo.frontend"],
         [("dynamo-frontend", None, "command python -m dynamo.frontend")]),
        (["python", "-m", "dynamo.planner.planner_sla"],
         [("dynamo-planner", None, "command python -m dynamo.planner")]),
        (["sh", "-c", "exec python3 -m sglang.launch_server --model-path x"],
         [("sglang", None, "command python -m sglang")]),
    ],
)  # fmt: skip
def test_command_rule(command: list[str], expected: list[tuple[str, str | None, str]]) -> None:
    assert found(container(command=command)) == expected


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-m", "vllm_proxy"],
        ["python", "-m", "my.vllm"],
        ["python", "serve.py", "--model", "x"],
        ["pythonic", "-m", "vllm"],
        ["vllm-router", "serve"],
        ["vllm", "bench"],
        ["echo", "vllm", "serve"],
        ["tritonserver-wrapper"],
        ["my-llama-server"],
        ["lmdeploy", "lite"],
        ["serve", "status"],
        ["ollama", "run", "llama3"],  # a client, not the server
        ["text-embeddings-router-proxy"],
    ],
)
def test_lookalike_commands_are_not_runtimes(command: list[str]) -> None:
    assert found(container(command=command)) == []


def test_every_table_entry_has_a_positive_test() -> None:
    """Each image row, module, program and subcommand above is exercised by a positive row."""
    images = [p[0] for p in _marks(test_image_rule)]
    for rule in IMAGE_RULES:
        assert any(
            (m := match_image(parse_image(str(i)))) is not None and m[0] == rule  # type: ignore[arg-type]
            for i in images
        ), rule.path
    commands = [" ".join(p[0]) for p in _marks(test_command_rule)]
    for module in MODULES:
        assert any(f"-m {module}" in c for c in commands), module
    for program in PROGRAMS:
        assert any(program in c for c in commands), program
    for program, sub in SUBCOMMANDS:
        assert any(f"{program} {sub}" in c for c in commands), (program, sub)
    named = [p[0] for p in _marks(test_an_image_named_after_its_runtime_where_unambiguous)]
    for name in NAMED_IMAGES:
        assert any(str(i).partition(":")[0].endswith(f"/{name}") for i in named), name


def _marks(fn: Any) -> list[Any]:
    (mark,) = [m for m in fn.pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


@pytest.mark.parametrize(
    ("image", "env", "expected"),
    [
        # No version in the tag: a literal env var the runtime's images set says it.
        ("vllm/vllm-openai:latest", {"VLLM_VERSION": "0.9.2"},
         ("vllm", "0.9.2", "env VLLM_VERSION")),
        ("nvcr.io/nvidia/tritonserver:latest", {"TRITON_SERVER_VERSION": "2.50.0"},
         ("triton", "2.50.0", "env TRITON_SERVER_VERSION")),
        ("rayproject/ray:nightly", {"RAY_VERSION": "v2.41.0"},
         ("ray", "2.41.0", "env RAY_VERSION")),
        # The tag wins over env; env that is no version, or another runtime's, says nothing.
        ("vllm/vllm-openai:v0.8.5", {"VLLM_VERSION": "0.9.2"}, ("vllm", "0.8.5", "image tag")),
        ("vllm/vllm-openai:latest", {"VLLM_VERSION": "main"}, ("vllm", None, None)),
        ("vllm/vllm-openai:latest", {"SGLANG_VERSION": "0.4.6"}, ("vllm", None, None)),
    ],
)  # fmt: skip
def test_version_from_tag_or_env(
    image: str, env: dict[str, str], expected: tuple[str, str | None, str | None]
) -> None:
    (rf,) = runtimes_of(container(image, env=env))
    assert (rf.runtime, rf.version, rf.version_from) == expected
    assert rf.confidence is I


def test_the_document_records_the_rule_and_version_source() -> None:
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "uid": "u"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "c", "image": "vllm/vllm-openai:latest",
            "command": ["vllm", "serve", "Qwen/Qwen3-0.6B"],
            "env": [{"name": "VLLM_VERSION", "value": "0.9.2"}],
        }]}}},
    }  # fmt: skip
    view = RootView(root=dep, status="root", reason=None, owned=(), pods=())
    doc = build_document(view, default_registry(), tool_version="0")
    validate(doc.json_bytes)
    import json

    (rt,) = [c for c in json.loads(doc.json_bytes)["components"] if c["type"] == "framework"]
    props = sorted((p["name"], p["value"]) for p in rt["properties"])
    assert (rt["name"], rt["version"]) == ("vllm", "0.9.2")
    assert ("aibom.runtime.rule", "command vllm serve") in props
    assert ("aibom.runtime.rule", "image docker.io/vllm/vllm-openai") in props
    assert ("aibom.runtime.version-from", "env VLLM_VERSION") in props
    assert ("aibom.evidence.spec", "Deployment/d#/spec/template/spec/containers/0/env/0") in props


@pytest.mark.parametrize(
    ("image", "command", "framework"),
    [
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime-nightly:2025-10-01", None, ("vllm", None)),
        ("lmsysorg/sglang-cpu:v0.4.10", None, ("sglang", "0.4.10")),
        ("ghcr.io/acme/vllm:v0.8.5", None, ("vllm", None)),
        ("rayproject/ray:2.40.0-py311", ["serve", "run", "app:main"], ("ray-serve", "2.40.0")),
    ],
)  # fmt: skip
def test_images_that_exist_reach_the_document(
    image: str, command: list[str] | None, framework: tuple[str, str | None]
) -> None:
    """Images that exist and were missed, in the document: the runtime component, and (a serving
    runtime that names no model) the unresolved model placeholder."""
    spec: dict[str, Any] = {"name": "c", "image": image}
    if command:
        spec["command"] = command
    components = _document([spec])["components"]
    frameworks = {(c["name"], c.get("version")) for c in components if c["type"] == "framework"}
    assert framework in frameworks
    models = [c for c in components if c["type"] == "machine-learning-model"]
    assert [m["name"] for m in models] == ["unresolved"]
