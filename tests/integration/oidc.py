"""A minimal OpenID Connect identity provider, for tests only (OIDC credentials).

An HTTPS server on loopback, in the test process, with its own CA (the
harness's `identity.CA`). It serves what kube-apiserver and the `kubernetes`
package's `oidc` auth-provider read, and nothing else:

- `/.well-known/openid-configuration`: issuer, `jwks_uri`, `token_endpoint`;
- `/jwks`: one RSA key (RS256);
- `/token`: the `refresh_token` grant only. Client id and secret must match
  (HTTP Basic or the form body). Each refresh token works once: the answer
  carries a new short-lived `id_token` and a new refresh token (rotation, as
  Dex does). A revoked or reused refresh token gets `400 invalid_grant`.

Every id_token is a real JWT signed with `cryptography`; `refreshes` records
each grant (when, and how long the token it replaced had left), so a test can
tell a refresh made ahead of expiry from one made after a 401.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.controlplane import OidcIssuer
from tests.controlplane.identity import CA, pem_cert, pem_key, write


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified (the test reads what it issued)."""
    payload = token.split(".")[1]
    out: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return out


@dataclass(frozen=True)
class Refresh:
    """One answered refresh_token grant."""

    at: float  # epoch seconds
    ok: bool
    replaced_had_left: float | None  # seconds the id_token issued with this refresh token had left
    id_token: str | None = None  # the one issued (None: refused)


class FakeIdP:
    subject = "annotator"  # the `sub` of every id_token
    client_id = "aibom-annotator"  # also the tokens' `aud`
    client_secret = "not-a-secret"

    def __init__(self, directory: Path, *, lifetime: float = 15.0) -> None:
        self.lifetime = lifetime  # of each id_token, in seconds
        self.kid = "test-key-1"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        self._valid: dict[str, float] = {}  # live refresh token -> exp of its id_token
        self.refreshes: list[Refresh] = []
        self.requests: dict[str, int] = {}  # path -> count
        self.refusing = False  # answer every refresh invalid_grant (a revoked grant)
        self.discovery_status = 200  # e.g. 503: the discovery document unavailable
        directory.mkdir(parents=True, exist_ok=True)
        ca = CA.create("aibom-test-idp-ca")
        key, cert = ca.issue("127.0.0.1", server=True, ip_addresses=["127.0.0.1"])
        self.ca_pem = pem_cert(ca.cert)
        self.ca_file = write(directory / "idp-ca.crt", self.ca_pem, 0o644)
        cert_file = write(directory / "idp.crt", pem_cert(cert), 0o644)
        key_file = write(directory / "idp.key", pem_key(key))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert_file, key_file)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeIdP:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def username(self) -> str:
        return f"{self.issuer().username_prefix}{self.subject}"

    def issuer(self) -> OidcIssuer:
        """What kube-apiserver is told to trust (the harness's `oidc=`)."""
        return OidcIssuer(url=self.url, ca_pem=self.ca_pem, audience=self.client_id)

    def kubeconfig_user(
        self, id_token: str, refresh_token: str, *, ca_data: bool = False
    ) -> dict[str, Any]:
        """A kubeconfig `user` with the `oidc` auth-provider, this IdP's CA as a file or data."""
        ca = (
            {"idp-certificate-authority-data": base64.b64encode(self.ca_pem).decode()}
            if ca_data
            else {"idp-certificate-authority": str(self.ca_file)}
        )
        config = {
            "client-id": self.client_id,
            "client-secret": self.client_secret,
            "id-token": id_token,
            "refresh-token": refresh_token,
            "idp-issuer-url": self.url,
            **ca,
        }
        return {"auth-provider": {"name": "oidc", "config": config}}

    # -- tokens --

    def id_token(self, *, lifetime: float | None = None) -> str:
        """A signed id_token for the subject, valid `lifetime` s from now (negative: expired)."""
        now = time.time()
        exp = int(now + (self.lifetime if lifetime is None else lifetime))
        claims = {
            "iss": self.url,
            "sub": self.subject,
            "aud": self.client_id,
            "iat": int(now) if exp > now else exp - 60,
            "exp": exp,
            "jti": secrets.token_hex(8),
        }
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = (
            f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        )
        sig = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(sig)}"

    def grant(self, *, lifetime: float | None = None) -> tuple[str, str]:
        """(id_token, refresh_token): what a login would hand the user."""
        token = self.id_token(lifetime=lifetime)
        refresh = secrets.token_urlsafe(32)
        with self._lock:
            self._valid[refresh] = float(claims_of(token)["exp"])
        return token, refresh

    def revoke_all(self) -> None:
        """Every refresh answered `invalid_grant` from now on, until `accept_again()`."""
        with self._lock:
            self.refusing = True

    def accept_again(self) -> None:
        with self._lock:
            self.refusing = False

    def grants(self) -> list[Refresh]:
        with self._lock:
            return list(self.refreshes)

    # -- HTTP --

    def _jwks(self) -> dict[str, Any]:
        pub = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": self.kid,
                    "n": b64url(pub.n.to_bytes((pub.n.bit_length() + 7) // 8, "big")),
                    "e": b64url(pub.e.to_bytes((pub.e.bit_length() + 7) // 8, "big")),
                }
            ]
        }

    def _discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/jwks",
            "token_endpoint": f"{self.url}/token",
            "authorization_endpoint": f"{self.url}/authorize",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "grant_types_supported": ["refresh_token"],
        }

    def _token(self, form: dict[str, str], basic: tuple[str, str] | None) -> tuple[int, Any]:
        client = basic or (form.get("client_id", ""), form.get("client_secret", ""))
        if client != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "refresh_token":
            return 400, {"error": "unsupported_grant_type"}
        now = time.time()
        with self._lock:
            # Refused while `refusing`, but not spent: `accept_again()` lets it work.
            exp = None if self.refusing else self._valid.pop(form.get("refresh_token", ""), None)
            if exp is None:
                self.refreshes.append(Refresh(now, False, None))
                return 400, {"error": "invalid_grant", "error_description": "refresh token revoked"}
        token, refresh = self.grant()
        with self._lock:
            self.refreshes.append(Refresh(now, True, exp - now, token))
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(self.lifetime),
            "id_token": token,
            "refresh_token": refresh,
        }


def _handler(idp: FakeIdP) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(raw)

        def _count(self) -> str:
            path = urllib.parse.urlsplit(self.path).path
            with idp._lock:
                idp.requests[path] = idp.requests.get(path, 0) + 1
            return path

        def do_GET(self) -> None:
            path = self._count()
            if path == "/.well-known/openid-configuration":
                ok = idp.discovery_status == 200
                self._answer(idp.discovery_status, idp._discovery() if ok else {"error": "down"})
            elif path == "/jwks":
                self._answer(200, idp._jwks())
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            path = self._count()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if path != "/token":
                self._answer(404, {"error": "not_found"})
                return
            form = dict(urllib.parse.parse_qsl(raw))
            basic = None
            auth = self.headers.get("Authorization", "")
            if auth.lower().startswith("basic "):
                user, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                basic = (urllib.parse.unquote(user), urllib.parse.unquote(secret))
            self._answer(*idp._token(form, basic))

    return Handler
