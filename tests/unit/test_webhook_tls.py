"""Certificate rotation, real TLS client: new handshakes get the new cert, open ones live on."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from certs.pki import KeyPair, issue_serving, new_ca
from webhook.tls import DEFAULT_CHECK_INTERVAL, CertError, CertReloader

NOW = dt.datetime.now(dt.UTC)


def _issue(ca: KeyPair, d: Path) -> int:
    pair = issue_serving(ca, dns_names=["localhost"], ips=["127.0.0.1"], now=NOW, days=1)
    (d / "tls.key").write_bytes(pair.key_pem)
    (d / "tls.crt").write_bytes(pair.cert_pem)
    return pair.cert.serial_number


def _installed(
    d: Path, interval: float = DEFAULT_CHECK_INTERVAL
) -> tuple[KeyPair, int, CertReloader, list[bool]]:
    """A CA (d/ca.crt, for the clients), the serial of the serving pair it issued
    (d/tls.crt, d/tls.key), and a reloader of that pair that records each reload's result."""
    ca = new_ca(common_name="test", now=NOW, days=1)
    (d / "ca.crt").write_bytes(ca.cert_pem)
    first = _issue(ca, d)
    reloads: list[bool] = []
    reloader = CertReloader(
        str(d / "tls.crt"), str(d / "tls.key"), interval=interval, on_reload=reloads.append
    )
    return ca, first, reloader, reloads


async def _serve(reloader: CertReloader) -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=reloader.context)
    return server, server.sockets[0].getsockname()[1]


async def _connect(port: int, ca: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    ctx = ssl.create_default_context(cafile=str(ca))
    # server_hostname is an IP: the client sends no SNI (as the API server
    # dialing https://127.0.0.1:PORT), the callback must still switch.
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return reader, writer, x509.load_der_x509_certificate(der).serial_number


async def test_rotation_without_dropping_open_connections(tmp_path: Path) -> None:
    ca, first, reloader, reloads = _installed(tmp_path, interval=0.05)
    server, port = await _serve(reloader)
    watch = asyncio.create_task(reloader.watch())
    try:
        r1, w1, serial = await _connect(port, tmp_path / "ca.crt")
        assert serial == first
        second = _issue(ca, tmp_path)
        for _ in range(100):
            _, w2, serial = await _connect(port, tmp_path / "ca.crt")
            w2.close()
            if serial == second:
                break
            await asyncio.sleep(0.05)
        assert serial == second and reloads == [True]
        # The connection opened before the rotation still works.
        w1.write(b"ping\n")
        assert await r1.readline() == b"ping\n"
        w1.close()
    finally:
        watch.cancel()
        server.close()


async def test_a_half_written_rotation_keeps_the_old_pair(tmp_path: Path) -> None:
    ca, first, reloader, reloads = _installed(tmp_path)
    other = issue_serving(ca, dns_names=["x"], ips=["127.0.0.1"], now=NOW, days=1)
    (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # the key is not written yet
    assert reloader.reload() is False and reloads == [False]
    server, port = await _serve(reloader)
    try:
        _, w, serial = await _connect(port, tmp_path / "ca.crt")
        w.close()
        assert serial == first
        (tmp_path / "tls.key").write_bytes(other.key_pem)  # now it is complete
        assert reloader.reload() is True
        _, w, serial = await _connect(port, tmp_path / "ca.crt")
        w.close()
        assert serial == other.cert.serial_number
    finally:
        server.close()


def test_tls_1_1_is_refused_and_bad_files_are_clear_errors(tmp_path: Path) -> None:
    ca = new_ca(common_name="test", now=NOW, days=1)
    _issue(ca, tmp_path)
    reloader = CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert reloader.context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(CertError, match="no such file"):
        CertReloader(str(tmp_path / "missing.crt"), str(tmp_path / "tls.key"))
    (tmp_path / "bad.key").write_bytes(new_ca(common_name="x", now=NOW, days=1).key_pem)
    with pytest.raises(CertError, match="key must match"):
        CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "bad.key"))
