"""Strangers get no answer: the caller authenticated by client
certificate and/or bearer token, on the real listening server with real TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.controlplane import webhook_caller
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, body, review, serving_files
from webhook.auth import AuthError, CallerAuth
from webhook.flags import Settings
from webhook.server import Server
from webhook.tls import CertReloader

JSON = {"Content-Type": "application/json"}


async def _serve(
    tmp_path: Path, *, cert: bool, token: bool, interval: float = 5.0
) -> AsyncIterator[tuple[int, Path, Server]]:
    serving_files(tmp_path)
    caller = webhook_caller(tmp_path / "caller", webhook_host="127.0.0.1", token=True)
    client_ca = str(caller.client_ca_file) if cert else None
    token_file = str(caller.token_file) if token else None
    server = Server(
        Settings(host="127.0.0.1", port=0, owner_cache_ttl=0, shutdown_grace=1.0),
        source=MemorySource(),
        reloader=CertReloader(
            str(tmp_path / "tls.crt"),
            str(tmp_path / "tls.key"),
            client_ca_file=client_ca,
            interval=interval,
        ),
        auth=CallerAuth.from_files(client_ca_file=client_ca, token_file=token_file),
    )
    await server.start()
    serving = asyncio.create_task(server.serve_until_stopped())
    try:
        assert server.port is not None
        yield server.port, tmp_path, server
    finally:
        server.request_stop("test")
        await asyncio.wait_for(serving, 10)


def _ctx(tmp_path: Path, client: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    if client == "apiserver":
        d = tmp_path / "caller"
        ctx.load_cert_chain(str(d / "apiserver-client.crt"), str(d / "apiserver-client.key"))
    elif client == "stranger":
        other = webhook_caller(tmp_path / "stranger", webhook_host="127.0.0.1", token=False)
        ctx.load_cert_chain(str(other.cert_file), str(other.key_file))
    return ctx


async def _post(
    port: int, ctx: ssl.SSLContext, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    connector = aiohttp.TCPConnector(ssl=ctx)
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.post(
            f"https://127.0.0.1:{port}/mutate",
            data=body(review(mk("Pod", "p"), uid="u1")),
            headers={**JSON, **(headers or {})},
        ) as resp,
    ):
        return resp.status, await resp.text()


async def _get(port: int, ctx: ssl.SSLContext, path: str) -> int:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as http,
        http.get(f"https://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status


async def test_client_certificate_required(tmp_path: Path) -> None:
    async for port, d, _ in _serve(tmp_path, cert=True, token=False):
        status, text = await _post(port, _ctx(d, "apiserver"))
        assert status == 200 and '"uid":"u1"' in text
        # No certificate: the connection is made (probes), /mutate refuses.
        status, text = await _post(port, _ctx(d, None))
        assert status == 401 and "client certificate" in text
        assert await _get(port, _ctx(d, None), "/healthz") == 200
        # A certificate of another CA: refused in the TLS handshake.
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await _post(port, _ctx(d, "stranger"))


async def test_bearer_token_required(tmp_path: Path) -> None:
    async for port, d, _ in _serve(tmp_path, cert=False, token=True):
        token = (d / "caller" / "token").read_text()
        status, _ = await _post(port, _ctx(d, None), {"Authorization": f"Bearer {token}"})
        assert status == 200
        for wrong in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {token}"}):
            status, text = await _post(port, _ctx(d, None), wrong)
            assert status == 401 and "bearer token" in text


async def test_both_required_together(tmp_path: Path) -> None:
    async for port, d, _ in _serve(tmp_path, cert=True, token=True):
        token = (d / "caller" / "token").read_text()
        good = {"Authorization": f"Bearer {token}"}
        assert (await _post(port, _ctx(d, "apiserver"), good))[0] == 200
        assert (await _post(port, _ctx(d, "apiserver")))[0] == 401
        assert (await _post(port, _ctx(d, None), good))[0] == 401


async def test_the_client_ca_is_read_again_when_the_serving_certificate_rotates(
    tmp_path: Path,
) -> None:
    async for port, d, server in _serve(tmp_path, cert=True, token=False):
        assert (await _post(port, _ctx(d, "apiserver")))[0] == 200
        # Rotation: a new serving pair (and CA), and a new client CA in place of the old.
        serving_files(d)
        new = webhook_caller(d / "new-caller", webhook_host="127.0.0.1", token=False)
        (d / "caller" / "client-ca.crt").write_bytes(new.client_ca_file.read_bytes())
        assert server.reloader.reload() is True
        # The old CA's client certificate fails the handshake now...
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await _post(port, _ctx(d, "apiserver"))
        # ...and the new CA's is answered.
        ctx = _ctx(d, None)
        ctx.load_cert_chain(str(new.cert_file), str(new.key_file))
        status, text = await _post(port, ctx)
        assert status == 200 and '"uid":"u1"' in text


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_rotated_token_file_is_read_again_without_a_restart(tmp_path: Path) -> None:
    """docs/webhook.md, Who may ask: the token file is watched like the serving
    certificate; while it holds two tokens (a rotation under way) both are
    accepted, and once the old one is removed it is refused."""
    async for port, d, server in _serve(tmp_path, cert=False, token=True, interval=0.05):
        path = d / "caller" / "token"
        old = path.read_text().strip()
        assert (await _post(port, _ctx(d, None), _bearer(old)))[0] == 200
        path.write_text(f"{old}\nnew-token-1\n")  # the rotation begins: both lines count
        for _ in range(200):  # the watcher looks every 0.05 s (10 s at most, for failures)
            if (await _post(port, _ctx(d, None), _bearer("new-token-1")))[0] == 200:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the new token was never accepted: the file is not read again")
        assert (await _post(port, _ctx(d, None), _bearer(old)))[0] == 200
        path.write_text("new-token-1\n")  # the rotation ends
        for _ in range(200):
            if (await _post(port, _ctx(d, None), _bearer(old)))[0] == 401:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the removed token is still accepted")
        assert (await _post(port, _ctx(d, None), _bearer("new-token-1")))[0] == 200
        reloads = server.metrics.token_reloads
        assert reloads.labels("ok")._value.get() >= 2


async def test_a_token_file_with_no_valid_token_keeps_the_previous_ones(tmp_path: Path) -> None:
    # No watcher within the test (an hour): only the test's own reloads count.
    async for port, d, server in _serve(tmp_path, cert=False, token=True, interval=3600):
        tokens = server.auth.token_file if server.auth is not None else None
        assert tokens is not None
        path = d / "caller" / "token"
        old = path.read_text().strip()
        for half_written in ("", "two words\n"):
            path.write_text(half_written)
            assert tokens.reload() is False
            assert (await _post(port, _ctx(d, None), _bearer(old)))[0] == 200
        path.write_text("fresh\n")
        assert tokens.reload() is True
        assert (await _post(port, _ctx(d, None), _bearer(old)))[0] == 401
        assert (await _post(port, _ctx(d, None), _bearer("fresh")))[0] == 200
        reloads = server.metrics.token_reloads
        assert (reloads.labels("failed")._value.get(), reloads.labels("ok")._value.get()) == (
            2,
            1,
        )


def test_bad_token_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match=r"(?i)no such file"):
        CallerAuth.from_files(client_ca_file=None, token_file=str(tmp_path / "missing"))
    (tmp_path / "t").write_text("two words\n")
    with pytest.raises(AuthError, match="printable"):
        CallerAuth.from_files(client_ca_file=None, token_file=str(tmp_path / "t"))
