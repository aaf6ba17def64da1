"""The webhook's provenance check: SubjectAccessReview verdicts and their
cache, the edge-proof it writes, and UPDATEs that keep the reference."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from aibom_core.kinds import GroupKind, default_registry
from aibom_core.objects import Obj, OwnerRef, controller_ref
from aibom_core.provenance import Origin, origin_of, proof_for, verify
from aibom_core.stamp import Keys
from aibom_core.walk import Reason
from aibom_edge.kube import ApiResource, KubeError, KubeResponse
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, apply_patch, review
from webhook.admission import parse_review
from webhook.app import Admitter
from webhook.metrics import Metrics
from webhook.provenance import (
    SUBJECT_ACCESS_REVIEWS,
    ApiReviewer,
    EdgeChecker,
    FinalizersAttributes,
    Provenance,
    SarCache,
    UserInfo,
    Verdict,
    review_body,
)
from webhook.resolver import OwnerCache, Resolver

KEY = b"q" * 32
WALL = 1_767_323_045.3  # the webhook's clock at a CREATE, and the second stored:
CREATED = "2026-01-02T03:04:05Z"
KEYS = Keys()
REG = default_registry()
OWNER = OwnerRef(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="u-rs")
ALICE = UserInfo(username="alice", groups=("tenants",))
CONTROLLER = UserInfo(
    username="system:serviceaccount:kube-system:replicaset-controller",
    groups=("system:serviceaccounts",),
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeApi:
    """Answers reviews from sets of allowed usernames (`allowed`: update on the owner's
    finalizers; `updaters`: update on the owner itself); records every review."""

    def __init__(self, allowed: set[str], *, updaters: set[str] | None = None) -> None:
        self.allowed = allowed
        self.updaters = updaters or set()
        self.reviews: list[dict[str, Any]] = []
        self.fail: BaseException | None = None
        self.delay = 0.0

    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        resources = {"ReplicaSet": "replicasets", "Deployment": "deployments"}
        return {**resources, "StatefulSet": "statefulsets"}.get(owner.kind)

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
    # A clock that stands still: every check is within the TTL, however slow the machine.
    checker = EdgeChecker(api, cache=SarCache(ttl=10, clock=Clock()))
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
    api.delay = 3600.0  # the review is not answered while the test runs
    checker = EdgeChecker(api)
    # Answered although the review never is: the budget ended it (the bound is the
    # test's, for a failure; a loaded machine only makes the answer later).
    async with asyncio.timeout(30):
        check = await checker.check(CONTROLLER, "ns", OWNER, timeout=0.05)
    assert check.verdict is Verdict.ERROR


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
        key=key,
        keys=KEYS,
        check_budget=0.25,
        wall=lambda: WALL,
    )
    return Admitter(resolver=resolver, registry=REG, keys=KEYS, metrics=Metrics(), provenance=prov)


def _chain() -> tuple[Obj, Obj]:
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "rs", dep, uid="u-rs")
    owner = controller_ref(rs)
    assert owner is not None
    rs["metadata"]["annotations"] = {KEYS.replicaset_edge_proof: proof_for(KEY, rs, owner)}
    return dep, rs


async def _admit(
    adm: Admitter, obj: Obj, user: str, *, operation: str = "CREATE", old: Obj | None = None
) -> Obj:
    doc = review(obj, operation=operation, old=old)
    doc["request"]["userInfo"] = {"username": user}
    resp, _ = await adm.admit(parse_review(json.dumps(doc).encode()))
    ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    stored = apply_patch(obj, ops)
    if operation == "CREATE":  # as the API server stores it, after admission
        stored["metadata"]["creationTimestamp"] = CREATED
    return stored


async def test_forged_edge_is_stamped_unproven_and_a_copied_proof_removed() -> None:
    dep, rs = _chain()
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]))
    legit = await _admit(adm, mk("Pod", "legit", rs), CONTROLLER.username)
    ann = legit["metadata"]["annotations"]
    assert ann["aibom.dev/rollup"] == "rolled-up"
    assert ann["aibom.dev/root"] == "Deployment/d"
    assert verify(KEY, ann[KEYS.edge_proof], legit, controller_ref(legit))  # type: ignore[arg-type]
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
    assert verify(KEY, proof, out, controller_ref(out))  # type: ignore[arg-type]


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
    copied = proof_for(KEY, dep, dep_owner)
    dep["metadata"]["annotations"] = {KEYS.edge_proof: copied}
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dgd, dep]))
    rs = mk("ReplicaSet", "d-1", dep, annotations={KEYS.edge_proof: copied})
    out = await _admit(adm, rs, CONTROLLER.username)
    ann = out["metadata"]["annotations"]
    assert ann[KEYS.edge_proof] == copied  # the copy is left alone
    owner = controller_ref(out)
    assert owner is not None
    assert verify(KEY, ann[KEYS.replicaset_edge_proof], out, owner)
    assert (
        ann["aibom.dev/rollup"] == "rolled-up"
        and ann["aibom.dev/root"] == "DynamoGraphDeployment/g"
    )
    # The deployment controller's next sync (copying again) changes nothing.
    again = await _admit(adm, out, CONTROLLER.username, operation="UPDATE", old=out)
    assert again == out


async def test_a_deeper_hop_needs_its_proof_whatever_the_namespace() -> None:
    """The hop above a Pod counts only with its own proof: a guarded namespace proves
    nothing the guard did not check (and the webhook does not ask whether it is
    guarded: no namespace or binding is read)."""
    dep, rs = _unproven_above()  # no proof: admitted while the webhook was down
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]))
    for name in ("p", "q"):
        out = (await _admit(adm, mk("Pod", name, rs), CONTROLLER.username))["metadata"][
            "annotations"
        ]
        assert out["aibom.dev/rollup"] == "unproven"
        assert out["aibom.dev/rollup-reason"] == "Unproven apps/Deployment/d"
        # The Pod's own edge was proven: it keeps its proof.
        assert KEYS.edge_proof in out
    # With its proof, the same hop counts.
    _, proven_rs = _chain()
    adm = _admitter(api, MemorySource([dep, proven_rs]))
    assert await _rollup(adm, "r", proven_rs) == ("rolled-up", None)


def _unproven_above(ns: str = "ns") -> tuple[Obj, Obj]:
    """A Deployment and its ReplicaSet without a proof (admitted while the webhook was
    down): a Pod's own edge to the ReplicaSet is proven, the hop above is not."""
    dep = mk("Deployment", "d", ns=ns)
    return dep, mk("ReplicaSet", "rs", dep, ns=ns, uid="u-rs")


async def _rollup(adm: Admitter, name: str, rs: Obj) -> tuple[str, str | None]:
    """(rollup, rollup-reason) of a Pod `name` the ReplicaSet controller creates under `rs`."""
    pod = mk("Pod", name, rs, ns=rs["metadata"]["namespace"])
    out = (await _admit(adm, pod, CONTROLLER.username))["metadata"]
    ann = out["annotations"]
    return ann["aibom.dev/rollup"], ann.get("aibom.dev/rollup-reason")


async def test_without_a_key_no_proof_is_written_and_user_proofs_are_removed() -> None:
    sts = mk("StatefulSet", "s")  # the root: no hop above, which no key could prove
    adm = _admitter(FakeApi({CONTROLLER.username}), MemorySource([sts]), key=None)
    pod = mk("Pod", "p", sts, annotations={KEYS.edge_proof: "v1:forged"})
    out = (await _admit(adm, pod, CONTROLLER.username))["metadata"]["annotations"]
    assert out["aibom.dev/rollup"] == "rolled-up"
    assert KEYS.edge_proof not in out


async def test_without_a_key_an_update_keeping_the_reference_carries_the_old_stamp() -> None:
    """No key, so no proof: the stamp oldObject carries is the verdict of a kept edge.
    (No hop above can be proven without a key either: the owner here is the root.)"""
    rs = mk("StatefulSet", "rs", uid="u-rs")
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([rs]), key=None)
    legit = await _admit(adm, mk("Pod", "legit", rs), CONTROLLER.username)
    assert legit["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"
    reviews = len(api.checks)
    # alice (who may not set the edge) relabels the controller's Pod: still rolled up.
    relabelled = json.loads(json.dumps(legit))
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = (await _admit(adm, relabelled, "alice", operation="UPDATE", old=legit))["metadata"]
    assert out["annotations"]["aibom.dev/rollup"] == "rolled-up"
    assert out["annotations"]["aibom.dev/root"] == "StatefulSet/rs"
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
    assert out["annotations"]["aibom.dev/rollup-reason"] == "Unproven apps/StatefulSet/rs"
    assert "aibom.dev/root" not in out["annotations"]
    assert len(api.checks) == reviews + 1  # no review for the UPDATE


@pytest.mark.parametrize("key", [KEY, None], ids=["key", "no-key"])
async def test_a_kept_proven_edge_stays_proven_when_only_a_hop_above_was_unproven(
    key: bytes | None,
) -> None:
    """The Pod's own edge was proven at CREATE; only the hop above was not (the
    ReplicaSet was admitted while the webhook was down). Its stamp says `unproven`,
    naming that hop. An UPDATE keeping the reference carries the own edge as
    proven, with a key (its proof) and without one (the stamp's reason names
    another hop), with no new review: with a key, once the ReplicaSet carries its
    proof, the Pod rolls up; without one, the reason still names the hop above."""
    dep, rs = _unproven_above()
    api = FakeApi({CONTROLLER.username})
    adm = _admitter(api, MemorySource([dep, rs]), key=key)
    pod = await _admit(adm, mk("Pod", "p", rs), CONTROLLER.username)
    ann = pod["metadata"]["annotations"]
    hop_above = ("unproven", "Unproven apps/Deployment/d")
    assert (ann["aibom.dev/rollup"], ann["aibom.dev/rollup-reason"]) == hop_above
    _, proven_rs = _chain()
    adm = _admitter(api, MemorySource([dep, proven_rs]), key=key)
    reviews = len(api.checks)
    relabelled = json.loads(json.dumps(pod))
    relabelled["metadata"]["labels"] = {"x": "y"}
    out = (await _admit(adm, relabelled, "alice", operation="UPDATE", old=pod))["metadata"]
    got = (
        out["annotations"]["aibom.dev/rollup"],
        out["annotations"].get("aibom.dev/rollup-reason"),
    )
    assert got == (("rolled-up", None) if key else hop_above)
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


# -- adoption and content ----------------------------------------------------------------------


def _templated(image: str = "registry.example/app:1") -> tuple[Obj, Obj]:
    """A Deployment and its ReplicaSet (with its proof), whose template runs `image`."""
    dep = mk("Deployment", "d")
    template = {"spec": {"containers": [{"name": "main", "image": image}]}}
    rs = mk("ReplicaSet", "rs", dep, uid="u-rs", spec={"template": template})
    owner = controller_ref(rs)
    assert owner is not None
    rs["metadata"]["annotations"] = {KEYS.replicaset_edge_proof: proof_for(KEY, rs, owner)}
    return dep, rs


def _bare(name: str, image: str) -> Obj:
    """A Pod without an owner, as a tenant creates it (labelled like the template's)."""
    return mk("Pod", name, spec={"containers": [{"name": "main", "image": image}]})


def _adopt(pod: Obj, rs: Obj) -> Obj:
    """The ReplicaSet controller's adoption: the same Pod with its controller reference."""
    adopted: Obj = json.loads(json.dumps(pod))
    adopted["metadata"]["ownerReferences"] = mk("Pod", "x", rs)["metadata"]["ownerReferences"]
    return adopted


def _with_owners(api: FakeApi, source: MemorySource) -> Admitter:
    adm = _admitter(api, source)
    assert adm._provenance is not None
    adm._provenance.owners = source  # the owner whole: its Pod template
    return adm


@pytest.mark.parametrize(
    ("image", "want", "result"),
    [
        ("registry.example/app:1", ("rolled-up", None), "matching"),
        ("evil.example/visitor:1", ("unproven", "AdoptedMismatch apps/ReplicaSet/rs"), "mismatch"),
    ],
)
async def test_an_adoption_is_proven_and_says_whether_the_pod_is_the_template(
    image: str, want: tuple[str, str | None], result: str
) -> None:
    """The ReplicaSet controller adopts a tenant's bare Pod labelled like its own: the
    edge is the controller's (it may control the owner), the content is the
    tenant's. Its proof records whether the Pod runs the template."""
    dep, rs = _templated()
    api = FakeApi({CONTROLLER.username})
    adm = _with_owners(api, MemorySource([dep, rs]))
    bare = await _admit(adm, _bare("visitor", image), "alice")
    assert bare["metadata"]["annotations"]["aibom.dev/rollup"] == "uncovered"
    out = await _admit(adm, _adopt(bare, rs), CONTROLLER.username, operation="UPDATE", old=bare)
    ann = out["metadata"]["annotations"]
    assert (ann["aibom.dev/rollup"], ann.get("aibom.dev/rollup-reason")) == want
    owner = controller_ref(out)
    assert owner is not None
    origin = origin_of(KEY, ann[KEYS.edge_proof], out, owner)
    assert origin is (Origin.ADOPTED if result == "matching" else Origin.MISMATCH)
    assert adm._metrics.adoptions.labels(result)._value.get() == 1
    # Its next UPDATE keeps the edge and the verdict, with no new review.
    reviews = len(api.reviews)
    again = json.loads(json.dumps(out))
    again["metadata"]["labels"] = {"touched": "yes"}
    kept = await _admit(adm, again, "alice", operation="UPDATE", old=out)
    ann = kept["metadata"]["annotations"]
    assert (ann["aibom.dev/rollup"], ann.get("aibom.dev/rollup-reason")) == want
    assert len(api.reviews) == reviews


async def test_an_adoption_whose_template_cannot_be_read_is_unchecked() -> None:
    dep, rs = _templated()
    source = MemorySource([dep, rs])
    adm = _with_owners(FakeApi({CONTROLLER.username}), source)
    bare = await _admit(adm, _bare("visitor", "registry.example/app:1"), "alice")
    source.fail["ReplicaSet"] = Reason.TIMEOUT  # for the template read (and the walk)
    out = await _admit(adm, _adopt(bare, rs), CONTROLLER.username, operation="UPDATE", old=bare)
    ann = out["metadata"]["annotations"]
    assert ann["aibom.dev/rollup-reason"] == "Unchecked apps/ReplicaSet/rs"
    assert KEYS.edge_proof not in ann


@pytest.mark.parametrize("who", ["alice", CONTROLLER.username])
async def test_an_image_changed_under_a_kept_edge_is_checked_as_a_new_edge(who: str) -> None:
    """A Pod's image can be changed in place. Changed by someone who may not control
    the owner (a tenant who may patch Pods), the Pod is not its controller's any
    more: unproven, its proof removed. By someone who may: proven again."""
    dep, rs = _templated()
    api = FakeApi({CONTROLLER.username})
    adm = _with_owners(api, MemorySource([dep, rs]))
    made = mk(
        "Pod", "p", rs, spec={"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    )
    pod = await _admit(adm, made, CONTROLLER.username)
    assert pod["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"
    swapped = json.loads(json.dumps(pod))
    swapped["spec"]["containers"][0]["image"] = "evil.example/swap:1"
    out = await _admit(adm, swapped, who, operation="UPDATE", old=pod)
    ann = out["metadata"]["annotations"]
    if who == "alice":
        assert ann["aibom.dev/rollup-reason"] == "Unproven apps/ReplicaSet/rs"
        assert KEYS.edge_proof not in ann
    else:
        assert ann["aibom.dev/rollup"] == "rolled-up"
        assert verify(KEY, ann[KEYS.edge_proof], out, controller_ref(out))  # type: ignore[arg-type]
    # The same image, the order of the containers aside: nothing to check.
    reviews = len(api.reviews)
    relabelled = json.loads(json.dumps(pod))
    relabelled["metadata"]["labels"] = {"x": "y"}
    await _admit(adm, relabelled, "alice", operation="UPDATE", old=pod)
    assert len(api.reviews) == reviews


async def test_a_create_binds_the_proof_to_the_second_it_was_answered() -> None:
    """At a CREATE the object has no UID yet (one in the request is replaced after
    admission): the proof names the second the webhook answered, which the API
    server's creationTimestamp will be close to."""
    dep, rs = _templated()
    adm = _with_owners(FakeApi({CONTROLLER.username}), MemorySource([dep, rs]))
    assert adm._provenance is not None
    adm._provenance.wall = lambda: 1_767_323_045.7
    for uid in (None, "chosen-by-the-requester"):
        made = mk("Pod", "p", rs, uid=uid or "")
        if uid is None:
            del made["metadata"]["uid"]
        out = await _admit(adm, made, CONTROLLER.username)
        proof = out["metadata"]["annotations"][KEYS.edge_proof]
        assert proof.startswith("v2:c:t1767323045:")
        out["metadata"]["uid"] = "assigned-by-the-api-server"
        out["metadata"]["creationTimestamp"] = "2026-01-02T03:04:06Z"
        assert verify(KEY, proof, out, controller_ref(out))  # type: ignore[arg-type]


class _Api:
    """A client answering one SubjectAccessReview, with discovery knowing ReplicaSets."""

    def __init__(self, status: int, body: Any) -> None:
        self.answer = KubeResponse(status, body, {})
        self.posted: list[tuple[str, str, Any]] = []
        self.discovery = self

    async def resource(self, gk: GroupKind) -> ApiResource | None:
        if gk != GroupKind("apps", "ReplicaSet"):
            return None
        return ApiResource("apps", "v1", "ReplicaSet", "replicasets", namespaced=True)

    async def request(self, method: str, path: str, **kw: Any) -> KubeResponse:
        self.posted.append((method, path, kw.get("json")))
        return self.answer


async def test_the_api_reviewer_asks_discovery_and_posts_the_review() -> None:
    api = _Api(201, {"status": {"allowed": True}})
    reviewer = ApiReviewer(api)  # type: ignore[arg-type]
    assert await reviewer.finalizers_resource(OWNER) == "replicasets"
    assert await reviewer.finalizers_resource(OwnerRef("x/v1", "Widget", "w", "u")) is None
    body = {"kind": "SubjectAccessReview"}
    assert await reviewer.access_review(body, timeout=1.0)
    assert api.posted == [("POST", SUBJECT_ACCESS_REVIEWS, body)]
    api.answer = KubeResponse(201, {"status": {"allowed": False, "denied": True}}, {})
    assert not await reviewer.access_review(body, timeout=1.0)
    api.answer = KubeResponse(403, {"kind": "Status"}, {})
    with pytest.raises(KubeError, match="HTTP 403"):
        await reviewer.access_review(body, timeout=1.0)
