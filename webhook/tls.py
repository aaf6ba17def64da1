"""The serving certificate: TLS 1.2+, re-read when its files change, no restart.

aiohttp has no TLS reload of its own (aio-libs/aiohttp#10626). The listening
socket keeps one `SSLContext` for its life; its SNI callback, which OpenSSL
calls for every new handshake (also when the client sends no server name, as
the API server does when it dials an IP), switches the connection to the
newest context. A fresh context per certificate generation, swapped by one
assignment, means a handshake never sees a half-loaded pair, connections
already open keep the certificate they started with (in-flight reviews are
not dropped), and a rotation that leaves the files broken for a moment (cert
written, key not yet) keeps serving the previous pair until both load.

Files are watched by (inode, size, mtime) of both paths, followed through
symlinks (webhook.files): a Kubernetes Secret volume swaps a `..data` symlink
atomically.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable

from cryptography import x509

from webhook.files import FileStat, poll, stat_of

log = logging.getLogger("webhook.tls")

DEFAULT_CHECK_INTERVAL = 5.0


class CertError(Exception):
    """The certificate or key cannot be loaded; the message says which and why."""


def server_context(
    cert_file: str, key_file: str, *, client_ca_file: str | None = None
) -> ssl.SSLContext:
    """A TLS 1.2+ server context for one cert/key pair. Sync (reads two small files).

    With `client_ca_file`, a client certificate is asked for and, when one is
    presented, must chain to that CA or the handshake fails (CERT_OPTIONAL: a
    client with none still connects, for the kubelet's probes; /mutate then
    refuses it at the HTTP level, webhook.app).
    """
    for path, what in ((cert_file, "certificate"), (key_file, "key")):
        if not os.path.isfile(path):
            raise CertError(f"serving {what} {path}: no such file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    if client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise CertError(
                f"cannot load the client CA {client_ca_file}: "
                f"{getattr(exc, 'reason', None) or getattr(exc, 'strerror', None) or exc}"
            ) from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        raise CertError(
            f"cannot load the serving certificate {cert_file} with key {key_file}: "
            f"{exc.reason or exc} (both PEM, and the key must match the certificate)"
        ) from None
    except OSError as exc:
        raise CertError(f"{exc.filename or cert_file}: {exc.strerror or exc}") from None
    return ctx


def not_after(cert_file: str) -> float | None:
    """The first certificate's notAfter (Unix seconds), or None if unreadable. Sync."""
    try:
        with open(cert_file, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError):
        return None
    return cert.not_valid_after_utc.timestamp()


class CertReloader:
    """The listening context, and the newest loaded pair behind it."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        interval: float = DEFAULT_CHECK_INTERVAL,
        on_reload: Callable[[bool], None] | None = None,
        client_ca_file: str | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.interval = interval
        self.on_reload = on_reload
        self._seen = self._stats()
        self._current = self._load()  # raises CertError
        #: notAfter of the pair served now (aibom_webhook_serving_cert_expiry_timestamp_seconds).
        self.not_after = not_after(cert_file)
        self.generation = 1
        # The context the server listens with: the first pair, and the hook
        # that moves each new handshake onto the newest one.
        self.context = self._load()
        self.context.sni_callback = self._sni

    def _load(self) -> ssl.SSLContext:
        return server_context(self.cert_file, self.key_file, client_ca_file=self.client_ca_file)

    def _stats(self) -> tuple[FileStat | None, FileStat | None]:
        return (stat_of(self.cert_file), stat_of(self.key_file))

    def _sni(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        if self.generation > 1:
            conn.context = self._current

    def changed(self) -> bool:
        return self._stats() != self._seen

    def reload(self) -> bool:
        """Load the files if they changed; True when a new pair is now served. Sync."""
        stats = self._stats()
        if stats == self._seen:
            return False
        try:
            fresh = self._load()
        except CertError as exc:
            # Maybe a rotation half-way (certificate written, key not yet):
            # keep serving the old pair and look again next time.
            log.warning("certificate reload failed, still serving the previous one: %s", exc)
            if self.on_reload:
                self.on_reload(False)
            return False
        self._seen = stats
        self._current = fresh
        self.not_after = not_after(self.cert_file)
        self.generation += 1
        log.info(
            "serving a new certificate",
            extra={"cert_file": self.cert_file, "generation": self.generation},
        )
        if self.on_reload:
            self.on_reload(True)
        return True

    async def watch(self) -> None:
        """Poll the files every `interval` seconds until cancelled (reloads off the loop)."""
        await poll(self.interval, self.changed, self.reload)
