"""`kubectl aibom`'s pure parts: names, the traced walk, rendering, argument order."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from aibom_core.document import MAX_DOCUMENT_BYTES
from aibom_core.explain import explanation, traced
from aibom_core.graph import build_graph
from aibom_core.kindnames import TargetError, parse_target, resolve_kind
from aibom_core.kinds import BUILTIN_KINDS, GroupKind, KindInfo, default_registry
from aibom_core.stamp import Keys
from aibom_rollup import render
from aibom_rollup.kubectl_aibom import hoist
from aibom_rollup.sources import readable_docs
from tests.unit.kobj import mk

REG = default_registry()
KEYS = Keys()


# -- names --


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("Deployment", GroupKind("apps", "Deployment")),  # the stamp's own form
        ("deployment", GroupKind("apps", "Deployment")),
        ("deployments", GroupKind("apps", "Deployment")),
        ("deploy", GroupKind("apps", "Deployment")),
        ("DEPLOY", GroupKind("apps", "Deployment")),
        ("deployments.apps", GroupKind("apps", "Deployment")),
        ("po", GroupKind("", "Pod")),
        ("rs", GroupKind("apps", "ReplicaSet")),
        ("dgd", GroupKind("nvidia.com", "DynamoGraphDeployment")),
        ("DynamoGraphDeployment", GroupKind("nvidia.com", "DynamoGraphDeployment")),
        ("lws", GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet")),
        (
            "leaderworkersets.leaderworkerset.x-k8s.io",
            GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ),
        ("nimservice", GroupKind("apps.nvidia.com", "NIMService")),
    ],
)
def test_every_kubectl_spelling_names_its_kind(token: str, expected: GroupKind) -> None:
    assert resolve_kind(token, BUILTIN_KINDS, REG).group_kind == expected


def test_an_ambiguous_name_prefers_the_registry_then_asks_to_qualify() -> None:
    other = KindInfo("example.com", "Deployment", "deployments", "deployment", ("deploy",))
    assert resolve_kind("deploy", [*BUILTIN_KINDS, other], REG).group == "apps"
    twins = [
        KindInfo("a.example", "Gizmo", "gizmos"),
        KindInfo("b.example", "Gizmo", "gizmos"),
    ]
    with pytest.raises(TargetError, match=r"ambiguous \(gizmos.a.example, gizmos.b.example\)"):
        resolve_kind("gizmos", twins, REG)
    assert resolve_kind("gizmos.b.example", twins, REG).group == "b.example"
    # Exact Kind wins outright only when it is unique; here both are `Gizmo`.
    with pytest.raises(TargetError, match="ambiguous"):
        resolve_kind("Gizmo", twins, REG)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["gizmo/x"], 'does not have a resource type "gizmo"'),
        (["pod"], "expected KIND/NAME or KIND NAME"),
        (["pod/a/b"], "one path segment"),
        (["pod/"], "one path segment"),
        (["/x"], "no kind given"),
        (["pod", "x", "y"], "expected KIND/NAME"),
    ],
)
def test_bad_targets_are_refused_with_a_reason(words: list[str], message: str) -> None:
    with pytest.raises(TargetError, match=message):
        parse_target(words, BUILTIN_KINDS, REG)


def test_both_target_forms() -> None:
    assert parse_target(["deploy/web"], BUILTIN_KINDS, REG).name == "web"
    assert parse_target(["deploy", "web"], BUILTIN_KINDS, REG).kind.kind == "Deployment"


# -- the traced walk --


def _explain(objs: list[dict[str, Any]], subject: dict[str, Any], max_depth: int = 6) -> Any:
    graph = build_graph(objs, REG, max_depth=max_depth)
    gen = traced(subject, registry=REG, max_depth=max_depth)
    try:
        req = next(gen)
        while True:
            req = gen.send(graph.lookup(req))
    except StopIteration as stop:
        result, record = stop.value
    assert result == graph.resolve(subject)  # the same walk, not a second one
    return explanation(subject, registry=REG, keys=KEYS, result=result, record=record)


def test_each_hop_its_uid_check_and_the_stamp_it_gives() -> None:
    dep = mk("Deployment", "web", annotations={"aibom.dev/rollup": "root"})
    rs = mk("ReplicaSet", "web-1", dep)
    pod = mk("Pod", "web-1-a", rs, annotations={"aibom.dev/rollup": "rolled-up"})
    ex = _explain([dep, rs, pod], pod)
    assert [(h.kind, h.verdict, h.tracked) for h in ex.hops] == [
        ("ReplicaSet", "ok", False),
        ("Deployment", "ok", True),
    ]
    assert all(h.ref_uid == h.found_uid for h in ex.hops)
    assert ex.expected.rollup == "rolled-up" and ex.expected.root == "Deployment/web"
    assert ex.differences == (
        "aibom.dev/root: carries nothing, the walk now gives 'Deployment/web'",
        f"aibom.dev/root-uid: carries nothing, the walk now gives '{dep['metadata']['uid']}'",
    )


def test_a_replicaset_expects_its_deployments_copy_and_says_so() -> None:
    dep = mk("Deployment", "web", annotations={"aibom.dev/rollup": "root"})
    rs = mk("ReplicaSet", "web-1", dep)
    ex = _explain([dep, rs], rs)
    assert ex.result.status.value == "rolled-up"
    assert ex.expected.rollup == "root" and ex.mirrored_from == "Deployment/web"


def test_a_uid_mismatch_names_both_uids_and_mirrors_nothing() -> None:
    old = mk("Deployment", "web", gen=0, annotations={"aibom.dev/rollup": "root"})
    new = mk("Deployment", "web", gen=1, annotations={"aibom.dev/rollup": "root"})
    rs = mk("ReplicaSet", "web-1", old)
    ex = _explain([new, rs], rs)
    (hop,) = ex.hops
    assert hop.verdict == "UIDMismatch"
    assert hop.ref_uid == old["metadata"]["uid"] and hop.found_uid == new["metadata"]["uid"]
    assert ex.expected.rollup == "unresolved" and ex.mirrored_from is None


def test_a_missing_owner_and_the_depth_cap_are_hops_too() -> None:
    dep = mk("Deployment", "web")
    rs = mk("ReplicaSet", "web-1", dep)
    pod = mk("Pod", "web-1-a", rs)
    ex = _explain([rs, pod], pod)
    assert [h.verdict for h in ex.hops] == ["ok", "NotFound"]
    assert ex.hops[-1].found_uid is None
    capped = _explain([dep, rs, pod], pod, max_depth=1)
    assert [h.verdict for h in capped.hops] == ["ok", "DepthExceeded"]
    assert capped.hops[-1].ref_uid == ""  # no GET was made for it


def test_an_object_without_an_owner_has_no_hops() -> None:
    pod = mk("Pod", "bare")
    ex = _explain([pod], pod)
    assert ex.hops == () and ex.expected.rollup == "uncovered"
    text = render.explain_text(ex, KEYS, colour=False)
    assert "no controller ownerReference" in text
    assert "carries no aibom.dev/rollup stamp" in text


# -- rendering --

HOSTILE = "evil\nPod/fake  [root]\x1b[2J"


def test_names_from_the_cluster_cannot_fake_lines_or_move_the_cursor() -> None:
    pod = mk("Pod", HOSTILE)
    ex = _explain([pod], pod)
    text = render.explain_text(ex, KEYS, colour=False)
    assert "\x1b" not in text
    assert text.splitlines()[0].startswith("Pod/evil\\x0aPod/fake  [root]\\x1b[2J")
    graph = build_graph([pod], REG)
    node = render.tree_of(graph, pod["metadata"]["uid"], graph.resolve_all(), KEYS)
    assert len(render.tree_text([node], colour=False, wide=False).splitlines()) == 1
    dot = render.tree_dot([node])
    assert "\n" not in dot.split("label=")[1].split("]")[0]  # escaped as \\n
    table = render.table(["ROOT"], [[HOSTILE]])
    assert len(table.splitlines()) == 2


def test_colour_only_when_asked() -> None:
    assert render.paint("root", "root", colour=False) == "root"
    assert render.paint("root", "root", colour=True) == "\x1b[1;32mroot\x1b[0m"


DOC = {
    "components": [
        {
            "type": "container",
            "name": "docker.io/library/nginx",
            "version": "1.27",
            "hashes": [{"alg": "SHA-256", "content": "ab" * 32}],
            "properties": [
                {"name": "aibom.confidence", "value": "verified"},
                {"name": "aibom.image.reference", "value": "nginx:1.27"},
            ],
        },
        {"type": "machine-learning-model", "name": "Qwen/Qwen3-0.6B", "properties": []},
    ]
}


@pytest.mark.parametrize(
    ("query", "hit"),
    [
        ("sha256:" + "ab" * 32, True),
        ("ab" * 32, True),
        ("SHA256:" + "AB" * 32, True),
        ("sha256:" + "cd" * 32, False),
        ("nginx", True),
        ("nginx:1.27", True),
        ("docker.io/library/nginx:1.27", True),
        ("nginx:1.28", False),
        ("nginx@sha256:" + "ab" * 32, True),
        ("nginx@sha256:" + "cd" * 32, False),
        ("nginxx", False),
        ("Qwen/Qwen3-0.6B", False),  # a model is not an image
    ],
)
def test_find_matches_digests_repositories_and_tags(query: str, hit: bool) -> None:
    rows = render.document_rows(json.loads(json.dumps(DOC)))
    assert any(render.image_matches(r, query) for r in rows) is hit


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-n", "ns", "explain", "pod/x"], ["explain", "-n", "ns", "pod/x"]),
        (["--kubeconfig=k", "get", "-A"], ["get", "--kubeconfig=k", "-A"]),
        (["--debug", "-n", "get", "tree"], ["--debug", "tree", "-n", "get"]),
        (["explain", "-n", "ns", "pod/x"], ["explain", "-n", "ns", "pod/x"]),
        (["--version"], ["--version"]),
    ],
)
def test_options_before_the_subcommand_move_after_it(argv: list[str], expected: list[str]) -> None:
    assert hoist(argv) == expected


def test_a_carried_unproven_verdict_is_explained_not_overruled() -> None:
    # The webhook refused the Pod's edge at admission; read offline, the reference
    # looks fine, but who wrote it cannot be known after the fact.
    rs = mk("ReplicaSet", "web-1", mk("Deployment", "web"))
    pod = mk(
        "Pod",
        "forged",
        rs,
        annotations={
            "aibom.dev/rollup": "unproven",
            "aibom.dev/rollup-reason": "Unproven apps/ReplicaSet/web-1",
        },
    )
    ex = _explain([rs, pod], pod)
    text = render.explain_text(ex, KEYS, colour=False)
    assert "aibom.dev/rollup: carries 'unproven'" in text
    assert "this command cannot re-check it; the carried verdict stands" in text
    assert "a stale stamp" not in text


def test_a_listing_leaves_out_a_document_it_cannot_read_and_says_why() -> None:
    """One ConfigMap labelled as ours that no reader can unpack (a tenant's gzip bomb)
    is a warning line, not the end of everyone's listing."""
    bomb = base64.b64encode(gzip.compress(b"\0" * (MAX_DOCUMENT_BYTES + 1))).decode()

    def cm(name: str, **payload: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": name}, **payload}

    good = cm("aibom-deployment-web", data={"aibom.json": json.dumps({"bomFormat": "CycloneDX"})})
    skipped: list[str] = []
    found = readable_docs(
        [cm("aibom-deployment-bomb", binaryData={"aibom.json.gz": bomb}), good],
        prefix="aibom.dev/",
        skipped=skipped,
    )
    assert [d.configmap for d in found] == ["aibom-deployment-web"]
    (why,) = skipped
    assert why.startswith("configmap ns/aibom-deployment-bomb: ") and "more than" in why
