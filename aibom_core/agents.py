"""Agent stacks and the LLM APIs they call, read from a container's spec.

Beyond the serving runtimes: a container that runs an agent framework
(LangChain, LangGraph, AutoGen, CrewAI) or calls a hosted LLM API says so in
its environment (`OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`, `LANGSMITH_*`), its
image or its command. Every rule is a table row below (docs/aibom-format.md,
"Agent stacks"), matched exactly: an env var by its whole name or a
documented prefix, an image by repository path, a command by program and
subcommand.

Secrets are never read: an API key variable counts by its NAME only (its
value, literal or from a Secret, is never looked at), and an endpoint URL is
kept without user info, query or fragment (where keys hide:
`https://user:key@host`, `?api-key=...`). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from aibom_core.commandline import Env, expand_k8s, segments
from aibom_core.evidence import Confidence
from aibom_core.images import parse_image
from aibom_core.scrape import Container, EnvVar

# An env var that names the endpoint a client calls -> the API it is.
ENDPOINT_ENV: dict[str, str] = {
    "OPENAI_BASE_URL": "openai",
    "OPENAI_API_BASE": "openai",
    "AZURE_OPENAI_ENDPOINT": "azure-openai",
    "ANTHROPIC_BASE_URL": "anthropic",
    "OLLAMA_BASE_URL": "ollama",
    "LANGCHAIN_ENDPOINT": "langsmith",
    "LANGSMITH_ENDPOINT": "langsmith",
}
# An env var that holds an API key -> the API it is for. Only the name counts.
KEY_ENV: dict[str, str] = {
    "OPENAI_API_KEY": "openai",
    "AZURE_OPENAI_API_KEY": "azure-openai",
    "ANTHROPIC_API_KEY": "anthropic",
    "GEMINI_API_KEY": "google-gemini",
    "MISTRAL_API_KEY": "mistral",
    "COHERE_API_KEY": "cohere",
    "GROQ_API_KEY": "groq",
    "LANGCHAIN_API_KEY": "langsmith",
    "LANGSMITH_API_KEY": "langsmith",
}
# Env var name prefixes (whole `_`-separated words) that configure a framework.
FRAMEWORK_ENV_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LANGCHAIN_", "langchain"),
    ("LANGSMITH_", "langchain"),
    ("LANGGRAPH_", "langgraph"),
    ("AUTOGEN_", "autogen"),
    ("AUTOGENSTUDIO_", "autogen"),
    ("CREWAI_", "crewai"),
)
FRAMEWORK_ENV: dict[str, str] = {"OAI_CONFIG_LIST": "autogen"}
# Image repository paths (whole segments, any registry) -> framework.
FRAMEWORK_IMAGES: dict[str, str] = {
    "langchain/langgraph-api": "langgraph",
}
# (program, subcommand) -> framework.
FRAMEWORK_COMMANDS: dict[tuple[str, str], str] = {
    ("langgraph", "dev"): "langgraph",
    ("langgraph", "up"): "langgraph",
    ("crewai", "run"): "crewai",
    ("autogenstudio", "ui"): "autogen",
}
_URL = re.compile(r"(https?)://(?:[^/@\s]*@)?([^/?#\s@]+)([^?#\s]*)(?:[?#]\S*)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class AgentFinding:
    kind: str  # "framework" | "endpoint"
    name: str  # langchain | langgraph | autogen | crewai; openai | anthropic | ...
    endpoint: str | None  # the URL called, cleaned; None when only a key names the API
    confidence: Confidence
    pointer: str
    rule: str  # `env OPENAI_BASE_URL`, `env-prefix LANGCHAIN_`, `image ...`, `command ...`


def clean_url(value: str) -> str | None:
    """`scheme://host[:port]/path` of a URL, without user info, query or fragment."""
    match = _URL.fullmatch(value.strip())
    if match is None:
        return None
    scheme, host, path = match.groups()
    return f"{scheme.lower()}://{host.lower()}{path}"


def agents_of(c: Container) -> tuple[AgentFinding, ...]:
    """Every agent-stack finding of one container (cached on its content)."""
    if c.init:
        return ()
    key = (c.image, c.image_pointer, c.command, c.command_pointer, c.args, c.args_pointer, c.env)
    return _agents(key)


_Key = tuple[str, str, tuple[str, ...], str, tuple[str, ...], str, tuple[EnvVar, ...]]


@lru_cache(maxsize=8192)
def _agents(key: _Key) -> tuple[AgentFinding, ...]:
    image, image_pointer, command, command_pointer, args, args_pointer, env_vars = key
    env = Env.of(env_vars)
    out: list[AgentFinding] = []
    seen: set[str] = set()
    for var in env_vars:
        if var.name in seen:
            continue
        seen.add(var.name)
        out += _env_findings(var, env)
    # A key beside a base URL for the same API is that endpoint's key.
    urls = {f.name: f.endpoint for f in out if f.kind == "endpoint" and f.endpoint}
    out = [
        AgentFinding(f.kind, f.name, urls[f.name], f.confidence, f.pointer, f.rule)
        if f.kind == "endpoint" and f.endpoint is None and f.name in urls
        else f
        for f in out
    ]
    parsed = parse_image(image) if image else None
    if parsed is not None and parsed.registry:
        for path, framework in FRAMEWORK_IMAGES.items():
            if parsed.path == path or parsed.path.endswith("/" + path):
                out.append(
                    AgentFinding("framework", framework, None, Confidence.INFERRED,
                                 image_pointer, f"image */{path}")
                )  # fmt: skip
    for tokens in segments(command, command_pointer, args, args_pointer, env):
        if not tokens:
            continue
        program = tokens[0].text.rpartition("/")[2]
        sub = tokens[1].text if len(tokens) > 1 else ""
        by_command = FRAMEWORK_COMMANDS.get((program, sub))
        if by_command is not None:
            out.append(
                AgentFinding("framework", by_command, None, Confidence.INFERRED,
                             tokens[0].pointer, f"command {program} {sub}")
            )  # fmt: skip
    return tuple(out)


def _env_findings(var: EnvVar, env: Env) -> list[AgentFinding]:
    out: list[AgentFinding] = []
    name = var.name
    api = ENDPOINT_ENV.get(name)
    if api is not None and var.value:
        cleaned = clean_url(expand_k8s(var.value, env))
        if cleaned is not None:
            out.append(
                AgentFinding(
                    "endpoint", api, cleaned, Confidence.DECLARED, var.pointer, f"env {name}"
                )
            )
    elif api is not None:
        # From a Secret/ConfigMap, or empty: the API is configured, its URL unread.
        out.append(
            AgentFinding("endpoint", api, None, Confidence.INFERRED, var.pointer, f"env {name}")
        )
    key_api = KEY_ENV.get(name)
    if key_api is not None:
        out.append(
            AgentFinding("endpoint", key_api, None, Confidence.INFERRED, var.pointer, f"env {name}")
        )
    framework = FRAMEWORK_ENV.get(name)
    rule = f"env {name}"
    if framework is None:
        for prefix, fw in FRAMEWORK_ENV_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                framework, rule = fw, f"env-prefix {prefix}"
                break
    if framework is not None:
        out.append(
            AgentFinding("framework", framework, None, Confidence.INFERRED, var.pointer, rule)
        )
    return out
