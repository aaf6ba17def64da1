"""An auditor's questions through the real kubectl, over the real annotator's documents:
`kubectl aibom find` by model, runtime (and version range), image glob, agent
framework and LLM API; `kubectl aibom models` and `runtimes` in every output form;
the same answers from a dump of the cluster; hostile names escaped.

Two opted-in namespaces, kept by one annotator: a vLLM 0.8.5 Deployment serving
Qwen/Qwen3-0.6B (its Pods report digests: verified images), a vLLM 0.10.1
Deployment serving the same model from a `sh -c` line (so only inferred), an
SGLang StatefulSet, an agent calling the
OpenAI API through LangChain, and a Deployment whose model name is an attack on a
terminal and on a spreadsheet.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl, child_env
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    docs,
    grant_annotator,
    grant_lease,
    new_namespace,
    wait_for,
    workload,
)

pytestmark = pytest.mark.integration

OLD = "docker.io/vllm/vllm-openai:v0.8.5"
NEW = "docker.io/vllm/vllm-openai:v0.10.1"
SGLANG = "docker.io/lmsysorg/sglang:v0.4.6"
AGENT = "registry.example/agents/support:2"
SHA = "sha256:" + "ab" * 32
QWEN = "Qwen/Qwen3-0.6B"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
HOSTILE = '=HYPERLINK("http://evil.example")\x1b[2J\nfake'


def pod_template(
    app: str, image: str, args: list[str], env: dict[str, str] | None = None, *, shell: str = ""
) -> Obj:
    container: dict[str, Any] = {"name": "main", "image": image, "args": args}
    if shell:  # a command line inside `sh -c`: what it names is only inferred
        container["command"] = ["sh", "-c", shell]
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [container]}}


@dataclass
class World:
    cp: ControlPlane
    kubectl: Kubectl
    a: str
    b: str

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`kubectl aibom ARGS` through the real kubectl (the plugin found on PATH)."""
        assert self.cp.bin_dir is not None
        env = child_env()
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["KUBERC"] = "off"
        cmd = [str(self.cp.bin_dir / "kubectl"), "aibom", f"--kubeconfig={self.cp.kubeconfig}"]
        return subprocess.run(
            [*cmd, *args], check=False, capture_output=True, text=True, env=env, timeout=60
        )

    def ok(self, *args: str) -> str:
        got = self.run(*args)
        assert got.returncode == 0, (args, got.returncode, got.stderr)
        return got.stdout

    def mine(self, rows: list[Any], key: str = "namespace") -> list[Any]:
        """Rows of this world's namespaces (the control plane is shared)."""
        return [r for r in rows if r[key] in (self.a, self.b)]


@pytest.fixture(scope="module")
def world(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    cp = control_plane
    a, b = new_namespace(cp, "aibom-audit-a"), new_namespace(cp, "aibom-audit-b")
    for ns in (a, b):
        kubectl("label", "namespace", ns, f"{LABEL_KEY}={a}")
    identity = grant_annotator(cp, kubectl, "aibom-audit-annotator")
    grant_lease(kubectl, a, "aibom-audit-annotator", "aibom-test")
    objects = [
        workload("Deployment", a, "chat-old", None, replicas=2,
                 template=pod_template("chat-old", OLD, ["--model", QWEN])),
        workload("Deployment", b, "chat-new", None, replicas=1,
                 template=pod_template("chat-new", NEW, [],
                                       shell=f"vllm serve {QWEN} --port 8000")),
        workload("StatefulSet", b, "sglang", None, replicas=1,
                 template=pod_template("sglang", SGLANG, [
                     "python", "-m", "sglang.launch_server", "--model-path", LLAMA])),
        workload("Deployment", b, "support-agent", None, replicas=1,
                 template=pod_template("support-agent", AGENT, ["serve"], {
                     "OPENAI_BASE_URL": "https://api.openai.com/v1",
                     "LANGCHAIN_TRACING_V2": "true"})),
        workload("Deployment", a, "hostile", None, replicas=1,
                 template=pod_template("hostile", OLD, ["--model", HOSTILE])),
    ]  # fmt: skip
    kubectl("apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1",
                                                  "items": objects}))  # fmt: skip

    def old_pods() -> list[Obj]:
        resp = cp.request("GET", f"/api/v1/namespaces/{a}/pods?labelSelector=app%3Dchat-old")
        items: list[Obj] = resp.json()["items"] if resp.ok else []
        return items if len(items) == 2 else []

    for pod in wait_for("the 2 Pods of chat-old", old_pods):
        set_digest(cp, a, pod["metadata"]["name"], OLD, SHA)
    annotator = Annotator(identity, tmp_path_factory.mktemp("audit"), a, trust_references=True)
    annotator.start()
    try:
        annotator.wait_ready().wait_leading()
        wait_for(
            "the five documents, chat-old's with its digest",
            lambda: (
                len(docs(cp, a)) + len(docs(cp, b)) == 5
                and any(SHA[7:] in json.dumps(cm) for cm in docs(cp, a).values())
            ),
            90,
        )
        yield World(cp, kubectl, a, b)
    finally:
        annotator.stop()
        for ns in (a, b):
            cp.request("DELETE", f"/api/v1/namespaces/{ns}")


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[1:]]


# -- find ------------------------------------------------------------------------------------


def test_where_does_model_x_run_and_on_what(world: World) -> None:
    hits = world.mine(json.loads(world.ok("find", "-A", "--model", QWEN, "-o", "json")))
    assert sorted((h["namespace"], h["root"]) for h in hits) == [
        (world.a, "Deployment/chat-old"), (world.b, "Deployment/chat-new"),
    ]  # fmt: skip
    for hit in hits:
        assert hit["component"] == {"kind": "model", "name": QWEN, "version": None,
                                    "bomRef": f"model:{QWEN}"}  # fmt: skip
    old, new = sorted(hits, key=lambda h: str(h["root"]) != "Deployment/chat-old")
    assert old["confidence"] == "declared"
    spec = "spec/template/spec/containers/0"
    assert old["evidence"] == [{"source": "spec", "locator": f"Deployment/chat-old#/{spec}/args/1"}]
    assert new["confidence"] == "inferred"
    assert new["evidence"] == [
        {"source": "spec", "locator": f"Deployment/chat-new#/{spec}/command/2"}
    ]
    # A revision nobody serves matches nothing.
    got = world.run("find", "-A", "--model", f"{QWEN}@main")
    assert (got.returncode, got.stdout) == (0, "")
    assert got.stderr == f"No AIBOM in the cluster matches --model {QWEN}@main.\n"


def test_what_runs_runtime_y_below_version_z(world: World) -> None:
    rows = table(world.ok("find", "-n", world.a, "--runtime", "vllm<0.9"))
    assert rows == [
        [world.a, "Deployment/chat-old", "runtime", "vllm@0.8.5", "-", "inferred"],
        [world.a, "Deployment/hostile", "runtime", "vllm@0.8.5", "-", "inferred"],
    ]
    newer = world.mine(json.loads(world.ok("find", "-A", "--runtime", "vllm@>=0.9", "-o", "json")))
    assert [(h["root"], h["component"]["version"]) for h in newer] == [
        ("Deployment/chat-new", "0.10.1")
    ]
    found = yaml.safe_load(world.ok("find", "-A", "--runtime", "sglang~=0.4.0", "-o", "yaml"))
    sglang = world.mine(found)
    assert [h["root"] for h in sglang] == ["StatefulSet/sglang"]


def test_filters_combine_and_images_match_by_glob(world: World) -> None:
    both = world.mine(json.loads(world.ok(
        "find", "-A", "--image", "*vllm*", "--model", QWEN, "--runtime", "vllm<0.9", "-o", "json"
    )))  # fmt: skip
    assert {h["root"] for h in both} == {"Deployment/chat-old"}
    assert sorted(tuple(h["matched"]) for h in both) == [("--image",), ("--model",), ("--runtime",)]
    (image,) = [h for h in both if h["matched"] == ["--image"]]
    assert image["image"] == OLD and image["digests"] == [SHA] and image["confidence"] == "verified"
    wide = table(world.ok("find", "-n", world.a, "--image", "*vllm-openai", "-o", "wide"))
    assert [r[:6] for r in wide if r[1] == "Deployment/chat-old"] == [
        [world.a, "Deployment/chat-old", "image", OLD, SHA, "verified"]
    ]
    # A plain word is a repository of its own, and the note says what a glob does.
    got = world.run("find", "-A", "--image", "vllm")
    assert (got.returncode, got.stdout) == (0, "")
    assert "--image '*vllm*'" in got.stderr


def test_agent_frameworks_and_llm_apis(world: World) -> None:
    fw = world.mine(json.loads(world.ok("find", "-A", "--framework", "langchain", "-o", "json")))
    api = world.mine(json.loads(world.ok("find", "-A", "--service", "openai", "-o", "json")))
    assert [h["root"] for h in fw] == [h["root"] for h in api] == ["Deployment/support-agent"]
    assert api[0]["component"]["bomRef"] == "service:openai@https://api.openai.com/v1"


# -- inventory -------------------------------------------------------------------------------


def test_models_one_row_per_model_with_roots_namespaces_and_the_weakest_confidence(
    world: World,
) -> None:
    items = json.loads(world.ok("models", "-A", "-o", "json"))["items"]
    mine = {i["model"]: i for i in items if set(i["namespaces"]) <= {world.a, world.b}}
    qwen = mine[QWEN]
    assert qwen["namespaces"] == sorted([world.a, world.b])
    assert [(r["namespace"], r["root"]) for r in qwen["roots"]] == sorted(
        [(world.a, "Deployment/chat-old"), (world.b, "Deployment/chat-new")]
    )
    # chat-old declares it, chat-new's only infers it: the row says the weaker.
    assert qwen["weakestConfidence"] == "inferred"
    assert sorted(r["confidence"] for r in qwen["roots"]) == ["declared", "inferred"]
    assert mine[LLAMA]["roots"] == [
        {"namespace": world.b, "root": "StatefulSet/sglang", "confidence": "declared"}
    ]
    # One namespace and the table form.
    rows = table(world.ok("models", "-n", world.b))
    assert [r[0] for r in rows] == sorted([LLAMA, QWEN], key=str.lower)
    assert rows[1][2:] == ["1", world.b, "inferred"]


def test_runtimes_as_csv_for_a_spreadsheet(world: World) -> None:
    got = list(csv.reader(io.StringIO(world.ok("runtimes", "-A", "-o", "csv"))))
    assert got[0] == ["RUNTIME", "VERSION", "ROOTS", "NAMESPACES", "CONFIDENCE", "ROOT NAMES"]
    mine = [r for r in got[1:] if world.a in r[3] or world.b in r[3]]
    assert mine == [
        ["sglang", "0.4.6", "1", world.b, "inferred", f"{world.b}/StatefulSet/sglang"],
        ["vllm", "0.8.5", "2", world.a, "inferred",
         f"{world.a}/Deployment/chat-old,{world.a}/Deployment/hostile"],
        ["vllm", "0.10.1", "1", world.b, "inferred", f"{world.b}/Deployment/chat-new"],
    ]  # fmt: skip


def test_a_hostile_model_name_moves_no_cursor_and_starts_no_formula(world: World) -> None:
    text = world.ok("models", "-n", world.a, "-o", "wide")
    assert "\x1b" not in text and "fake" not in text.splitlines()[0]
    assert '=HYPERLINK("http://evil.example")\\x1b[2J\\x0afake' in text
    rows = list(csv.reader(io.StringIO(world.ok("models", "-n", world.a, "-o", "csv"))))
    (hostile,) = [r for r in rows if "HYPERLINK" in r[0]]
    assert hostile[0].startswith("'=")  # a spreadsheet shows it as text
    found = table(world.ok("find", "-n", world.a, "--model", "=HYPERLINK*"))
    assert [r[1] for r in found] == ["Deployment/hostile"]


def test_nothing_found_is_exit_0_with_a_note(world: World) -> None:
    got = world.run("runtimes", "-n", world.a, "-l", "app.kubernetes.io/part-of=nothing")
    assert (got.returncode, got.stdout) == (0, "")
    assert got.stderr == f'No runtimes in the AIBOMs of namespace "{world.a}".\n'


# -- the same answers from a dump ---------------------------------------------------------------


def test_a_dump_of_the_cluster_gives_the_same_answers(world: World, tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(world.kubectl("get", "deploy,sts,rs,pod,cm", "-A", "-o", "json").stdout)
    for args in (
        ["find", "--model", QWEN, "-o", "json"],
        ["find", "--runtime", "vllm<0.9", "--image", "*vllm*", "-o", "wide"],
        ["find", "--framework", "langchain"],
        ["models", "-o", "csv"],
        ["runtimes", "-o", "yaml"],
    ):
        for scope in (["-n", world.a], ["-n", world.b]):
            live = world.ok(*args, *scope)
            assert world.ok(*args, *scope, f"--from-file={dump}") == live, (args, scope)
    offline = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "models", str(dump), "-n", world.b, "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert offline == world.ok("models", "-n", world.b, "-o", "json")
