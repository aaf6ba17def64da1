"""bench/peer.py's pure parts: how requests are counted from the audit log, the table.

The counting is what makes the side-by-side objective (the same rule for both
tools), so it is pinned here: one request per auditID (a watch's ResponseStarted
and ResponseComplete are one), only the named user, cut at the request that
wrote the last first document, failed writes and other namespaces not counted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import BuildError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import peer

NS = "bench"


def event(
    n: int,
    verb: str,
    *,
    user: str = peer.PEER_USER,
    resource: str = "aiboms",
    name: str = "",
    sub: str = "",
    code: int = 200,
    stage: str = "ResponseComplete",
    ns: str = NS,
) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "namespace": ns}
    if name:
        ref["name"] = name
    if sub:
        ref["subresource"] = sub
    return {
        "auditID": f"id-{n}",
        "stage": stage,
        "verb": verb,
        "user": {"username": user},
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": f"2026-12-04T08:10:{n:02d}.000000Z",
    }


def write_log(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    peer.audit_log(tmp_path).write_text("".join(json.dumps(e) + "\n" for e in events))
    return tmp_path


def test_audit_counts_one_request_per_audit_id_and_only_the_user(tmp_path: Path) -> None:
    watch_started = event(1, "watch", stage="ResponseStarted")
    watch_done = {
        **event(1, "watch"),
        "requestReceivedTimestamp": watch_started["requestReceivedTimestamp"],
    }
    events = [
        event(2, "list", user="aibom-admin"),
        watch_started,
        event(3, "create", name="a"),
        watch_done,
        event(0, "list"),
    ]
    got = peer.audited(write_log(tmp_path, events), peer.PEER_USER)
    assert [(e["auditID"], e["verb"]) for e in got] == [
        ("id-0", "list"),
        ("id-1", "watch"),
        ("id-3", "create"),
    ]


def test_cold_requests_cut_at_the_last_first_document() -> None:
    events = [
        event(0, "list", resource="pods"),
        event(1, "watch", resource="pods"),
        event(2, "create", name="a"),  # the object, not its document
        event(3, "update", name="a", sub="status"),
        event(4, "update", name="b", sub="status", code=409),  # a conflict writes nothing
        event(5, "update", name="a", sub="status"),  # a second write of a
        event(6, "update", name="b", sub="status", ns="other"),
        event(7, "update", name="b", sub="status"),  # the 2nd document: the cut
        event(8, "update", name="c", sub="status"),
    ]
    got = peer.cold_requests(events, "aiboms", "status", roots=2)
    assert got["complete"]
    assert got["total"] == 8
    assert got["per_root"] == 4.0
    assert got["by_verb"] == {"create": 1, "list": 1, "update": 5, "watch": 1}
    assert got["server_seconds"] == 7.0


def test_cold_requests_say_when_the_documents_never_all_came() -> None:
    events = [event(0, "update", name="a", sub="status")]
    got = peer.cold_requests(events, "aiboms", "status", roots=2)
    assert got == {"complete": False, "documents": 1, "by_verb": {}, "total": 0}


def test_our_documents_are_configmap_writes_without_a_subresource() -> None:
    events = [
        event(0, "patch", resource="configmaps", name="aibom-deployment-d0", user=peer.OURS_USER),
        event(1, "patch", resource="configmaps", name="aibom-deployment-d1", user=peer.OURS_USER),
    ]
    assert peer.cold_requests(events, "configmaps", "", roots=2)["total"] == 2
    assert not peer.cold_requests(events, "aiboms", "status", roots=2)["complete"]


def test_audit_policy_logs_exactly_the_two_tools(tmp_path: Path) -> None:
    args = peer.apiserver_args(tmp_path)
    policy_file = Path(
        next(a for a in args if a.startswith("--audit-policy-file=")).split("=", 1)[1]
    )
    policy = json.loads(policy_file.read_text())
    assert policy["rules"] == [
        {"level": "Metadata", "users": [peer.OURS_USER, peer.PEER_USER]},
        {"level": "None"},
    ]
    assert f"--audit-log-path={peer.audit_log(tmp_path)}" in args


def test_client_requests_sum_the_controller_runtime_counter_by_method() -> None:
    m = {
        'rest_client_requests_total{code="200",host="127.0.0.1:1",method="GET"}': 3.0,
        'rest_client_requests_total{code="201",host="127.0.0.1:1",method="POST"}': 2.0,
        'rest_client_requests_total{code="409",host="127.0.0.1:1",method="PUT"}': 1.0,
        'rest_client_requests_total{code="200",host="127.0.0.1:1",method="PUT"}': 4.0,
        "rest_client_request_duration_seconds_count": 99.0,
    }
    assert peer._client_requests(m) == {"GET": 3, "POST": 2, "PUT": 5}


def test_table_has_both_rows_and_says_what_each_documents() -> None:
    audit = {"complete": True, "per_root": 1.04}
    common = {
        "cold_seconds": 4.8,
        "audited_requests_until_converged": audit,
        "peak_rss_mib_after_cold": 120.0,
        "peak_rss_mib_at_end": 130.0,
        "update_p50_ms": 10.0,
        "update_p99_ms": 30.0,
        "update_max_ms": 40.0,
        "documents": 1000,
    }
    result = {
        "ours": {
            **common,
            "update_probe": "one Pod",
            "documents_by_root_kind": {"deployment": 700, "leaderworkerset": 100},
        },
        "peer": {
            **common,
            "version": "main-0dd2f89e",
            "audited_requests_until_converged": {"complete": False},
            "update_probe": "rollout",
            "documents_by_workload_kind": {"Deployment": 900, "StatefulSet": 100},
        },
    }
    lines = peer.table(result).splitlines()
    assert len(lines) == 4
    assert "| aibom-rollup annotator | 4.8 | 1.04 |" in lines[2]
    assert "700 deployment, 100 leaderworkerset" in lines[2]
    assert "| k8s-aibom main-0dd2f89e | 4.8 | incomplete |" in lines[3]
    assert "900 Deployment, 100 StatefulSet" in lines[3]


def test_a_missing_source_tree_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peer, "upstream_source_dirs", lambda: [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(BuildError, match="AIBOM_UPSTREAM_SRC"):
        peer.peer_src()
