"""The side-by-side bench counts API requests from the API server's audit log
(bench/peer.py): on the real API server, its policy logs every request of the two
tools' identities, once each, and nothing of anyone else's."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import peer

pytestmark = pytest.mark.integration


def test_audit_log_counts_the_two_tools_and_no_one_else(tmp_path: Path) -> None:
    with ControlPlane(extra_apiserver_args=peer.apiserver_args(tmp_path)) as cp:
        ours = cp.issue_identity(peer.OURS_USER, ["system:masters"])
        for _ in range(3):
            assert cp.request("GET", "/api/v1/namespaces/default/configmaps").ok  # the admin
        assert cp.request("GET", "/api/v1/namespaces/default", identity=ours).ok
        assert cp.request("GET", "/api/v1/namespaces/default/pods", identity=ours).ok
        watch = "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1"
        assert cp.request("GET", watch, identity=ours).ok  # ends after 1 s
        assert cp.request("GET", "/api/v1/namespaces/nope", identity=ours).status == 404
        # The peer's identity is a ServiceAccount token, as bench/peer.py runs it.
        manifest = {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": peer.PEER_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
                "name": peer.PEER_SERVICE_ACCOUNT, "namespace": peer.PEER_NAMESPACE}},
        ]}  # fmt: skip
        cp.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        path = (
            f"/api/v1/namespaces/{peer.PEER_NAMESPACE}/serviceaccounts/"
            f"{peer.PEER_SERVICE_ACCOUNT}/token"
        )
        resp = cp.request("POST", path, {"apiVersion": "authentication.k8s.io/v1",
                                         "kind": "TokenRequest", "spec": {}})  # fmt: skip
        assert resp.ok, resp.body
        token = resp.json()["status"]["token"]
        assert cp.ports is not None
        conn = http.client.HTTPSConnection(
            "127.0.0.1",
            cp.ports.apiserver,
            context=ssl.create_default_context(cafile=str(cp.ca_file)),
            timeout=30,
        )
        conn.request("GET", "/api/v1/pods", headers={"Authorization": f"Bearer {token}"})
        assert conn.getresponse().status == 403  # no role bound: still one request
        conn.close()
        deadline = time.monotonic() + 30
        while True:
            got = peer.audited(tmp_path, peer.OURS_USER)
            theirs = peer.audited(tmp_path, peer.PEER_USER)
            if (len(got) >= 4 and theirs) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    verbs = [(e["verb"], e["objectRef"].get("resource"), e["responseStatus"]["code"]) for e in got]
    assert verbs == [
        ("get", "namespaces", 200),
        ("list", "pods", 200),
        ("watch", "pods", 200),
        ("get", "namespaces", 404),
    ]
    assert all(e["user"]["username"] == peer.OURS_USER for e in got)
    assert [(e["verb"], e["objectRef"]["resource"]) for e in theirs] == [("list", "pods")]
    assert theirs[0]["responseStatus"]["code"] == 403
    assert peer.audited(tmp_path, "aibom-admin") == []  # the bench's own client: not counted
