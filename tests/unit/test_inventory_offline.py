"""The auditor's questions offline: `kubectl aibom find|models|runtimes --from-file` and
`aibom-rollup find|models|runtimes` give the same answers from a dump, from the
dump's stored documents and from a directory of documents (`scan -o DIR`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aibom_rollup import cli, kubectl_aibom
from aibom_rollup.inputs import is_document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture
def documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "docs"
    code, _, _ = run(cli.main, ["scan", str(EXAMPLES), "-o", str(out)], capsys)
    assert code == 0
    return out


QUESTIONS = [
    ["find", "--model", "Qwen/Qwen3-0.6B", "-o", "json"],
    ["find", "--runtime", "vllm<0.9", "-o", "csv"],
    ["find", "--image", "*vllm*", "--runtime", "vllm", "-o", "wide"],
    ["models", "-o", "json"],
    ["runtimes", "-o", "csv"],
    ["models", "-o", "wide"],
]


@pytest.mark.parametrize("question", QUESTIONS, ids=" ".join)
def test_a_dump_and_a_directory_of_documents_answer_alike(
    question: list[str], documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from_dump = run(kubectl_aibom.main, [*question, "-A", "--from-file", str(EXAMPLES)], capsys)
    from_docs = run(kubectl_aibom.main, [*question, "-A", "--from-file", str(documents)], capsys)
    offline = run(cli.main, [question[0], str(documents), *question[1:]], capsys)
    assert from_dump[0] == 0 and from_dump[1]
    assert from_dump == from_docs == offline


def test_the_answers_name_the_root_the_component_and_the_evidence(
    documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(cli.main, ["find", str(documents), "--runtime", "vllm@0.8.5", "-o", "json"],
                       capsys)  # fmt: skip
    assert code == 0
    (hit,) = json.loads(out)
    assert (hit["namespace"], hit["root"], hit["matched"]) == (
        "default", "LeaderWorkerSet/vllm", ["--runtime"]
    )  # fmt: skip
    assert hit["component"]["name"] == "vllm" and hit["component"]["version"] == "0.8.5"
    assert hit["confidence"] == "inferred"
    assert hit["evidence"] and all(
        e["locator"].startswith("LeaderWorkerSet/vllm#") for e in hit["evidence"]
    )


def test_nothing_matched_is_exit_0_with_a_note(
    documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(cli.main, ["find", str(documents), "--model", "nobody/none"], capsys)
    assert (code, out) == (0, "")
    assert err == "No AIBOM in the cluster matches --model nobody/none.\n"


def test_a_dump_holding_a_document_in_a_configmap_is_still_a_dump(documents: Path) -> None:
    doc = next(documents.rglob("*.json")).read_bytes()
    assert is_document(doc)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                 "data": {"aibom.json": doc.decode()}}  # fmt: skip
    assert not is_document(json.dumps({"kind": "List", "items": [configmap]}).encode())
    assert not is_document(json.dumps(configmap, indent=2).encode())


def test_documents_and_objects_mixed_are_a_usage_error(
    documents: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.json").write_bytes(next(documents.rglob("*.json")).read_bytes())
    (mixed / "b.yaml").write_bytes((EXAMPLES / "deployment.yaml").read_bytes())
    code, out, err = run(kubectl_aibom.main, ["models", "-A", "--from-file", str(mixed)], capsys)
    assert (code, out) == (2, "")
    assert "mix AIBOM documents" in err and err.count("\n") == 1


def test_documents_hold_no_objects_and_say_so(
    documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(kubectl_aibom.main, ["tree", "-A", "--from-file", str(documents)], capsys)
    assert (code, out) == (1, "")
    assert (
        err == "error: AIBOM documents hold no objects: explain and tree need a cluster or a dump\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["find"], "find needs at least one of --image, --model, --runtime"),
        (["find", "--runtime", "vllm@>=x"], "is not a version range"),
        (["find", "--model", "@main"], "give a model id"),
    ],
)
def test_a_bad_question_is_exit_2_in_one_line(
    argv: list[str], message: str, documents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(kubectl_aibom.main, [*argv, "--from-file", str(documents)], capsys)
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1
