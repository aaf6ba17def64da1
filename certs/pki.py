"""A small CA and serving certificates for the webhook. No I/O, no clock of its own.

ECDSA P-256 keys (what the API server and Go's TLS stack prefer, and fast to
make), SHA-256 signatures. The serving certificate carries every name the API
server may dial as a SAN (a CN-only certificate is refused since Go 1.15):
the Service's DNS names and any IP for a `url` clientConfig such as
https://127.0.0.1:PORT/mutate.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aibom_core.provenance import KEY_BYTES

# Certificates are valid from a little before `now`: clocks of the API server
# and the machine that made them are rarely in perfect step.
BACKDATE = dt.timedelta(minutes=5)


class PkiError(ValueError):
    """Bad input for a certificate (a name or IP that cannot be a SAN)."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service answers to inside the cluster (the API server dials `svc.ns.svc`)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _usage(*, ca: bool) -> x509.KeyUsage:
    """Digital signatures; a CA also signs certificates and CRLs."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(
    *, common_name: str, now: dt.datetime, days: int, path_length: int | None = 0
) -> KeyPair:
    """A self-signed CA; `path_length` 0 (the default) lets it sign only leaf certificates."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(key, cert)


def _sans(dns_names: Sequence[str], ips: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in dns_names:
        if not name or any(c.isspace() for c in name) or "/" in name:
            raise PkiError(f"not a DNS name: {name!r}")
        out.append(x509.DNSName(name))
    for ip in ips:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            raise PkiError(f"not an IP address: {ip!r}") from None
    return out


def issue(
    ca: KeyPair,
    *,
    common_name: str,
    now: dt.datetime,
    days: int,
    organizations: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> KeyPair:
    """A leaf certificate signed by `ca`: TLS server and/or client, with these SANs."""
    sans = _sans(dns_names, ips)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(key, builder.sign(ca.key, hashes.SHA256()))


def issue_serving(
    ca: KeyPair, *, dns_names: list[str], ips: list[str], now: dt.datetime, days: int
) -> KeyPair:
    """A TLS server certificate signed by `ca` for these names and IPs."""
    if not _sans(dns_names, ips):
        raise PkiError("a serving certificate needs at least one DNS name or IP")
    common = dns_names[0] if dns_names else ips[0]
    return issue(
        ca, common_name=common, now=now, days=days, server=True, dns_names=dns_names, ips=ips
    )


def load_pair(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    """An existing CA (to issue a new serving certificate under the same caBundle)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError("the CA key is not an EC key (was it made by `aibom-rollup certs`?)")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise PkiError("the CA key does not match the CA certificate")
    return KeyPair(key, cert)


def new_key_text() -> bytes:
    """A fresh edge-proof key as the file `certs` writes: base64 of 32 random bytes, newline."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)) + b"\n"
