"""An async, raw-JSON Kubernetes API client on aiohttp (the I/O edge both processes share).

Why not the `kubernetes` client's API classes: they are synchronous (they
would block the webhook's event loop) and deserialize every object into
models (10,000 cached Pods as models would blow the annotator's memory goal,
and the webhook's hot path would pay for fields it never reads). We still use
the `kubernetes` library for what it does well and we should not rewrite:
reading kubeconfigs (contexts, embedded or file credentials, exec plugins) and
the in-cluster service-account configuration.

Objects are the dicts the API server sent. Resource paths come from API
discovery, cached per group-version and refreshed on a miss at most every
`rediscover_after` seconds, so a CRD installed later is found without a
restart and an unserved kind costs no request storm.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from aibom_core.kinds import GroupKind
from aibom_core.objects import OwnerRef
from aibom_core.walk import Fetched, Reason
from aibom_edge.kubeconfig import kubeconfig_path

log = logging.getLogger("aibom_edge.kube")

USER_AGENT = "aibom-rollup"
# Lines of a watch stream are whole objects (up to the API server's ~3 MiB
# limit, wrapped in an event); we split the stream ourselves, so no line limit.
WATCH_CHUNK = 1 << 16
AGGREGATED_DISCOVERY = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;q=0.9"
)
# Metadata-only gets, lists and watches (client-go's metadata client and
# informer): the server sends PartialObjectMetadata(List), never the spec,
# status or data; a server that cannot falls back to the full objects (the
# second media type). What the webhook's owner index and the annotator's
# metadata-only kinds need, without specs and status on the wire or in memory.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
METADATA_GET = METADATA_WATCH


class KubeError(Exception):
    """A request failed in a way the caller must handle (connection, bad config, HTTP status).

    `status` is the HTTP status (or a watch ERROR event's `code`) when the
    server answered, None for connection trouble; `retry_after` the seconds
    the server asked us to wait (`Retry-After`, or a Status's
    `details.retryAfterSeconds`). Callers decide by these, never by the text.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def throttled(self) -> bool:
        """429, or a 5xx that says when to come back: wait, then resume (not relist)."""
        return self.status == 429 or (
            self.status is not None and self.status >= 500 and self.retry_after is not None
        )


class WatchExpired(KubeError):
    """The watch's resourceVersion is too old (410 Gone): relist."""


def retry_after(headers: Mapping[str, str]) -> float | None:
    """`Retry-After` in seconds (the API server sends an integer), None if absent or not one."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None  # an HTTP-date: the API server never sends one
    return value if value >= 0 else None


@dataclass(frozen=True, slots=True)
class KubeResponse:
    status: int
    body: Any  # parsed JSON when the server sent JSON, else text
    headers: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()
    short_names: tuple[str, ...] = ()  # kubectl's short names (`deploy`, `rs`), for tools
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        return base


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


def _load_credentials(kubeconfig: str | None, context: str | None) -> Credentials:
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


def _ssl_context(
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


class Discovery:
    """GroupKind -> ApiResource, from /api and /apis, cached; misses refresh at most every N s."""

    def __init__(self, kube: Kube, *, rediscover_after: float = 30.0) -> None:
        self._kube = kube
        self._rediscover_after = rediscover_after
        self._by_gk: dict[GroupKind, ApiResource] = {}
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()

    async def resource(self, gk: GroupKind) -> ApiResource | None:
        """The served resource of a kind, or None if the server does not serve it (NoMatch)."""
        found = self._by_gk.get(gk)
        if found is not None:
            return found
        if self._loaded_at is None or time.monotonic() - self._loaded_at >= self._rediscover_after:
            async with self._lock:
                if gk not in self._by_gk and (
                    self._loaded_at is None
                    or time.monotonic() - self._loaded_at >= self._rediscover_after
                ):
                    await self.refresh()
        return self._by_gk.get(gk)

    def cached(self, gk: GroupKind) -> ApiResource | None:
        return self._by_gk.get(gk)

    async def all(self) -> list[ApiResource]:
        """Every served kind (discovering first if nothing is known yet)."""
        if self._loaded_at is None:
            async with self._lock:
                if self._loaded_at is None:
                    await self.refresh()
        return list(self._by_gk.values())

    async def refresh(self) -> None:
        """Reload what the server serves: aggregated discovery (2 requests), else per version."""
        by_gk = await self._aggregated()
        if by_gk is None:
            by_gk = await self._legacy()
        self._by_gk = by_gk
        self._loaded_at = time.monotonic()

    async def _aggregated(self) -> dict[GroupKind, ApiResource] | None:
        """`/api` and `/apis` as APIGroupDiscoveryList (Kubernetes >= 1.30); None if refused."""
        by_gk: dict[GroupKind, ApiResource] = {}
        for path in ("/api", "/apis"):
            resp = await self._kube.request("GET", path, accept=AGGREGATED_DISCOVERY)
            body = resp.body
            if (
                not resp.ok
                or not isinstance(body, dict)
                or body.get("kind") != "APIGroupDiscoveryList"
            ):
                return None
            for group in body.get("items") or []:
                name = (group.get("metadata") or {}).get("name", "")
                # Versions come in preference order; earlier ones win a kind.
                for ver in group.get("versions") or []:
                    for r in ver.get("resources") or []:
                        kind = (r.get("responseKind") or {}).get("kind", "")
                        if not kind or not r.get("resource"):
                            continue
                        by_gk.setdefault(
                            GroupKind(name, kind),
                            ApiResource(
                                group=name,
                                version=ver.get("version", ""),
                                kind=kind,
                                plural=r["resource"],
                                namespaced=r.get("scope") == "Namespaced",
                                verbs=frozenset(r.get("verbs") or ()),
                                short_names=tuple(r.get("shortNames") or ()),
                                singular=r.get("singularResource") or "",
                            ),
                        )
        return by_gk

    async def _legacy(self) -> dict[GroupKind, ApiResource]:
        """One request per group-version (servers without aggregated discovery)."""
        by_gk: dict[GroupKind, ApiResource] = {}
        core = await self._kube.request("GET", "/api/v1")
        if core.ok:
            by_gk.update(self._parse("", "v1", core.body))
        groups = await self._kube.request("GET", "/apis")
        if not groups.ok:
            raise KubeError(f"discovery: GET /apis answered {groups.status}")
        versions: list[tuple[str, str]] = []
        for g in groups.body.get("groups", []):
            # Preferred version first; other versions fill kinds it lacks.
            preferred = (g.get("preferredVersion") or {}).get("version")
            names = [v.get("version") for v in g.get("versions", [])]
            ordered = [preferred, *[n for n in names if n != preferred]] if preferred else names
            versions += [(g["name"], v) for v in ordered if v]
        results = await asyncio.gather(
            *(self._kube.request("GET", f"/apis/{g}/{v}") for g, v in versions)
        )
        for (g, v), resp in zip(versions, results, strict=True):
            if resp.ok:
                for gk, res in self._parse(g, v, resp.body).items():
                    by_gk.setdefault(gk, res)
        return by_gk

    @staticmethod
    def _parse(group: str, version: str, body: Any) -> dict[GroupKind, ApiResource]:
        out: dict[GroupKind, ApiResource] = {}
        for r in body.get("resources", []) if isinstance(body, dict) else []:
            name = r.get("name", "")
            if "/" in name:  # subresource
                continue
            gk = GroupKind(group, r.get("kind", ""))
            out.setdefault(
                gk,
                ApiResource(
                    group=group,
                    version=version,
                    kind=gk.kind,
                    plural=name,
                    namespaced=bool(r.get("namespaced")),
                    verbs=frozenset(r.get("verbs") or ()),
                    short_names=tuple(r.get("shortNames") or ()),
                    singular=r.get("singularName") or "",
                ),
            )
        return out


class Kube:
    """A pooled aiohttp session to one API server with one identity."""

    def __init__(
        self,
        creds: Credentials,
        *,
        pool_size: int = 64,
        request_timeout: float = 30.0,
        rediscover_after: float = 30.0,
        max_retries: int = 0,
        retry_after_cap: float = 30.0,
    ) -> None:
        self.creds = creds
        self.max_retries = max_retries
        self.retry_after_cap = retry_after_cap
        self.throttled: Counter[str] = Counter()  # verb -> retries after 429/Retry-After
        self.server = creds.server
        self._ssl = _ssl_context(creds)
        self._pool_size = pool_size
        self._timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        # kubeconfig `tls-server-name` (SNI and the name the certificate must
        # carry) and `proxy-url`; without proxy-url, HTTPS_PROXY/NO_PROXY apply.
        self._conn_opts: dict[str, Any] = {}
        if creds.tls_server_name:
            self._conn_opts["server_hostname"] = creds.tls_server_name
        if creds.proxy:
            self._conn_opts["proxy"] = creds.proxy
        self._token = creds.token
        self._client_cert = creds.tokens.client_cert if creds.tokens is not None else None
        self._token_lock = asyncio.Lock()
        self.token_refreshes = 0
        self.token_refresh_failures = 0
        self.discovery = Discovery(self, rediscover_after=rediscover_after)
        self.requests: Counter[str] = Counter()  # verb -> count, for metrics and benchmarks

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, *, context: str | None = None, **kwargs: Any
    ) -> _KubeOpener:
        """`async with Kube.from_kubeconfig(p) as kube:` (opened), or `await` it (not opened).

        None: $KUBECONFIG, ~/.kube/config, else the in-cluster service account.
        """
        return _KubeOpener(cls, path, context, kwargs)

    async def __aenter__(self) -> Kube:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._pool_size, ssl=self._ssl, keepalive_timeout=60
            )
            self._session = aiohttp.ClientSession(
                base_url=None,
                connector=connector,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                json_serialize=json.dumps,
                # HTTPS_PROXY / NO_PROXY apply as client-go's ProxyFromEnvironment;
                # only looked up when set (aiohttp would parse them per request).
                trust_env=not self.creds.proxy and _proxy_in_env(),
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, content_type: str | None, accept: str | None = None) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": accept} if accept else {}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def _fresh_token(self, *, force: bool = False) -> None:
        """Refresh the token through the library when due (or forced), off the event loop."""
        tokens = self.creds.tokens
        if tokens is None or not tokens.due(force=force):
            return
        seen = self._token
        async with self._token_lock:
            if self._token != seen or not tokens.due(force=force):
                return  # another task refreshed it meanwhile (or failed: backing off)
            try:
                token = await asyncio.to_thread(tokens.fetch, force=force)
            except Exception as exc:  # the library raises many kinds; keep the old token
                self.token_refresh_failures += 1
                log.warning(
                    "could not refresh the API credentials",
                    extra={
                        "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                        "failures": tokens.failures,
                        "retry_in_s": round(tokens.retry_in(), 1),
                    },
                )
                return
            if token and token != self._token:
                self.token_refreshes += 1
                log.info("API credentials refreshed", extra={"refreshes": self.token_refreshes})
            self._token = token or self._token
            await self._fresh_client_cert(tokens.client_cert)

    async def _fresh_client_cert(self, pair: tuple[str, str] | None) -> None:
        """New handshakes present the exec plugin's newest client certificate (open
        connections keep theirs: the API server checks a certificate at the handshake)."""
        if pair is None or pair == self._client_cert:
            return
        try:
            context = await asyncio.to_thread(_ssl_context, self.creds, pair)
        except (OSError, ssl.SSLError) as exc:
            self.token_refresh_failures += 1
            log.warning(
                "could not load the refreshed client certificate; keeping the previous one",
                extra={"error": f"{type(exc).__name__}: {str(exc)[:300]}"},
            )
            return
        self._client_cert = pair
        if isinstance(context, ssl.SSLContext):
            self._ssl = context
            # Per request: aiohttp keys pooled connections by their TLS context, so
            # connections of the old certificate are never reused for a new request.
            self._conn_opts["ssl"] = context
        self.token_refreshes += 1
        log.info("API client certificate refreshed", extra={"refreshes": self.token_refreshes})

    def _require(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise KubeError("Kube client used before open()")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        data: bytes | str | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout: float | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> KubeResponse:
        """One API request; HTTP errors are responses, connection problems KubeError.

        `decode` parses a successful (2xx) JSON body instead of `loads` (e.g. a
        `aibom_edge.schema.KindSchema`'s `page`, which keeps only what the caller reads);
        any other body is parsed whole, so an error's Status keeps its message.

        With `max_retries` > 0 (the annotator's client), a 429 or 5xx that
        carries `Retry-After` is retried after that many seconds (capped at
        `retry_after_cap`), as client-go's rest client does, while the whole
        exchange still fits in `timeout`; otherwise the response is returned.
        """
        body: bytes | str | None = data
        if json is not None:
            body = _dumps(json)
            content_type = content_type or "application/json"
        budget = timeout or self._timeout
        deadline = time.monotonic() + budget
        attempt = 0
        reauthenticated = False
        await self._fresh_token()
        while True:
            resp = await self._request_once(
                method,
                path,
                params=params,
                body=body,
                content_type=content_type,
                accept=accept,
                timeout=max(0.001, deadline - time.monotonic()),
                decode=decode,
            )
            if resp.status == 401 and not reauthenticated and self.creds.tokens is not None:
                # The token expired or was revoked before we knew: get a new
                # one (re-run the exec plugin) and try once more, as client-go.
                reauthenticated = True
                await self._fresh_token(force=True)
                continue
            wait = retry_after(resp.headers)
            if (
                attempt >= self.max_retries
                or wait is None
                or not (resp.status == 429 or resp.status >= 500)
            ):
                return resp
            wait = min(wait, self.retry_after_cap)
            if time.monotonic() + wait >= deadline:
                return resp
            self.throttled[method] += 1
            attempt += 1
            log.debug(
                "API server asked us to retry later",
                extra={"method": method, "path": path, "status": resp.status, "retry_in_s": wait},
            )
            await asyncio.sleep(wait)

    async def _request_once(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: bytes | str | None,
        content_type: str | None,
        accept: str | None,
        timeout: float,
        decode: Callable[[bytes], Any] | None = None,
    ) -> KubeResponse:
        session = self._require()
        self.requests[method] += 1
        try:
            async with session.request(
                method,
                self.server + path,
                params=params,
                data=body,
                headers=self._headers(content_type, accept),
                timeout=aiohttp.ClientTimeout(total=timeout),
                **self._conn_opts,
            ) as resp:
                raw = await resp.read()
                ctype = resp.headers.get("Content-Type", "")
                parsed: Any = raw.decode("utf-8", "replace")
                if "json" in ctype and raw:
                    parse = decode if decode is not None and 200 <= resp.status < 300 else loads
                    with contextlib.suppress(ValueError):
                        parsed = parse(raw)
                return KubeResponse(resp.status, parsed, resp.headers)
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc

    async def get_owner(
        self,
        namespace: str,
        owner: OwnerRef,
        *,
        timeout: float | None = None,
        metadata_only: bool = False,
    ) -> Fetched:
        """GET an owner for the walk; the walk itself checks the UID.

        `metadata_only`: ask for PartialObjectMetadata (no spec, no status: less
        for the server to encode and for us to parse), answered with the owner's
        own apiVersion and kind, for callers that read only metadata.
        """
        try:
            res = await self.discovery.resource(owner.group_kind)
        except KubeError:
            return Fetched(failure=Reason.TIMEOUT)
        if res is None:
            return Fetched(failure=Reason.NO_MATCH)
        if not res.namespaced:
            # The walk's rule (docs/webhook.md, "Cluster-scoped owners"): owners
            # are looked up in the child's namespace, where a cluster-scoped
            # object never is; NotFound without a request, as the offline scan says.
            return Fetched(failure=Reason.NOT_FOUND)
        try:
            resp = await self.request(
                "GET",
                res.path(namespace, owner.name),
                timeout=timeout,
                accept=METADATA_GET if metadata_only else None,
            )
        except (TimeoutError, KubeError):
            return Fetched(failure=Reason.TIMEOUT)
        if resp.status == 200 and isinstance(resp.body, dict):
            if metadata_only:
                resp.body["apiVersion"], resp.body["kind"] = res.api_version, res.kind
            return Fetched(obj=resp.body)
        if resp.status == 404:
            return Fetched(failure=Reason.NOT_FOUND)
        if resp.status in (401, 403):
            return Fetched(failure=Reason.FORBIDDEN)
        # 429 / 5xx: the API did not give an answer in time.
        return Fetched(failure=Reason.TIMEOUT)

    # -- provenance: what the webhook's edge check reads -----------

    async def finalizers_resource(self, owner: OwnerRef) -> str | None:
        """The plural resource of the owner's kind (None: not served)."""
        res = await self.discovery.resource(owner.group_kind)
        return res.plural if res is not None else None

    async def access_review(self, body: dict[str, Any], *, timeout: float) -> bool:
        """POST a SubjectAccessReview; `status.allowed`. KubeError on a non-201 answer."""
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        resp = await self.request("POST", path, json=body, timeout=timeout)
        if resp.status not in (200, 201) or not isinstance(resp.body, dict):
            raise KubeError(f"POST {path}: HTTP {resp.status}")
        status = resp.body.get("status")
        return isinstance(status, dict) and status.get("allowed") is True

    async def admission_policy_object(
        self, resource: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        """A cluster-scoped admissionregistration.k8s.io/v1 object (`resource`: its
        plural, e.g. validatingadmissionpolicies) by name; None when it does not
        exist, KubeError on other answers."""
        path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}"
        resp = await self.request("GET", path, timeout=timeout)
        if resp.status == 404:
            return None
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise KubeError(f"GET {path}: HTTP {resp.status}")
        body: dict[str, Any] = resp.body
        return body

    async def watch(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        accept: str | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (`?watch=1`), one dict each; ends when the server ends it.

        Raises WatchExpired on 410 Gone (as a status or as an ERROR event) and
        KubeError on other failures, so the caller relists or backs off.
        `accept`: e.g. `METADATA_WATCH` (the objects as PartialObjectMetadata).
        `decode`: parses one event line instead of `loads` (e.g. a `KindSchema`'s
        `event`, which must keep an ERROR event's Status whole).
        """
        parse = decode or loads
        session = self._require()
        query = {"watch": "1", **(params or {})}
        self.requests["WATCH"] += 1
        await self._fresh_token()
        try:
            async with session.get(
                self.server + path,
                params=query,
                headers=self._headers(None, accept),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
                **self._conn_opts,
            ) as resp:
                if resp.status == 401 and self.creds.tokens is not None:
                    await self._fresh_token(force=True)
                if resp.status == 410:
                    raise WatchExpired(f"watch {path}: 410 Gone", status=410)
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")[:300]
                    raise KubeError(
                        f"watch {path}: HTTP {resp.status}: {text}",
                        status=resp.status,
                        retry_after=retry_after(resp.headers),
                    )
                buf = b""
                async for chunk in resp.content.iter_chunked(WATCH_CHUNK):
                    buf += chunk
                    while (nl := buf.find(b"\n")) >= 0:
                        line, buf = buf[:nl], buf[nl + 1 :]
                        if line.strip():
                            event = parse(line)
                            _raise_on_error_event(path, event)
                            yield event
                if buf.strip():
                    event = parse(buf)
                    _raise_on_error_event(path, event)
                    yield event
        except aiohttp.ClientError as exc:
            raise KubeError(f"watch {path}: {exc}") from exc


class _KubeOpener:
    """Loads credentials off the event loop (the kubeconfig parser is synchronous)."""

    def __init__(
        self, cls: type[Kube], path: str | None, context: str | None, kwargs: dict[str, Any]
    ) -> None:
        self._args = (cls, path, context, kwargs)
        self._kube: Kube | None = None

    async def _make(self) -> Kube:
        cls, path, context, kwargs = self._args
        creds = await asyncio.to_thread(_load_credentials, path, context)
        return cls(creds, **kwargs)

    def __await__(self) -> Generator[Any, None, Kube]:
        return self._make().__await__()

    async def __aenter__(self) -> Kube:
        self._kube = await self._make()
        return await self._kube.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        """The opened client's own exit (it closes the client)."""
        if self._kube is not None:
            await self._kube.__aexit__(*exc_info)


def _raise_on_error_event(path: str, event: Any) -> None:
    if not isinstance(event, dict) or event.get("type") != "ERROR":
        return
    status = event.get("object") or {}
    code = status.get("code") if isinstance(status.get("code"), int) else None
    if code == 410:
        raise WatchExpired(f"watch {path}: {status.get('message', '410 Gone')}", status=410)
    details = status.get("details")
    wait = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    raise KubeError(
        f"watch {path}: {status.get('message', status)}",
        status=code,
        retry_after=float(wait) if isinstance(wait, int | float) else None,
    )


# The variables aiohttp's trust_env reads for a proxy.
PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
)


def _proxy_in_env() -> bool:
    return any(os.environ.get(name) for name in PROXY_VARIABLES)


def _dumps(obj: Any) -> bytes | str:
    # orjson: 5-10x faster; what it refuses (an int past 64 bits) the stdlib writes.
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"))


def loads(raw: bytes) -> Any:
    # orjson decodes list pages and watch events 2-3x faster than the stdlib
    # (100,000 Pods at restart). What it refuses (nesting past 1,024,
    # a lone surrogate escape) goes to the stdlib parser, which decided before.
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
