"""The API server as the only caller (docs/webhook.md), on a real control plane.

kube-apiserver is started with an AdmissionConfiguration whose
WebhookAdmissionConfiguration kubeconfig names the webhook's host with a
client certificate and a bearer token (tests.controlplane.webhook_caller);
the webhook runs with --client-ca-file and --client-token-file. The API
server's calls are answered (objects are stamped); a stranger without the
certificate or the token is refused at the TLS or HTTP level.

A control plane of its own: the admission configuration is read at start.
"""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane, ControlPlaneError, webhook_caller
from tests.integration.support import (
    Webhook,
    bare_pod,
    enabled_namespace,
    grant_webhook,
    kubectl_apply,
    shipped_role,
    stamp,
    wait_registered,
)
from tests.unit.webhook_fakes import body, review

pytestmark = pytest.mark.integration


def test_api_server_is_answered_and_strangers_are_refused(tmp_path: Path) -> None:
    cp = ControlPlane()
    hook = Webhook(cp, tmp_path, name="aibom-rollup-auth", kubeconfig=Path("unset"))
    caller = webhook_caller(tmp_path / "caller", webhook_host=f"127.0.0.1:{hook.port}")
    assert caller.token_file is not None
    cp.admission_config_file = caller.config_file
    try:
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"cannot start the control plane: {exc}", pytrace=False)
    try:
        hook.kubeconfig = grant_webhook(cp, cp.kubectl, "aibom-webhook-auth", shipped_role())
        hook.args = (
            "--client-ca-file",
            str(caller.client_ca_file),
            "--client-token-file",
            str(caller.token_file),
        )
        hook.start()  # /readyz is open: the kubelet's probes carry no certificate
        hook.register(cp.kubectl)
        ns = f"auth-{uuid.uuid4().hex[:6]}"
        cp.kubectl("create", "namespace", ns)
        enabled_namespace(cp.kubectl, ns)
        # The API server's calls are answered: objects are stamped.
        wait_registered(cp.kubectl, ns)
        pod = kubectl_apply(cp.kubectl, bare_pod(ns, "stamped"))
        assert stamp(pod) == {"aibom.dev/rollup": "uncovered"}
        answered = hook.metric(
            "aibom_webhook_admissions_total",
            {"kind": "Pod", "operation": "CREATE", "result": "uncovered"},
        )
        assert answered >= 2  # the probe's dry-run and the Pod
        # A stranger with neither certificate nor token: 401, no review.
        data = body(review(bare_pod(ns, "x"), uid="stranger"))
        status, text = hook.request("POST", "/mutate", data)
        assert status == 401, text
        assert b"stranger" not in text
        # A stranger with a certificate of another CA: refused in the handshake.
        other = webhook_caller(tmp_path / "other", webhook_host="127.0.0.1", token=False)
        ctx = hook.ssl_context()
        ctx.load_cert_chain(str(other.cert_file), str(other.key_file))
        conn = http.client.HTTPSConnection("127.0.0.1", hook.port, timeout=10, context=ctx)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            conn.request("POST", "/mutate", body=data, headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        conn.close()
        # The API server's certificate without its token: still 401.
        ctx = hook.ssl_context()
        ctx.load_cert_chain(str(caller.cert_file), str(caller.key_file))
        conn = http.client.HTTPSConnection("127.0.0.1", hook.port, timeout=10, context=ctx)
        conn.request("POST", "/mutate", body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 401
        conn.close()
        refused = hook.metric("aibom_webhook_bad_requests_total", {"status": "401"})
        assert refused >= 2
        # And the stamps went on all along.
        again = kubectl_apply(cp.kubectl, bare_pod(ns, "stamped-too"))
        assert json.dumps(stamp(again)) == json.dumps({"aibom.dev/rollup": "uncovered"})
    finally:
        if hook.proc is not None:
            hook.stop()
        cp.stop()
