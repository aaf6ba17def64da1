"""Credentials come from the `kubernetes` library's loaders, all of their settings kept."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import ssl
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from aibom_edge import credentials as credentials_module
from aibom_edge import kube as kube_module
from aibom_edge.credentials import load_credentials
from aibom_edge.kube import Kube, KubeError
from certs.pki import issue, new_ca
from tests.integration.oidc import FakeIdP, claims_of
from tests.unit.webhook_fakes import serving_files


def kubeconfig(tmp_path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path = tmp_path / "config"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [
                    {"name": "one", "context": {"cluster": "c", "user": "u"}},
                    {"name": "two", "context": {"cluster": "c", "user": "u", "namespace": "x"}},
                ],
                "current-context": "one",
            }
        )
    )
    return path


def test_tls_server_name_and_proxy_url_reach_the_connection(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {
            "server": "https://10.0.0.1:6443",
            "insecure-skip-tls-verify": True,
            "tls-server-name": "kubernetes.default.svc",
            "proxy-url": "http://proxy.example:3128",
        },
        {"token": "static-token"},
    )
    creds = load_credentials(str(path), "two")
    assert creds.server == "https://10.0.0.1:6443"
    assert creds.tls_server_name == "kubernetes.default.svc"
    assert creds.proxy == "http://proxy.example:3128"
    assert creds.token == "static-token"
    kube = Kube(creds)
    assert kube._conn_opts == {
        "server_hostname": "kubernetes.default.svc",
        "proxy": "http://proxy.example:3128",
    }


def counting_exec_plugin(tmp_path: Path, *, expires: str) -> tuple[Path, dict[str, object]]:
    """An exec credential plugin whose n-th run issues `tok-<n>` expiring at `expires` (n
    kept in the file returned), and the kubeconfig user that runs it."""
    counter = tmp_path / "n"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, sys\n"
        f"p = {str(counter)!r}\n"
        "n = int(open(p).read()) + 1 if os.path.exists(p) else 1\n"
        "open(p, 'w').write(str(n))\n"
        "json.dump({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        f" 'status': {{'token': f'tok-{{n}}', 'expirationTimestamp': {expires!r}}}}},"
        " sys.stdout)\n"
    )
    command = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable}
    return counter, {"exec": {**command, "args": [str(plugin)], "interactiveMode": "Never"}}


def test_an_exec_plugin_is_run_again_when_its_token_nears_expiry(tmp_path: Path) -> None:
    counter, user = counting_exec_plugin(tmp_path, expires="2000-01-01T00:00:00Z")
    path = kubeconfig(
        tmp_path,
        {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
        user,
    )
    creds = load_credentials(str(path), None)
    runs = int(counter.read_text())
    assert creds.token == f"tok-{runs}" and creds.tokens is not None
    # Already expired: due (no I/O to tell), and fetching runs the plugin again.
    creds.tokens._checked -= 2
    assert creds.tokens.due()
    assert creds.tokens.fetch() == f"tok-{runs + 1}"
    assert creds.tokens.fetch(force=True) == f"tok-{int(counter.read_text())}"
    assert int(counter.read_text()) > runs + 1


# -- an exec plugin that answers with client certificates --


def cert_plugin(
    tmp_path: Path, *, expires: str, pairs: int = 3
) -> tuple[Path, Path, dict[str, object]]:
    """A client CA (its file returned), an exec credential plugin whose n-th run answers
    the client certificate `client-<n>` (the last one from then on) expiring at
    `expires`, and the kubeconfig user that runs it."""
    now = dt.datetime.now(dt.UTC)
    ca = new_ca(common_name="client-ca", now=now, days=1)
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    for n in range(1, pairs + 1):
        pair = issue(ca, common_name=f"client-{n}", now=now, days=1, client=True)
        (tmp_path / f"client-{n}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"client-{n}.key").write_bytes(pair.key_pem)
    counter = tmp_path / "n"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, sys\n"
        f"d, p = {str(tmp_path)!r}, {str(counter)!r}\n"
        f"n = min(int(open(p).read()) + 1 if os.path.exists(p) else 1, {pairs})\n"
        "open(p, 'w').write(str(n))\n"
        "read = lambda ext: open(os.path.join(d, f'client-{n}.{ext}')).read()\n"
        "json.dump({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'clientCertificateData': read('crt'), 'clientKeyData': read('key'),"
        f" 'expirationTimestamp': {expires!r}}}}}, sys.stdout)\n"
    )
    command = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable}
    return (
        counter,
        ca_file,
        {"exec": {**command, "args": [str(plugin)], "interactiveMode": "Never"}},
    )


@contextlib.asynccontextmanager
async def client_cert_server(
    tmp_path: Path, client_ca: Path, *, refused: frozenset[str] = frozenset()
) -> AsyncIterator[tuple[int, list[str]]]:
    """An HTTPS server that requires a client certificate of `client_ca` and records the
    CN of the one each request came with; 401 for the CNs in `refused` (revoked)."""
    serving_files(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    ctx.load_verify_locations(client_ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        cn = dict(x[0] for x in (peer or {}).get("subject", ()))["commonName"]
        seen.append(cn)
        status = 401 if cn in refused else 200
        return web.json_response({"kind": "Status", "code": status}, status=status)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/x", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    try:
        yield runner.addresses[0][1], seen
    finally:
        await runner.cleanup()


def _cert_kubeconfig(tmp_path: Path, port: int, user: dict[str, object]) -> Path:
    cluster: dict[str, object] = {
        "server": f"https://127.0.0.1:{port}",
        "certificate-authority": str(tmp_path / "ca.crt"),
    }
    return kubeconfig(tmp_path, cluster, user)


async def test_a_plugin_client_certificate_is_run_again_when_it_nears_expiry(
    tmp_path: Path,
) -> None:
    """docs/annotator.md, Credentials: a plugin's client certificate is renewed like a
    token (its expirationTimestamp), and new handshakes present the new one."""
    counter, client_ca, user = cert_plugin(tmp_path, expires="2000-01-01T00:00:00Z")
    async with client_cert_server(tmp_path, client_ca) as (port, seen):
        creds = load_credentials(str(_cert_kubeconfig(tmp_path, port, user)), None)
        assert counter.read_text() == "1" and creds.tokens is not None
        async with Kube(creds) as kube:
            assert (await kube.request("GET", "/api/v1/namespaces/x")).status == 200
            creds.tokens._checked -= 2  # a second has passed since the last look
            assert (await kube.request("GET", "/api/v1/namespaces/x")).status == 200
    assert seen[-1] == f"client-{counter.read_text()}" != "client-1"
    assert kube.token_refreshes >= 1


async def test_a_refused_plugin_client_certificate_is_replaced_and_the_request_retried(
    tmp_path: Path,
) -> None:
    """After a 401 the plugin runs again (no expiry known) and the retry presents the
    new certificate, not the refused one its kept-alive connection had."""
    counter, client_ca, user = cert_plugin(tmp_path, expires="2999-01-01T00:00:00Z")
    async with client_cert_server(tmp_path, client_ca, refused=frozenset({"client-1"})) as (
        port,
        seen,
    ):
        creds = load_credentials(str(_cert_kubeconfig(tmp_path, port, user)), None)
        async with Kube(creds) as kube:
            resp = await kube.request("GET", "/api/v1/namespaces/x")
            assert resp.status == 200, seen
            assert (await kube.request("GET", "/api/v1/namespaces/x")).status == 200
    assert seen == ["client-1", "client-2", "client-2"]
    assert counter.read_text() == "2"


async def test_proxy_environment_applies_only_without_proxy_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path, {"server": "https://127.0.0.1:6443"}, {"token": "t"})
    for name in kube_module.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    async with Kube(load_credentials(str(path), None)) as kube:
        assert kube._session is not None and not kube._session.trust_env
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    creds = load_credentials(str(path), None)
    # The environment's proxy is not pinned on every request (NO_PROXY must apply).
    assert creds.proxy is None
    async with Kube(creds) as kube:
        assert kube._session is not None and kube._session.trust_env
        assert "proxy" not in kube._conn_opts


# -- OIDC: the `oidc` auth-provider against a real HTTPS identity provider --


class _Clock:
    """`time` for aibom_edge.credentials (where tokens are judged), moved forward by the
    test (the IdP keeps real time)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(credentials_module, "time", c)
    return c


@pytest.fixture
def idp(tmp_path: Path) -> Iterator[FakeIdP]:
    with FakeIdP(tmp_path / "idp", lifetime=60) as server:
        yield server


def oidc_kubeconfig(
    tmp_path: Path, idp: FakeIdP, id_token: str, refresh_token: str, *, ca_data: bool = False
) -> Path:
    return kubeconfig(
        tmp_path,
        {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
        idp.kubeconfig_user(id_token, refresh_token, ca_data=ca_data),
    )


def test_an_oidc_id_token_is_refreshed_ahead_of_its_expiry(
    tmp_path: Path, idp: FakeIdP, clock: _Clock
) -> None:
    expired, refresh = idp.grant(lifetime=-30)
    path = oidc_kubeconfig(tmp_path, idp, expired, refresh, ca_data=True)
    creds = load_credentials(str(path), None)
    # Expired in the kubeconfig: the library refreshed it at load (its inline CA honoured).
    assert [g.ok for g in idp.grants()] == [True] and creds.token != expired
    tokens = creds.tokens
    assert tokens is not None and tokens.token == creds.token
    assert claims_of(creds.token or "")["exp"] > time.time()
    assert not tokens.due()  # 60 s left: not yet
    clock.ahead = 29.0
    assert not tokens.due()
    # Half its lifetime left (the library's 5-minute skew is longer than the
    # token): due, with no I/O to tell, and fetching asks the IdP for a new one.
    clock.ahead = 31.0
    assert tokens.due()
    new = tokens.fetch()
    grants = idp.grants()
    assert len(grants) == 2 and new not in (None, creds.token) and tokens.token == new
    # Asked while the old id-token still had (real) time left: not after a 401.
    assert grants[1].replaced_had_left is not None and grants[1].replaced_had_left > 50
    assert not tokens.due()


async def test_a_refused_oidc_refresh_is_counted_logged_and_retried_with_backoff(
    tmp_path: Path, idp: FakeIdP, clock: _Clock, caplog: pytest.LogCaptureFixture
) -> None:
    creds = load_credentials(str(oidc_kubeconfig(tmp_path, idp, *idp.grant(lifetime=-1))), None)
    tokens = creds.tokens
    assert tokens is not None and creds.token is not None and len(idp.grants()) == 1
    idp.revoke_all()
    clock.ahead = 31.0
    kube = Kube(creds)
    with caplog.at_level(logging.WARNING, logger="aibom_edge.kube"):
        await kube._fresh_token()
    assert kube.token_refresh_failures == 1 and kube._token == creds.token  # the old one kept
    (record,) = [r for r in caplog.records if r.getMessage().startswith("could not refresh")]
    assert "InvalidGrantError" in record.__dict__["error"]
    assert "invalid_grant" in record.__dict__["error"]
    assert record.__dict__["failures"] == 1 and record.__dict__["retry_in_s"] == 1.0
    # Backing off: not due, not even after a 401 (no refresh storm against the IdP).
    assert not tokens.due() and not tokens.due(force=True)
    await kube._fresh_token(force=True)
    assert len(idp.grants()) == 2
    clock.ahead += 1.1
    await kube._fresh_token(force=True)
    assert kube.token_refresh_failures == 2 and tokens.retry_in() > 1.5  # 2 s next
    # The provider accepts again: the next attempt succeeds and the backoff resets.
    idp.accept_again()
    clock.ahead += 2.1
    await kube._fresh_token()
    assert [g.ok for g in idp.grants()] == [True, False, False, True]
    assert kube.token_refreshes == 1 and kube._token not in (None, creds.token)
    assert tokens.failures == 0 and tokens.retry_in() == 0.0


def test_an_oidc_refresh_the_library_gives_up_silently_is_a_failure(
    tmp_path: Path, idp: FakeIdP, clock: _Clock
) -> None:
    creds = load_credentials(str(oidc_kubeconfig(tmp_path, idp, *idp.grant(lifetime=-1))), None)
    tokens = creds.tokens
    assert tokens is not None
    # The library returns without a word when discovery fails, keeping the old id-token.
    idp.discovery_status = 503
    clock.ahead = 61.0  # past the (60 s) token's expiry, on our clock
    with pytest.raises(KubeError, match="the OIDC provider gave no new id-token"):
        tokens.fetch()
    assert tokens.failures == 1 and not tokens.due(force=True)


def test_a_refused_oidc_refresh_at_start_is_a_clear_error(tmp_path: Path, idp: FakeIdP) -> None:
    expired, refresh = idp.grant(lifetime=-30)
    idp.revoke_all()
    with pytest.raises(KubeError) as err:
        load_credentials(str(oidc_kubeconfig(tmp_path, idp, expired, refresh)), None)
    assert "cannot get Kubernetes credentials: InvalidGrantError" in str(err.value)
    assert "refresh token revoked" in str(err.value)


@pytest.mark.parametrize("answers", [(401, 200), (401, 401, 200)])
async def test_after_a_401_the_token_is_refreshed_and_the_request_retried_once(
    tmp_path: Path, answers: tuple[int, ...]
) -> None:
    """docs/annotator.md: after a 401 the client forces a refresh and retries once."""
    counter, user = counting_exec_plugin(tmp_path, expires="2999-01-01T00:00:00Z")
    seen: list[str] = []
    statuses = iter(answers)

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        status = next(statuses)
        return web.json_response({"kind": "Status", "code": status}, status=status)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/x", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        path = kubeconfig(
            tmp_path,
            {"server": f"http://127.0.0.1:{port}"},
            user,
        )
        async with Kube(load_credentials(str(path), None)) as kube:
            runs = int(counter.read_text())
            resp = await kube.request("GET", "/api/v1/namespaces/x")
    finally:
        await runner.cleanup()
    # One retry, with the token of one forced refresh; a second 401 is the answer.
    assert resp.status == answers[1]
    assert seen == [f"Bearer tok-{runs}", f"Bearer tok-{runs + 1}"]
    assert int(counter.read_text()) == runs + 1
