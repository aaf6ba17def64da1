"""Which serving runtime a container runs, and its version when the tag says it.

Detected from three places, each kept as evidence:

- structured fields (declared): a Dynamo component's `type` (frontend,
  planner, worker/prefill/decode) and the graph's `backendFramework`; the
  NIMService kind itself (handed over by the scrapers);
- the command line (inferred): `python -m vllm.entrypoints...`, `vllm serve`,
  `python -m sglang.launch_server`, `trtllm-serve`, `python -m tensorrt_llm`,
  `tritonserver`, `text-generation-launcher`, `ollama serve`,
  `python -m dynamo.{vllm,sglang,trtllm}` (a Dynamo worker and its backend),
  `python -m dynamo.frontend`, `python -m dynamo.planner...`;
- the image name (inferred): `vllm/vllm-openai`, `lmsysorg/sglang`,
  `nvcr.io/nvidia/tritonserver`, `nvcr.io/nvidia/tensorrt-llm/...`,
  `huggingface/text-generation-inference`, `ollama/ollama`, `nvcr.io/nim/...`,
  `nvcr.io/nvidia/ai-dynamo/<backend>-runtime`.

A version comes only from the tag of an image that *is* that runtime's release
(`vllm/vllm-openai:v0.8.5` is vLLM 0.8.5; `ai-dynamo/vllm-runtime:1.3.1` is
Dynamo 1.3.1 and says nothing of the vLLM inside). An image we do not know
and a command we do not recognise make no runtime claim at all. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from aibom_core.commandline import Env, Token, segments
from aibom_core.evidence import Confidence, Source
from aibom_core.images import ImageRef, parse_image, version_of_tag
from aibom_core.scrape import Container, EnvVar, RuntimeDecl

# Runtimes that load a model (a frontend or a planner routes; it does not).
SERVING = frozenset(
    {"vllm", "sglang", "tensorrt-llm", "triton", "tgi", "ollama", "nim", "dynamo-worker"}
)
DYNAMO_ROLES = frozenset({"dynamo-frontend", "dynamo-worker", "dynamo-planner"})

_MODULES = {
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "tensorrt_llm": ("tensorrt-llm",),
    "text_generation_server": ("tgi",),
    "dynamo.vllm": ("dynamo-worker", "vllm"),
    "dynamo.sglang": ("dynamo-worker", "sglang"),
    "dynamo.trtllm": ("dynamo-worker", "tensorrt-llm"),
    "dynamo.frontend": ("dynamo-frontend",),
    "dynamo.planner": ("dynamo-planner",),
}
_PROGRAMS = {
    "tritonserver": ("triton",),
    "text-generation-launcher": ("tgi",),
    "trtllm-serve": ("tensorrt-llm",),
}
_SUBCOMMANDS = {("vllm", "serve"): ("vllm",), ("ollama", "serve"): ("ollama",)}
# Words that run the next word as the program.
_WRAPPERS = frozenset({"exec", "env", "nohup", "time", "stdbuf", "uv", "run", "uvx", "sudo"})


@dataclass(frozen=True, slots=True)
class RuntimeFinding:
    runtime: str
    version: str | None
    confidence: Confidence
    source: Source
    pointer: str


def _module_runtimes(module: str) -> tuple[str, ...]:
    """`dynamo.planner.planner_sla` -> dynamo-planner; `vllm.entrypoints.openai...` -> vllm."""
    parts = module.split(".")
    for n in (2, 1):
        found = _MODULES.get(".".join(parts[:n]))
        if found is not None:
            return found
    return ()


def _command_runtimes(tokens: list[Token]) -> list[tuple[str, Token]]:
    """The runtimes one command starts, each with the token that says so."""
    i = 0
    while i < len(tokens) and (
        tokens[i].text in _WRAPPERS or ("=" in tokens[i].text and tokens[i].text[0] != "-")
    ):
        i += 1
    if i >= len(tokens):
        return []
    program = tokens[i].text.rpartition("/")[2]
    nxt = tokens[i + 1].text if i + 1 < len(tokens) else ""
    if program.startswith("python"):
        for j in range(i + 1, len(tokens) - 1):
            if tokens[j].text == "-m":
                module = tokens[j + 1]
                return [(r, module) for r in _module_runtimes(module.text)]
        return []
    if program in _PROGRAMS:
        return [(r, tokens[i]) for r in _PROGRAMS[program]]
    if (program, nxt) in _SUBCOMMANDS:
        return [(r, tokens[i]) for r in _SUBCOMMANDS[(program, nxt)]]
    return []


def _image_runtimes(ref: ImageRef) -> tuple[tuple[str, ...], frozenset[str]]:
    """(runtimes the image names, runtimes whose version is the image's tag)."""
    path = ref.path.lower()
    name = ref.name.lower()
    if ref.registry == "nvcr.io" and path.startswith("nim/"):
        return ("nim",), frozenset({"nim"})
    if "ai-dynamo/" in f"{path}/" and name.endswith("-runtime"):
        backend = name.removesuffix("-runtime")
        found = {"vllm": "vllm", "sglang": "sglang", "tensorrtllm": "tensorrt-llm",
                 "trtllm": "tensorrt-llm"}.get(backend)  # fmt: skip
        return ((found,) if found else ()), DYNAMO_ROLES
    if name == "tritonserver":
        tag = (ref.tag or "").lower()
        extra = tuple(r for key, r in (("trtllm", "tensorrt-llm"), ("vllm", "vllm")) if key in tag)
        return ("triton", *extra), frozenset({"triton"})
    if "tensorrt-llm" in path or "tensorrt_llm" in path or "trtllm" in name:
        first = ref.registry == "nvcr.io" and path.startswith("nvidia/tensorrt-llm/")
        return ("tensorrt-llm",), frozenset({"tensorrt-llm"} if first else ())
    if name == "text-generation-inference":
        return ("tgi",), frozenset({"tgi"} if path.startswith("huggingface/") else ())
    if "sglang" in name:
        return ("sglang",), frozenset({"sglang"} if path == "lmsysorg/sglang" else ())
    if "vllm" in name:
        first = ref.registry == "docker.io" and path.startswith("vllm/")
        return ("vllm",), frozenset({"vllm"} if first else ())
    if name == "ollama":
        return ("ollama",), frozenset({"ollama"} if path == "ollama/ollama" else ())
    return (), frozenset()


def runtimes_of(c: Container) -> tuple[RuntimeFinding, ...]:
    """Every runtime finding of one container (cached on its content, not its object)."""
    key = (c.image, c.image_pointer, c.command, c.command_pointer, c.args, c.args_pointer, c.env)
    return _runtimes(key, c.runtimes)


_Key = tuple[str, str, tuple[str, ...], str, tuple[str, ...], str, tuple[EnvVar, ...]]


@lru_cache(maxsize=8192)
def _runtimes(key: _Key, decls: tuple[RuntimeDecl, ...]) -> tuple[RuntimeFinding, ...]:
    image, image_pointer, command, command_pointer, args, args_pointer, env_vars = key
    ref = parse_image(image)
    named, versioned = _image_runtimes(ref) if ref is not None else ((), frozenset())
    version = version_of_tag(ref.tag) if ref is not None else None
    env = Env.of(env_vars)
    raw: list[tuple[str, Confidence, Source, str]] = [
        (d.runtime, d.confidence, d.source, d.pointer) for d in decls
    ]
    for tokens in segments(command, command_pointer, args, args_pointer, env):
        for runtime, tok in _command_runtimes(tokens):
            raw.append((runtime, Confidence.INFERRED, Source.SPEC, tok.pointer))
    raw += [(r, Confidence.INFERRED, Source.SPEC, image_pointer) for r in named]
    if env.values.get("NIM_USE_SGLANG", "").strip().lower() in {"1", "true", "yes"}:
        ptr = next(v.pointer for v in env_vars if v.name == "NIM_USE_SGLANG")
        raw.append(("sglang", Confidence.INFERRED, Source.SPEC, ptr))
    return tuple(
        RuntimeFinding(
            runtime=runtime,
            version=version if runtime in versioned else None,
            confidence=confidence,
            source=source,
            pointer=ptr,
        )
        for runtime, confidence, source, ptr in raw
    )
