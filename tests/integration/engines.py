"""The policy-engine tests, shared by test_kyverno.py and test_gatekeeper.py.

Each engine's test module derives a test class from :class:`EngineTests` below
and provides two module fixtures: ``webhook`` (our real webhook,
registered for the opted-in namespaces) and ``engine`` (the real engine,
tests/controlplane/components/, with the shipped policies of
manifests/policies/<engine>/ installed: an :class:`Engine`). So both engines run
the same scenarios: the API server calls our mutating webhook first, then the
engine's validating webhook, which decides on the stamp. Tenants are restricted
identities (client certificates bound to a Role in their namespace), never the
admin. What differs between the engines is in :class:`Engine`: how the refusal
reads, and where the audit lists a Pod.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl, bind_rules
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    Webhook,
    apply,
    bare_pod,
    deployment,
    dgd,
    grant_annotator,
    grant_lease,
    kubectl_get,
    owner_ref,
    stamp,
    wait_for,
    wait_registered,
)

#: The namespace label both the webhook (here) and the shipped policies select.
OPTED_IN = {"aibom.dev/enabled": "true"}
ROLLUP = "aibom.dev/rollup"
REASON = "aibom.dev/rollup-reason"
ROOT = "aibom.dev/root"
#: What a tenant may do in its namespace: Pods and Deployments, nothing else.
TENANT_RULES: list[Obj] = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "get", "list", "update", "patch", "delete"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]},
]  # fmt: skip
#: Generous: two engines, the API server and our webhook share 2 busy cores.
TIMEOUT = 90.0


class Engine(Protocol):
    """What the scenarios need of a running engine with the shipped policies."""

    #: Text that only this engine's refusal by the enforcing policy carries.
    refusal: str

    def audited(self, ns: str, pod: str) -> str | None:
        """What the engine's audit says of Pod ``ns/pod`` now: its message when listed,
        ``""`` when audited and not listed, None when not audited yet."""
        ...


@dataclass
class Tenant:
    """A restricted identity with :data:`TENANT_RULES` in one namespace."""

    kubectl: Kubectl
    ns: str
    kubeconfig: Path

    def run(self, *args: str, body: Obj | None = None) -> tuple[bool, str]:
        """``kubectl ARGS`` as the tenant (``body`` on stdin): (succeeded, stderr or stdout)."""
        res = self.kubectl(
            *args, kubeconfig=self.kubeconfig, check=False,
            input=json.dumps(body) if body is not None else None,
        )  # fmt: skip
        return res.returncode == 0, res.stderr if res.returncode else res.stdout

    def create(self, body: Obj) -> tuple[bool, str]:
        return self.run("create", "-f", "-", "-o", "json", body=body)

    def patch(self, what: str, patch: Obj) -> tuple[bool, str]:
        return self.run("patch", "-n", self.ns, what, "--type=merge", "-p", json.dumps(patch))


def opt_in(kubectl: Kubectl, ns: str, engine: Engine) -> str:
    """Opt ``ns`` in to aibom-rollup (our webhook, the policies, the annotator's test
    label); return once our webhook stamps there and the engine refuses there."""
    labels = [f"{k}={v}" for k, v in OPTED_IN.items()]
    kubectl("label", "namespace", ns, *labels, f"{LABEL_KEY}={ns}", "--overwrite")
    # Not a Pod: the policies would refuse a bare one.
    wait_registered(kubectl, ns, probe=deployment(ns, "probe", replicas=0), rollup="root")
    wait_for(f"{engine.refusal} to refuse in {ns}", lambda: _refused_dry_run(kubectl, ns, engine))
    return ns


def _refused_dry_run(kubectl: Kubectl, ns: str, engine: Engine) -> bool:
    probe = bare_pod(ns, f"probe-{uuid.uuid4().hex[:6]}")
    res = kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
    return res.returncode != 0 and engine.refusal in res.stderr


def refused(outcome: tuple[bool, str]) -> str:
    ok, text = outcome
    assert not ok, f"admitted, expected a refusal:\n{text[:2000]}"
    return text


def admitted(outcome: tuple[bool, str]) -> Obj:
    ok, text = outcome
    assert ok, f"refused, expected admission:\n{text[:2000]}"
    result: Obj = json.loads(text)
    return result


def pod_under(
    ns: str, name: str, owner: Obj | None = None, *, annotations: dict[str, str] | None = None
) -> Obj:
    """A Pod (controlled by ``owner``, if given; with ``annotations``) as a tenant writes it."""
    body = bare_pod(ns, name)
    if owner is not None:
        body["metadata"]["ownerReferences"] = [owner_ref(owner)]
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def pods_of(kubectl: Kubectl, ns: str, selector: str, count: int = 1) -> list[Obj]:
    """The Pods ``selector`` once there are ``count`` (the controllers make them)."""

    def enough() -> list[Obj] | None:
        found: list[Obj] = kubectl_get(kubectl, ns, "pods", "-l", selector)["items"]
        return found if len(found) >= count else None

    pods: list[Obj] = wait_for(f"{count} Pod(s) {selector} in {ns}", enough, timeout=TIMEOUT)
    return pods


# -- the tests ------------------------------------------------------------------------------


class EngineTests:
    """The tests every engine runs: test_kyverno.py and test_gatekeeper.py each derive a
    ``Test...`` class from it, beside their module fixtures ``webhook`` and ``engine``."""

    @pytest.fixture
    def tenant(
        self, control_plane: ControlPlane, kubectl: Kubectl, namespace: str, engine: Engine
    ) -> Tenant:
        """A restricted identity in a fresh namespace, opted in once the engine refuses there."""
        user = f"tenant-{namespace}"
        ident = control_plane.issue_identity(user)
        bind_rules(kubectl, user, "tenant", TENANT_RULES, namespace=namespace)
        opt_in(kubectl, namespace, engine)
        return Tenant(kubectl, namespace, ident.kubeconfig)

    def test_uncovered_pods_are_refused_with_the_stamp(
        self, tenant: Tenant, engine: Engine
    ) -> None:
        """A bare Pod, by name and by generateName: refused, the stamp in the message."""
        err = refused(tenant.create(pod_under(tenant.ns, "bare")))
        assert engine.refusal in err, err
        assert "Pod bare is not covered by any AIBOM: aibom.dev/rollup=uncovered" in err, err
        generated = pod_under(tenant.ns, "x")
        del generated["metadata"]["name"]
        generated["metadata"]["generateName"] = "batch-"
        err = refused(tenant.create(generated))
        # The API server names it (generateName) before validating admission runs.
        assert re.search(r"Pod batch-[a-z0-9]{5} is not covered", err), err
        assert engine.refusal in err, err
        assert kubectl_get(tenant.kubectl, tenant.ns, "pods")["items"] == []

    def test_covered_pods_are_admitted(self, tenant: Tenant) -> None:
        """A Deployment's Pods (named by the ReplicaSet controller with generateName) are
        rolled up and admitted; its ReplicaSet mirrors the Deployment's stamp."""
        admitted(tenant.create(deployment(tenant.ns, "web", replicas=2)))
        for p in pods_of(tenant.kubectl, tenant.ns, "app=web", 2):
            assert p["metadata"].get("generateName"), p["metadata"]
            assert stamp(p)[ROLLUP] == "rolled-up" and stamp(p)[ROOT] == "Deployment/web", stamp(p)
        (rs,) = kubectl_get(tenant.kubectl, tenant.ns, "replicasets")["items"]
        assert stamp(rs)[ROLLUP] == "root" and stamp(rs)[ROOT] == "Deployment/web", stamp(rs)

    def test_an_unproven_replicaset_is_mirrored_and_its_pods_admitted(
        self, tenant: Tenant, kubectl: Kubectl
    ) -> None:
        """A tenant's Deployment under a graph it may not control is `unproven`; its
        ReplicaSet mirrors that (the policies are about Pods: it is not refused), and its
        Pods, rolled up to the Deployment, are admitted."""
        graph = apply(kubectl, dgd(tenant.ns, "graph"))
        made = admitted(tenant.create(deployment(tenant.ns, "claimed", graph)))
        assert stamp(made)[ROLLUP] == "unproven", stamp(made)
        assert stamp(made)[REASON].startswith("Unproven nvidia.com/DynamoGraphDeployment/graph")

        def mirrored() -> Obj | None:
            found = kubectl_get(kubectl, tenant.ns, "replicasets", "-l", "app=claimed")["items"]
            return found[0] if found and stamp(found[0]).get(ROLLUP) == "unproven" else None

        rs = wait_for("the ReplicaSet mirroring `unproven`", mirrored, timeout=TIMEOUT)
        assert stamp(rs)[REASON] == stamp(made)[REASON]
        (p,) = pods_of(kubectl, tenant.ns, "app=claimed")
        assert stamp(p)[ROLLUP] == "rolled-up" and stamp(p)[ROOT] == "Deployment/claimed", stamp(p)

    def test_a_forged_owner_is_refused_with_its_reason(
        self, tenant: Tenant, kubectl: Kubectl, engine: Engine
    ) -> None:
        """A tenant copies a Deployment's name and UID into its Pod's controller reference:
        our webhook's check says `unproven`, the engine refuses with the reason."""
        owner = apply(kubectl, deployment(tenant.ns, "owner", replicas=0))
        err = refused(tenant.create(pod_under(tenant.ns, "forged", owner)))
        assert engine.refusal in err, err
        assert (
            "Pod forged is not covered by any AIBOM: aibom.dev/rollup=unproven, "
            "aibom.dev/rollup-reason=Unproven apps/Deployment/owner"
        ) in err, err

    def test_a_hand_written_stamp_gains_nothing(self, tenant: Tenant, engine: Engine) -> None:
        """A tenant writes a harmless stamp itself: our webhook overwrites it before the
        engine sees the Pod, which is refused as what it is."""
        disguise = {ROLLUP: "rolled-up", ROOT: "Deployment/web"}
        err = refused(tenant.create(pod_under(tenant.ns, "disguised", annotations=disguise)))
        assert engine.refusal in err and "aibom.dev/rollup=uncovered" in err, err

    def test_updates_are_judged_when_the_controller_changes(
        self, tenant: Tenant, kubectl: Kubectl, engine: Engine
    ) -> None:
        """UPDATE: a new or changed controller reference is judged on the new stamp; a kept
        one (a label) or a removed one (orphaning) is not, so no Pod is held hostage."""
        admitted(tenant.create(deployment(tenant.ns, "moving", replicas=2)))
        first, second = (
            p["metadata"]["name"] for p in pods_of(kubectl, tenant.ns, "app=moving", 2)
        )
        admitted_patch(tenant.patch(f"pod/{first}", {"metadata": {"labels": {"touched": "yes"}}}))
        holder_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "holder"}}
        holder = admitted(
            tenant.run("create", "-n", tenant.ns, "-f", "-", "-o", "json", body=holder_cm)
        )
        # The controller moved to a ConfigMap (outside the kind registry: the walk stops
        # there): uncovered, refused. The Pod keeps its owner and stamp.
        err = refused(
            tenant.patch(f"pod/{first}", {"metadata": {"ownerReferences": [owner_ref(holder)]}})
        )
        assert engine.refusal in err and f"Pod {first} is not covered" in err, err
        assert stamp(kubectl_get(kubectl, tenant.ns, f"pod/{first}"))[ROLLUP] == "rolled-up"
        # Orphaned (the controller reference removed; relabelled, or its ReplicaSet would
        # adopt it back): not judged, admitted; the stamp now says uncovered, for the audit.
        orphan = {"metadata": {"labels": {"app": "orphan"}, "ownerReferences": None}}
        admitted_patch(tenant.patch(f"pod/{second}", orphan))
        assert stamp(kubectl_get(kubectl, tenant.ns, f"pod/{second}"))[ROLLUP] == "uncovered"
        # An UPDATE of that uncovered Pod that keeps its (absent) controller: admitted.
        admitted_patch(tenant.patch(f"pod/{second}", {"metadata": {"labels": {"touched": "yes"}}}))

    def test_webhook_down_fails_open_then_repairs_are_admitted_and_audited(
        self,
        *,
        control_plane: ControlPlane,
        kubectl: Kubectl,
        tenant: Tenant,
        webhook: Webhook,
        engine: Engine,
        tmp_path: Path,
    ) -> None:
        """Our webhook down (failurePolicy Ignore): Pods are admitted unstamped, and a stamp a
        tenant wrote by hand is what the engine decides on: it admits them all (fail-open:
        an engine cannot tell who wrote a stamp). The webhook back, our annotator repairs
        the stamps (merge patches: UPDATEs that keep the controller reference); the engine
        admits every repair instead of fighting it, and its audit lists the Pods no AIBOM
        covers, with the reason, and not the covered one."""
        ns = tenant.ns
        web = apply(kubectl, deployment(ns, "web"))
        (covered,) = pods_of(kubectl, ns, "app=web")
        assert webhook.stop() == 0
        try:
            assert stamp(admitted(tenant.create(pod_under(ns, "while-down")))) == {}
            disguised = tenant.create(
                pod_under(ns, "disguised-down", annotations={ROLLUP: "rolled-up"})
            )
            assert stamp(admitted(disguised)) == {ROLLUP: "rolled-up"}
            assert stamp(admitted(tenant.create(pod_under(ns, "forged-down", web)))) == {}
        finally:
            webhook.start()
        wait_registered(kubectl, ns, probe=deployment(ns, "probe", replicas=0), rollup="root")
        want = {"while-down": "uncovered", "disguised-down": "uncovered", "forged-down": "unproven"}
        annotator = _annotator(control_plane, kubectl, ns, webhook, tmp_path)
        try:
            annotator.wait_ready().wait_leading()

            def repaired() -> bool:
                got = {n: stamp(kubectl_get(kubectl, ns, f"pod/{n}")).get(ROLLUP) for n in want}
                return got == want

            wait_for(f"the annotator to repair the stamps to {want}", repaired, timeout=TIMEOUT)
            repairs = annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "Pod"})
            assert repairs == len(want), annotator.tail()
            assert not [r for r in annotator.records() if "may not patch" in str(r)], (
                annotator.tail()
            )
        finally:
            assert annotator.stop() == 0, annotator.tail()
        for name, rollup in want.items():
            message: str = wait_for(
                f"the audit to list {ns}/{name}",
                lambda n=name: engine.audited(ns, n),  # type: ignore[misc]
                timeout=TIMEOUT,
            )
            assert f"aibom.dev/rollup={rollup}" in message, message
            reason = stamp(kubectl_get(kubectl, ns, f"pod/{name}")).get(REASON)
            assert rollup == "uncovered" or f"aibom.dev/rollup-reason={reason}" in message, message
        name = covered["metadata"]["name"]
        wait_for(f"the audit of {name}", lambda: engine.audited(ns, name) is not None, TIMEOUT)
        assert engine.audited(ns, name) == "", engine.audited(ns, name)


def admitted_patch(outcome: tuple[bool, str]) -> None:
    ok, text = outcome
    assert ok, f"refused, expected admission:\n{text[:2000]}"


def _annotator(
    cp: ControlPlane, kubectl: Kubectl, ns: str, webhook: Webhook, workdir: Path
) -> Annotator:
    """Our annotator as shipped (its ClusterRole) for ``ns``, started, with the webhook's
    key: an edge without the webhook's proof (made while it was down) is unproven."""
    user = f"aibom-annotator-{ns}"
    kubeconfig = grant_annotator(cp, kubectl, user)
    grant_lease(kubectl, ns, user, "aibom-test")
    key = ("--provenance-key", str(webhook.dir / "provenance.key"))
    return Annotator(kubeconfig, workdir, ns, args=key).start()
