"""The annotator with OIDC credentials, against a real control plane of its own.

kube-apiserver trusts a test identity provider (`tests.integration.oidc`,
an HTTPS server in this process with its own CA) through structured
authentication (`ControlPlane(oidc=...)`). The annotator runs with a
kubeconfig whose user is the `oidc` auth-provider: client id and secret,
an id-token that has ALREADY EXPIRED, a refresh token, the issuer URL and
its CA file. The `kubernetes` package's loader refreshes it; the annotator
decides when (docs/annotator.md, "Credentials"). RBAC: the shipped
ClusterRole and Lease Role, bound to the OIDC username (`oidc:annotator`).
kube-apiserver itself says which tokens it accepts (SelfSubjectReview).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane, bind_rules
from tests.integration.oidc import FakeIdP, Refresh
from tests.integration.support import (
    LABEL_KEY,
    apply,
    dcd,
    grant_lease,
    shipped_rules,
    wait_for,
)
from tests.integration.test_annotator_faults import Annotator, names, sa_request, want
from tests.integration.test_signing import cli

pytestmark = pytest.mark.integration

# Short-lived id-tokens: the annotator refreshes each at half its lifetime
# (the library's 5-minute skew is longer than the token).
LIFETIME = 16.0
# kube-apiserver caches a token's successful authentication for 10 s.
AUTH_CACHE = 10.0
SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REFRESHES = "aibom_annotator_credential_refreshes_total"
FAILURES = "aibom_annotator_credential_refresh_failures_total"


def whoami(cp: ControlPlane, token: str) -> str | None:
    """The username kube-apiserver gives this bearer token (None: refused, 401)."""
    status, body = sa_request(
        cp,
        token,
        "POST",
        SSR,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    if status == 401:
        return None
    assert status == 201, (status, body)
    return str(body["status"]["userInfo"]["username"])


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeIdP]:
    with FakeIdP(tmp_path_factory.mktemp("idp"), lifetime=LIFETIME) as server:
        yield server


@pytest.fixture(scope="module")
def ocp(idp: FakeIdP) -> Iterator[ControlPlane]:
    cp = ControlPlane(oidc=idp.issuer())
    cp.start()
    try:
        cp.install_crds()
        # kube-apiserver fetches the issuer's discovery and keys in the background.
        wait_for(
            "kube-apiserver to trust the IdP",
            lambda: whoami(cp, idp.id_token()) == idp.username,
            90,
        )
        yield cp
    finally:
        cp.stop()


def namespace(cp: ControlPlane, name: str, user: str) -> str:
    """An opted-in namespace, the OIDC user bound to the shipped roles (its Lease in it)."""
    cp.kubectl("create", "namespace", name)
    cp.kubectl("label", "namespace", name, f"{LABEL_KEY}={name}")
    bind_rules(cp.kubectl, user, f"{name}-oidc-annotator", shipped_rules())
    grant_lease(cp.kubectl, name, user, "aibom-test")
    return name


def oidc_kubeconfig(
    path: Path, cp: ControlPlane, idp: FakeIdP, id_token: str, refresh: str
) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "cp",
                        "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)},
                    }
                ],
                "users": [{"name": "oidc", "user": idp.kubeconfig_user(id_token, refresh)}],
                "contexts": [{"name": "oidc", "context": {"cluster": "cp", "user": "oidc"}}],
                "current-context": "oidc",
            }
        )
    )
    return path


def healthz(a: Annotator) -> int:
    return a._get(a.health_port, "/healthz")[0]


def test_oidc_tokens_are_refreshed_ahead_of_expiry_and_the_annotator_keeps_working(
    ocp: ControlPlane, idp: FakeIdP, tmp_path: Path
) -> None:
    ns = namespace(ocp, "oidc-rotate", idp.username)
    expired, refresh = idp.grant(lifetime=-60)
    # kube-apiserver refuses the kubeconfig's own token: the annotator must refresh to get in.
    assert whoami(ocp, expired) is None
    before = len(idp.grants())
    kubeconfig = oidc_kubeconfig(tmp_path / "oidc.kubeconfig", ocp, idp, expired, refresh)
    a = Annotator(kubeconfig, tmp_path, ns, identity="oidc").start()

    def ours() -> list[Refresh]:
        return idp.grants()[before:]

    try:
        a.wait_ready(90).wait_leading(60)
        apply(ocp.kubectl, dcd(ns, "first"))
        wait_for("the first document", lambda: want("first") <= names(ocp, ns), 60)
        # The token endpoint was called: at start, for the expired token.
        start = ours()[0]
        assert start.ok and start.id_token and start.replaced_had_left is not None
        assert start.replaced_had_left < 0
        assert whoami(ocp, start.id_token) == idp.username
        # Two more rotations while the annotator works...
        wait_for("two rotations", lambda: len(ours()) >= 3, 4 * LIFETIME + 30)
        # ...each asked for ahead of the expiry of the token it replaced (not after a 401).
        rotations = ours()[1:]
        assert all(g.ok for g in rotations), rotations
        assert all((g.replaced_had_left or 0) > 0 for g in rotations), rotations
        # The start-up token has expired for kube-apiserver too (after its auth cache).
        wait_for(
            "kube-apiserver to refuse the first token",
            lambda: whoami(ocp, start.id_token or "") is None,
            LIFETIME + AUTH_CACHE + 30,
        )
        assert healthz(a) == 200
        apply(ocp.kubectl, dcd(ns, "second"))
        wait_for("the second document", lambda: want("second") <= names(ocp, ns), 60)
        assert a.leading()
        assert a.metric(REFRESHES) >= 2 and a.metric(FAILURES) == 0
        assert idp.requests.get("/.well-known/openid-configuration", 0) >= 3
        assert not [
            r for r in a.records() if r.get("msg") == "could not refresh the API credentials"
        ]
    finally:
        assert a.stop() == 0, a.tail()


def test_a_refused_refresh_is_reported_backs_off_and_recovers_without_a_restart(
    ocp: ControlPlane, idp: FakeIdP, tmp_path: Path
) -> None:
    ns = namespace(ocp, "oidc-refused", idp.username)
    kubeconfig = oidc_kubeconfig(tmp_path / "oidc.kubeconfig", ocp, idp, *idp.grant(lifetime=-60))
    a = Annotator(kubeconfig, tmp_path, ns, identity="oidc-refused").start()
    try:
        a.wait_ready(90).wait_leading(60)
        refused_from = len(idp.grants())
        idp.revoke_all()
        since = time.monotonic()
        # Every refresh is refused: counted, logged, retried with backoff.
        wait_for("three refused refreshes", lambda: a.metric(FAILURES) >= 3, 4 * LIFETIME + 30)
        # The token expired and was not replaced: no writes without credentials.
        wait_for("the annotator to stop leading", lambda: not a.leading(), LIFETIME + 60)
        elapsed = time.monotonic() - since
        refused = [g for g in idp.grants()[refused_from:] if not g.ok]
        assert refused and len(refused) == len(idp.grants()[refused_from:])
        # Backoff 1, 2, 4 ... s: n attempts take at least 2**(n-1) - 1 s (one of slack).
        assert len(refused) <= math.log2(elapsed + 1) + 2, (len(refused), elapsed)
        assert a.alive() and healthz(a) == 200
        warned = [r for r in a.records() if r.get("msg") == "could not refresh the API credentials"]
        assert warned and all("invalid_grant" in r["error"] for r in warned), warned[:3]
        assert "Traceback" not in a.log_path.read_text(errors="replace")
        # The provider accepts again: the annotator recovers by itself.
        idp.accept_again()
        a.wait_leading(30 + 30)
        apply(ocp.kubectl, dcd(ns, "after"))
        wait_for("a document after recovery", lambda: want("after") <= names(ocp, ns), 60)
        assert a.metric(REFRESHES) >= 1
    finally:
        idp.accept_again()
        assert a.stop() == 0, a.tail()


def test_a_refused_refresh_at_start_is_one_clear_error(
    ocp: ControlPlane, idp: FakeIdP, tmp_path: Path
) -> None:
    kubeconfig = oidc_kubeconfig(tmp_path / "oidc.kubeconfig", ocp, idp, *idp.grant(lifetime=-60))
    idp.revoke_all()
    try:
        done = cli(ocp, "annotator", f"--kubeconfig={kubeconfig}")
    finally:
        idp.accept_again()
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    assert "cannot get Kubernetes credentials: InvalidGrantError" in done.stderr
    assert "refresh token revoked" in done.stderr
