"""Ownership provenance in the core: the edge-trust input, the
`unproven` status, the edge proof, and the documents' new properties."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from aibom_core.bom import facts_of, render
from aibom_core.graph import build_graph, key_of
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj, ObjRef, OwnerRef, controller_ref, ref_of
from aibom_core.provenance import (
    ProofTrust,
    ProvenanceKeyError,
    parse_key,
    proof_for,
    verify,
)
from aibom_core.rollup import inventory, root_entry
from aibom_core.stamp import Keys, stamp_of
from aibom_core.walk import Reason, Rollup
from certs.pki import new_key_text
from tests.unit.kobj import mk

REG = default_registry()
KEY = b"k" * 32
PROOF = Keys().edge_proof


def proved(obj: Obj, key: bytes = KEY) -> Obj:
    """obj with the edge-proof the webhook would write for its controller edge."""
    owner = controller_ref(obj)
    assert owner is not None
    where = Keys().proof_key(ref_of(obj).group_kind, owner.group_kind)
    obj["metadata"].setdefault("annotations", {})[where] = proof_for(key, ref_of(obj), owner)
    return obj


# -- the proof ---------------------------------------------------------------------------


def test_proof_is_the_contract_hmac() -> None:
    msg = b"v1\nns\napps\nReplicaSet\nrs-1\nuid-1"
    mac = hmac.new(KEY, msg, hashlib.sha256).digest()
    want = "v1:" + base64.urlsafe_b64encode(mac).decode().rstrip("=")
    child = ObjRef(group="apps", kind="ReplicaSet", namespace="ns", name="rs-1", uid="rs-uid")
    owner = OwnerRef(api_version="apps/v1", kind="Deployment", name="d", uid="uid-1")
    got = proof_for(KEY, child, owner)
    assert got == want
    assert "=" not in got


@pytest.mark.parametrize(
    ("field", "of_owner"),
    [("namespace", False), ("group", False), ("kind", False), ("name", False), ("uid", True)],
)
def test_proof_binds_each_field(field: str, of_owner: bool) -> None:
    child = ObjRef(group="", kind="Pod", namespace="ns", name="p", uid="")
    owner = OwnerRef(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="u")
    proof = proof_for(KEY, child, owner)
    assert verify(KEY, proof, child, owner)
    if of_owner:
        owner = dataclasses.replace(owner, **{field: getattr(owner, field) + "x"})
    else:
        child = dataclasses.replace(child, **{field: getattr(child, field) + "x"})
    assert proof_for(KEY, child, owner) != proof
    assert not verify(KEY, proof, child, owner)
    assert not verify(b"j" * 32, proof, child, owner)
    assert not verify(KEY, proof + "A", child, owner)
    assert not verify(KEY, None, child, owner)


def test_key_file_forms() -> None:
    text = new_key_text()
    assert len(parse_key(text)) == 32
    assert parse_key(b"\x00" * 32) == b"\x00" * 32
    assert parse_key(base64.b64encode(b"z" * 48)) == b"z" * 48
    with pytest.raises(ProvenanceKeyError, match="at least 32"):
        parse_key(b"c2hvcnQ=\n")
    with pytest.raises(ProvenanceKeyError):
        parse_key(b"")


def test_a_proof_copied_onto_a_forged_object_gains_nothing() -> None:
    rs = mk("ReplicaSet", "rs")
    legit = proved(mk("Pod", "legit", rs))
    forged = mk("Pod", "forged", rs, annotations=dict(legit["metadata"]["annotations"]))
    trust = ProofTrust(key=KEY, keys=Keys())
    assert trust(legit, ref_of(legit), controller_ref(legit)) is None  # type: ignore[arg-type]
    assert trust(forged, ref_of(forged), controller_ref(forged)) is Reason.UNPROVEN  # type: ignore[arg-type]
    # Same name in another namespace, or the same object pointing elsewhere: refused too.
    elsewhere = mk("Pod", "legit", mk("ReplicaSet", "rs", ns="other"), ns="other")
    elsewhere["metadata"]["annotations"] = dict(legit["metadata"]["annotations"])
    assert trust(elsewhere, ref_of(elsewhere), controller_ref(elsewhere)) is Reason.UNPROVEN  # type: ignore[arg-type]


def test_no_key_proves_nothing() -> None:
    rs = mk("ReplicaSet", "rs")
    pod = proved(mk("Pod", "p", rs))
    ref, owner = ref_of(pod), controller_ref(pod)
    assert owner is not None
    assert ProofTrust(key=None, keys=Keys())(pod, ref, owner) is Reason.UNPROVEN


# -- the walk with edge trust: the rule's table ----------------------------------------------


def _objs() -> dict[str, Obj]:
    dep = mk("Deployment", "d")
    rs = proved(mk("ReplicaSet", "d-1", dep))
    dgd = mk("DynamoGraphDeployment", "g")
    return {
        "dep": dep,
        "rs": rs,
        "pod-ok": proved(mk("Pod", "ok", rs)),
        "pod-forged": mk("Pod", "forged", rs),  # no proof: forged, or admitted with no webhook
        "dcd-forged": mk("DynamoComponentDeployment", "c", dgd),  # tracked child, refused edge
        "dgd": dgd,
        # Proven first hop, refused hop above it before any tracked ancestor.
        "rs-forged": mk("ReplicaSet", "x-1", dep),
        "pod-under-forged-rs": proved(mk("Pod", "x", mk("ReplicaSet", "x-1", dep))),
        # Tracked ancestor reached through a proven edge, refused edge above it.
        "dep-forged": mk("Deployment", "inner", dgd),
    }


def _pod_under_inner(objs: dict[str, Obj]) -> tuple[Obj, Obj]:
    rs = proved(mk("ReplicaSet", "inner-1", objs["dep-forged"]))
    return rs, proved(mk("Pod", "inner-pod", rs))


@dataclass(frozen=True)
class Case:
    name: str
    subject: str
    status: Rollup
    root: str | None
    reason: str | None


CASES = [
    Case("proven chain rolls up", "pod-ok", Rollup.ROLLED_UP, "Deployment/d", None),
    Case("untracked child, unproven edge: no root", "pod-forged", Rollup.UNPROVEN, None,
         "Unproven apps/ReplicaSet/d-1"),
    Case("tracked child, unproven edge: own root", "dcd-forged", Rollup.UNPROVEN,
         "DynamoComponentDeployment/c", "Unproven nvidia.com/DynamoGraphDeployment/g"),
    Case("proven first hop, refused higher hop", "pod-under-forged-rs", Rollup.UNPROVEN, None,
         "Unproven apps/Deployment/d"),
    Case("refused above a tracked ancestor: the ancestor is the root", "inner-pod",
         Rollup.ROLLED_UP, "Deployment/inner", None),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_edge_trust_table(case: Case) -> None:
    objs = _objs()
    rs, pod = _pod_under_inner(objs)
    objs["inner-rs"], objs["inner-pod"] = rs, pod
    trust = ProofTrust(key=KEY, keys=Keys())
    graph = build_graph(objs.values(), REG, trust=trust)
    result = graph.resolve(objs[case.subject])
    assert result.status is case.status
    assert (result.root.kind_name if result.root else None) == case.root
    stamp = stamp_of(result)
    assert stamp.rollup == case.status.value
    assert stamp.reason == case.reason
    # The one-pass derivation agrees with every walk.
    all_results = graph.resolve_all()
    for key in graph:
        assert all_results[key] == graph.resolve_key(key), key
    # Without the trust input, the same objects roll up as without provenance.
    assert build_graph(objs.values(), REG).resolve(objs["pod-forged"]).status is Rollup.ROLLED_UP


def test_refused_edge_is_not_fetched() -> None:
    dep = mk("Deployment", "d")
    pod = mk("Pod", "p", mk("ReplicaSet", "rs", dep))
    asked: list[str] = []

    def lookup(req):  # type: ignore[no-untyped-def]
        asked.append(req.owner.name)
        raise AssertionError("a refused edge must not be fetched")

    from aibom_core.walk import resolve

    result = resolve(pod, registry=REG, lookup=lookup, trust=lambda *_: Reason.UNCHECKED)
    assert asked == []
    assert result.status is Rollup.UNPROVEN
    assert str(result.failure) == "Unchecked apps/ReplicaSet/rs"


# -- documents -----------------------------------------------------------------------------------


def test_unproven_members_are_listed_not_absorbed() -> None:
    objs = _objs()
    trust = ProofTrust(key=KEY, keys=Keys())
    objs["pod-forged"]["spec"] = {"containers": [{"name": "m", "image": "evil.example/x:1"}]}
    graph = build_graph(objs.values(), REG, trust=trust)
    entry = root_entry(graph, key_of(ref_of(objs["dep"])))
    assert entry is not None
    assert [ref_of(p).name for p in entry.pods] == ["ok"]
    # The forged Pod (edge to a member RS) and the forged RS (edge to the root).
    assert [ref_of(o).kind_name for o in entry.unproven] == ["Pod/forged", "ReplicaSet/x-1"]
    # The offline one-pass inventory says the same.
    by_root = {e.ref.name: e for e in inventory(graph)}
    assert [ref_of(o).kind_name for o in by_root["d"].unproven] == [
        "Pod/forged",
        "ReplicaSet/x-1",
    ]
    # The tracked DCD whose edge to the graph is refused: its own root, listed by the graph.
    assert by_root["c"].status is Rollup.UNPROVEN
    assert [ref_of(o).kind_name for o in by_root["g"].unproven] == [
        "Deployment/inner",
        "DynamoComponentDeployment/c",
    ]
    view = entry.view
    facts = facts_of(dataclasses.replace(view, guarded=False), REG)
    doc = json.loads(render(facts, tool_version="t"))
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["aibom.rollup.unproven.0"] == "Pod/forged"
    assert props["aibom.rollup.unproven.1"] == "ReplicaSet/x-1"
    assert props["aibom.provenance.guarded"] == "false"
    assert "evil.example/x:1" not in json.dumps(doc)
    own = facts_of(by_root["c"].view, REG)
    own_doc = json.loads(render(own, tool_version="t"))
    own_props = {p["name"]: p["value"] for p in own_doc["metadata"]["component"]["properties"]}
    assert own_props["aibom.provenance.unproven"] == "Unproven nvidia.com/DynamoGraphDeployment/g"
    assert "aibom.rollup.unresolved" not in own_props


# -- offline: scan and tree with --provenance-key ---------------------------------------------


def test_offline_scan_counts_only_proven_edges_with_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aibom_rollup.cli import main

    dep = mk("Deployment", "d")
    rs = proved(mk("ReplicaSet", "d-1", dep))
    ok = proved(mk("Pod", "ok", rs, spec={"containers": [{"name": "m", "image": "good.io/a:1"}]}))
    bad = mk("Pod", "forged", rs, spec={"containers": [{"name": "m", "image": "evil.io/x:1"}]})
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [dep, rs, ok, bad]}))
    key_file = tmp_path / "provenance.key"
    key_file.write_bytes(base64.b64encode(KEY) + b"\n")

    assert main(["scan", str(dump), "--provenance-key", str(key_file)]) == 0
    out = capsys.readouterr()
    (root,) = json.loads(out.out)["roots"]
    assert root["images"] == ["good.io/a:1"]
    assert root["unproven"] == ["Pod/forged"]
    assert "taken as written" not in out.err

    assert main(["tree", str(dump), "-o", "json", "--provenance-key", str(key_file)]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert records["forged"]["rollup"] == "unproven"
    assert records["ok"]["rollup"] == "rolled-up"

    # Without a key the references are taken as written, and stderr says so.
    assert main(["scan", str(dump)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["roots"][0]["images"] == ["evil.io/x:1", "good.io/a:1"]
    assert "taken as written" in out.err

    key_file.write_text("short\n")
    assert main(["scan", str(dump), "--provenance-key", str(key_file)]) == 2
    assert "--provenance-key" in capsys.readouterr().err
