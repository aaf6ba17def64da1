"""kube-apiserver: secure serving on loopback, client certificates and ServiceAccount
tokens (and optionally an OIDC issuer) as identities, RBAC, the default admission
plugins (so admission webhooks are called)."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.controlplane.identity import CA, pem_cert, pem_key, write
from tests.controlplane.process import Process, child_env

#: The Go garbage collector of a test API server (the caller's own GOGC or
#: GOMEMLIMIT win): collect at 5 times the live heap (GOGC=400, not 100), and
#: harder near 1.5 GiB (a soft limit). With the operators' big CRDs installed,
#: 30 % of its CPU was garbage collection; this cuts its start and CRD install by
#: about 15 % and doubles its memory (0.9 GB to 1.7 GB) (BENCHMARKS.md, "`make
#: test`": "The API server's garbage collector").
GC_ENV: Final = {"GOGC": "400", "GOMEMLIMIT": "1536MiB"}

SERVICE_CLUSTER_IP_RANGE: Final = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class OidcIssuer:
    """A JWT issuer kube-apiserver trusts (`ControlPlane(oidc=...)`), e.g. a test's IdP.

    Written as structured authentication (`--authentication-config`,
    apiserver.config.k8s.io/v1): the issuer `url` (https) must equal the
    tokens' `iss` and its discovery's `issuer`; `ca_pem` verifies its TLS;
    `audience` is the client id; the username is `username_prefix` + the
    `username_claim`. The harness's client certificates and ServiceAccount
    tokens keep working beside it.
    """

    url: str
    ca_pem: bytes
    audience: str
    username_claim: str = "sub"
    username_prefix: str = "oidc:"

    def authentication_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [
                {
                    "issuer": {
                        "url": self.url,
                        "certificateAuthority": self.ca_pem.decode(),
                        "audiences": [self.audience],
                    },
                    "claimMappings": {
                        "username": {"claim": self.username_claim, "prefix": self.username_prefix}
                    },
                }
            ],
        }


@dataclass
class KubeApiServer:
    """``bin_dir/kube-apiserver`` on ``https://127.0.0.1:port``, backed by ``etcd_url``.

    :meth:`write_pki` writes its serving certificate (signed by ``ca``, SANs for
    127.0.0.1 and the in-cluster names) and the ServiceAccount key pair into
    ``pki_dir``; :meth:`start` runs it and returns once ``/readyz`` answers 200
    to ``client`` (an SSL context with a client certificate).
    """

    bin_dir: Path
    pki_dir: Path
    log_dir: Path
    port: int
    etcd_url: str
    ca: CA
    ca_file: Path
    extra_args: Sequence[str] = ()
    oidc: OidcIssuer | None = None
    admission_config_file: Path | None = None
    sa_key_file: Path = field(init=False, default=Path())
    process: Process | None = field(init=False, default=None)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_pki(self) -> None:
        pki = self.pki_dir
        pki.mkdir(parents=True, exist_ok=True)
        key, cert = self.ca.issue(
            "kube-apiserver",
            server=True,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
        )
        write(pki / "apiserver.crt", pem_cert(cert), 0o644)
        write(pki / "apiserver.key", pem_key(key))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key_file = write(pki / "sa.key", pem_key(sa))
        public = sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        write(pki / "sa.pub", public, 0o644)

    def args(self) -> list[str]:
        pki = self.pki_dir
        args = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.sa_key_file}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *self.extra_args,
        ]
        if self.oidc is not None:
            authn = json.dumps(self.oidc.authentication_config()).encode()
            args.append(f"--authentication-config={write(pki / 'authn.json', authn, 0o644)}")
        if self.admission_config_file is not None:
            args.append(f"--admission-control-config-file={self.admission_config_file}")
        return args

    def start(
        self, client: ssl.SSLContext, *, timeout: float, also: Sequence[Process] = ()
    ) -> Process:
        """Start it (again, after :meth:`stop`: same flags, port and data)."""
        if self.process is None:
            self.process = Process(
                "kube-apiserver",
                self.args(),
                self.log_dir / "kube-apiserver.log",
                env={**GC_ENV, **child_env()},
            )
        self.process.start()
        self.process.wait_ready(
            "kube-apiserver /readyz", lambda: self.ready(client), timeout, also=also
        )
        return self.process

    def ready(self, client: ssl.SSLContext) -> bool:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=5, context=client)
        try:
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            resp.read()
        finally:
            conn.close()
        return resp.status == 200
