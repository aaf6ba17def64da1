"""Who may ask: authenticating the API server as the caller of /mutate.

Without it the webhook answers any TLS client that can reach it, and an
answer says which root (name and UID) an object with a given
ownerReference resolves to: any Pod could read names, UIDs and chains of
namespaces it cannot see. The API server can identify itself to webhooks
(its AdmissionConfiguration's WebhookAdmissionConfiguration kubeconfig,
with a user entry named after the webhook's host), with a client
certificate or a bearer token, or both; each is turned on by a flag:

- `--client-ca-file PEM`: the TLS layer asks for a client certificate; one
  that does not chain to this CA fails the handshake, and /mutate refuses a
  connection that presented none (401). /healthz, /readyz and /metrics stay
  open (the kubelet's probes present no certificate).
- `--client-token-file FILE`: /mutate requires `Authorization: Bearer
  <the file's content>` (compared in constant time); anything else is 401.

Refusals happen before the body is read (a stranger costs no parsing and
no owner GET) and are counted in aibom_webhook_bad_requests_total{status="401"}.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web


class AuthError(Exception):
    """A credential file cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class CallerAuth:
    require_client_cert: bool = False
    token: bytes | None = None

    @classmethod
    def from_files(cls, *, client_ca_file: str | None, token_file: str | None) -> CallerAuth:
        token = None
        if token_file is not None:
            try:
                token = Path(token_file).read_bytes().strip()
            except OSError as exc:
                raise AuthError(
                    f"--client-token-file {token_file}: {exc.strerror or exc}"
                ) from None
            if not token or any(b <= 0x20 or b >= 0x7F for b in token):
                raise AuthError(
                    f"--client-token-file {token_file}: the token must be one line of printable "
                    "ASCII without spaces"
                )
        return cls(require_client_cert=client_ca_file is not None, token=token)

    @property
    def enabled(self) -> bool:
        return self.require_client_cert or self.token is not None

    def refusal(self, request: web.BaseRequest) -> str | None:
        """Why this request may not be answered, or None when it may."""
        if self.require_client_cert:
            transport = request.transport
            ssl_object = transport.get_extra_info("ssl_object") if transport else None
            if ssl_object is None or not ssl_object.getpeercert():
                return "a client certificate signed by the webhook's client CA is required"
        if self.token is not None:
            scheme, _, value = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode("utf-8", "replace"), self.token
            ):
                return "a valid bearer token is required"
        return None
