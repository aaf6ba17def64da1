"""aibom_core.query: the auditor's questions over AIBOM documents, as tables.

Documents are the core's own (`scan`'s builder over objects written here), so the
questions are asked of exactly what the annotator writes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aibom_core import query
from aibom_core.bom import facts_of, input_hash, render
from aibom_core.graph import build_graph
from aibom_core.kinds import default_registry
from aibom_core.rollup import inventory
from aibom_rollup.render import csv_cell, csv_text

REG = default_registry()
SHA = "sha256:" + "ab" * 32


def container(name: str, image: str, args: list[str], env: dict[str, str] | None = None) -> Any:
    c: dict[str, Any] = {"name": name, "image": image, "args": args}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return c


def deployment(name: str, *containers: Any, ns: str = "ns") -> Any:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
        "spec": {"template": {"spec": {"containers": list(containers)}}},
    }


def documents(*objects: Any) -> list[tuple[str, str, list[query.Part]]]:
    graph = build_graph(list(objects), REG)
    out = []
    for entry in inventory(graph):
        facts = facts_of(entry.view, REG)
        raw = render(facts, tool_version="t", digest=input_hash(facts, tool_version="t"))
        root = f"{entry.ref.kind}/{entry.ref.name}"
        out.append((entry.ref.namespace, root, query.parts_of(json.loads(raw))))
    return out


VLLM_OLD = deployment(
    "chat",
    container("vllm", "docker.io/vllm/vllm-openai:v0.8.5", ["--model", "Qwen/Qwen3-0.6B"]),
)
VLLM_NEW = deployment(
    "chat2",
    container("vllm", "docker.io/vllm/vllm-openai:v0.10.1", ["--model", "Qwen/Qwen3-0.6B"]),
    ns="other",
)
SGLANG = deployment(
    "sg",
    container(
        "s", "lmsysorg/sglang:v0.4.6", ["python", "-m", "sglang.launch_server", "--model-path",
                                         "meta-llama/Llama-3.1-8B-Instruct"],
    ),
)  # fmt: skip
AGENT = deployment(
    "agent",
    container("a", "reg.io/agent:1", ["run"], {"OPENAI_BASE_URL": "https://api.openai.com/v1",
                                                "LANGCHAIN_TRACING_V2": "true"}),
)  # fmt: skip
LATEST = deployment("edge", container("v", "vllm/vllm-openai:latest", ["--model", "x/y"]))


def hits(filters: list[query.Filter], *objects: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    return [
        (root, h.part.label, h.options)
        for _, root, parts in documents(*objects)
        for h in query.find(parts, filters)
    ]


def test_a_model_is_found_by_id_with_any_revision_case_insensitively() -> None:
    got = hits([query.model_filter("qwen/QWEN3-0.6b")], VLLM_OLD, SGLANG)
    assert got == [("Deployment/chat", "model Qwen/Qwen3-0.6B", ("--model",))]
    assert hits([query.model_filter("Qwen/Qwen3-0.6B@main")], VLLM_OLD) == []
    assert hits([query.model_filter("*llama*")], VLLM_OLD, SGLANG) == [
        ("Deployment/sg", "model meta-llama/Llama-3.1-8B-Instruct", ("--model",))
    ]


@pytest.mark.parametrize(
    ("text", "roots"),
    [
        ("vllm", ["Deployment/chat", "Deployment/chat2", "Deployment/edge"]),
        ("vllm<0.9", ["Deployment/chat"]),
        ("vllm@>=0.9", ["Deployment/chat2"]),
        ("vllm@>=0.8,<0.11", ["Deployment/chat", "Deployment/chat2"]),
        ("vllm@0.8.5", ["Deployment/chat"]),
        ("vllm@v0.8.5", ["Deployment/chat"]),
        ("vllm~=0.10.0", ["Deployment/chat2"]),
        ("sglang<0.5", ["Deployment/sg"]),
        ("sg*", ["Deployment/sg"]),
        ("vllm!=0.8.5", ["Deployment/chat2"]),
    ],
)
def test_a_runtime_is_found_by_name_version_or_range(text: str, roots: list[str]) -> None:
    got = hits([query.runtime_filter(text)], VLLM_OLD, VLLM_NEW, SGLANG, LATEST)
    assert sorted({root for root, _, _ in got}) == roots


def test_a_version_no_range_can_place_is_left_out_and_said() -> None:
    docs = documents(LATEST)
    f = [query.runtime_filter("vllm<0.9")]
    assert [query.find(parts, f) for _, _, parts in docs] == [[]]
    placed = [p.label for _, _, parts in docs for p in query.uncomparable(parts, f)]
    # The image is :latest; the runtime found in it has no version to compare.
    assert placed == ["runtime vllm"]


def test_filters_combine_and_each_component_is_one_hit_with_what_it_matched() -> None:
    f = [query.model_filter("Qwen/Qwen3-0.6B"), query.runtime_filter("vllm<0.9")]
    assert hits(f, VLLM_OLD, VLLM_NEW) == [
        ("Deployment/chat", "model Qwen/Qwen3-0.6B", ("--model",)),
        ("Deployment/chat", "runtime vllm@0.8.5", ("--runtime",)),
    ]
    both = [query.image_filter("*vllm*"), query.image_filter("docker.io/vllm/vllm-openai:v0.8.5")]
    assert hits(both, VLLM_OLD, VLLM_NEW) == [
        ("Deployment/chat", "image docker.io/vllm/vllm-openai@v0.8.5", ("--image", "--image"))
    ]


def test_images_by_glob_repository_tag_and_digest() -> None:
    image = query.Part(
        role="image", bom_ref="image:nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
        name="nvcr.io/nvidia/ai-dynamo/vllm-runtime", version="1.3.1", confidence="verified",
        evidence=(), digests=(SHA,), reference="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
    )  # fmt: skip
    repo = "nvcr.io/nvidia/ai-dynamo/vllm-runtime"
    yes = ["*vllm*", "nvcr.io/*", "*VLLM-runtime", SHA, SHA[7:], repo, f"{repo}:1.3.1",
           f"{repo}@{SHA}"]  # fmt: skip
    no = ["vllm", "*sglang*", f"{repo}:1.3.2", "sha256:" + "cd" * 32]
    assert [query.image_matches(image, q) for q in yes] == [True] * len(yes)
    assert [query.image_matches(image, q) for q in no] == [False] * len(no)


def test_frameworks_and_llm_apis() -> None:
    assert hits([query.name_filter("--framework", "framework", "LangChain")], AGENT) == [
        ("Deployment/agent", "framework langchain", ("--framework",))
    ]
    got = hits([query.name_filter("--service", "service", "openai")], AGENT, VLLM_OLD)
    assert [(root, opts) for root, _, opts in got] == [("Deployment/agent", ("--service",))]


def test_a_hit_names_its_evidence_and_confidence() -> None:
    (_, _, parts), = documents(VLLM_OLD)  # fmt: skip
    (hit,) = query.find(parts, [query.model_filter("Qwen/Qwen3-0.6B")])
    assert hit.part.confidence == "declared"
    assert hit.part.evidence == (
        ("spec", "Deployment/chat#/spec/template/spec/containers/0/args/1"),
    )


@pytest.mark.parametrize("text", ["", "@rev", "vllm@>=bad", "<0.9", "vllm@=>0.9"], ids=repr)
def test_an_unreadable_filter_is_a_usage_error(text: str) -> None:
    with pytest.raises(query.QueryError):
        (query.model_filter if text.startswith("@") else query.runtime_filter)(text)


def test_the_inventory_is_one_row_per_model_with_its_roots_and_the_weakest_confidence() -> None:
    rows = query.inventory(documents(VLLM_OLD, VLLM_NEW, SGLANG, LATEST), "model")
    assert [(r.name, r.version, [u.root for u in r.uses], r.namespaces) for r in rows] == [
        ("meta-llama/Llama-3.1-8B-Instruct", "", ["Deployment/sg"], ("ns",)),
        ("Qwen/Qwen3-0.6B", "", ["Deployment/chat", "Deployment/chat2"], ("ns", "other")),
        ("x/y", "", ["Deployment/edge"], ("ns",)),
    ]
    runtimes = query.inventory(documents(VLLM_OLD, VLLM_NEW, LATEST), "runtime")
    # Versions in PEP 440 order (0.8.5 before 0.10.1), what no version orders last.
    assert [(r.name, r.version) for r in runtimes] == [
        ("vllm", "0.8.5"), ("vllm", "0.10.1"), ("vllm", ""),
    ]  # fmt: skip


def test_weakest_is_the_least_sure() -> None:
    assert query.weakest(["verified", "inferred", "declared"]) == "inferred"
    assert query.weakest(["verified", "unresolved"]) == "unresolved"
    assert query.weakest(["verified", "???"]) == "???"
    assert query.weakest([]) == ""


def test_a_placeholder_model_is_counted_as_unresolved_and_never_found_by_name() -> None:
    bare = deployment("bare", container("v", "vllm/vllm-openai:v0.8.5", ["serve"]))
    rows = query.inventory(documents(bare), "model")
    assert [(r.name, [u.root for u in r.uses]) for r in rows] == [
        ("(unresolved)", ["Deployment/bare"])
    ]
    assert hits([query.model_filter("*")], bare) == []


@pytest.mark.parametrize(
    ("cell", "shown"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"),
        ("a\nb", "a\\x0ab"),
    ],
)
def test_a_csv_cell_never_starts_a_formula(cell: str, shown: str) -> None:
    assert csv_cell(cell) == shown


def test_csv_is_rfc_4180() -> None:
    assert csv_text(["A", "B"], [["x,y", 'say "hi"']]) == 'A,B\r\n"x,y","say ""hi"""\r\n'
