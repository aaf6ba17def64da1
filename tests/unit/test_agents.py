"""Agent stacks and the LLM APIs they call: every rule, its lookalikes, and no secrets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aibom_core.agents import (
    ENDPOINT_ENV,
    FRAMEWORK_COMMANDS,
    FRAMEWORK_ENV,
    FRAMEWORK_ENV_PREFIXES,
    FRAMEWORK_IMAGES,
    KEY_ENV,
    agents_of,
    clean_url,
)
from aibom_core.bom import RootView, build_document, validate
from aibom_core.evidence import Confidence
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj
from aibom_core.scrape import Container, scrape

D = Confidence.DECLARED
I = Confidence.INFERRED  # noqa: E741


def container(
    env: dict[str, str] | None = None,
    *,
    image: str = "reg.io/app:1",
    command: list[str] | None = None,
    secret_env: tuple[str, ...] = (),
    init: bool = False,
) -> Container:
    c: Obj = {"name": "app", "image": image}
    vars_: list[Obj] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    vars_ += [{"name": k, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
              for k in secret_env]  # fmt: skip
    if vars_:
        c["env"] = vars_
    if command:
        c["command"] = command
    key = "initContainers" if init else "containers"
    spec: Obj = {key: [c]} if init else {"containers": [c]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    (out,) = scrape(pod)
    return out


def found(c: Container) -> list[tuple[str, str, str | None, Confidence, str]]:
    return sorted({(f.kind, f.name, f.endpoint, f.confidence, f.rule) for f in agents_of(c)})


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # Endpoints named by a URL (declared), cleaned of user info, query and fragment.
        ({"env": {"OPENAI_BASE_URL": "http://vllm.ns.svc:8000/v1"}},
         [("endpoint", "openai", "http://vllm.ns.svc:8000/v1", D, "env OPENAI_BASE_URL")]),
        ({"env": {"OPENAI_API_BASE": "https://api.openai.com/v1"}},
         [("endpoint", "openai", "https://api.openai.com/v1", D, "env OPENAI_API_BASE")]),
        ({"env": {"AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com/"}},
         [("endpoint", "azure-openai", "https://x.openai.azure.com/", D,
           "env AZURE_OPENAI_ENDPOINT")]),
        ({"env": {"ANTHROPIC_BASE_URL": "https://u:p@proxy.corp/anthropic?key=1#x"}},
         [("endpoint", "anthropic", "https://proxy.corp/anthropic", D, "env ANTHROPIC_BASE_URL")]),
        ({"env": {"OLLAMA_BASE_URL": "http://ollama:11434"}},
         [("endpoint", "ollama", "http://ollama:11434", D, "env OLLAMA_BASE_URL")]),
        ({"env": {"LANGCHAIN_ENDPOINT": "https://api.smith.langchain.com"}},
         [("endpoint", "langsmith", "https://api.smith.langchain.com", D,
           "env LANGCHAIN_ENDPOINT"),
          ("framework", "langchain", None, I, "env-prefix LANGCHAIN_")]),
        ({"env": {"LANGSMITH_ENDPOINT": "https://api.smith.langchain.com"}},
         [("endpoint", "langsmith", "https://api.smith.langchain.com", D,
           "env LANGSMITH_ENDPOINT"),
          ("framework", "langchain", None, I, "env-prefix LANGSMITH_")]),
        # An API named only by its key variable (inferred; the value is never read).
        ({"env": {"OPENAI_API_KEY": "sk-x"}},
         [("endpoint", "openai", None, I, "env OPENAI_API_KEY")]),
        ({"secret_env": ("ANTHROPIC_API_KEY",)},
         [("endpoint", "anthropic", None, I, "env ANTHROPIC_API_KEY")]),
        ({"env": {"GEMINI_API_KEY": "x", "MISTRAL_API_KEY": "x", "COHERE_API_KEY": "x",
                  "GROQ_API_KEY": "x", "AZURE_OPENAI_API_KEY": "x"}},
         [("endpoint", "azure-openai", None, I, "env AZURE_OPENAI_API_KEY"),
          ("endpoint", "cohere", None, I, "env COHERE_API_KEY"),
          ("endpoint", "google-gemini", None, I, "env GEMINI_API_KEY"),
          ("endpoint", "groq", None, I, "env GROQ_API_KEY"),
          ("endpoint", "mistral", None, I, "env MISTRAL_API_KEY")]),
        ({"env": {"LANGCHAIN_API_KEY": "x", "LANGSMITH_API_KEY": "y"}},
         [("endpoint", "langsmith", None, I, "env LANGCHAIN_API_KEY"),
          ("endpoint", "langsmith", None, I, "env LANGSMITH_API_KEY"),
          ("framework", "langchain", None, I, "env-prefix LANGCHAIN_"),
          ("framework", "langchain", None, I, "env-prefix LANGSMITH_")]),
        # A key beside a base URL for the same API belongs to that endpoint.
        ({"env": {"OPENAI_BASE_URL": "http://vllm:8000/v1", "OPENAI_API_KEY": "sk-x"}},
         [("endpoint", "openai", "http://vllm:8000/v1", D, "env OPENAI_BASE_URL"),
          ("endpoint", "openai", "http://vllm:8000/v1", I, "env OPENAI_API_KEY")]),
        # A base URL from a Secret: the API is configured, its URL unread.
        ({"secret_env": ("OPENAI_BASE_URL",)},
         [("endpoint", "openai", None, I, "env OPENAI_BASE_URL")]),
        # Frameworks, from env.
        ({"env": {"LANGCHAIN_TRACING_V2": "true"}},
         [("framework", "langchain", None, I, "env-prefix LANGCHAIN_")]),
        ({"env": {"LANGGRAPH_AUTH_TYPE": "noop"}},
         [("framework", "langgraph", None, I, "env-prefix LANGGRAPH_")]),
        ({"env": {"AUTOGEN_USE_DOCKER": "0"}},
         [("framework", "autogen", None, I, "env-prefix AUTOGEN_")]),
        ({"env": {"OAI_CONFIG_LIST": "[]"}},
         [("framework", "autogen", None, I, "env OAI_CONFIG_LIST")]),
        ({"env": {"AUTOGENSTUDIO_APPDIR": "/app"}},
         [("framework", "autogen", None, I, "env-prefix AUTOGENSTUDIO_")]),
        ({"env": {"CREWAI_STORAGE_DIR": "/data"}},
         [("framework", "crewai", None, I, "env-prefix CREWAI_")]),
        # Frameworks, from the image and the command.
        ({"image": "langchain/langgraph-api:3.11"},
         [("framework", "langgraph", None, I, "image */langchain/langgraph-api")]),
        ({"command": ["langgraph", "dev"]},
         [("framework", "langgraph", None, I, "command langgraph dev")]),
        ({"command": ["langgraph", "up"]},
         [("framework", "langgraph", None, I, "command langgraph up")]),
        ({"command": ["crewai", "run"]}, [("framework", "crewai", None, I, "command crewai run")]),
        ({"command": ["autogenstudio", "ui", "--port", "8081"]},
         [("framework", "autogen", None, I, "command autogenstudio ui")]),
    ],
)  # fmt: skip
def test_rule(kwargs: Obj, expected: list[Any]) -> None:
    assert found(container(**kwargs)) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        # Lookalikes: not a rule's whole name, prefix word, repository or command.
        {"env": {"OPENAI_BASE_URL_OLD": "http://x"}},
        {"env": {"MY_OPENAI_API_KEY": "x"}},
        {"env": {"LANGCHAIN": "1"}},
        {"env": {"LANGCHAIN_": "1"}},
        {"env": {"XLANGCHAIN_TRACING": "1"}},
        {"env": {"CREWAIX_MODE": "1"}},
        {"env": {"AUTOGENX": "1"}},
        {"env": {"OPENAI_BASE_URL": "not a url"}},
        {"env": {"OPENAI_BASE_URL": "ftp://files.example/v1"}},
        {"env": {"OLLAMA_HOST": "0.0.0.0:11434"}},  # the server's bind address
        {"image": "langchain/langgraph-api-proxy:1"},
        {"image": "myorg/langgraph:1"},
        {"command": ["langgraph", "build"]},
        {"command": ["crewai", "create"]},
        {"command": ["echo", "crewai", "run"]},
        {"command": ["python", "app.py"]},
        # Init containers are not the application.
        {"env": {"OPENAI_API_KEY": "x", "LANGCHAIN_TRACING_V2": "1"}, "init": True},
    ],
)
def test_lookalikes_are_not_agents(kwargs: Obj) -> None:
    assert found(container(**kwargs)) == []


def test_every_rule_is_tested() -> None:
    """Each table row above appears in a positive row of test_rule."""
    (mark,) = [m for m in test_rule.pytestmark if m.name == "parametrize"]
    text = json.dumps([row[1] for row in mark.args[1]])
    for name in (*ENDPOINT_ENV, *KEY_ENV, *FRAMEWORK_ENV):
        assert f"env {name}" in text, name
    for prefix, _ in FRAMEWORK_ENV_PREFIXES:
        assert f"env-prefix {prefix}" in text, prefix
    for path in FRAMEWORK_IMAGES:
        assert f"image */{path}" in text, path
    for program, sub in FRAMEWORK_COMMANDS:
        assert f"command {program} {sub}" in text, (program, sub)


@pytest.mark.parametrize(
    ("value", "cleaned"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("HTTPS://API.Example.com/V1", "https://api.example.com/V1"),
        ("https://user:sk-abc@host/v1", "https://host/v1"),
        ("https://host/v1?api-key=sk-abc", "https://host/v1"),
        ("https://host/v1#frag", "https://host/v1"),
        ("http://h:8000", "http://h:8000"),
        ("host:8000", None),
        ("", None),
        ("https://", None),
    ],
)
def test_clean_url(value: str, cleaned: str | None) -> None:
    assert clean_url(value) == cleaned


SECRETS = ("sk-SECRET-1", "sk-SECRET-2", "sk-SECRET-3", "lsv2-SECRET-4", "SECRET-5")


def test_no_secret_value_reaches_the_document() -> None:
    """API keys, and keys hidden in URLs, never appear in a document's bytes."""
    env = [
        {"name": "OPENAI_BASE_URL",
         "value": f"https://user:{SECRETS[0]}@vllm.ns.svc:8000/v1?api-key={SECRETS[1]}"},
        {"name": "OPENAI_API_KEY", "value": SECRETS[2]},
        {"name": "LANGSMITH_API_KEY", "value": SECRETS[3]},
        {"name": "LANGCHAIN_API_KEY", "value": SECRETS[3]},
        {"name": "ANTHROPIC_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "AZURE_OPENAI_ENDPOINT", "value": f"https://x.azure.com/?key={SECRETS[4]}"},
        {"name": "LANGCHAIN_TRACING_V2", "value": "true"},
    ]  # fmt: skip
    dep = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "agent", "namespace": "ns", "uid": "u"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "reg.io/agent:1", "command": ["crewai", "run"], "env": env},
        ]}}},
    }  # fmt: skip
    view = RootView(root=dep, status="root", reason=None, owned=(), pods=())
    doc = build_document(view, default_registry(), tool_version="0")
    validate(doc.json_bytes)
    assert build_document(view, default_registry(), tool_version="0").json_bytes == doc.json_bytes
    text = doc.json_bytes.decode()
    for secret in SECRETS:
        assert secret not in text
    assert "SECRET" not in text
    out = json.loads(text)
    services = {s["bom-ref"]: s for s in out["services"]}
    assert sorted(services) == [
        "service:anthropic",
        "service:azure-openai@https://x.azure.com/",
        "service:langsmith",
        "service:openai@https://vllm.ns.svc:8000/v1",
    ]
    openai = services["service:openai@https://vllm.ns.svc:8000/v1"]
    assert openai["endpoints"] == ["https://vllm.ns.svc:8000/v1"]
    props = {(p["name"], p["value"]) for p in openai["properties"]}
    assert ("aibom.confidence", "declared") in props
    assert ("aibom.agent.rule", "env OPENAI_API_KEY") in props
    frameworks = sorted(c["name"] for c in out["components"] if c["bom-ref"].startswith("agent:"))
    assert frameworks == ["crewai", "langchain"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in out["dependencies"]}
    assert set(deps["image:reg.io/agent:1"]) == {
        "agent:crewai", "agent:langchain", *services,
    }  # fmt: skip


def test_a_plain_app_has_no_agent_components() -> None:
    dep = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    }  # fmt: skip
    view = RootView(root=dep, status="root", reason=None, owned=(), pods=())
    out = json.loads(build_document(view, default_registry(), tool_version="0").json_bytes)
    assert "services" not in out
    assert [c["type"] for c in out["components"]] == ["container"]
