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


async def _served(port: int, ca: Path, serial: int) -> None:
    """Until a new handshake is served the certificate `serial` (bounded, for failures)."""
    async with asyncio.timeout(10):
        while True:
            _, w, got = await _connect(port, ca)
            w.close()
            if got == serial:
                return
            await asyncio.sleep(0.05)


async def _looked(reloads: list[bool]) -> None:
    """Until the watcher has tried a reload (bounded, for failures). Polled: the
    watcher reports from its worker thread, where an asyncio.Event cannot be set."""
    for _ in range(1000):
        if reloads:
            return
        await asyncio.sleep(0.01)
    pytest.fail("the watcher never looked at the new files")


async def test_rotation_without_dropping_open_connections(tmp_path: Path) -> None:
    """Files replaced in place, key first: the watcher may look between the two
    writes (new key, old certificate). The test makes it look there every time (it
    did at random, and `reloads == [True]` failed): the guarantee is that a pair
    that does not load is refused, as often as the watcher looks at it, and the
    complete one is then served, once."""
    ca, first, reloader, reloads = _installed(tmp_path, interval=0.05)
    server, port = await _serve(reloader)
    watch = asyncio.create_task(reloader.watch())
    try:
        r1, w1, serial = await _connect(port, tmp_path / "ca.crt")
        assert serial == first
        pair = issue_serving(ca, dns_names=["localhost"], ips=["127.0.0.1"], now=NOW, days=1)
        (tmp_path / "tls.key").write_bytes(pair.key_pem)
        await _looked(reloads)
        _, w, serial = await _connect(port, tmp_path / "ca.crt")
        w.close()
        assert serial == first  # the half-written pair is not served
        (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
        await _served(port, tmp_path / "ca.crt", pair.cert.serial_number)
        assert reloads[-1] is True and not any(reloads[:-1]), reloads
        # The connection opened before the rotation still works.
        w1.write(b"ping\n")
        assert await r1.readline() == b"ping\n"
        w1.close()
    finally:
        watch.cancel()
        server.close()


def _secret_volume(d: Path, pair: KeyPair, generation: int) -> None:
    """The files as a Kubernetes Secret volume holds them: `tls.crt` and `tls.key` are
    links through `..data`, a link to a directory of this generation, replaced by a
    rename (atomic: a reader sees the old pair or the new one, never half of each)."""
    version = d / f"..{generation}"
    version.mkdir()
    (version / "tls.key").write_bytes(pair.key_pem)
    (version / "tls.crt").write_bytes(pair.cert_pem)
    (d / "..data_tmp").symlink_to(version.name)
    (d / "..data_tmp").rename(d / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (d / name).is_symlink():
            (d / name).symlink_to(f"..data/{name}")


async def test_a_secret_volume_rotation_is_one_reload(tmp_path: Path) -> None:
    """The atomic swap leaves no half-written pair to look at: one reload, whenever
    the watcher looks."""
    ca = new_ca(common_name="test", now=NOW, days=1)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    pairs = [
        issue_serving(ca, dns_names=["localhost"], ips=["127.0.0.1"], now=NOW, days=1)
        for _ in range(2)
    ]
    _secret_volume(tmp_path, pairs[0], 1)
    reloads: list[bool] = []
    reloader = CertReloader(
        str(tmp_path / "tls.crt"),
        str(tmp_path / "tls.key"),
        interval=0.05,
        on_reload=reloads.append,
    )
    server, port = await _serve(reloader)
    watch = asyncio.create_task(reloader.watch())
    try:
        _secret_volume(tmp_path, pairs[1], 2)
        await _served(port, tmp_path / "ca.crt", pairs[1].cert.serial_number)
        # The watcher's thread swaps the pair, then reports: a handshake can see the
        # new pair before the report is in.
        await _looked(reloads)
        assert reloads == [True]
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
