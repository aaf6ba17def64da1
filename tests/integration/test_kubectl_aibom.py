"""`kubectl aibom` against the real control plane, run as a real kubectl plugin.

The plugin is the installed executable `kubectl-aibom`, found by the real
(version-matched) kubectl on PATH. The cluster state it explains is made by
the real kube-controller-manager (Deployment -> ReplicaSet -> Pods) and the
real annotator (documents and stamps); Pod statuses are written as a kubelet
would. One namespace is opted in (stamps and a document exist), a second is
not (nothing is stamped, and a Pod there carries a hand-written stamp).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from aibom_core.kinds import default_registry
from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl, bind_rules, child_env
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    deployment,
    docs,
    document,
    grant_annotator,
    grant_lease,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration

IMAGE = "registry.example/serve/web:1.4"
SHA = "sha256:" + "ab" * 32
SHA2 = "sha256:" + "cd" * 32


@dataclass
class World:
    cp: ControlPlane
    kubectl: Kubectl
    ns: str  # opted in: the annotator keeps documents and stamps
    plain: str  # not opted in: nothing is stamped
    rs: str
    pods: list[str]

    def run(
        self, *args: str, env: dict[str, str] | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl aibom ARGS` through the real kubectl, the plugin found on PATH."""
        assert self.cp.bin_dir is not None
        run_env = child_env()
        run_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{run_env.get('PATH', '')}"
        run_env["KUBERC"] = "off"
        run_env.update(env or {})
        cmd = [
            str(self.cp.bin_dir / "kubectl"),
            "aibom",
            f"--kubeconfig={kubeconfig or self.cp.kubeconfig}",
            *args,
        ]
        return subprocess.run(
            cmd, check=False, capture_output=True, text=True, env=run_env, timeout=60
        )

    def ok(self, *args: str) -> str:
        got = self.run(*args)
        assert got.returncode == 0, (args, got.returncode, got.stderr)
        return got.stdout


def _pods(cp: ControlPlane, ns: str, app: str) -> list[Obj]:
    resp = cp.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")
    assert resp.ok
    items: list[Obj] = resp.json()["items"]
    return items


@pytest.fixture(scope="module")
def world(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    cp = control_plane
    ns = new_namespace(cp, "aibom-plugin")
    plain = new_namespace(cp, "aibom-plugin-plain")
    kubectl("label", "namespace", ns, f"{LABEL_KEY}={ns}")
    identity = grant_annotator(cp, kubectl, "aibom-plugin-annotator")
    grant_lease(kubectl, ns, "aibom-plugin-annotator", "aibom-test")
    kubectl("apply", "-f", "-", input=json.dumps(deployment(ns, "web", replicas=2, image=IMAGE)))
    kubectl("apply", "-f", "-", input=json.dumps(deployment(plain, "web", replicas=1, image=IMAGE)))
    # A bare Pod with a stamp written by hand: what a forger (or a stale copy) leaves.
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "forged",
            "namespace": plain,
            "annotations": {"aibom.dev/rollup": "rolled-up", "aibom.dev/root": "Deployment/web"},
        },
        "spec": {"containers": [{"name": "main", "image": IMAGE}]},
    }
    kubectl("apply", "-f", "-", input=json.dumps(forged))
    pods = wait_for("2 pods of web", lambda: (p := _pods(cp, ns, "web")) and len(p) == 2 and p)
    for pod in pods:
        set_digest(cp, ns, pod["metadata"]["name"], IMAGE, SHA)
    workdir = tmp_path_factory.mktemp("plugin-annotator")
    annotator = Annotator(identity, workdir, ns, trust_references=True).start()
    try:
        annotator.wait_ready().wait_leading()
        wait_for(
            "the document of Deployment/web with the digest",
            lambda: any(SHA[7:] in json.dumps(document(cm)) for cm in docs(cp, ns).values()),
            60,
        )
        # Stamps are repaired after a settle delay: wait for every Pod's.
        wait_for(
            "stamps on the pods",
            lambda: all(
                (p["metadata"].get("annotations") or {}).get("aibom.dev/rollup") == "rolled-up"
                for p in _pods(cp, ns, "web")
            ),
            60,
        )
        rs = pods[0]["metadata"]["ownerReferences"][0]["name"]
        yield World(cp, kubectl, ns, plain, rs, sorted(p["metadata"]["name"] for p in pods))
    finally:
        annotator.stop()
        for name in (ns, plain):
            cp.request("DELETE", f"/api/v1/namespaces/{name}")


# -- explain --


def test_explain_walks_hop_by_hop_and_agrees_with_the_carried_stamp(world: World) -> None:
    out = world.ok("explain", "-n", world.ns, f"pod/{world.pods[0]}")
    assert f"-> ReplicaSet/{world.rs} (apps): ok" in out
    assert "-> Deployment/web (apps) [tracked]: ok" in out
    assert "verdict: rolled-up -> Deployment/web" in out
    assert "the carried stamp is current" in out
    assert "\x1b[" not in out  # piped: no colour

    data = json.loads(world.ok("explain", "-n", world.ns, f"pod/{world.pods[0]}", "-o", "json"))
    assert [h["verdict"] for h in data["hops"]] == ["ok", "ok"]
    assert [h["owner"]["kind"] for h in data["hops"]] == ["ReplicaSet", "Deployment"]
    assert all(h["referencedUID"] == h["foundUID"] for h in data["hops"])
    assert data["agrees"] is True
    assert data["expectedStamp"]["aibom.dev/rollup"] == "rolled-up"
    assert data["expectedStamp"] == data["carriedStamp"]
    as_yaml = yaml.safe_load(
        world.ok("explain", "-n", world.ns, f"pod/{world.pods[0]}", "-o", "yaml")
    )
    assert as_yaml == data


@pytest.mark.parametrize(
    "words",
    [["Deployment/web"], ["deploy/web"], ["deployments.apps/web"], ["deployment", "web"]],
)
def test_every_kubectl_name_form_and_the_pasted_stamp_value_are_accepted(
    world: World, words: list[str]
) -> None:
    pod = world.cp.request("GET", f"/api/v1/namespaces/{world.ns}/pods/{world.pods[0]}").json()
    assert pod["metadata"]["annotations"]["aibom.dev/root"] == "Deployment/web"  # pasteable
    data = json.loads(world.ok("explain", "-n", world.ns, *words, "-o", "json"))
    assert data["object"]["kind"] == "Deployment"
    assert data["walk"]["rollup"] == "root"


def test_explain_shows_the_mirrored_replicaset_as_mirrored(world: World) -> None:
    out = world.ok("explain", "-n", world.ns, f"rs/{world.rs}")
    assert "verdict: rolled-up -> Deployment/web" in out
    assert "(mirrors Deployment/web:" in out
    data = json.loads(world.ok("explain", "-n", world.ns, f"rs/{world.rs}", "-o", "json"))
    assert data["mirroredFrom"] == "Deployment/web"
    assert data["expectedStamp"]["aibom.dev/rollup"] == "root"  # the Deployment's copy


def test_explain_names_a_stale_stamp_and_a_missing_one(world: World) -> None:
    out = world.ok("explain", "-n", world.plain, "pod/forged")
    assert "verdict: uncovered" in out
    assert "the carried stamp differs:" in out
    assert "aibom.dev/rollup: carries 'rolled-up', the walk now gives 'uncovered'" in out
    assert "aibom.dev/root: carries 'Deployment/web', the walk now gives nothing" in out

    pod = _pods(world.cp, world.plain, "web")[0]["metadata"]["name"]
    data = json.loads(world.ok("explain", "-n", world.plain, f"pod/{pod}", "-o", "json"))
    assert data["walk"] == {"rollup": "rolled-up", "root": "Deployment/web", "reason": None}
    assert data["carriedStamp"] is None and data["agrees"] is False
    assert "carries no aibom.dev/rollup stamp" in data["differences"][0]


def test_explain_says_when_the_owner_was_recreated(world: World, tmp_path: Path) -> None:
    # A Pod claiming a controller that exists under that name but with another UID.
    # Live, the garbage collector deletes such a Pod within seconds, so this one
    # is read from a dump of the live Deployment plus the leftover.
    dump = json.loads(world.kubectl("get", "deploy", "-n", world.plain, "-o", "json").stdout)
    dump["items"].append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "leftover",
                "namespace": world.plain,
                "uid": str(uuid.uuid4()),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "web",
                        "uid": str(uuid.uuid4()),
                        "controller": True,
                    }
                ],
            },
            "spec": {"containers": [{"name": "main", "image": IMAGE}]},
        }
    )
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    out = world.ok("explain", "-n", world.plain, "pod/leftover", f"--from-file={path}")
    assert "-> Deployment/web (apps) [tracked]: UIDMismatch" in out
    assert "the owner was re-created" in out
    assert "verdict: unresolved  (UIDMismatch apps/Deployment/web)" in out


# -- tree --


def test_tree_covers_the_root_with_digests_and_no_second_root(world: World) -> None:
    out = world.ok("tree", "-n", world.ns, "deploy/web")
    lines = out.splitlines()
    assert lines[0] == "Deployment/web  [root]"
    assert f"ReplicaSet/{world.rs}  [rolled-up; stamp mirrors Deployment/web]" in out
    assert out.count("[root") == 1  # the mirrored ReplicaSet is not a second root
    for pod in world.pods:
        assert f"Pod/{pod}  [rolled-up]" in out
    assert f"image main: {IMAGE} @ {SHA[:19]}…" in out
    wide = world.ok("tree", "-n", world.ns, "deploy/web", "-o", "wide")
    assert SHA in wide and "uid=" in wide
    coloured = world.ok("tree", "-n", world.ns, "deploy/web", "--color=always")
    assert "\x1b[1;32mroot\x1b[0m" in coloured

    data = json.loads(world.ok("tree", "-n", world.ns, "deploy/web", "-o", "json"))
    (top,) = data
    assert (top["kind"], top["rollup"]) == ("Deployment", "root")
    (rs,) = top["children"]
    assert rs["stampMirrors"] == "Deployment/web"
    assert sorted(p["name"] for p in rs["children"]) == world.pods
    assert {p["images"][0]["digest"] for p in rs["children"]} == {SHA}
    assert yaml.safe_load(world.ok("tree", "-n", world.ns, "deploy/web", "-o", "yaml")) == data

    dot = world.ok("tree", "-n", world.ns, "deploy/web", "-o", "dot")
    assert dot.startswith("digraph aibom {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == 1 + len(world.pods)


def test_tree_without_a_name_lists_the_roots(world: World) -> None:
    out = world.ok("tree", "-n", world.ns)
    assert out.splitlines()[0] == "Deployment/web  [root]"
    every = world.ok("tree", "-A")
    assert every.count("Deployment/web  [root]") >= 2  # both namespaces


def test_tree_of_a_rolled_up_object_says_where_its_aibom_is(world: World) -> None:
    got = world.run("tree", "-n", world.ns, f"pod/{world.pods[0]}")
    assert got.returncode == 0
    assert "its AIBOM is that root's (kubectl aibom tree Deployment/web)" in got.stderr


# -- get and find --


def test_get_decodes_the_stored_document(world: World) -> None:
    cm = docs(world.cp, world.ns)["aibom-deployment-web"]
    stored = cm["data"]["aibom.json"]
    assert world.ok("get", "-n", world.ns, "Deployment/web") == stored + "\n"
    assert world.ok("get", "-n", world.ns, "deploy/web", "-o", "yaml") == yaml.safe_dump(
        json.loads(stored), sort_keys=False, allow_unicode=True
    )
    wide = world.ok("get", "-n", world.ns, "deploy/web", "-o", "wide")
    assert "AIBOM of Deployment/web" in wide
    assert "container" in wide and SHA in wide and "verified" in wide

    table = world.ok("get", "-n", world.ns)
    header, *rows = table.splitlines()
    assert header.split() == ["ROOT", "OWNED", "IMAGES", "DIGESTS", "MODELS", "SIGNATURE"]
    # This module's annotator does not sign: the root says so.
    assert rows[0].split() == ["Deployment/web", "0", "1", "1", "0", "unsigned"]
    every = world.ok("get", "-A")
    assert every.splitlines()[0].split()[0] == "NAMESPACE"
    assert any(line.split()[:2] == [world.ns, "Deployment/web"] for line in every.splitlines())
    items = json.loads(world.ok("get", "-n", world.ns, "-o", "json"))["items"]
    assert [i["root"] for i in items] == ["Deployment/web"]
    assert items[0]["document"] == json.loads(stored)


def test_get_of_a_non_root_points_at_its_root(world: World) -> None:
    got = world.run("get", "-n", world.ns, f"pod/{world.pods[0]}")
    assert got.returncode == 1
    assert "is not a root: it is rolled up into Deployment/web" in got.stderr
    got = world.run("get", "-n", world.plain, "deploy/web")
    assert got.returncode == 1
    assert "no AIBOM for Deployment/web yet" in got.stderr


@pytest.mark.parametrize(
    "ref", [SHA, SHA[7:], IMAGE, "registry.example/serve/web", f"registry.example/serve/web@{SHA}"]
)
def test_find_lists_the_roots_running_an_image(world: World, ref: str) -> None:
    out = world.ok("find", "-A", "--image", ref)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [world.ns, "Deployment/web", "image", IMAGE, SHA, "verified"] in rows
    data = json.loads(world.ok("find", "-n", world.ns, "--image", ref, "-o", "json"))
    assert [(d["root"], d["digests"]) for d in data] == [("Deployment/web", [SHA])]


@pytest.mark.parametrize("ref", [SHA2, "registry.example/serve/web:1.5", "registry.example/other"])
def test_find_with_no_match_says_so_on_stderr(world: World, ref: str) -> None:
    got = world.run("find", "-A", "--image", ref)
    assert got.returncode == 0 and got.stdout == ""
    assert f"No AIBOM in the cluster contains {ref}." in got.stderr


# -- errors, identities, offline --


def test_errors_are_one_line_on_stderr_with_kubectl_exit_codes(world: World) -> None:
    got = world.run("explain", "-n", world.ns, "gizmo/x")
    assert (got.returncode, got.stdout) == (2, "")
    assert got.stderr == 'error: the server does not have a resource type "gizmo"\n'
    got = world.run("explain", "-n", world.ns, "pod/nope")
    assert got.returncode == 1
    assert got.stderr == f'error: pods "nope" not found in namespace "{world.ns}"\n'
    got = world.run("explain", "-n", world.ns, "pod/a/b")
    assert got.returncode == 2 and "Traceback" not in got.stderr


def test_a_reader_without_rights_gets_forbidden_not_a_traceback(world: World) -> None:
    ident = world.cp.issue_identity(f"nobody-{uuid.uuid4().hex[:6]}")
    got = world.run("get", "-n", world.ns, kubeconfig=ident.kubeconfig)
    assert got.returncode == 1
    assert got.stderr.startswith("error: forbidden: cannot list configmaps")
    assert "Traceback" not in got.stderr


def test_read_is_all_it_needs_and_it_never_writes(world: World) -> None:
    """docs/kubectl-aibom.md: get and list on the walked kinds and on ConfigMaps
    is all the plugin needs, and it never writes: an identity bound to exactly
    that (a write would be refused, 403) gets the admin's answers."""
    reg = default_registry()
    rules: list[Obj] = [
        {"apiGroups": [gk.group], "resources": [reg.resource_of(gk)], "verbs": ["get", "list"]}
        for gk in sorted(reg.tracked | reg.walk_only, key=str)
    ]
    rules.append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]})
    user = f"aibom-reader-{uuid.uuid4().hex[:6]}"
    reader = world.cp.issue_identity(user)
    bind_rules(world.kubectl, user, user, rules)
    for args in (
        ["explain", "-n", world.ns, f"pod/{world.pods[0]}"],
        ["explain", "-n", world.ns, f"rs/{world.rs}", "-o", "json"],
        ["tree", "-n", world.ns, "deploy/web"],
        ["tree", "-A"],
        ["get", "-A"],
        ["get", "-n", world.ns, "Deployment/web", "-o", "wide"],
        ["find", "-A", "--image", IMAGE],
        ["find", "-A", "--image", "*serve*", "--runtime", "nginx", "-o", "wide"],
        ["models", "-A", "-o", "csv"],
        ["runtimes", "-A", "-o", "wide"],
    ):
        admin = world.run(*args)
        got = world.run(*args, kubeconfig=reader.kubeconfig)
        assert (admin.returncode, got.returncode) == (0, 0), (args, admin.stderr, got.stderr)
        assert got.stdout == admin.stdout, args


def test_the_context_namespace_is_the_default(world: World, tmp_path: Path) -> None:
    kc = yaml.safe_load(world.cp.kubeconfig.read_text())
    for ctx in kc["contexts"]:
        ctx["context"]["namespace"] = world.ns
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    got = world.run("get", kubeconfig=path)
    assert got.returncode == 0, got.stderr
    assert "Deployment/web" in got.stdout


def test_from_file_gives_the_same_answers_as_live(world: World, tmp_path: Path) -> None:
    dump = world.kubectl("get", "deploy,rs,pod,cm", "-n", world.ns, "-o", "json").stdout
    path = tmp_path / "dump.json"
    path.write_text(dump)
    for args in (
        ["explain", f"pod/{world.pods[0]}", "-o", "json"],
        ["explain", f"rs/{world.rs}"],
        ["tree", "deploy/web", "-o", "json"],
        ["tree", "deploy/web"],
        ["get", "Deployment/web"],
        ["get"],
        ["find", "--image", SHA],
    ):
        live = world.ok(*args, "-n", world.ns)
        offline = world.ok(*args, "-n", world.ns, f"--from-file={path}")
        assert offline == live, args


def test_offline_without_stored_documents_builds_them_like_scan(
    world: World, tmp_path: Path
) -> None:
    dump = world.kubectl("get", "deploy,rs,pod", "-n", world.ns, "-o", "json").stdout
    path = tmp_path / "dump.json"
    path.write_text(dump)
    built = world.ok("get", "-n", world.ns, "Deployment/web", f"--from-file={path}")
    scan = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "scan", str(path), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "wrote 1 AIBOM" in scan.stderr
    written = (tmp_path / "out" / world.ns / "aibom-deployment-web.json").read_text()
    assert built == written + "\n"
