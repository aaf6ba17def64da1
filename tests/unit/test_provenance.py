"""Ownership provenance in the core: the edge-trust input, the
`unproven` status, the edge proof, and the documents' new properties."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aibom_core.bom import facts_of, render
from aibom_core.graph import build_graph, key_of
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj, OwnerRef, controller_ref, ref_of
from aibom_core.provenance import (
    CREATED_WITHIN,
    Origin,
    ProofTrust,
    ProvenanceKeyError,
    matches_template,
    origin_of,
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
    obj["metadata"].setdefault("annotations", {})[where] = proof_for(key, obj, owner)
    return obj


# -- the proof ---------------------------------------------------------------------------

OWNER = OwnerRef(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="u")
CREATED = "2026-01-02T03:04:05Z"
CREATED_AT = 1767323045  # CREATED in Unix seconds


def pod(name: str = "p", *, uid: str = "pod-uid", image: str = "registry.example/app:1") -> Obj:
    meta = {"name": name, "namespace": "ns", "uid": uid, "creationTimestamp": CREATED}
    if not uid:
        del meta["uid"]
    spec = {"containers": [{"name": "main", "image": image}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _mac(message: bytes) -> str:
    mac = hmac.new(KEY, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def test_proof_is_the_contract_hmac() -> None:
    """docs: v2:<origin>:<anchor>:<mac>, the message naming the object, the owner UID,
    the origin, the anchor (and the UID it names) and what a Pod runs."""
    child = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs-1", "namespace": "ns", "uid": "rs-uid"},
    }
    owner = OwnerRef(api_version="apps/v1", kind="Deployment", name="d", uid="uid-1")
    msg = b"v2\nns\napps\nReplicaSet\nrs-1\nuid-1\nc\nu\nrs-uid\n"
    assert proof_for(KEY, child, owner) == "v2:c:u:" + _mac(msg)
    # At a CREATE (no UID yet): bound to the second, and a Pod to what it runs.
    new = pod(uid="")
    containers = json.dumps(
        [["containers", "main", "registry.example/app:1"]], separators=(",", ":")
    )
    content = hashlib.sha256(containers.encode()).hexdigest()
    msg = f"v2\nns\n\nPod\np\nu\nc\nt{CREATED_AT}\n\n{content}".encode()
    got = proof_for(KEY, new, OWNER, now=CREATED_AT + 0.9)
    assert got == f"v2:c:t{CREATED_AT}:" + _mac(msg)
    assert "=" not in got
    with pytest.raises(ValueError, match="needs the time"):
        proof_for(KEY, new, OWNER)


@pytest.mark.parametrize(
    ("field", "of_owner"),
    [("namespace", False), ("group", False), ("kind", False), ("name", False), ("uid", True)],
)
def test_proof_binds_each_field(field: str, of_owner: bool) -> None:
    child, owner = pod(), OWNER
    proof = proof_for(KEY, child, owner)
    assert verify(KEY, proof, child, owner)
    ref = ref_of(child)
    if of_owner:
        owner = dataclasses.replace(owner, **{field: getattr(owner, field) + "x"})
    else:
        ref = dataclasses.replace(ref, **{field: getattr(ref, field) + "x"})
    assert proof_for(KEY, child, owner, ref=ref) != proof
    assert not verify(KEY, proof, child, owner, ref=ref)
    assert not verify(b"j" * 32, proof, child, OWNER)
    assert not verify(KEY, proof + "A", child, OWNER)
    assert not verify(KEY, None, child, OWNER)
    assert not verify(KEY, "v1:" + proof.rpartition(":")[2], child, OWNER)  # the old format


def test_a_proof_binds_one_lifetime_of_its_object() -> None:
    """A Pod re-created under a deleted Pod's name, with the same owner, carrying the
    old Pod's proof: on UPDATE the proof names the UID; at CREATE (no UID yet) the
    second it was written, which the namesake's creationTimestamp is too late for."""
    old = pod(uid="old")
    namesake = pod(uid="new")
    assert not verify(KEY, proof_for(KEY, old, OWNER), namesake, OWNER)
    at_create = proof_for(KEY, pod(uid=""), OWNER, now=CREATED_AT)
    low, high = CREATED_WITHIN
    for offset, ok in ((0, True), (high, True), (high + 1, False), (low, True), (low - 1, False)):
        later = pod(uid="old")
        stamp = datetime.fromtimestamp(CREATED_AT + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        later["metadata"]["creationTimestamp"] = stamp
        assert verify(KEY, at_create, later, OWNER) is ok, offset
    no_stamp = pod(uid="old")
    del no_stamp["metadata"]["creationTimestamp"]
    assert not verify(KEY, at_create, no_stamp, OWNER)


def test_a_pods_proof_binds_what_it_runs() -> None:
    """Its images can be changed in place: a changed image, an added container (an
    init container too) does not verify; the order of the containers does not count."""
    two = pod()
    two["spec"]["containers"].append({"name": "side", "image": "registry.example/side:1"})
    proof = proof_for(KEY, two, OWNER)
    swapped = json.loads(json.dumps(two))
    swapped["spec"]["containers"].reverse()
    assert verify(KEY, proof, swapped, OWNER)
    for change in ("image", "added", "init"):
        other = json.loads(json.dumps(two))
        if change == "image":
            other["spec"]["containers"][0]["image"] = "evil.example/x:1"
        elif change == "added":
            other["spec"]["containers"].append({"name": "x", "image": "evil.example/x:1"})
        else:
            other["spec"]["initContainers"] = [{"name": "x", "image": "evil.example/x:1"}]
        assert not verify(KEY, proof, other, OWNER), change


@pytest.mark.parametrize("origin", list(Origin))
def test_a_proof_records_how_its_edge_came_to_be(origin: Origin) -> None:
    child = pod()
    proof = proof_for(KEY, child, OWNER, origin=origin)
    assert origin_of(KEY, proof, child, OWNER) is origin
    forged = proof.replace(
        f"v2:{origin.value}:", "v2:c:" if origin is not Origin.CONTROLLED else "v2:a:"
    )
    assert origin_of(KEY, forged, child, OWNER) is None  # the origin is under the MAC
    want = Reason.ADOPTED_MISMATCH if origin is Origin.MISMATCH else None
    assert ProofTrust(key=KEY, keys=Keys())(child, ref_of(child), OWNER) is Reason.UNPROVEN
    child["metadata"]["annotations"] = {PROOF: proof}
    assert ProofTrust(key=KEY, keys=Keys())(child, ref_of(child), OWNER) is want


@pytest.mark.parametrize(
    ("owner_kind", "child_kind", "same", "want"),
    [
        ("ReplicaSet", "Pod", True, True),
        ("ReplicaSet", "Pod", False, False),
        ("StatefulSet", "Pod", False, False),
        ("DaemonSet", "Pod", True, True),
        ("Job", "Pod", False, False),
        ("Deployment", "ReplicaSet", True, True),
        ("Deployment", "ReplicaSet", False, False),
        ("Deployment", "Pod", False, None),  # a Deployment makes ReplicaSets, not Pods
        ("DynamoComponentDeployment", "Pod", False, None),  # no Pod template to compare
    ],
)
def test_an_adopted_child_matches_its_owners_template_or_not(
    owner_kind: str, child_kind: str, same: bool, want: bool | None
) -> None:
    template = {"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    owner = mk(owner_kind, "o", spec={"template": {"spec": template}})
    image = "registry.example/app:1" if same else "evil.example/visitor:1"
    runs = {"containers": [{"name": "main", "image": image}]}
    spec = runs if child_kind == "Pod" else {"template": {"spec": runs}}
    child = mk(child_kind, "c", owner, spec=spec)
    assert matches_template(child, owner) is want


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
