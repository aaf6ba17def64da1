"""Which serving runtime a container runs, and its version when the tag or env says it.

Detection is an explicit table (`IMAGE_RULES`, `MODULES`, `PROGRAMS`,
`SUBCOMMANDS`), never a substring: `some-mirror/sglang-but-different` is not
SGLang, `my-vllm-proxy` is not vLLM. Every finding names the rule that matched
(`aibom.runtime.rule`), from three places:

- structured fields (declared): a Dynamo component's `type` (frontend,
  planner, worker/prefill/decode) and the graph's `backendFramework`; the
  NIMService kind; a KServe predictor's `modelFormat` / `runtime` (handed over
  by the scrapers);
- the command line (inferred), matched on the program's basename, its
  subcommand, or the `python -m` module (a dotted prefix of the module):
  `vllm serve`, `python -m vllm.entrypoints...`, `python -m sglang.launch_server`,
  `trtllm-serve`, `python -m tensorrt_llm`, `tritonserver`,
  `text-generation-launcher`, `text-embeddings-router`, `lmdeploy serve`,
  `python -m lmdeploy`, `llama-server`, `python -m llama_cpp.server`,
  `ollama serve`, `serve run|deploy` (Ray Serve), `python -m dynamo.*`;
- the image repository (inferred), matched exactly: the repository path on
  the registry the project publishes to (`docker.io/vllm/vllm-openai`), or
  the same path as a whole-segment suffix on any other registry (a mirror:
  `mirror.local/team/vllm/vllm-openai`); nvcr.io namespaces (`nvcr.io/nim/...`,
  `nvcr.io/nvidia/tensorrt-llm/...`) only on nvcr.io;
- the image's name (inferred), where that is unambiguous (`NAMED_IMAGES`): an
  organisation's own build under the runtime's own name (`ghcr.io/acme/vllm`),
  the whole last path segment, when no table row matched and the command
  names no other serving runtime. Its tag is that build's: no version.

A version comes from the tag of an image that *is* that runtime's release
(`vllm/vllm-openai:v0.8.5` is vLLM 0.8.5; `ai-dynamo/vllm-runtime:1.3.1` is
Dynamo 1.3.1 and says nothing of the vLLM inside), else from a literal env
var the runtime's images set (`VLLM_VERSION`, `TRITON_SERVER_VERSION`, ...,
`VERSION_ENV`). An image we do not know and a command we do not recognise
make no runtime claim at all. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from aibom_core.commandline import Env, Token, segments
from aibom_core.evidence import Confidence, Source
from aibom_core.images import ImageRef, parse_image, version_of_tag
from aibom_core.scrape import Container, EnvVar, RuntimeDecl

# Runtimes that load a model (a frontend, a planner or a bare Ray cluster do not).
SERVING = frozenset(
    {
        "vllm",
        "sglang",
        "tensorrt-llm",
        "triton",
        "tgi",
        "tei",
        "ollama",
        "nim",
        "dynamo-worker",
        "lmdeploy",
        "llama.cpp",
        "ray-serve",
    }
)
DYNAMO_ROLES = frozenset({"dynamo-frontend", "dynamo-worker", "dynamo-planner"})


@dataclass(frozen=True, slots=True)
class ImageRule:
    """One known image repository: what it runs, and whose version its tag is."""

    path: str  # repository path without the registry; a prefix when it ends in "/"
    registries: frozenset[str]  # where the project publishes it
    runtimes: tuple[str, ...]  # what the image runs
    versioned: frozenset[str]  # the runtimes whose version is the tag
    mirrors: bool = True  # also match the path as a suffix on other registries
    tag_prefix: bool = False  # the tag may start with a variant (`cpu-1.5`, `89-1.5`)
    build_tag: bool = False  # llama.cpp: the version is a `b<build>` tag token


def _rule(path: str, registry: str, *runtimes: str, **kw: object) -> ImageRule:
    versioned = kw.pop("versioned", None)
    return ImageRule(
        path=path,
        registries=frozenset(registry.split()),
        runtimes=runtimes,
        versioned=frozenset(runtimes) if versioned is None else versioned,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


DOCKER = "docker.io"
GHCR = "ghcr.io"
NVCR = "nvcr.io"
RAY = frozenset({"ray", "ray-serve"})
# The runtime table. Each row is a repository a project publishes (checked
# against each project's docs); docs/aibom-format.md lists it.
IMAGE_RULES: tuple[ImageRule, ...] = (
    _rule("vllm/vllm-openai", DOCKER, "vllm"),
    _rule("vllm/vllm-tpu", DOCKER, "vllm"),
    _rule("rocm/vllm", DOCKER, "vllm"),
    _rule("lmsysorg/sglang", DOCKER, "sglang"),
    _rule("lmsysorg/sglang-cpu", DOCKER, "sglang"),  # SGLang's CPU (Xeon) build
    _rule("nvidia/tensorrt-llm/", NVCR, "tensorrt-llm", mirrors=False),
    _rule("nvidia/tritonserver", NVCR, "triton"),
    _rule("huggingface/text-generation-inference", GHCR + " " + DOCKER, "tgi"),
    _rule("huggingface/tgi-gaudi", GHCR, "tgi"),
    _rule("huggingface/text-embeddings-inference", GHCR, "tei", tag_prefix=True),
    _rule("nim/", NVCR, "nim", mirrors=False),
    _rule("nvidia/ai-dynamo/vllm-runtime", NVCR, "vllm", versioned=DYNAMO_ROLES),
    # Dynamo's nightly vLLM runtime: a nightly's tag is no release's version.
    _rule("nvidia/ai-dynamo/vllm-runtime-nightly", NVCR, "vllm", versioned=frozenset()),
    _rule("nvidia/ai-dynamo/sglang-runtime", NVCR, "sglang", versioned=DYNAMO_ROLES),
    _rule("nvidia/ai-dynamo/tensorrtllm-runtime", NVCR, "tensorrt-llm", versioned=DYNAMO_ROLES),
    # Ray Serve ships inside Ray: a Ray image's tag is also the version of the Serve
    # a command of it runs (`serve run`), though the image alone runs no Serve.
    _rule("rayproject/ray", DOCKER, "ray", versioned=RAY),
    _rule("rayproject/ray-ml", DOCKER, "ray", versioned=RAY),
    _rule("rayproject/ray-llm", DOCKER, "ray", "ray-serve"),
    _rule("anyscale/ray", DOCKER, "ray", versioned=RAY),
    _rule("anyscale/ray-llm", DOCKER, "ray", "ray-serve"),
    _rule("openmmlab/lmdeploy", DOCKER, "lmdeploy"),
    _rule("ggml-org/llama.cpp", GHCR, "llama.cpp", build_tag=True),
    _rule("ggerganov/llama.cpp", GHCR, "llama.cpp", build_tag=True),
    _rule("ollama/ollama", DOCKER, "ollama"),
    # KServe's model servers (config/runtimes of KServe v0.15.2), named as the
    # ServingRuntime software they are (docs/aibom-format.md, KServe).
    _rule("kserve/huggingfaceserver", DOCKER, "kserve-huggingfaceserver"),
    _rule("kserve/sklearnserver", DOCKER, "kserve-sklearnserver"),
    _rule("kserve/xgbserver", DOCKER, "kserve-xgbserver"),
    _rule("kserve/lgbserver", DOCKER, "kserve-lgbserver"),
    _rule("kserve/pmmlserver", DOCKER, "kserve-pmmlserver"),
    _rule("kserve/paddleserver", DOCKER, "kserve-paddleserver"),
    _rule("pytorch/torchserve-kfs", DOCKER, "torchserve"),
    _rule("pytorch/torchserve", DOCKER, "torchserve"),
    _rule("seldonio/mlserver", DOCKER, "mlserver"),
    _rule("tensorflow/serving", DOCKER, "tensorflow-serving"),
)
# An image's last path segment that names exactly one runtime, whoever publishes it
# (`ghcr.io/acme/vllm`: an organisation's own vLLM build). The whole segment
# (`vllm-proxy`, `myvllm` are not vLLM), and only where unambiguous (module doc).
NAMED_IMAGES: dict[str, tuple[str, ...]] = {"vllm": ("vllm",)}
NAME_RULE = "image-name */"
# Triton images whose tag names a bundled backend (`24.08-trtllm-python-py3`):
# a whole `-`-separated tag token, not a substring. A `sdk` token is the
# client SDK image (`24.08-py3-sdk`): no server runs there.
TRITON_TAG_BACKENDS = {"trtllm": "tensorrt-llm", "vllm": "vllm"}
# `python -m <module>`: the module or a dotted prefix of it.
MODULES: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "tensorrt_llm": ("tensorrt-llm",),
    "text_generation_server": ("tgi",),
    "lmdeploy": ("lmdeploy",),
    "llama_cpp.server": ("llama.cpp",),
    "dynamo.vllm": ("dynamo-worker", "vllm"),
    "dynamo.sglang": ("dynamo-worker", "sglang"),
    "dynamo.trtllm": ("dynamo-worker", "tensorrt-llm"),
    "dynamo.frontend": ("dynamo-frontend",),
    "dynamo.planner": ("dynamo-planner",),
}
# A program, by the basename of the command's first word.
PROGRAMS: dict[str, tuple[str, ...]] = {
    "tritonserver": ("triton",),
    "text-generation-launcher": ("tgi",),
    "text-embeddings-router": ("tei",),
    "trtllm-serve": ("tensorrt-llm",),
    "llama-server": ("llama.cpp",),
}
# A program and its first argument.
SUBCOMMANDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm", "serve"): ("vllm",),
    ("ollama", "serve"): ("ollama",),
    ("lmdeploy", "serve"): ("lmdeploy",),
    ("serve", "run"): ("ray-serve",),
    ("serve", "deploy"): ("ray-serve",),
}
# Literal env vars that state a runtime's version (the images set them; a
# spec that sets them says which version it expects). Used when no tag does.
VERSION_ENV: dict[str, tuple[str, ...]] = {
    "vllm": ("VLLM_VERSION",),
    "sglang": ("SGLANG_VERSION",),
    "tensorrt-llm": ("TRTLLM_VERSION", "TENSORRT_LLM_VERSION"),
    "triton": ("TRITON_SERVER_VERSION", "NVIDIA_TRITON_SERVER_VERSION"),
    "tgi": ("TGI_VERSION",),
    "tei": ("TEI_VERSION",),
    "nim": ("NIM_VERSION",),
    "ray": ("RAY_VERSION",),
    "ray-serve": ("RAY_VERSION",),
    "lmdeploy": ("LMDEPLOY_VERSION",),
    "ollama": ("OLLAMA_VERSION",),
    "dynamo-worker": ("DYNAMO_VERSION",),
    "dynamo-frontend": ("DYNAMO_VERSION",),
    "dynamo-planner": ("DYNAMO_VERSION",),
}
_ENV_VERSION = re.compile(r"v?(\d+(?:\.\d+){1,3}(?:[.-]?(?:post|rc|dev)\d+)?)")
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")
_BUILD = re.compile(r"b\d{3,6}")
# Words that run the next word as the program.
_WRAPPERS = frozenset({"exec", "env", "nohup", "time", "stdbuf", "uv", "run", "uvx", "sudo"})


@dataclass(frozen=True, slots=True)
class RuntimeFinding:
    runtime: str
    version: str | None
    confidence: Confidence
    source: Source
    pointer: str
    rule: str = ""  # which rule matched: `image docker.io/vllm/vllm-openai`, `command vllm serve`
    version_from: str | None = None  # `image tag` | `env VLLM_VERSION`
    version_pointer: str | None = None  # where the version was read, when not the finding's


def _module_runtimes(module: str) -> tuple[str, tuple[str, ...]]:
    """`dynamo.planner.planner_sla` -> dynamo-planner; `vllm.entrypoints.openai...` -> vllm."""
    parts = module.split(".")
    for n in (2, 1):
        key = ".".join(parts[:n])
        found = MODULES.get(key)
        if found is not None:
            return key, found
    return "", ()


def _command_runtimes(tokens: list[Token]) -> list[tuple[str, Token, str]]:
    """The runtimes one command starts, each with the token that says so and the rule."""
    i = 0
    while i < len(tokens) and (
        tokens[i].text in _WRAPPERS or ("=" in tokens[i].text and tokens[i].text[0] != "-")
    ):
        i += 1
    if i >= len(tokens):
        return []
    program = tokens[i].text.rpartition("/")[2]
    nxt = tokens[i + 1].text if i + 1 < len(tokens) else ""
    if _PYTHON.fullmatch(program):
        for j in range(i + 1, len(tokens) - 1):
            if tokens[j].text == "-m":
                module = tokens[j + 1]
                key, found = _module_runtimes(module.text)
                return [(r, module, f"command python -m {key}") for r in found]
        return []
    if program in PROGRAMS:
        return [(r, tokens[i], f"command {program}") for r in PROGRAMS[program]]
    if (program, nxt) in SUBCOMMANDS:
        return [(r, tokens[i], f"command {program} {nxt}") for r in SUBCOMMANDS[(program, nxt)]]
    return []


def match_image(ref: ImageRef) -> tuple[ImageRule, str] | None:
    """The table row an image is, and the rule text (`image <repo>` or `image-mirror <path>`)."""
    path = ref.path
    for rule in IMAGE_RULES:
        if rule.path.endswith("/"):
            if ref.registry in rule.registries and path.startswith(rule.path):
                return rule, f"image {ref.registry}/{rule.path}*"
            continue
        if path == rule.path and ref.registry in rule.registries:
            return rule, f"image {ref.registry}/{rule.path}"
        if rule.mirrors and (path == rule.path or path.endswith("/" + rule.path)):
            return rule, f"image-mirror */{rule.path}"
    return None


def _tag_version(rule: ImageRule, tag: str | None) -> str | None:
    if not tag:
        return None
    if rule.build_tag:
        return next((t for t in tag.split("-") if _BUILD.fullmatch(t)), None)
    version = version_of_tag(tag)
    if version is None and rule.tag_prefix and "-" in tag:
        version = version_of_tag(tag.partition("-")[2])
    return version


@lru_cache(maxsize=4096)
def _image_runtimes(ref: ImageRef) -> tuple[tuple[str, ...], frozenset[str], str | None, str]:
    """(runtimes the image names, runtimes whose version is the tag's, that version, rule)."""
    found = match_image(ref)
    if found is None:
        named_by = NAMED_IMAGES.get(ref.name, ())
        return named_by, frozenset(), None, f"{NAME_RULE}{ref.name}" if named_by else ""
    rule, text = found
    named = rule.runtimes
    if rule.runtimes == ("triton",):
        tokens = (ref.tag or "").split("-")
        if "sdk" in tokens:
            return (), frozenset(), None, ""  # `<ver>-py3-sdk`: the client SDK, no server
        named += tuple(r for key, r in TRITON_TAG_BACKENDS.items() if key in tokens)
    return named, rule.versioned, _tag_version(rule, ref.tag), text


def runtimes_of(c: Container) -> tuple[RuntimeFinding, ...]:
    """Every runtime finding of one container (cached on its content, not its object)."""
    key = (c.image, c.image_pointer, c.command, c.command_pointer, c.args, c.args_pointer, c.env)
    return _runtimes(key, c.runtimes)


_Key = tuple[str, str, tuple[str, ...], str, tuple[str, ...], str, tuple[EnvVar, ...]]


@lru_cache(maxsize=8192)
def _runtimes(key: _Key, decls: tuple[RuntimeDecl, ...]) -> tuple[RuntimeFinding, ...]:
    image, image_pointer, command, command_pointer, args, args_pointer, env_vars = key
    ref = parse_image(image)
    named, versioned, tag_version, image_rule = (
        _image_runtimes(ref) if ref is not None else ((), frozenset(), None, "")
    )
    env = Env.of(env_vars)
    raw: list[tuple[str, Confidence, Source, str, str]] = [
        (d.runtime, d.confidence, d.source, d.pointer, d.rule) for d in decls
    ]
    for tokens in segments(command, command_pointer, args, args_pointer, env):
        for runtime, tok, rule in _command_runtimes(tokens):
            raw.append((runtime, Confidence.INFERRED, Source.SPEC, tok.pointer, rule))
    if image_rule.startswith(NAME_RULE) and any(r in SERVING and r not in named for r, *_ in raw):
        named = ()  # the command runs another runtime: the name is ambiguous
    raw += [(r, Confidence.INFERRED, Source.SPEC, image_pointer, image_rule) for r in named]
    if env.values.get("NIM_USE_SGLANG", "").strip().lower() in {"1", "true", "yes"}:
        ptr = next(v.pointer for v in env_vars if v.name == "NIM_USE_SGLANG")
        raw.append(("sglang", Confidence.INFERRED, Source.SPEC, ptr, "env NIM_USE_SGLANG"))
    out = []
    for runtime, confidence, source, ptr, rule in raw:
        version, version_from, version_ptr = None, None, None
        if runtime in versioned and tag_version is not None:
            version, version_from = tag_version, "image tag"
            version_ptr = image_pointer if ptr != image_pointer else None
        else:
            version, version_from, version_ptr = _env_version(runtime, env_vars)
        out.append(
            RuntimeFinding(
                runtime=runtime,
                version=version,
                confidence=confidence,
                source=source,
                pointer=ptr,
                rule=rule,
                version_from=version_from,
                version_pointer=version_ptr,
            )
        )
    return tuple(out)


def _env_version(
    runtime: str, env_vars: tuple[EnvVar, ...]
) -> tuple[str | None, str | None, str | None]:
    """A version stated by a literal env var of the container (the first one set)."""
    names = VERSION_ENV.get(runtime, ())
    if not names:
        return None, None, None
    for var in env_vars:
        if var.name in names and var.value:
            match = _ENV_VERSION.fullmatch(var.value.strip())
            if match:
                return match.group(1), f"env {var.name}", var.pointer
    return None, None, None
