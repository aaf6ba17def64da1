"""Which model a container serves (or fetches), read conservatively.

Sources, strongest first: structured fields (Dynamo `modelRef`, NIMService
`status.model`, the `model.aibom.dev/name` annotation, all handed over by the
scrapers), the command line (`--model`, `--model-path`, `--model-id`, their
`=` forms and underscore spellings, the positional model of `vllm serve`,
`trtllm-serve`, `ollama run|pull`, `huggingface-cli download`), the
environment (`HF_MODEL_ID`, `MODEL_ID`, `MODEL_NAME`, `NIM_MODEL_NAME`, ...)
and a NIM image name (`nvcr.io/nim/<publisher>/<model>`).

Only a serving container names the served model: an init container (a
download step, a native sidecar) and a known sidecar (`SIDECAR_NAMES`,
`SIDECAR_IMAGES`: a mesh proxy, Knative's queue-proxy, KServe's agent)
yield no model findings. A local path (`/models/x`, `./m`, `~/m`) is where a
model lies, not which model it is: it gives an *unresolved* finding with the
path as evidence (`detail`), never a model identity. A Triton
`--model-repository` is recorded the same way when nothing else names a model.

`--served-model-name` is an alias: it is recorded on the model the container
loads, and becomes the model only when nothing else names one. A value that
comes from a Secret or ConfigMap (`valueFrom`, or `$(VAR)` / `$VAR` naming
such a variable, or naming none) gives an *unresolved* finding: we say a model
is configured and why we cannot read it, and never guess. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from packageurl import PackageURL

from aibom_core.commandline import (
    Env,
    Token,
    expand_k8s,
    expand_shell,
    segments,
    unresolved_reference,
)
from aibom_core.evidence import Confidence, Source
from aibom_core.images import parse_image
from aibom_core.scrape import Container, EnvVar, ModelDecl, kserve_storage

MODEL_FLAGS = frozenset(
    {"--model", "--model-path", "--model-id", "--model_path", "--model_id", "--model-name"}
)
ALIAS_FLAGS = frozenset({"--served-model-name", "--served_model_name"})
REVISION_FLAGS = frozenset({"--revision"})
# A directory of models (Triton; TorchServe's `--model-store`): recorded only
# when nothing else names a model, and never as a model identity.
REPOSITORY_FLAGS = frozenset({"--model-repository", "--model_repository", "--model-store"})
# Containers that never serve the pod's model, by exact container name ...
SIDECAR_NAMES = frozenset(
    {
        "istio-proxy",
        "istio-init",
        "istio-validation",
        "linkerd-proxy",
        "linkerd-init",
        "queue-proxy",
        "vault-agent",
        "vault-agent-init",
        "cloud-sql-proxy",
    }
)
# ... and by image repository path (whole segments, any registry).
SIDECAR_IMAGES = (
    "istio/proxyv2",
    "linkerd/proxy",
    "knative.dev/serving/cmd/queue",
    "kserve/agent",
    "kserve/storage-initializer",
    "envoyproxy/envoy",
    "hashicorp/vault",
    "fluent/fluent-bit",
    "otel/opentelemetry-collector",
    "otel/opentelemetry-collector-contrib",
)
MODEL_ENV = frozenset(
    {
        "HF_MODEL_ID",
        "HF_MODEL",
        "MODEL_ID",
        "MODEL_NAME",
        "MODEL",
        "MODEL_PATH",
        "NIM_MODEL_NAME",
        "VLLM_MODEL",
    }
)
ALIAS_ENV = frozenset({"SERVED_MODEL_NAME", "NIM_SERVED_MODEL_NAME"})
REVISION_ENV = frozenset({"HF_MODEL_REVISION", "MODEL_REVISION"})
# `<program> [<subcommand>] <model>`: the CLIs whose first positional is a model.
_POSITIONAL = {
    "vllm": ("serve",),
    "trtllm-serve": ("serve", ""),
    "ollama": ("run", "pull"),
    "huggingface-cli": ("download",),
    "hf": ("download",),
}
# NIM images that are not one model (the multi-LLM NIM loads NIM_MODEL_NAME).
_GENERIC_NIMS = frozenset({"llm-nim", "nim-llm"})
_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_HF_URL = re.compile(
    r"(?:hf://|https?://(?:www\.)?huggingface\.co/|https?://hf\.co/|hf\.co/)"
    r"([^/\s]+/[^/\s@]+)(?:/tree/([^/\s]+))?/?"
)


@dataclass(frozen=True, slots=True)
class ModelFinding:
    """One place that names (or fails to name) a model, relative to its object."""

    id: str | None  # None: a model is configured there but its value cannot be read
    revision: str | None
    confidence: Confidence
    source: Source
    pointer: str
    via: str  # "--model", "env MODEL_ID", "modelRef", "annotation", "nim-image", ...
    reason: str | None = None  # why it is unresolved
    served_names: tuple[str, ...] = ()
    # (property, value) kept as evidence of an unresolved model:
    # ("aibom.model.path", "/models/x"), ("aibom.model.repository", "s3://b/m")
    detail: tuple[str, str] | None = None
    properties: tuple[tuple[str, str], ...] = ()  # more said of a resolved model

    @classmethod
    def unresolved(
        cls,
        *,
        pointer: str,
        via: str,
        reason: str,
        detail: tuple[str, str] | None = None,
        source: Source = Source.SPEC,
    ) -> ModelFinding:
        """A place that configures a model whose identity cannot be read there."""
        # id None: a model is configured there, its value cannot be read.
        return cls(None, None, Confidence.UNRESOLVED, source, pointer, via, reason, detail=detail)


def is_sidecar(name: str, image: str) -> bool:
    """A known sidecar, by exact container name or image repository (whole segments)."""
    if name in SIDECAR_NAMES:
        return True
    parsed = parse_image(image)
    if parsed is None or not parsed.registry:
        return False
    path = parsed.path
    return any(path == s or path.endswith("/" + s) for s in SIDECAR_IMAGES)


def normalise_id(value: str) -> tuple[str, str | None]:
    """A model id without quoting and URL dressing: `hf://org/m` -> (`org/m`, None)."""
    value = value.strip().strip("\"'").strip()
    match = _HF_URL.fullmatch(value)
    if match:
        return match.group(1), match.group(2)
    if len(value) > 1 and value.endswith("/") and not value.startswith("/"):
        value = value.rstrip("/")
    return value, None


def is_hf_id(model_id: str) -> bool:
    """`<org>/<name>` as Hugging Face spells repositories (not a path, not a URL)."""
    return bool(_HF_ID.fullmatch(model_id)) and ".." not in model_id


def origin_of(model_id: str) -> str:
    """`huggingface`, `local-path`, `uri` or `name`: what kind of id this is."""
    if model_id.startswith(("/", "./", "~")):
        return "local-path"
    if model_id.startswith("oci://"):
        return "oci"  # a KServe modelcar: the model is an OCI artifact
    if "://" in model_id:
        return "uri"
    if is_hf_id(model_id):
        return "huggingface"
    return "name"


@lru_cache(maxsize=4096)
def hf_purl(model_id: str, revision: str | None) -> str | None:
    """`pkg:huggingface/<org>/<name>@<revision>` for a Hugging Face id, else None."""
    if not is_hf_id(model_id):
        return None
    org, _, name = model_id.partition("/")
    return str(
        PackageURL(type="huggingface", namespace=org, name=name, version=revision).to_string()
    )


def nim_model(image: str) -> str | None:
    """`nvcr.io/nim/<publisher>/<model>:<tag>` -> `<publisher>/<model>`."""
    parsed = parse_image(image)
    if parsed is None or parsed.registry != "nvcr.io":
        return None
    parts = parsed.path.split("/")
    if len(parts) != 3 or parts[0] != "nim" or parts[2] in _GENERIC_NIMS:
        return None
    return f"{parts[1]}/{parts[2]}"


def _value_finding(
    raw: str, tok_ptr: str, *, via: str, env: Env, shell: bool, declared: bool
) -> ModelFinding | None:
    if shell:
        raw = expand_shell(raw, env)
    value, revision = normalise_id(raw)
    if not value or value.startswith("-"):
        return None
    why = unresolved_reference(value, env, shell=True)
    if why is not None:
        return ModelFinding.unresolved(
            pointer=tok_ptr,
            via=via,
            reason=f"{via} {value}: {why}",
        )
    if origin_of(value) == "local-path":
        return ModelFinding.unresolved(
            pointer=tok_ptr,
            via=via,
            reason=f"{via} {value}: a local path, not a model identity",
            detail=("aibom.model.path", value),
        )
    return ModelFinding(
        id=value,
        revision=revision,
        confidence=Confidence.DECLARED if declared and not shell else Confidence.INFERRED,
        source=Source.SPEC,
        pointer=tok_ptr,
        via=via,
    )


_Alias = tuple[str, str]  # (served name, pointer)


def _flag_findings(
    tokens: list[Token], env: Env, repositories: list[ModelFinding]
) -> tuple[list[ModelFinding], list[_Alias], list[str]]:
    """Models, served names and revisions named by the flags of one command.

    Model repositories (`--model-repository`) go to `repositories`.
    """
    models: list[ModelFinding] = []
    aliases: list[_Alias] = []
    revisions: list[str] = []
    n = len(tokens)
    for i, tok in enumerate(tokens):
        flag, eq, inline = tok.text.partition("=")
        if flag in REPOSITORY_FLAGS:
            _repository(tokens, i, inline if eq else None, env, repositories)
            continue
        if flag not in MODEL_FLAGS and flag not in ALIAS_FLAGS and flag not in REVISION_FLAGS:
            continue
        if eq:
            value, ptr, shell = inline, tok.pointer, tok.shell
        elif i + 1 < n:
            value, ptr, shell = tokens[i + 1].text, tokens[i + 1].pointer, tokens[i + 1].shell
        else:
            continue
        if flag in MODEL_FLAGS:
            found = _value_finding(value, ptr, via=flag, env=env, shell=shell, declared=True)
            if found is not None:
                models.append(found)
        else:
            text = normalise_id(expand_shell(value, env) if shell else value)[0]
            if not text or text.startswith("-") or "$" in text:
                continue
            if flag in ALIAS_FLAGS:
                aliases.append((text, ptr))
            else:
                revisions.append(text)
    models += _positional(tokens, env)
    return models, aliases, revisions


def _repository(
    tokens: list[Token], i: int, inline: str | None, env: Env, out: list[ModelFinding]
) -> None:
    flag = tokens[i].text.partition("=")[0]
    if inline is not None:
        value, ptr, shell = inline, tokens[i].pointer, tokens[i].shell
    elif i + 1 < len(tokens):
        value, ptr, shell = tokens[i + 1].text, tokens[i + 1].pointer, tokens[i + 1].shell
    else:
        return
    value = (expand_shell(value, env) if shell else value).strip().strip("\"'")
    if not value or value.startswith("-"):
        return
    out.append(
        ModelFinding.unresolved(
            pointer=ptr,
            via=flag,
            reason=f"{flag} {value}: a model repository; the models in it are not in the spec",
            detail=("aibom.model.repository", value),
        )
    )


def _positional(tokens: list[Token], env: Env) -> list[ModelFinding]:
    for i, tok in enumerate(tokens):
        program = tok.text.rpartition("/")[2]
        subcommands = _POSITIONAL.get(program)
        if subcommands is None:
            continue
        j = i + 1
        if j < len(tokens) and tokens[j].text in subcommands:
            j += 1
        elif "" not in subcommands:
            continue
        if j < len(tokens) and not tokens[j].text.startswith("-"):
            found = _value_finding(
                tokens[j].text,
                tokens[j].pointer,
                via=f"{program} {tokens[j - 1].text if j > i + 1 else ''}".strip(),
                env=env,
                shell=tokens[j].shell,
                declared=True,
            )
            return [found] if found is not None else []
    return []


def _env_findings(
    env_vars: tuple[EnvVar, ...], env: Env
) -> tuple[list[ModelFinding], list[_Alias], list[str]]:
    models: list[ModelFinding] = []
    aliases: list[_Alias] = []
    revisions: list[str] = []
    seen: set[str] = set()
    for var in env_vars:
        if var.name in seen:
            continue  # an operator-merged duplicate; the container's own wins
        seen.add(var.name)
        if var.name == "STORAGE_URI" and var.value:
            # KServe's custom-container convention: the storage initializer
            # fetches it. Read like `storageUri`.
            decl, _ = kserve_storage(expand_k8s(var.value, env), var.pointer)
            models.append(_decl(decl))
            continue
        if var.name in MODEL_ENV:
            if var.value is None:
                models.append(
                    ModelFinding.unresolved(
                        pointer=var.pointer,
                        via=f"env {var.name}",
                        reason=f"env {var.name} is set from a {var.value_from}",
                    )
                )
                continue
            found = _value_finding(
                expand_k8s(var.value, env),
                var.pointer,
                via=f"env {var.name}",
                env=env,
                shell=False,
                declared=True,
            )
            if found is not None:
                models.append(found)
        elif var.value and (var.name in ALIAS_ENV or var.name in REVISION_ENV):
            text = normalise_id(var.value)[0]
            if not text or "$" in text:
                continue
            if var.name in ALIAS_ENV:
                aliases.append((text, var.pointer))
            else:
                revisions.append(text)
    return models, aliases, revisions


def _decl(decl: ModelDecl) -> ModelFinding:
    if decl.reason is not None or not decl.id:
        return ModelFinding.unresolved(
            pointer=decl.pointer,
            via=decl.via,
            reason=decl.reason or f"{decl.via}: no model identity",
            detail=decl.detail,
            source=decl.source,
        )
    model_id, url_revision = normalise_id(decl.id)
    return ModelFinding(
        id=model_id,
        revision=decl.revision or url_revision,
        confidence=decl.confidence,
        source=decl.source,
        pointer=decl.pointer,
        via=decl.via,
        properties=decl.properties,
    )


def models_of(c: Container) -> tuple[ModelFinding, ...]:
    """Every model finding of one container (cached on its content, not its object).

    None for an init container or a known sidecar: they do not serve the model.
    """
    if c.init or is_sidecar(c.name, c.image):
        return ()
    key = (c.image, c.image_pointer, c.command, c.command_pointer, c.args, c.args_pointer, c.env)
    return _models(key, c.models)


_Key = tuple[str, str, tuple[str, ...], str, tuple[str, ...], str, tuple[EnvVar, ...]]


@lru_cache(maxsize=8192)
def _models(key: _Key, decls: tuple[ModelDecl, ...]) -> tuple[ModelFinding, ...]:
    image, image_pointer, command, command_pointer, args, args_pointer, env_vars = key
    env = Env.of(env_vars)
    found: list[ModelFinding] = []
    aliases: list[_Alias] = []
    revisions: list[str] = []
    repositories: list[ModelFinding] = []
    for tokens in segments(command, command_pointer, args, args_pointer, env):
        m, a, r = _flag_findings(tokens, env, repositories)
        found += m
        aliases += a
        revisions += r
    m, a, r = _env_findings(env_vars, env)
    found += m
    aliases += a
    revisions += r
    nim = nim_model(image)
    if nim is not None:
        found.append(
            ModelFinding(
                id=nim,
                revision=None,
                confidence=Confidence.INFERRED,
                source=Source.SPEC,
                pointer=image_pointer,
                via="nim-image",
            )
        )
    if repositories and not found and not aliases and not decls:
        found += repositories  # the only declaration: recorded, never an identity
    served = tuple(sorted({name for name, _ in aliases}))
    # A revision flag is the container's model's only when it is unambiguous.
    revision = revisions[0] if len(set(revisions)) == 1 else None
    if aliases and all(f.id is None and f.detail is not None for f in found):
        # Only an alias names the model (a path or a repository names none):
        # it is a name, not necessarily the id. The path stays as evidence.
        first: dict[str, str] = {}
        for name, ptr in aliases:
            first.setdefault(name, ptr)
        return (
            tuple(_decl(d) for d in decls)
            + tuple(found)
            + tuple(
                ModelFinding(
                    id=name,
                    revision=revision,
                    confidence=Confidence.INFERRED,
                    source=Source.SPEC,
                    pointer=first[name],
                    via="served-model-name",
                )
                for name in served
            )
        )
    out = []
    for f in found:
        if f.id is None or f.via == "nim-image":
            out.append(f)
            continue
        out.append(
            ModelFinding(
                id=f.id,
                revision=f.revision or revision,
                confidence=f.confidence,
                source=f.source,
                pointer=f.pointer,
                via=f.via,
                served_names=tuple(s for s in served if s != f.id),
                properties=f.properties,
            )
        )
    return tuple(_decl(d) for d in decls) + tuple(out)
