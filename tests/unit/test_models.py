"""Model identity and runtime detection: tricky command lines, env, absence, upstream."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.evidence import Confidence
from aibom_core.models import hf_purl, is_hf_id, models_of, nim_model, normalise_id, origin_of
from aibom_core.runtime import runtimes_of
from aibom_core.scrape import Container, scrape
from tests.unit.kobj import bare_pod, container_spec

UPSTREAM = Path(
    os.environ.get("AIBOM_SHARED_DIR")
    or Path(__file__).resolve().parents[1] / "upstream"  # vendored upstream files: SOURCES.md there
)
D = Confidence.DECLARED
I = Confidence.INFERRED  # noqa: E741
U = Confidence.UNRESOLVED
V = Confidence.VERIFIED


def container(
    *,
    image: str = "reg.io/custom:1",
    command: list[Any] | None = None,
    args: list[Any] | None = None,
    env: list[dict[str, Any]] | None = None,
) -> Container:
    pod = bare_pod(container_spec(image, command=command, args=args, env=env))
    (out,) = scrape(pod)
    return out


def found(c: Container) -> list[tuple[str | None, str | None, Confidence, str]]:
    return [(m.id, m.revision, m.confidence, m.via) for m in models_of(c)]


def secret(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


QWEN = "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # The flag spellings, list form.
        ({"args": ["--model", QWEN]}, [(QWEN, None, D, "--model")]),
        ({"args": ["--model-path", QWEN]}, [(QWEN, None, D, "--model-path")]),
        ({"args": ["--model-id", QWEN]}, [(QWEN, None, D, "--model-id")]),
        ({"args": ["--model_path", QWEN]}, [(QWEN, None, D, "--model_path")]),
        ({"args": [f"--model={QWEN}"]}, [(QWEN, None, D, "--model")]),
        # Quotes written into a list element are not part of the id.
        ({"args": ["--model", f'"{QWEN}"']}, [(QWEN, None, D, "--model")]),
        ({"args": [f"--model='{QWEN}'"]}, [(QWEN, None, D, "--model")]),
        # Command and args concatenate (command = ENTRYPOINT, args = CMD).
        ({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"],
          "args": [QWEN]}, [(QWEN, None, D, "--model")]),
        # A revision flag goes to the model; served-model-name is an alias of it.
        ({"args": ["--model", QWEN, "--revision", "abc123", "--served-model-name", "qwen"]},
         [(QWEN, "abc123", D, "--model")]),
        # Positional models.
        ({"command": ["vllm", "serve", QWEN, "--port", "8000"]}, [(QWEN, None, D, "vllm serve")]),
        ({"command": ["/usr/local/bin/vllm"], "args": ["serve", QWEN]},
         [(QWEN, None, D, "vllm serve")]),
        ({"command": ["trtllm-serve", QWEN]}, [(QWEN, None, D, "trtllm-serve")]),
        ({"command": ["ollama", "run", "llama3:8b"]}, [("llama3:8b", None, D, "ollama run")]),
        ({"command": ["huggingface-cli", "download", QWEN, "--local-dir", "/m"]},
         [(QWEN, None, D, "huggingface-cli download")]),
        ({"command": ["vllm", "serve", "--port", "1"]}, []),
        # Shell strings: tokenised with shlex, split into commands; inferred.
        ({"command": ["sh", "-c", f"python -m dynamo.vllm --model {QWEN} --port 1"]},
         [(QWEN, None, I, "--model")]),
        ({"command": ["/bin/bash", "-lc",
                      f'setup.sh && exec python3 -m sglang.launch_server --model-path "{QWEN}"']},
         [(QWEN, None, I, "--model-path")]),
        ({"command": ["bash", "-c"], "args": [f"echo hi; vllm serve '{QWEN}' --tp 2"]},
         [(QWEN, None, I, "vllm serve")]),
        ({"command": ["sh", "-c", f"python3 -m vllm.entrypoints.openai.api_server \\\n"
                                  f"  --model {QWEN} \\\n  --port 8000\n"]},
         [(QWEN, None, I, "--model")]),
        # An unbalanced quote: whitespace tokenising still finds the flag.
        ({"command": ["sh", "-c", f"vllm serve --model {QWEN} --x 'oops"]},
         [(QWEN, None, I, "--model")]),
        # One list element holding several flags.
        ({"args": [f"--model {QWEN} --port 8000"]}, [(QWEN, None, I, "--model")]),
        # $(VAR) is expanded from literal env, like the kubelet does.
        ({"args": ["--model", "$(MODEL)"], "env": [{"name": "MODEL", "value": QWEN}]},
         [(QWEN, None, D, "--model"), (QWEN, None, D, "env MODEL")]),
        ({"args": ["--model", "$(M)"], "env": [{"name": "M", "value": QWEN}]},
         [(QWEN, None, D, "--model")]),
        ({"command": ["sh", "-c", "vllm serve $M"], "env": [{"name": "M", "value": QWEN}]},
         [(QWEN, None, I, "vllm serve")]),
        # ... and never guessed when it cannot be read.
        ({"args": ["--model", "$(M)"], "env": [secret("M")]}, [(None, None, U, "--model")]),
        ({"args": ["--model", "$(M)"]}, [(None, None, U, "--model")]),
        ({"command": ["sh", "-c", "vllm serve ${M}"]}, [(None, None, U, "vllm serve")]),
        ({"env": [secret("HF_MODEL_ID")]}, [(None, None, U, "env HF_MODEL_ID")]),
        # Env names that mean a model.
        ({"env": [{"name": "HF_MODEL_ID", "value": QWEN}]}, [(QWEN, None, D, "env HF_MODEL_ID")]),
        ({"env": [{"name": "MODEL_ID", "value": QWEN},
                  {"name": "MODEL_REVISION", "value": "r2"}]},
         [(QWEN, "r2", D, "env MODEL_ID")]),
        ({"env": [{"name": "NIM_MODEL_NAME", "value": f"hf://{QWEN}"}]},
         [(QWEN, None, D, "env NIM_MODEL_NAME")]),
        ({"env": [{"name": "MODEL_NAME", "value": f"https://huggingface.co/{QWEN}/tree/v1"}]},
         [(QWEN, "v1", D, "env MODEL_NAME")]),
        ({"env": [{"name": "HF_TOKEN", "value": "x"}, {"name": "MODEL_SERVER", "value": "y"}]}, []),
        # Only an alias: it becomes the model, inferred.
        ({"args": ["--served-model-name", "my-llm"]}, [("my-llm", None, I, "served-model-name")]),
        # Things that are not models.
        ({"command": ["python3", "-m", "dynamo.frontend"]}, []),
        ({"args": ["--model"]}, []),
        ({"args": ["--model", "--port"]}, []),
        ({"args": ["--tokenizer", QWEN, "--modelx", "y"]}, []),
        ({"command": ["sh", "-c", "echo --model"]}, []),
        ({}, []),
    ],
)  # fmt: skip
def test_model_findings(kwargs: dict[str, Any], expected: list[Any]) -> None:
    assert found(container(**kwargs)) == expected


def test_unresolved_says_why() -> None:
    (f,) = models_of(container(env=[secret("MODEL_ID")]))
    assert f.reason == "env MODEL_ID is set from a secretKeyRef"
    (f,) = models_of(container(args=["--model", "$(M)"], env=[secret("M")]))
    assert f.reason == "--model $(M): $M is set from a secretKeyRef"
    (f,) = models_of(container(command=["sh", "-c", "vllm serve $NOPE"]))
    assert f.reason == "vllm serve $NOPE: $NOPE is not set in the spec"


def test_served_names_ride_on_the_model() -> None:
    (f,) = models_of(container(args=["--model", QWEN, "--served-model-name", "qwen"]))
    assert (f.id, f.served_names) == (QWEN, ("qwen",))


def test_nim_image_model() -> None:
    assert found(container(image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3")) == [
        ("meta/llama-3.1-8b-instruct", None, I, "nim-image")
    ]


@pytest.mark.parametrize(
    ("image", "model"),
    [
        ("nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0", "meta/llama-3.2-1b-instruct"),
        ("nvcr.io/nim/deepseek-ai/deepseek-r1:1.7.3", "deepseek-ai/deepseek-r1"),
        ("nvcr.io/nim/nvidia/llm-nim:1.0", None),  # the multi-LLM NIM: no one model
        ("nvcr.io/nvidia/tritonserver:24.08-py3", None),
        ("docker.io/nim/a/b:1", None),
        ("nvcr.io/nim/a:1", None),
    ],
)
def test_nim_model(image: str, model: str | None) -> None:
    assert nim_model(image) == model


@pytest.mark.parametrize(
    ("model_id", "hf", "origin", "purl"),
    [
        (QWEN, True, "huggingface", "pkg:huggingface/Qwen/Qwen3-0.6B"),
        ("meta-llama/Llama-3.1-8B-Instruct", True, "huggingface",
         "pkg:huggingface/meta-llama/Llama-3.1-8B-Instruct"),
        ("/models/llama", False, "local-path", None),
        ("./m", False, "local-path", None),
        ("s3://bucket/m", False, "uri", None),
        ("llama3:8b", False, "name", None),
        ("a/b/c", False, "name", None),
        ("../x/y", False, "name", None),
    ],
)  # fmt: skip
def test_ids(model_id: str, hf: bool, origin: str, purl: str | None) -> None:
    assert is_hf_id(model_id) is hf
    assert origin_of(model_id) == origin
    assert hf_purl(model_id, None) == purl


def test_hf_purl_revision() -> None:
    assert hf_purl(QWEN, "ABC123") == "pkg:huggingface/Qwen/Qwen3-0.6B@abc123"


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        (f"hf://{QWEN}", (QWEN, None)),
        (f"hf.co/{QWEN}", (QWEN, None)),
        (f"https://huggingface.co/{QWEN}/", (QWEN, None)),
        (f"https://huggingface.co/{QWEN}/tree/main", (QWEN, "main")),
        (f' "{QWEN}" ', (QWEN, None)),
        (f"{QWEN}/", (QWEN, None)),
        ("/", ("/", None)),
    ],
)
def test_normalise_id(raw: str, normalised: tuple[str, str | None]) -> None:
    assert normalise_id(raw) == normalised


def runtimes(c: Container) -> list[tuple[str, str | None, Confidence]]:
    return sorted({(r.runtime, r.version, r.confidence) for r in runtimes_of(c)})


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"image": "vllm/vllm-openai:v0.8.5"}, [("vllm", "0.8.5", I)]),
        ({"image": "vllm/vllm-openai:latest"}, [("vllm", None, I)]),
        ({"image": "lmsysorg/sglang:v0.4.6-cu124"}, [("sglang", "0.4.6", I)]),
        ({"image": "nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3"},
         [("tensorrt-llm", None, I), ("triton", "24.08", I)]),
        ({"image": "nvcr.io/nvidia/tensorrt-llm/release:0.21.0"}, [("tensorrt-llm", "0.21.0", I)]),
        ({"image": "ghcr.io/huggingface/text-generation-inference:2.0.4"}, [("tgi", "2.0.4", I)]),
        ({"image": "ollama/ollama:0.3.12"}, [("ollama", "0.3.12", I)]),
        ({"image": "nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"}, [("nim", "1.12.0", I)]),
        # A Dynamo runtime image's tag is Dynamo's version, not its backend's.
        ({"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
          "command": ["python3", "-m", "dynamo.vllm"]},
         [("dynamo-worker", "1.3.1", I), ("vllm", None, I)]),
        ({"image": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.3.1",
          "command": ["python3", "-m", "dynamo.trtllm"]},
         [("dynamo-worker", "1.3.1", I), ("tensorrt-llm", None, I)]),
        ({"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
          "command": ["python3", "-m", "dynamo.frontend"]},
         [("dynamo-frontend", "1.3.1", I), ("vllm", None, I)]),
        ({"command": ["python", "-m", "dynamo.planner.planner_sla"]},
         [("dynamo-planner", None, I)]),
        # From the command of an image we do not know: no version claimed.
        ({"command": ["vllm", "serve", QWEN]}, [("vllm", None, I)]),
        ({"command": ["sh", "-c", "exec python3 -m sglang.launch_server --model-path x"]},
         [("sglang", None, I)]),
        ({"command": ["tritonserver", "--model-repository=/models"]}, [("triton", None, I)]),
        ({"command": ["text-generation-launcher", "--model-id", QWEN]}, [("tgi", None, I)]),
        ({"command": ["ollama", "serve"]}, [("ollama", None, I)]),
        ({"command": ["env", "A=1", "trtllm-serve", QWEN]}, [("tensorrt-llm", None, I)]),
        # Conservative: nothing we recognise, no claim.
        ({"image": "nginx:1.27"}, []),
        ({"image": "python:3.11", "command": ["python", "serve.py", "--model", QWEN]}, []),
        ({"command": ["echo", "vllm", "serve"]}, []),
    ],
)  # fmt: skip
def test_runtime_findings(kwargs: dict[str, Any], expected: list[Any]) -> None:
    assert runtimes(container(**kwargs)) == expected


def test_nim_use_sglang_env() -> None:
    nim = next(
        d
        for d in yaml.safe_load_all(
            (UPSTREAM / "nim-operator/examples/multi-node-nimservice.yaml").read_text()
        )
        if d["kind"] == "NIMService"
    )
    (main,) = scrape(nim)
    assert runtimes(main) == [("nim", "1.7.3", D), ("nim", "1.7.3", I), ("sglang", None, I)]
