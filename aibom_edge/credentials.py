"""How the client authenticates: kubeconfig or in-cluster credentials, kept fresh.

The `kubernetes` library does the credential work we should not rewrite
(kubeconfig contexts, `token`/`tokenFile`, `exec` plugins, the `oidc`
auth-provider, the in-cluster projected token); this module loads it
(`load_credentials`, sync: at start-up, in a thread), says when to ask it
again (`TokenSource`), and builds the TLS context a configuration names
(`ssl_context`, the client certificate included). The request client
(`aibom_edge.kube.Kube`) puts the token on its requests and the context on
its connections.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from aibom_edge.kubeconfig import kubeconfig_path
from aibom_edge.wire import KubeError

# The library refreshes a token 5 minutes before its expiry (EXPIRY_SKEW_PREVENTION_DELAY).
LIBRARY_SKEW = 300.0
# After a failed refresh, the next attempt (even after a 401) waits 1, 2, 4 ... s, capped.
REFRESH_RETRY_CAP = 30.0


class TokenSource:
    """The bearer token (or the exec plugin's client certificate), as the `kubernetes`
    library's config loaders keep it fresh.

    The library does the credential work we should not rewrite: kubeconfig
    contexts, `token`/`tokenFile`, `exec` plugins (their `expirationTimestamp`),
    the `oidc` auth-provider (refresh-token flow), and the in-cluster
    projected token (re-read every minute). Its refresh is synchronous (an exec
    plugin is a subprocess, OIDC an HTTP call), so `Kube` runs `fetch` in a
    thread, one at a time, never on the event loop; `due()` (no I/O) says when.

    OIDC: the library keeps no expiry for the `oidc` auth-provider and its
    refresh hook never fires for it (it refreshes only inside
    `load_and_set`), so the expiry is the id-token's own `exp` claim, and
    `fetch` calls the loader when the token is within min(5 min, half its
    lifetime) of it. A refresh that raises, or leaves an expired id-token,
    is a failure: counted in `failures`, retried with backoff.

    Client certificates from an `exec` plugin (`clientCertificateData`): the
    library's refresh hook exists only for tokens, so it would never run the
    plugin again. With `plugin_certs`, `fetch` runs it (`load_and_set`) when
    its `expirationTimestamp` is near, and always when forced (a 401; a
    plugin without an expiry is run again only then, as client-go does).
    `client_cert` is the (certificate, key) file pair the library wrote for
    the newest answer; `Kube` builds a new TLS context when it changes.
    """

    def __init__(
        self,
        configuration: Any,
        loader: Any,
        *,
        check_every: float = 60.0,
        oidc: bool = False,
        token: str | None = None,
        plugin_certs: bool = False,
    ) -> None:
        self._cfg = configuration
        self._loader = loader
        self._check_every = check_every
        self._oidc = oidc
        self._plugin_certs = plugin_certs
        self.client_cert = _client_cert(configuration)
        self._checked = time.monotonic()
        self._retry_at = 0.0
        self.failures = 0  # consecutive failed refreshes
        self.token = token  # the loaded one (reading it again could run a plugin)

    def refresh_in(self) -> float | None:
        """Seconds until the token should be refreshed (<= 0: now); None if no expiry is known."""
        if self._oidc:
            claims = _jwt_claims(self.token)
            exp, iat = claims.get("exp"), claims.get("iat")
            if not isinstance(exp, int | float):
                return None
            lifetime = exp - iat if isinstance(iat, int | float) and iat < exp else LIBRARY_SKEW * 2
            return float(exp) - time.time() - min(LIBRARY_SKEW, lifetime / 2)
        expiry = getattr(self._loader, "expiry", None) if self._loader is not None else None
        if expiry is None:
            return None
        import datetime as _dt

        try:
            return float((expiry - _dt.datetime.now(tz=_dt.UTC)).total_seconds()) - LIBRARY_SKEW
        except TypeError:  # not an aware datetime: let the library judge, each second
            return 0.0

    def due(self, *, force: bool = False) -> bool:
        """Time to ask the library again: forced (a 401), a minute passed, or the expiry is
        near; never while backing off after a failed refresh."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        if force or now - self._checked >= self._check_every:
            return True
        left = self.refresh_in()
        return left is not None and left <= 0 and now - self._checked >= 1.0

    def fetch(self, *, force: bool = False) -> str | None:
        """The current token (sync: call it in a thread). `force`: re-run the plugin / re-read
        the file now (after a 401), whatever the expiry says."""
        self._checked = time.monotonic()
        try:
            left = self.refresh_in()
            if self._oidc:  # no readable expiry: let the library's flow decide
                expiring = (left or 0.0) <= 0
            else:  # plugin certificates: only the plugin's expiry says when
                expiring = self._plugin_certs and left is not None and left <= 0
            if self._loader is not None and (force or expiring):
                self._loader.load_and_set(self._cfg)
            token = _bearer(self._cfg)
            exp = _jwt_claims(token).get("exp") if self._oidc else None
            if isinstance(exp, int | float) and exp <= time.time():
                raise KubeError(
                    "the OIDC provider gave no new id-token "
                    f"(the current one expired {time.time() - exp:.0f} s ago)"
                )
        except Exception:
            self.failures += 1
            self._retry_at = time.monotonic() + min(REFRESH_RETRY_CAP, 2.0 ** (self.failures - 1))
            raise
        self.failures = 0
        self._retry_at = 0.0
        self.token = token
        self.client_cert = _client_cert(self._cfg)
        return token

    def retry_in(self) -> float:
        """Seconds until the next attempt after a failure (0: not backing off)."""
        return max(0.0, self._retry_at - time.monotonic())


def _jwt_claims(token: str | None) -> dict[str, Any]:
    """A JWT's payload, unverified ({} if the token is not a JWT): only to read its `exp`."""
    parts = (token or "").split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}


def _client_cert(cfg: Any) -> tuple[str, str] | None:
    """The client certificate and key files a loaded configuration names, if any."""
    cert, key = getattr(cfg, "cert_file", None), getattr(cfg, "key_file", None)
    return (str(cert), str(key)) if cert and key else None


def _bearer(cfg: Any) -> str | None:
    auth = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    if not auth:
        return None
    return str(auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth)


@dataclass(frozen=True, slots=True)
class Credentials:
    """How to reach and authenticate to the API server (what a kubeconfig says; a field
    it leaves out is None, and certificates are verified)."""

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    tokens: TokenSource | None = field(default=None, compare=False)


def load_credentials(kubeconfig: str | None, context: str | None) -> Credentials:
    """Read a kubeconfig (or the in-cluster config) with the kubernetes library. Sync."""
    from kubernetes import client  # heavy; only at start-up
    from kubernetes.config import incluster_config, kube_config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    token_file: str | None = None
    loader: Any
    path = kubeconfig_path(kubeconfig)
    try:
        if path is not None:
            loader = kube_config._get_kube_config_loader(  # type: ignore[no-untyped-call]
                filename=path, active_context=context, persist_config=False
            )
            loader.load_and_set(cfg)
        else:
            token_file = incluster_config.SERVICE_TOKEN_FILENAME
            loader = incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=token_file,
                cert_filename=incluster_config.SERVICE_CERT_FILENAME,
                try_refresh_token=True,
            )
            loader.load_and_set(cfg)
    except ConfigException as exc:
        raise KubeError(f"cannot load Kubernetes configuration: {exc}") from None
    except OSError as exc:
        raise KubeError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # a refresh at load: an OIDC provider's refusal, an HTTP error
        raise KubeError(
            f"cannot get Kubernetes credentials: {type(exc).__name__}: {str(exc)[:300]}"
        ) from None
    token = _bearer(cfg)
    return Credentials(
        server=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        token=token,
        token_file=token_file,
        verify=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        # Only the kubeconfig's own `proxy-url` (the library also copies
        # HTTPS_PROXY into cfg.proxy, ignoring NO_PROXY: the environment is
        # left to aiohttp's trust_env, which honours NO_PROXY).
        proxy=str(loader.__dict__.get("proxy") or "") or None,
        tokens=TokenSource(
            cfg,
            loader,
            oidc=_auth_provider(loader) == "oidc",
            token=token,
            plugin_certs=_has_exec(loader) and _client_cert(cfg) is not None,
        ),
    )


def _auth_provider(loader: Any) -> str | None:
    """The kubeconfig user's `auth-provider` name (`oidc`), None without one."""
    user = getattr(loader, "_user", None)
    try:
        return str(user["auth-provider"]["name"]) if user and "auth-provider" in user else None
    except Exception:  # the library's ConfigException for a malformed entry
        return None


def _has_exec(loader: Any) -> bool:
    """Whether the kubeconfig user is an `exec` credential plugin."""
    user = getattr(loader, "_user", None)
    try:
        return user is not None and "exec" in user
    except Exception:  # the library's ConfigException for a malformed entry
        return False


def ssl_context(
    creds: Credentials, client_cert: tuple[str, str] | None = None
) -> ssl.SSLContext | bool:
    """The TLS context for `creds` (reads files: sync). `client_cert`: a (certificate,
    key) pair other than the one `creds` names (an exec plugin's newer answer)."""
    if not creds.server.startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=creds.ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not creds.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = client_cert or (creds.cert_file, creds.key_file)
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return ctx
