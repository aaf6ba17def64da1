"""The webhook's watch-backed owner index against the real control plane.

The webhook runs as a real process under the ClusterRole shipped in
manifests/webhook/rbac.yaml, with the TTL cache off (`--owner-cache-ttl 0`:
every hop is answered by the index or by a live GET, never by the TTL cache),
talking to the real API server through the fault-injecting proxy of
tests/integration/apiproxy.py (which only ever forwards, or refuses when told
to). Reviews are posted to it directly; the owners are real objects, and what
answered each hop is read from its own counters
(`aibom_webhook_owner_lookups_total{source="get"|"watch"}`).

- An owner created after the index synced resolves at once (a GET when its
  event has not arrived), and is then answered from the index.
- An owner deleted and re-created under the same name (a new UID) is never
  accepted for a child naming the old UID: `UIDMismatch`, from a live GET.
- Watches the server ends are resumed; a `410 Gone` relists, and the relist
  drops an owner deleted while the watch was away.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl, bind_rules
from tests.integration.apiproxy import ApiProxy
from tests.integration.support import (
    Webhook,
    deployment,
    shipped_role,
    wait_for,
)
from tests.integration.support import kubectl_apply as apply
from tests.integration.test_webhook import dcd

pytestmark = pytest.mark.integration

DCD_KIND = "nvidia.com/DynamoComponentDeployment"
# Who the reviews say set the controller reference: in system:masters, so the
# SubjectAccessReview of the first hop allows it and the walk follows it.
ADMIN = {"username": "ownerwatch-test-admin", "groups": ["system:masters", "system:authenticated"]}


class Hook:
    """The webhook process, its proxy, and reviews posted to it."""

    def __init__(self, webhook: Webhook, proxy: ApiProxy) -> None:
        self.webhook, self.proxy = webhook, proxy

    def lookups(self, source: str) -> float:
        return self.webhook.metric("aibom_webhook_owner_lookups_total", {"source": source})

    def admit(self, obj: Obj) -> tuple[dict[str, str], int, int]:
        """(the stamp the webhook answers for `obj` as a CREATE, GETs, index hits)."""
        gets, hits = self.lookups("get"), self.lookups("watch")
        group, _, version = obj["apiVersion"].rpartition("/")
        meta = obj["metadata"]
        request = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": "deployments"},
            "operation": "CREATE",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "userInfo": ADMIN,
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        }
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        }
        status, raw = self.webhook.request("POST", "/mutate", json.dumps(review).encode())
        assert status == 200, raw
        response = json.loads(raw)["response"]
        assert response["allowed"] is True
        ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        stamp = {
            op["path"].rsplit("/", 1)[1].replace("~1", "/"): op["value"]
            for op in ops
            if op["op"] in ("add", "replace") and "aibom.dev~1r" in op["path"]
        }
        return stamp, int(self.lookups("get") - gets), int(self.lookups("watch") - hits)

    def indexed(self, owner: Obj) -> bool:
        """Whether a child of `owner` is answered from the index alone (no GET)."""
        child = deployment(owner["metadata"]["namespace"], f"probe-{uuid.uuid4().hex[:6]}", owner)
        stamp, gets, hits = self.admit(child)
        return gets == 0 and hits == 1 and stamp.get("aibom.dev/root-uid") == uid(owner)

    def restarts(self, reason: str) -> float:
        return self.webhook.metric(
            "aibom_webhook_owner_watch_restarts_total", {"kind": DCD_KIND, "reason": reason}
        )


def uid(obj: Obj) -> str:
    value: str = obj["metadata"]["uid"]
    return value


@contextlib.contextmanager
def proxied(
    cp: ControlPlane,
    kubectl: Kubectl,
    workdir: Path,
    *args: str,
    name: str,
    blackhole: str | None = None,
) -> Iterator[Hook]:
    """A webhook process under the shipped ClusterRole, behind its own proxy."""
    ident = cp.issue_identity(name)
    bind_rules(kubectl, name, f"{name}-role", shipped_role()["rules"])
    with ApiProxy(cp, ident) as proxy:
        if blackhole is not None:
            proxy.blackhole(blackhole)
        webhook = Webhook(
            cp, workdir, name=name, kubeconfig=proxy.kubeconfig(workdir / "proxy"), args=args
        )
        webhook.start()  # returns once /readyz is 200: the index has settled
        try:
            yield Hook(webhook, proxy)
        finally:
            if webhook.proc is not None:
                webhook.stop()


@pytest.fixture(scope="module")
def hook(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hook]:
    # The server ends each watch after 3 s: resumes happen during the module.
    with proxied(
        control_plane,
        kubectl,
        tmp_path_factory.mktemp("ownerwatch"),
        "--owner-cache-ttl",
        "0",
        "--owner-watch-timeout",
        "3",
        name="aibom-rollup-ownerwatch",
    ) as hook:
        yield hook


def test_an_owner_created_after_the_sync_resolves_then_is_indexed(
    hook: Hook, kubectl: Kubectl, namespace: str
) -> None:
    assert hook.webhook.metric("aibom_webhook_owner_watch_synced", {"kind": DCD_KIND}) == 1
    comp = apply(kubectl, dcd(namespace, "late"))
    # At once: from the index if its ADDED event was read, else a live GET.
    stamp, gets, hits = hook.admit(deployment(namespace, "first", comp))
    assert stamp["aibom.dev/root"] == "DynamoComponentDeployment/late"
    assert stamp["aibom.dev/root-uid"] == uid(comp)
    assert gets + hits == 1
    # And once the event is in: no request at all.
    wait_for("the new owner answered from the index", lambda: hook.indexed(comp))


def test_a_recreated_owner_is_never_accepted_for_the_old_uid(
    hook: Hook, kubectl: Kubectl, namespace: str
) -> None:
    old = apply(kubectl, dcd(namespace, "comp"))
    wait_for("the owner indexed", lambda: hook.indexed(old))
    kubectl("delete", "-n", namespace, "dynamocomponentdeployment/comp", "--wait=true")
    new = apply(kubectl, dcd(namespace, "comp"))
    assert uid(new) != uid(old)
    # The new object indexed: its watch delivered the old one's deletion before it.
    wait_for("the re-created owner indexed", lambda: hook.indexed(new))
    stamp, gets, hits = hook.admit(deployment(namespace, "stale", old))
    assert stamp == {
        "aibom.dev/root": "Deployment/stale",
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/rollup-reason": f"UIDMismatch {DCD_KIND}/comp",
    }
    # Not from the index (nothing there has the old UID): the miss was a live GET.
    assert (gets, hits) == (1, 0)


def test_watches_resume_and_a_410_relists_without_the_deleted(
    hook: Hook, kubectl: Kubectl, namespace: str
) -> None:
    # The server ends each watch after --owner-watch-timeout; it is resumed.
    closed = hook.restarts("closed")
    wait_for("a watch ended by the server", lambda: hook.restarts("closed") > closed)
    gone = apply(kubectl, dcd(namespace, "gone"))
    wait_for("an owner created after a resume indexed", lambda: hook.indexed(gone))
    # The watches lose the API server (every request through the proxy 503s);
    # meanwhile one owner is deleted and another created (by the admin, directly).
    lists = sum(n for p, n in hook.proxy.lists_ok.items() if "dynamocomponentdeployments" in p)
    expired = hook.restarts("expired")
    hook.proxy.cut()
    try:
        kubectl("delete", "-n", namespace, "dynamocomponentdeployment/gone", "--wait=true")
        born = apply(kubectl, dcd(namespace, "born"))
        # Back, but its resourceVersion is too old now: 410 Gone, so it relists.
        hook.proxy.expire("dynamocomponentdeployments")
    finally:
        hook.proxy.restore()
    wait_for("the watch to expire", lambda: hook.restarts("expired") > expired, timeout=60)
    wait_for(
        "the relist",
        lambda: (
            sum(n for p, n in hook.proxy.lists_ok.items() if "dynamocomponentdeployments" in p)
            > lists
        ),
        timeout=60,
    )
    assert hook.proxy.counts["410"] >= 1
    wait_for("the owner created while away indexed", lambda: hook.indexed(born), timeout=60)
    # The deleted owner left the index with the relist: a child naming it is a
    # live GET (NotFound), never the old entry.
    stamp, gets, hits = hook.admit(deployment(namespace, "orphan", gone))
    assert (gets, hits) == (1, 0)
    assert stamp["aibom.dev/rollup"] == "unresolved"
    assert stamp["aibom.dev/rollup-reason"] == f"NotFound {DCD_KIND}/gone"


def test_not_ready_until_the_index_settles_and_gets_meanwhile(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A kind whose list never answers: /readyz is 503 (`owner-index`) until the
    sync timeout, then ready, and that kind's owners are fetched with GETs."""
    # The cluster-wide list/watch path only: GETs of one ReplicaSet still pass.
    with proxied(
        control_plane,
        kubectl,
        tmp_path,
        "--owner-cache-ttl",
        "0",
        "--owner-watch-sync-timeout",
        "4",
        name="aibom-rollup-ownerwatch-sync",
        blackhole="/apis/apps/v1/replicasets",
    ) as hook:
        webhook = hook.webhook
        # Ready only once the index settled, and that by the sync timeout: its own
        # log says so, on its clock (the test's 503s at /readyz meanwhile are up to
        # the scheduler: a loaded machine may poll first when the 4 s are over).
        listening = _logged(webhook, "webhook listening")
        settled = _logged(webhook, "owner index settled")
        assert "apps/ReplicaSet=synced" not in settled["kinds"], settled
        assert "nvidia.com/DynamoComponentDeployment=synced" in settled["kinds"], settled
        assert _at(settled) - _at(listening) >= 4 - 0.001, (listening, settled)
        assert hook.proxy.counts["blackholed"] >= 1
        kind = {"kind": "apps/ReplicaSet"}
        assert webhook.metric("aibom_webhook_owner_watch_synced", kind) == 0
        assert webhook.metric("aibom_webhook_owner_watch_synced", {"kind": DCD_KIND}) == 1
        apply(kubectl, deployment(namespace, "web", replicas=0))
        rs = wait_for(
            "the ReplicaSet",
            lambda: json.loads(kubectl("get", "-n", namespace, "rs", "-o", "json").stdout)["items"],
        )[0]
        rs = {**rs, "apiVersion": "apps/v1", "kind": "ReplicaSet"}
        child = deployment(namespace, "child", rs)  # any child naming the ReplicaSet
        _, gets, hits = hook.admit(child)
        assert (gets, hits) == (1, 0), "the unsynced kind must be fetched"


def _logged(webhook: Webhook, msg: str) -> dict[str, Any]:
    """The webhook's first JSON log record with this message."""
    for line in webhook.log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("msg") == msg:
                return record
    raise AssertionError(f"{msg!r} not logged:\n{webhook.log.read_text()[-3000:]}")


def _at(record: dict[str, Any]) -> float:
    """A record's `ts` (UTC, milliseconds) as seconds."""
    when = dt.datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return when.replace(tzinfo=dt.UTC).timestamp()
