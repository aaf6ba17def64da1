"""The webhook's provenance check: SubjectAccessReview verdicts and their
cache, the edge-proof it writes, and UPDATEs that keep the reference."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aibom_core.kinds import default_registry
from aibom_core.objects import Obj, OwnerRef, controller_ref, ref_of
from aibom_core.provenance import proof_for, verify
from aibom_core.stamp import Keys
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, apply_patch, review, serving_files
from webhook.admission import parse_review
from webhook.app import Admitter
from webhook.main import Server
from webhook.metrics import Metrics
from webhook.provenance import (
    EdgeChecker,
    FinalizersAttributes,
    GuardCache,
    Provenance,
    SarCache,
    UserInfo,
    Verdict,
    review_body,
)
from webhook.resolver import OwnerCache, Resolver
from webhook.tls import CertReloader

KEY = b"q" * 32
KEYS = Keys()
REG = default_registry()
OWNER = OwnerRef(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="u-rs")
ALICE = UserInfo(username="alice", groups=("tenants",))
CONTROLLER = UserInfo(
    username="system:serviceaccount:kube-system:replicaset-controller",
    groups=("system:serviceaccounts",),
)


OPTED_IN = {"aibom.dev/enabled": "true"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeApi:
    """Answers reviews from sets of allowed usernames (`allowed`: update on the owner's
    finalizers; `updaters`: update on the owner itself); records every review."""

    def __init__(
        self,
        allowed: set[str],
        *,
        guarded: bool = False,
        labels: Mapping[str, str] | None = OPTED_IN,
        updaters: set[str] | None = None,
    ) -> None:
        self.allowed = allowed
        self.updaters = updaters or set()
        self.reviews: list[dict[str, Any]] = []
        self.fail: BaseException | None = None
        self.delay = 0.0
        self.guarded = guarded  # the binding exists
        self.labels = labels  # the namespace's (None: no such namespace)
        self.labels_of: dict[str, Mapping[str, str] | None] = {}  # other namespaces'
        self.namespace_fail: BaseException | None = None
        self.binding_fail: BaseException | None = None
        self.gets = 0

    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        return {"ReplicaSet": "replicasets", "Deployment": "deployments"}.get(owner.kind)

    async def access_review(self, body: dict[str, Any], *, timeout: float) -> bool:
        self.reviews.append(body)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        who = str(body["spec"]["user"])
        if body["spec"]["resourceAttributes"].get("subresource") == "finalizers":
            return who in self.allowed
        return who in self.updaters

    @property
    def checks(self) -> list[dict[str, Any]]:
        """One per check made: its first review (the owner's finalizers)."""
        return [b for b in self.reviews if b["spec"]["resourceAttributes"].get("subresource")]

    async def namespace_labels(self, name: str, *, timeout: float) -> Mapping[str, str] | None:
        self.gets += 1
        if self.namespace_fail is not None:
            raise self.namespace_fail
        return self.labels_of.get(name, self.labels)

    async def binding_exists(self, name: str, *, timeout: float) -> bool:
        self.gets += 1
        if self.binding_fail is not None:
            raise self.binding_fail
        return self.guarded


# -- the cache -----------------------------------------------------------------------------


def test_sar_cache_expires_after_ttl_and_is_lru_bounded() -> None:
    clock = Clock()
    cache = SarCache(ttl=10, size=2, clock=clock)
    key = (ALICE, "apps", "ReplicaSet", "ns", "rs")
    cache.put(key, False)
    clock.now += 9.99
    assert cache.get(key) is False
    clock.now += 0.01
    assert cache.get(key) is None  # expired exactly at the TTL
    for i in range(3):
        cache.put((ALICE, "apps", "ReplicaSet", "ns", f"r{i}"), True)
    assert len(cache) == 2
    assert cache.get((ALICE, "apps", "ReplicaSet", "ns", "r0")) is None
    off = SarCache(ttl=0, clock=clock)
    off.put(key, True)
    assert off.get(key) is None


async def test_checker_ttl_with_a_fake_clock() -> None:
    clock = Clock()
    api = FakeApi({CONTROLLER.username})
    checker = EdgeChecker(api, cache=SarCache(ttl=10, clock=clock))
    await checker.check(CONTROLLER, "ns", OWNER, timeout=1)
    clock.now += 9.9
    assert (await checker.check(CONTROLLER, "ns", OWNER, timeout=1)).cached
    api.allowed.clear()  # the permission is revoked: seen once the TTL is over
    clock.now += 0.1
    check = await checker.check(CONTROLLER, "ns", OWNER, timeout=1)
    assert (check.verdict, check.cached) == (Verdict.DENIED, False)
    assert len(api.checks) == 2


def test_review_body_carries_the_whole_identity() -> None:
    user = UserInfo.parse(
        {"username": "bob", "uid": "u-1", "groups": ["g1", "g2"], "extra": {"scopes": ["a"]}}
    )
    assert user is not None
    body = review_body(
        user, FinalizersAttributes("nvidia.com", "dynamographdeployments", "ns", "g")
    )
    assert body["spec"] == {
        "user": "bob",
        "uid": "u-1",
        "groups": ["g1", "g2"],
        "extra": {"scopes": ["a"]},
        "resourceAttributes": {
            "verb": "update",
            "group": "nvidia.com",
            "resource": "dynamographdeployments",
            "subresource": "finalizers",
            "namespace": "ns",
            "name": "g",
        },
    }
    assert UserInfo.parse({"groups": ["x"]}) is None


async def test_an_identity_that_may_update_the_owner_itself_proves_the_edge() -> None:
    """Grove's operator: update on podcliques, no */finalizers. Asked
    second, only after the finalizers review says no; the verdict is cached whole."""
    grove = UserInfo(username="system:serviceaccount:grove-system:grove-operator")
    api = FakeApi(set(), updaters={grove.username})
    checker = EdgeChecker(api, cache=SarCache(ttl=10))
    check = await checker.check(grove, "ns", OWNER, timeout=1)
    assert check.verdict is Verdict.ALLOWED
    asked = [b["spec"]["resourceAttributes"] for b in api.reviews]
    assert asked == [
        {"verb": "update", "group": "apps", "resource": "replicasets",
         "subresource": "finalizers", "namespace": "ns", "name": "rs"},
        {"verb": "update", "group": "apps", "resource": "replicasets",
         "namespace": "ns", "name": "rs"},
    ]  # fmt: skip
    assert (await checker.check(grove, "ns", OWNER, timeout=1)).cached
    assert len(api.reviews) == 2


async def test_a_pod_only_tenant_is_denied_after_both_reviews() -> None:
    api = FakeApi({CONTROLLER.username}, updaters={"someone-else"})
    checker = EdgeChecker(api, cache=SarCache(ttl=10))
    check = await checker.check(ALICE, "ns", OWNER, timeout=1)
    assert check.verdict is Verdict.DENIED
    assert [b["spec"]["resourceAttributes"].get("subresource") for b in api.reviews] == [
        "finalizers",
        None,
    ]
    # The finalizers permission alone answers at once: one review.
    assert (await checker.check(CONTROLLER, "ns", OWNER, timeout=1)).verdict is Verdict.ALLOWED
    assert len(api.reviews) == 3


async def test_checker_caches_per_identity_and_owner_and_never_caches_errors() -> None:
    api = FakeApi({CONTROLLER.username})
    checker = EdgeChecker(api, cache=SarCache(ttl=10))
    first = await checker.check(CONTROLLER, "ns", OWNER, timeout=1)
    again = await checker.check(CONTROLLER, "ns", OWNER, timeout=1)
    assert (first.verdict, first.cached, again.verdict, again.cached) == (
        Verdict.ALLOWED,
        False,
        Verdict.ALLOWED,
        True,
    )
    assert (await checker.check(ALICE, "ns", OWNER, timeout=1)).verdict is Verdict.DENIED
    assert (await checker.check(CONTROLLER, "other", OWNER, timeout=1)).cached is False
    assert len(api.checks) == 3
    api.fail = RuntimeError("connection refused")
    other = OwnerRef("apps/v1", "ReplicaSet", "rs2", "u2")
    assert (await checker.check(CONTROLLER, "ns", other, timeout=1)).verdict is Verdict.ERROR
    api.fail = None
    assert (await checker.check(CONTROLLER, "ns", other, timeout=1)).verdict is Verdict.ALLOWED
    unknown = OwnerRef("example.com/v1", "Widget", "w", "u3")
    assert (await checker.check(CONTROLLER, "ns", unknown, timeout=1)).verdict is Verdict.DENIED
    assert (await checker.check(None, "ns", OWNER, timeout=1)).verdict is Verdict.DENIED


async def test_checker_timeout_is_an_error_within_the_budget() -> None:
    api = FakeApi({CONTROLLER.username})
    api.delay = 5.0
    checker = EdgeChecker(api)
    loop = asyncio.get_running_loop()
    started = loop.time()
    check = await checker.check(CONTROLLER, "ns", OWNER, timeout=0.05)
    assert check.verdict is Verdict.ERROR
    assert loop.time() - started < 1.0


async def test_concurrent_checks_of_one_key_share_one_review() -> None:
    api = FakeApi({CONTROLLER.username})
    api.delay = 0.05
    checker = EdgeChecker(api)
    checks = await asyncio.gather(
        *(checker.check(CONTROLLER, "ns", OWNER, timeout=1) for _ in range(20))
    )
    assert {c.verdict for c in checks} == {Verdict.ALLOWED}
    assert len(api.checks) == 1


# -- the admitter ------------------------------------------------------------------------------


def _admitter(api: FakeApi, source: MemorySource, *, key: bytes | None = KEY) -> Admitter:
    resolver = Resolver(source, registry=REG, deadline=0.5, cache=OwnerCache(ttl=0))
    prov = Provenance(
        EdgeChecker(api, cache=SarCache(ttl=10)),
        GuardCache(api),
        key=key,
        keys=KEYS,
        check_budget=0.25,
    )
    return Admitter(resolver=resolver, registry=REG, keys=KEYS, metrics=Metrics(), provenance=prov)


def _chain() -> tuple[Obj, Obj]:
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "rs", dep, uid="u-rs")
    owner = controller_ref(rs)
    assert owner is not None
    rs["metadata"]["annotations"] = {KEYS.replicaset_edge_proof: proof_for(KEY, ref_of(rs), owner)}
    return dep, rs


async def _admit(
    adm: Admitter, obj: Obj, user: str, *, operation: str = "CREATE", old: Obj | None = None
) -> Obj:
    doc = review(obj, operation=operation, old=old)
    doc["request"]["userInfo"] = {"username": user}
    resp, _ = await adm.admit(parse_review(json.dumps(doc).encode()))
    ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    return apply_patch(obj, ops)


async def test_forged_edge_is_stamped_unproven_and_a_copied_proof_removed() -> None:
    dep, rs = _chain()
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]))
    legit = await _admit(adm, mk("Pod", "legit", rs), CONTROLLER.username)
    ann = legit["metadata"]["annotations"]
    assert ann["aibom.dev/rollup"] == "rolled-up"
    assert ann["aibom.dev/root"] == "Deployment/d"
    assert verify(KEY, ann[KEYS.edge_proof], ref_of(legit), controller_ref(legit))  # type: ignore[arg-type]
    # The tenant copies the legitimate Pod's stamp and proof onto its own Pod.
    forged = mk("Pod", "forged", rs, annotations=dict(ann))
    out = (await _admit(adm, forged, "alice"))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "unproven"
    assert out["aibom.dev/rollup-reason"] == "Unproven apps/ReplicaSet/rs"
    assert "aibom.dev/root" not in out and KEYS.edge_proof not in out
    # A refused edge is not followed: no GET of the ReplicaSet for alice's Pod.
    assert adm._resolver._source.gets["ReplicaSet"] == 1  # type: ignore[attr-defined]


async def test_review_error_stamps_unchecked_never_denies() -> None:
    dep, rs = _chain()
    api = FakeApi({CONTROLLER.username})
    api.fail = RuntimeError("503")
    adm = _admitter(api, MemorySource([dep, rs]))
    out = (await _admit(adm, mk("Pod", "p", rs), CONTROLLER.username))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "unproven"
    assert out["aibom.dev/rollup-reason"] == "Unchecked apps/ReplicaSet/rs"


async def test_generate_name_gets_the_name_the_proof_binds() -> None:
    dep, rs = _chain()
    adm = _admitter(FakeApi({CONTROLLER.username}), MemorySource([dep, rs]))
    pod = mk("Pod", "ignored", rs)
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "rs-"
    out = await _admit(adm, pod, CONTROLLER.username)
    name = out["metadata"]["name"]
    assert name.startswith("rs-") and len(name) == 8
    proof = out["metadata"]["annotations"][KEYS.edge_proof]
    assert verify(KEY, proof, ref_of(out), controller_ref(out))  # type: ignore[arg-type]


async def test_update_keeping_the_reference_is_not_rechecked() -> None:
    dep, rs = _chain()
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]))
    legit = await _admit(adm, mk("Pod", "legit", rs), CONTROLLER.username)
    reviews = len(api.checks)
    # alice (who may not set the edge) relabels the Pod: verdict and proof are kept.
    relabelled = json.loads(json.dumps(legit))
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = await _admit(adm, relabelled, "alice", operation="UPDATE", old=legit)
    assert out["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"
    assert (
        out["metadata"]["annotations"][KEYS.edge_proof]
        == legit["metadata"]["annotations"][KEYS.edge_proof]
    )
    assert len(api.checks) == reviews
    # ...and cannot bring back a verdict the old object did not carry.
    forged = await _admit(adm, mk("Pod", "forged", rs), "alice")
    again = json.loads(json.dumps(forged))
    again["metadata"]["annotations"][KEYS.edge_proof] = legit["metadata"]["annotations"][
        KEYS.edge_proof
    ]
    out = await _admit(adm, again, "alice", operation="UPDATE", old=forged)
    assert out["metadata"]["annotations"]["aibom.dev/rollup"] == "unproven"
    assert KEYS.edge_proof not in out["metadata"]["annotations"]
    assert len(api.checks) == reviews + 1  # only the forged CREATE was reviewed
    # Changing the reference is a new edge: checked again, as the updater.
    other = mk("ReplicaSet", "rs2", dep, uid="u-rs2")
    moved = json.loads(json.dumps(legit))
    moved["metadata"]["ownerReferences"][0].update(name="rs2", uid="u-rs2")
    adm._resolver._source.add(other)  # type: ignore[attr-defined]
    out = await _admit(adm, moved, "alice", operation="UPDATE", old=legit)
    assert out["metadata"]["annotations"]["aibom.dev/rollup"] == "unproven"
    assert len(api.checks) == reviews + 2


async def test_replicaset_under_a_deployment_keeps_the_deployments_copy() -> None:
    """The deployment controller copies the Deployment's edge-proof onto its
    ReplicaSets; the ReplicaSet's own proof lives beside it, so nobody fights."""
    dgd = mk("DynamoGraphDeployment", "g")
    dep = mk("Deployment", "d", dgd)
    dep_owner = controller_ref(dep)
    assert dep_owner is not None
    copied = proof_for(KEY, ref_of(dep), dep_owner)
    dep["metadata"]["annotations"] = {KEYS.edge_proof: copied}
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dgd, dep]))
    rs = mk("ReplicaSet", "d-1", dep, annotations={KEYS.edge_proof: copied})
    out = await _admit(adm, rs, CONTROLLER.username)
    ann = out["metadata"]["annotations"]
    assert ann[KEYS.edge_proof] == copied  # the copy is left alone
    owner = controller_ref(out)
    assert owner is not None
    assert verify(KEY, ann[KEYS.replicaset_edge_proof], ref_of(out), owner)
    assert (
        ann["aibom.dev/rollup"] == "rolled-up"
        and ann["aibom.dev/root"] == "DynamoGraphDeployment/g"
    )
    # The deployment controller's next sync (copying again) changes nothing.
    again = await _admit(adm, out, CONTROLLER.username, operation="UPDATE", old=out)
    assert again == out


async def test_deeper_hop_needs_a_proof_or_a_guarded_namespace() -> None:
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "rs", dep, uid="u-rs")  # no proof: admitted while the webhook was down
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]))
    out = (await _admit(adm, mk("Pod", "p", rs), CONTROLLER.username))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "unproven"
    assert out["aibom.dev/rollup-reason"] == "Unproven apps/Deployment/d"
    # The Pod's own edge was proven: it keeps its proof.
    assert KEYS.edge_proof in out
    guarded = FakeApi({CONTROLLER.username}, guarded=True)
    adm = _admitter(guarded, MemorySource([dep, rs]))
    for name in ("p", "q"):
        out = (await _admit(adm, mk("Pod", name, rs), CONTROLLER.username))["metadata"][
            "annotations"
        ]
        assert out["aibom.dev/rollup"] == "rolled-up"
    assert guarded.gets == 2  # namespace + binding, once each (cached)


# -- the guarded-namespace decision (GuardCache) ---------------------------------------------

OPTED_OUT = {**OPTED_IN, "aibom.dev/provenance-guard": "disabled"}


def _unproven_above(ns: str = "ns") -> tuple[Obj, Obj]:
    """A Deployment and its ReplicaSet without a proof (admitted while the webhook was
    down): a Pod's own edge to the ReplicaSet is proven, the hop above is not."""
    dep = mk("Deployment", "d", ns=ns)
    return dep, mk("ReplicaSet", "rs", dep, ns=ns, uid=f"u-rs-{ns}")


async def _rollup(adm: Admitter, name: str, rs: Obj) -> tuple[str, str | None]:
    """(rollup, rollup-reason) of a Pod `name` the ReplicaSet controller creates under `rs`."""
    pod = mk("Pod", name, rs, ns=rs["metadata"]["namespace"])
    out = (await _admit(adm, pod, CONTROLLER.username))["metadata"]
    ann = out["annotations"]
    return ann["aibom.dev/rollup"], ann.get("aibom.dev/rollup-reason")


@pytest.mark.parametrize(
    ("labels", "trusted"),
    [
        (OPTED_IN, True),
        (OPTED_OUT, False),
        ({}, False),
        ({"aibom.dev/enabled": "false"}, False),
        (None, False),
    ],
    ids=["opted-in", "opted-out", "no-opt-in", "opt-in-false", "no-namespace"],
)
async def test_a_deeper_hop_counts_only_in_an_opted_in_namespace_without_the_opt_out(
    labels: Mapping[str, str] | None, trusted: bool
) -> None:
    """Guarded = opted in AND not `provenance-guard=disabled` AND the binding exists.
    The binding exists in every case here: the labels alone decide."""
    dep, rs = _unproven_above()
    warm_dep, warm_rs = _unproven_above("warm")
    api = FakeApi({CONTROLLER.username}, guarded=True, labels=labels)
    api.labels_of["warm"] = OPTED_IN
    adm = _admitter(api, MemorySource([dep, rs, warm_dep, warm_rs]))
    # A guarded namespace first: the binding's answer is cached from then on.
    assert await _rollup(adm, "w", warm_rs) == ("rolled-up", None)
    want = ("rolled-up", None) if trusted else ("unproven", "Unproven apps/Deployment/d")
    # The first Pod asks for the labels, the second is answered from the cache.
    assert [await _rollup(adm, name, rs) for name in ("p", "q")] == [want, want]


@pytest.mark.parametrize("failing", ["namespace", "binding"])
async def test_a_failed_guard_lookup_is_not_guarded_and_not_cached(failing: str) -> None:
    dep, rs = _unproven_above()
    api = FakeApi({CONTROLLER.username}, guarded=True)
    setattr(api, f"{failing}_fail", RuntimeError("503 Service Unavailable"))
    adm = _admitter(api, MemorySource([dep, rs]))
    unproven = ("unproven", "Unproven apps/Deployment/d")
    assert await _rollup(adm, "p", rs) == unproven
    gets = api.gets
    assert await _rollup(adm, "q", rs) == unproven
    assert api.gets == gets + 1  # the failed GET is made again, not answered from a cache
    setattr(api, f"{failing}_fail", None)
    assert await _rollup(adm, "r", rs) == ("rolled-up", None)


async def test_a_custom_namespace_label_is_the_opt_in(tmp_path: Path) -> None:
    """`--namespace-label team.example/aibom=on` (the Server's `opt_in`): that label
    opts a namespace in, the default one no longer does, the opt-out still applies."""
    serving_files(tmp_path)
    custom = {"team.example/aibom": "on"}
    for labels, guarded in (
        (custom, True),
        (OPTED_IN, False),
        ({**custom, "aibom.dev/provenance-guard": "disabled"}, False),
    ):
        server = Server(
            source=MemorySource(),
            registry=REG,
            keys=KEYS,
            reloader=CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")),
            host="127.0.0.1",
            port=0,
            provenance_source=FakeApi(set(), guarded=True, labels=labels),
            opt_in=("team.example/aibom", "on"),
        )
        assert server.provenance is not None and server.provenance.guard is not None
        assert await server.provenance.guard.guarded("ns", timeout=1) is guarded, labels


async def test_without_a_key_no_proof_is_written_and_user_proofs_are_removed() -> None:
    dep, rs = _chain()
    adm = _admitter(FakeApi({CONTROLLER.username}, guarded=True), MemorySource([dep, rs]), key=None)
    pod = mk("Pod", "p", rs, annotations={KEYS.edge_proof: "v1:forged"})
    out = (await _admit(adm, pod, CONTROLLER.username))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "rolled-up"
    assert KEYS.edge_proof not in out


async def test_without_a_key_an_update_keeping_the_reference_carries_the_old_stamp() -> None:
    """No key, so no proof: the stamp oldObject carries is the verdict of a kept edge."""
    dep, rs = _chain()
    api = FakeApi({CONTROLLER.username}, guarded=True)  # the hops above count
    adm = _admitter(api, MemorySource([dep, rs]), key=None)
    legit = await _admit(adm, mk("Pod", "legit", rs), CONTROLLER.username)
    assert legit["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"
    reviews = len(api.checks)
    # alice (who may not set the edge) relabels the controller's Pod: still rolled up.
    relabelled = json.loads(json.dumps(legit))
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = (await _admit(adm, relabelled, "alice", operation="UPDATE", old=legit))["metadata"]
    assert out["annotations"]["aibom.dev/rollup"] == "rolled-up"
    assert out["annotations"]["aibom.dev/root"] == "Deployment/d"
    assert len(api.checks) == reviews  # not re-checked
    # alice's own Pod is unproven; an UPDATE keeping the reference, with the legit
    # Pod's stamp written into it, leaves it unproven.
    forged = await _admit(adm, mk("Pod", "forged", rs), "alice")
    assert forged["metadata"]["annotations"]["aibom.dev/rollup"] == "unproven"
    assert len(api.checks) == reviews + 1
    again = json.loads(json.dumps(forged))
    again["metadata"]["annotations"] = dict(legit["metadata"]["annotations"])
    out = (await _admit(adm, again, "alice", operation="UPDATE", old=forged))["metadata"]
    assert out["annotations"]["aibom.dev/rollup"] == "unproven"
    assert out["annotations"]["aibom.dev/rollup-reason"] == "Unproven apps/ReplicaSet/rs"
    assert "aibom.dev/root" not in out["annotations"]
    assert len(api.checks) == reviews + 1  # no review for the UPDATE


@pytest.mark.parametrize("key", [KEY, None], ids=["key", "no-key"])
async def test_a_kept_proven_edge_stays_proven_when_only_a_hop_above_was_unproven(
    key: bytes | None,
) -> None:
    """The Pod's own edge was proven at CREATE; only the hop above was not (the
    binding GET failed: not guarded). Its stamp then says `unproven`, naming that
    hop. An UPDATE keeping the reference carries the own edge as proven, with a
    key (its proof) and without one (the stamp's reason names another hop), so
    once the namespace reads as guarded the Pod rolls up, with no new review."""
    dep, rs = _unproven_above()
    api = FakeApi({CONTROLLER.username}, guarded=True)
    api.binding_fail = RuntimeError("503 Service Unavailable")
    adm = _admitter(api, MemorySource([dep, rs]), key=key)
    pod = await _admit(adm, mk("Pod", "p", rs), CONTROLLER.username)
    ann = pod["metadata"]["annotations"]
    assert (ann["aibom.dev/rollup"], ann["aibom.dev/rollup-reason"]) == (
        "unproven",
        "Unproven apps/Deployment/d",
    )
    api.binding_fail = None
    reviews = len(api.checks)
    relabelled = json.loads(json.dumps(pod))
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = await _admit(adm, relabelled, "alice", operation="UPDATE", old=pod)
    assert out["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"
    assert len(api.checks) == reviews


@pytest.mark.parametrize("annotations", [None, {"other": "x"}])
async def test_proof_patch_applies_with_or_without_an_annotation_map(
    annotations: dict[str, str] | None,
) -> None:
    dep, rs = _chain()
    adm = _admitter(FakeApi({CONTROLLER.username}), MemorySource([dep, rs]))
    pod = mk("Pod", "p", rs, annotations=annotations)
    if annotations is None:
        pod["metadata"].pop("annotations", None)
    out = (await _admit(adm, pod, CONTROLLER.username))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "rolled-up" and KEYS.edge_proof in out
