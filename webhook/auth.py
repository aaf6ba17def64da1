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
  <a token of the file>` (compared in constant time); anything else is 401.
  The file holds one token per line, any of them accepted (a rotation adds
  the new token, gives it to the API server, then removes the old one), and
  is re-read when it changes (`TokenFile`), as the serving certificate is:
  no restart. A file that changed into no valid token (emptied, half
  written) keeps the previous tokens until it holds valid ones again.

Refusals happen before the body is read (a stranger costs no parsing and
no owner GET) and are counted in aibom_webhook_bad_requests_total{status="401"}.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from webhook.files import poll, stat_of

log = logging.getLogger("webhook.auth")


class AuthError(Exception):
    """A credential file cannot be used; the message says which and why."""


def read_tokens(path: str) -> tuple[bytes, ...]:
    """The tokens of a token file, one per line (blank lines skipped). Sync."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise AuthError(f"--client-token-file {path}: {exc.strerror or exc}") from None
    tokens = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not tokens or any(b <= 0x20 or b >= 0x7F for token in tokens for b in token):
        raise AuthError(
            f"--client-token-file {path}: each line must be one token of printable ASCII "
            "without spaces"
        )
    return tokens


class TokenFile:
    """The tokens of `--client-token-file`, re-read when the file changes."""

    def __init__(self, path: str, *, on_reload: Callable[[bool], None] | None = None) -> None:
        self.path = path
        self.on_reload = on_reload
        self._seen = stat_of(path)
        self.tokens = read_tokens(path)  # raises AuthError

    def changed(self) -> bool:
        return stat_of(self.path) != self._seen

    def reload(self) -> bool:
        """Read the file if it changed; True when new tokens are now accepted. Sync."""
        seen = stat_of(self.path)
        if seen == self._seen:
            return False
        try:
            tokens = read_tokens(self.path)
        except AuthError as exc:
            # Maybe written half-way: keep the tokens we have, look again next time.
            log.warning("client token reload failed, still accepting the previous ones: %s", exc)
            if self.on_reload:
                self.on_reload(False)
            return False
        self._seen, self.tokens = seen, tokens
        log.info("client tokens reloaded", extra={"token_file": self.path, "tokens": len(tokens)})
        if self.on_reload:
            self.on_reload(True)
        return True

    async def watch(self, interval: float) -> None:
        """Poll the file every `interval` seconds until cancelled (reloads off the loop)."""
        await poll(interval, self.changed, self.reload)


@dataclass(frozen=True, slots=True)
class CallerAuth:
    require_client_cert: bool = False
    token_file: TokenFile | None = None

    @classmethod
    def from_files(cls, *, client_ca_file: str | None, token_file: str | None) -> CallerAuth:
        tokens = TokenFile(token_file) if token_file is not None else None
        return cls(require_client_cert=client_ca_file is not None, token_file=tokens)

    @property
    def enabled(self) -> bool:
        return self.require_client_cert or self.token_file is not None

    def refusal(self, request: web.BaseRequest) -> str | None:
        """Why this request may not be answered, or None when it may."""
        if self.require_client_cert:
            transport = request.transport
            ssl_object = transport.get_extra_info("ssl_object") if transport else None
            if ssl_object is None or not ssl_object.getpeercert():
                return "a client certificate signed by the webhook's client CA is required"
        if self.token_file is not None:
            scheme, _, value = request.headers.get("Authorization", "").partition(" ")
            presented = value.strip().encode("utf-8", "replace")
            # Every token compared (a list, not `any` over a generator): how long
            # the refusal takes says nothing about which token came close.
            matches = [hmac.compare_digest(presented, t) for t in self.token_file.tokens]
            if scheme.lower() != "bearer" or not any(matches):
                return "a valid bearer token is required"
        return None
