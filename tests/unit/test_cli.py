"""The offline CLI: exit codes, one-line errors, `tree` records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aibom_core.objects import Obj
from aibom_rollup.cli import main
from tests.unit.kobj import chain, mk


def _write(path: Path, objs: list[Obj]) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


def _objs() -> list[Obj]:
    dgd, dcd, dep, rs, pod = chain(
        "DynamoGraphDeployment/g",
        "DynamoComponentDeployment/g-w",
        "Deployment/g-w",
        "ReplicaSet/g-w-1",
        "Pod/g-w-1-a",
    )
    orphan = mk("ReplicaSet", "lost", mk("Deployment", "gone"))
    return [dgd, dcd, dep, rs, pod, mk("Pod", "debug"), orphan]


def test_tree_json_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = _write(tmp_path / "d.json", _objs())
    assert main(["tree", str(dump), "-o", "json"]) == 0
    records = {(r["kind"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    assert len(records) == 7
    pod = records[("Pod", "g-w-1-a")]
    dgd_uid = records[("DynamoGraphDeployment", "g")]["uid"]
    assert (pod["root"], pod["root-uid"], pod["rollup"], pod["rollup-reason"]) == (
        "DynamoGraphDeployment/g",
        dgd_uid,
        "rolled-up",
        None,
    )
    assert pod["annotations"] == {
        "aibom.dev/root": "DynamoGraphDeployment/g",
        "aibom.dev/root-uid": dgd_uid,
        "aibom.dev/rollup": "rolled-up",
    }
    assert records[("Pod", "debug")]["rollup"] == "uncovered"
    lost = records[("ReplicaSet", "lost")]
    assert (lost["rollup"], lost["rollup-reason"]) == (
        "unresolved",
        "NotFound apps/Deployment/gone",
    )
    assert set(pod) >= {"namespace", "kind", "name", "uid"}


def test_tree_text_nests_children_under_owners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _write(tmp_path / "d.json", _objs())
    assert main(["tree", str(dump)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "namespace ns"
    dgd = next(i for i, line in enumerate(lines) if "DynamoGraphDeployment/g " in line)
    assert lines[dgd].strip() == "DynamoGraphDeployment/g  [root]"
    assert lines[dgd + 4].strip() == "Pod/g-w-1-a  [rolled-up] -> DynamoGraphDeployment/g"
    assert lines[dgd + 4].startswith(" " * 10)
    assert any("(NotFound apps/Deployment/gone)" in line for line in lines)


def test_tree_shows_a_mirrored_replicaset_as_mirrored_not_as_a_second_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stamped plain Deployment: its ReplicaSet's stamp copies `rollup: root`.
    dep = mk("Deployment", "web", annotations={"aibom.dev/rollup": "root"})
    rs = mk("ReplicaSet", "web-1", dep)
    assert main(["tree", str(_write(tmp_path / "d.json", [dep, rs]))]) == 0
    out = capsys.readouterr().out
    assert "ReplicaSet/web-1  [rolled-up; stamp mirrors Deployment/web] -> Deployment/web" in out
    assert out.count("[root") == 1
    assert main(["tree", str(_write(tmp_path / "d.json", [dep, rs])), "-o", "json"]) == 0
    records = {r["kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert records["ReplicaSet"]["rollup"] == "root"  # the stamp itself is the copy


def test_tree_prints_cycles_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = mk("Pod", "a", uid="ua")
    b = mk("ReplicaSet", "b", a, uid="ub")
    a = mk("Pod", "a", b, uid="ua")
    assert main(["tree", str(_write(tmp_path / "c.json", [a, b])), "-o", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in records) == ["a", "b"]
    assert {r["rollup-reason"].split()[0] for r in records} == {"Cycle"}


def test_directory_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = _objs()
    _write(tmp_path / "a.json", objs[:3])
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "b.json", objs[3:])
    (tmp_path / "notes.txt").write_text("ignored")
    assert main(["tree", str(tmp_path), "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 7


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON at line 1"),
        ('{"kind": "Pod", "apiVersion": "v1"}', "Pod has no `metadata`"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["tree", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aibom-rollup: error: {bad}")
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tree", "/nonexistent/dump.json"]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tree", str(tmp_path)]) == 2
    assert "no .json, .yaml or .yml files" in capsys.readouterr().err


def test_bad_kinds_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("tracked:\n  - {group: apps/v1, kind: Deployment}\n")
    dump = _write(tmp_path / "d.json", _objs())
    assert main(["tree", str(dump), "--kinds", str(kinds)]) == 2
    assert "looks like an apiVersion" in capsys.readouterr().err


def test_user_kinds_are_tracked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("tracked:\n  - {group: example.com, kind: Widget}\n")
    widget, dep = chain("Widget/w", "Deployment/d")
    dump = _write(tmp_path / "d.json", [widget, dep])
    assert main(["tree", str(dump), "--kinds", str(kinds), "-o", "json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert (records["d"]["rollup"], records["d"]["root"]) == ("rolled-up", "Widget/w")
    assert main(["kinds", "--kinds", str(kinds)]) == 0
    assert "{group: 'example.com', kind: Widget}" in capsys.readouterr().out


def test_max_depth_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = _write(tmp_path / "d.json", _objs())
    assert main(["tree", str(dump), "--max-depth", "0"]) == 2
    assert "--max-depth must be between 1 and 64" in capsys.readouterr().err


def test_kinds_prints_the_builtin_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kinds"]) == 0
    out = capsys.readouterr().out
    # Each kind with kubectl's short names beside it (the one kind catalogue, #36).
    assert "{group: nvidia.com, kind: DynamoGraphDeployment, shortNames: [dgd]}" in out
    assert "{group: grove.io, kind: PodClique, shortNames: [pclq]}" in out
    assert "{group: ray.io, kind: RayJob}" in out


def test_kinds_prints_the_short_names_of_a_merged_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = tmp_path / "k.yaml"
    kinds.write_text("tracked: [{group: x.io, kind: Gizmo, shortNames: [gz]}]\n")
    assert main(["kinds", "--kinds", str(kinds)]) == 0
    out = capsys.readouterr().out
    assert "{group: 'x.io', kind: Gizmo, shortNames: [gz]}" in out
    assert "{group: 'apps', kind: Deployment, shortNames: [deploy]}" in out


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for word in ("scan", "tree", "kinds", "webhook", "annotator", "certs"):
        assert word in out


def test_scan_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = _write(tmp_path / "d.json", _objs())
    assert main(["scan", str(dump)]) == 0
    roots = {(r["kind"], r["name"]): r for r in json.loads(capsys.readouterr().out)["roots"]}
    # The orphaned ReplicaSet is not tracked: unresolved, but no root of its own.
    assert set(roots) == {("DynamoGraphDeployment", "g")}
    graph = roots[("DynamoGraphDeployment", "g")]
    assert graph["owned"] == ["Deployment/g-w", "DynamoComponentDeployment/g-w"]
    assert graph["pods"] == 1
    assert graph["configMap"] == "aibom-dynamographdeployment-g"
    assert graph["inputHash"].startswith("sha256:")


def test_scan_writes_one_valid_deterministic_document_per_root(tmp_path: Path) -> None:
    from aibom_core.bom import validate

    objs = [*_objs(), mk("Deployment", "web", ns="other")]
    dump = _write(tmp_path / "d.json", objs)
    assert main(["scan", str(dump), "-o", str(tmp_path / "a")]) == 0
    assert main(["scan", str(dump), "-o", str(tmp_path / "b")]) == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.json"))
    assert [str(f) for f in files] == [
        "ns/aibom-dynamographdeployment-g.json",
        "other/aibom-deployment-web.json",
    ]
    for f in files:
        data = (tmp_path / "a" / f).read_bytes()
        assert data == (tmp_path / "b" / f).read_bytes()
        validate(data)
    doc = json.loads((tmp_path / "a" / files[0]).read_bytes())
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["aibom.rollup.owned.0"] == "Deployment/g-w"
    assert props["aibom.rollup.owned.1"] == "DynamoComponentDeployment/g-w"


def test_scan_opted_in_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ns_on = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "on", "labels": {"aibom.dev/enabled": "true"}},
    }
    ns_off = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "off"}}
    objs = [ns_on, ns_off, mk("Deployment", "a", ns="on"), mk("Deployment", "b", ns="off")]
    dump = _write(tmp_path / "d.json", objs)
    assert main(["scan", str(dump), "--opted-in-only"]) == 0
    roots = json.loads(capsys.readouterr().out)["roots"]
    assert [(r["namespace"], r["name"]) for r in roots] == [("on", "a")]


def test_scan_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    data = json.dumps({"apiVersion": "v1", "kind": "List", "items": _objs()}).encode()

    class Stdin(io.BytesIO):
        def isatty(self) -> bool:
            return False

    fake = io.TextIOWrapper(Stdin(data))
    monkeypatch.setattr(sys, "stdin", fake)
    assert main(["scan", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["roots"]


# -- scan at fleet scale: same documents, written atomically ---------------------


def _fleet(tmp_path: Path) -> tuple[Path, list[Obj]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_dump", Path(__file__).resolve().parents[2] / "bench" / "gen_dump.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    shapes = ["deployment", "nim", "cronjob", "lws", "dcd"]
    objs: list[Obj] = list(gen.generate(60, 300, 3, shapes))
    return _write(tmp_path / "fleet.json", objs), objs


def test_scan_writes_the_core_documents_and_nothing_else(tmp_path: Path) -> None:
    from aibom_core.bom import facts_of, input_hash, render
    from aibom_core.graph import build_graph
    from aibom_core.kinds import default_registry
    from aibom_core.rollup import inventory
    from aibom_edge.options import tool_version

    dump, objs = _fleet(tmp_path)
    out = tmp_path / "out"
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # Each root's document as the core writes it alone (no cache shared between roots).
    reg = default_registry()
    expected = {}
    for entry in inventory(build_graph([o for o in objs if o["kind"] != "Namespace"], reg)):
        facts = facts_of(entry.view, reg)
        digest = input_hash(facts, tool_version=tool_version())
        path = Path(entry.ref.namespace) / f"{entry.configmap_name}.json"
        expected[path] = render(facts, tool_version=tool_version(), digest=digest)
    assert len(expected) == 60
    assert first == expected  # no temporary file left either
    # Again over the documents: replaced in place, same bytes.
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == first


@pytest.mark.parametrize(
    ("namespace", "name"), [("..", "web"), ("ns", "a/b"), ("ns/x", "web"), (".", "web")]
)
def test_scan_refuses_a_root_whose_names_are_not_file_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], namespace: str, name: str
) -> None:
    # A dump can hold any string; the documents stay under DIR.
    out = tmp_path / "a" / "out"
    dump = _write(tmp_path / "d.json", [mk("Deployment", name, ns=namespace)])
    assert main(["scan", str(dump), "-o", str(out)]) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert "cannot be a file name under" in error
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [dump]


def test_scan_write_failure_is_one_line_and_leaves_no_temporary_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    dump = _write(tmp_path / "d.json", _objs())
    out = tmp_path / "out"
    out.mkdir()  # an existing DIR: written into document by document
    monkeypatch.setattr(os, "rename", full)
    assert main(["scan", str(dump), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "aibom-dynamographdeployment-g.json: No space left on device" in err
    assert [p for p in out.rglob("*") if p.is_file()] == []


def test_scan_into_a_new_dir_shows_it_complete_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    dump = _many_roots(tmp_path)
    out = tmp_path / "new" / "out"
    real_open = os.open
    seen: list[bool] = []

    def watching(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:  # a document being written: DIR must not be visible yet
            seen.append(out.exists())
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", watching)
    assert main(["scan", str(dump), "-o", str(out), "-j", "1"]) == 0
    assert seen and not any(seen)
    assert len([p for p in out.rglob("*") if p.is_file()]) == 13
    assert [p.name for p in tmp_path.rglob(".*")] == []  # no staging directory left


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_scan_into_a_new_dir_that_fails_leaves_no_dir_and_nothing_hidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    import errno
    import os

    real_write = os.write
    calls = [0]

    def full_after_some(fd: int, data: Any) -> int:
        calls[0] += 1
        if calls[0] > 2:  # in every process: each writes at least one document first
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    dump = _many_roots(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(os, "write", full_after_some)
    assert main(["scan", str(dump), "-o", str(out), "-j", jobs]) == 2
    monkeypatch.undo()
    err = [line for line in capsys.readouterr().err.splitlines() if " note: " not in line]
    assert len(err) == 1 and "No space left on device" in err[0] and str(out) in err[0], err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.json"]


def test_scan_into_a_new_dir_steps_over_a_staging_dir_a_killed_run_left(tmp_path: Path) -> None:
    import os

    dump = _write(tmp_path / "d.json", _objs())
    out = tmp_path / "out"
    stale = tmp_path / f".out.{os.getpid()}-0.tmp"
    (stale / "ns").mkdir(parents=True)
    (stale / "ns" / "half.json").write_bytes(b"half a document")
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    assert json.loads((out / "ns" / "aibom-dynamographdeployment-g.json").read_bytes())
    assert (stale / "ns" / "half.json").read_bytes() == b"half a document"  # not ours


def test_scan_steps_over_a_temporary_file_a_killed_run_left(tmp_path: Path) -> None:
    import os

    dump = _write(tmp_path / "d.json", _objs())
    out = tmp_path / "out"
    stale = out / "ns" / f".aibom-dynamographdeployment-g.json.{os.getpid()}-0.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a document")
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    assert json.loads((out / "ns" / "aibom-dynamographdeployment-g.json").read_bytes())
    assert stale.read_bytes() == b"half a document"  # not ours to remove


def test_scan_summary_is_indented_utf8_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = mk("Deployment", "web", annotations={"model.aibom.dev/name": "org/mödel-ü"})
    dep["spec"] = {"template": {"spec": {"containers": [{"name": "m", "image": "reg.io/a:1"}]}}}
    dump = _write(tmp_path / "d.json", [dep, *_objs()])
    assert main(["scan", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "org/mödel-ü" in out  # UTF-8, not \u escapes
    data = json.loads(out)
    assert [r["models"] for r in data["roots"] if r["name"] == "web"] == [["org/mödel-ü"]]
    assert out == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_tree_json_is_indented_utf8_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The API server allows only DNS names; a dump may carry any text, and the
    # record must say it as it is.
    dump = _write(tmp_path / "d.json", [*_objs(), mk("Pod", "pöd-ü")])
    assert main(["tree", str(dump), "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert "pöd-ü" in out  # UTF-8, not \u escapes
    data = json.loads(out)
    assert [r["rollup"] for r in data if r["name"] == "pöd-ü"] == ["uncovered"]
    assert out == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_scan_into_its_last_dir_rewrites_only_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objs = [*_objs(), mk("Deployment", "web", ns="other")]
    dump = _write(tmp_path / "d.json", objs)
    out = tmp_path / "out"
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    graph_doc = out / "ns" / "aibom-dynamographdeployment-g.json"
    web_doc = out / "other" / "aibom-deployment-web.json"
    before = {p: p.stat() for p in (graph_doc, web_doc)}
    assert "wrote 2 AIBOM document(s)" in capsys.readouterr().err
    objs[-1]["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"  # web's document changes
    _write(dump, objs)
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    assert "wrote 1 AIBOM document(s) under" in (err := capsys.readouterr().err)
    assert "(1 more unchanged)" in err
    after = {p: p.stat() for p in (graph_doc, web_doc)}
    assert (after[graph_doc].st_ino, after[graph_doc].st_mtime_ns) == (
        before[graph_doc].st_ino,
        before[graph_doc].st_mtime_ns,
    )
    assert after[web_doc].st_ino != before[web_doc].st_ino
    assert json.loads(web_doc.read_bytes())["metadata"]["timestamp"] == "2026-11-01T00:00:00Z"


def test_scan_replaces_a_link_at_a_document_path_never_its_target(tmp_path: Path) -> None:
    dump = _write(tmp_path / "d.json", _objs())
    out = tmp_path / "out"
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    doc = out / "ns" / "aibom-dynamographdeployment-g.json"
    data = doc.read_bytes()
    target = tmp_path / "elsewhere.json"
    target.write_bytes(data)  # the same bytes: still not "unchanged", it is not our file
    doc.unlink()
    doc.symlink_to(target)
    assert main(["scan", str(dump), "-o", str(out)]) == 0
    assert not doc.is_symlink()
    assert doc.read_bytes() == data
    assert target.read_bytes() == data


def _many_roots(tmp_path: Path) -> Path:
    objs = [mk("Deployment", f"web-{i:02d}", ns=f"ns-{i % 3}") for i in range(12)]
    return _write(tmp_path / "many.json", [*_objs(), *objs])


def test_scan_jobs_write_the_same_bytes_as_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _many_roots(tmp_path)
    assert main(["scan", str(dump), "-o", str(tmp_path / "one"), "--jobs", "1"]) == 0
    assert main(["scan", str(dump), "-o", str(tmp_path / "four"), "-j", "4"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if " note: " not in line]
    assert err[0].startswith("wrote 13 AIBOM document(s)") and err[1].startswith("wrote 13 "), err

    def tree(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    one, four = tree(tmp_path / "one"), tree(tmp_path / "four")
    assert len(one) == 13 and one == four


def test_scan_a_failing_writer_process_is_one_line_and_nothing_is_left_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _many_roots(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "ns-2").write_text("a file where the namespace's folder goes")  # the last share's
    assert main(["scan", str(dump), "-o", str(out), "-j", "3"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " note: " not in line]
    assert len(err) == 1 and err[0].startswith("aibom-rollup: error: ") and "ns-2" in err[0], err
    leftovers = [p.name for p in out.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_scan_a_bug_in_a_writer_process_is_an_internal_error_as_in_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from aibom_core import bom
    from aibom_rollup import cli

    real = bom.render

    def broken(facts: Any, **kw: Any) -> bytes:
        if "web-11" in str(facts):  # in the last share: a child's root
            raise ValueError("a bug")
        return real(facts, **kw)

    monkeypatch.setattr(cli, "render", broken)
    dump = _many_roots(tmp_path)
    for jobs in ("1", "3"):
        assert main(["scan", str(dump), "-o", str(tmp_path / jobs), "-j", jobs]) == 1
        err = capsys.readouterr().err
        assert "internal error" in err and "a bug" in err, err


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["scan"], 0), (["tree", "-o", "json"], 0), (["scan", "-o", "DIR"], 0), (["scan"], 2)],
)
def test_the_program_skips_teardown_but_not_its_output_or_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    # `scan` and `tree` as a program leave by os._exit (no freeing of the
    # dump); stdout and stderr must still be complete and the code the same.
    import os
    import subprocess
    import sys

    dump = _write(tmp_path / "d.json", _objs() if code == 0 else [{"kind": "Pod"}])

    def command(out: str) -> list[str]:
        return [argv[0], str(dump), *(a.replace("DIR", str(tmp_path / out)) for a in argv[1:])]

    proc = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", *command("program")],
        capture_output=True,
        # Buffered as a user's shell would have it (PYTHONUNBUFFERED would hide a lost flush).
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        },
        check=False,
    )
    in_process = main(command("in-process"))
    captured = capsys.readouterr()
    assert (proc.returncode, in_process) == (code, code)
    assert proc.stdout.decode() == captured.out
    assert proc.stderr.decode() == captured.err.replace("in-process", "program")
