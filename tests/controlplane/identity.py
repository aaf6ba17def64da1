"""Who is who in the test cluster: the test CA, client certificates, serving
certificates, kubeconfigs (certificate or token) and the API server's own identity
toward admission webhooks (:func:`webhook_caller`)."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from certs import pki


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


@dataclass(frozen=True)
class CA:
    """A test CA (``certs.pki``, the code ``aibom-rollup certs`` uses) and what it issues."""

    pair: pki.KeyPair

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        return self.pair.key

    @property
    def cert(self) -> x509.Certificate:
        return self.pair.cert

    @property
    def pem(self) -> bytes:
        return pem_cert(self.cert)

    @classmethod
    def create(cls, common_name: str) -> CA:
        # path_length None: kube-controller-manager signs with it too.
        now = _dt.datetime.now(_dt.UTC)
        return cls(pki.new_ca(common_name=common_name, now=now, days=3650, path_length=None))

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        leaf = pki.issue(
            self.pair,
            common_name=common_name,
            now=_dt.datetime.now(_dt.UTC),
            days=365,
            organizations=organizations,
            server=server,
            client=client,
            dns_names=dns_names,
            ips=ip_addresses,
        )
        return leaf.key, leaf.cert


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate signed by the cluster CA, and a kubeconfig using it."""

    user: str
    groups: tuple[str, ...]
    cert_file: Path
    key_file: Path
    kubeconfig: Path


@dataclass(frozen=True)
class ServingCert:
    """A server certificate and key signed by the cluster CA (``ca_file``)."""

    cert_file: Path
    key_file: Path
    ca_file: Path


def kubeconfig(server: str, ca_pem: bytes, user: str, credentials: dict[str, str]) -> str:
    """A one-context kubeconfig (JSON, which is YAML) for ``user`` with ``credentials``
    (``client-certificate-data``/``client-key-data``, or ``token``)."""
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "aibom", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "aibom", "context": {"cluster": "aibom", "user": user}}],
        "current-context": "aibom",
        "preferences": {},
    }
    return json.dumps(doc, indent=2) + "\n"


def cert_credentials(cert_pem: bytes, key_pem: bytes) -> dict[str, str]:
    return {
        "client-certificate-data": base64.b64encode(cert_pem).decode(),
        "client-key-data": base64.b64encode(key_pem).decode(),
    }


@dataclass(frozen=True)
class WebhookCaller:
    """The identity kube-apiserver presents to an admission webhook, and its config.

    Give the webhook ``client_ca_file`` (``--client-ca-file``) and/or
    ``token_file`` (``--client-token-file``); start the control plane with
    ``ControlPlane(admission_config_file=caller.config_file)``.
    """

    client_ca_file: Path
    cert_file: Path
    key_file: Path
    token_file: Path | None
    kubeconfig: Path
    config_file: Path


def webhook_caller(directory: Path, *, webhook_host: str, token: bool = True) -> WebhookCaller:
    """Write what makes kube-apiserver authenticate to the webhook at ``webhook_host``.

    A fresh client CA and a client certificate (CN ``kube-apiserver-webhook-client``)
    signed by it, optionally a random bearer token, a kubeconfig whose user entry
    is named ``webhook_host`` (``host:port`` of the webhook's URL, the name the
    API server looks up), and the AdmissionConfiguration pointing the
    MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins at it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = CA.create("aibom-test-webhook-client-ca")
    key, cert = ca.issue("kube-apiserver-webhook-client", client=True)
    ca_file = write(directory / "client-ca.crt", pem_cert(ca.cert), 0o644)
    cert_file = write(directory / "apiserver-client.crt", pem_cert(cert), 0o644)
    key_file = write(directory / "apiserver-client.key", pem_key(key))
    user: dict[str, str] = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    token_file = None
    if token:
        value = secrets.token_urlsafe(32)
        token_file = write(directory / "token", value.encode())
        user["token"] = value
    config = {"apiVersion": "v1", "kind": "Config", "users": [{"name": webhook_host, "user": user}]}
    caller_kubeconfig = write(directory / "webhook-kubeconfig.yaml", json.dumps(config).encode())
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(caller_kubeconfig),
    }
    admission = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": "MutatingAdmissionWebhook", "configuration": plugin},
            {"name": "ValidatingAdmissionWebhook", "configuration": plugin},
        ],
    }
    config_file = write(directory / "admission-config.yaml", json.dumps(admission).encode(), 0o644)
    return WebhookCaller(ca_file, cert_file, key_file, token_file, caller_kubeconfig, config_file)
