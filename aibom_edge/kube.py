"""The request client: an async, raw-JSON Kubernetes API client on aiohttp (the I/O
edge both processes share).

Why not the `kubernetes` client's API classes: they are synchronous (they
would block the webhook's event loop) and deserialize every object into
models (10,000 cached Pods as models would blow the annotator's memory goal,
and the webhook's hot path would pay for fields it never reads). We still use
the `kubernetes` library for what it does well and we should not rewrite:
reading kubeconfigs and keeping credentials fresh (`aibom_edge.credentials`).

`Kube` is one pooled session with one identity: requests (retried after a
401 with fresh credentials, and after a `Retry-After` when asked to), watches
(the stream read by `aibom_edge.watch`) and the resources of kinds
(`aibom_edge.discovery`). Objects are the dicts the API server sent; answers
and errors are `aibom_edge.wire`'s. The names of those modules stay
importable from here, where every caller found them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from types import TracebackType
from typing import Any

import aiohttp

from aibom_core.objects import OwnerRef
from aibom_core.walk import Fetched, Reason
from aibom_edge.credentials import (
    LIBRARY_SKEW,
    REFRESH_RETRY_CAP,
    Credentials,
    TokenSource,
    load_credentials,
    ssl_context,
)
from aibom_edge.discovery import AGGREGATED_DISCOVERY, ApiResource, Discovery
from aibom_edge.watch import WATCH_CHUNK, WATCH_TIMEOUT, events
from aibom_edge.wire import (
    METADATA_GET,
    METADATA_LIST,
    METADATA_WATCH,
    KubeError,
    KubeResponse,
    WatchExpired,
    dumps,
    loads,
    retry_after,
)

# The names callers import from here (they moved to the modules above).
__all__ = [
    "AGGREGATED_DISCOVERY",
    "LIBRARY_SKEW",
    "METADATA_GET",
    "METADATA_LIST",
    "METADATA_WATCH",
    "PROXY_VARIABLES",
    "REFRESH_RETRY_CAP",
    "USER_AGENT",
    "WATCH_CHUNK",
    "ApiResource",
    "Credentials",
    "Discovery",
    "Kube",
    "KubeError",
    "KubeResponse",
    "TokenSource",
    "WatchExpired",
    "load_credentials",
    "loads",
    "retry_after",
]

log = logging.getLogger("aibom_edge.kube")

USER_AGENT = "aibom-rollup"


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
        self._ssl = ssl_context(creds)
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
            context = await asyncio.to_thread(ssl_context, self.creds, pair)
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
            body = dumps(json)
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

    # -- the annotator's guard check (annotator/controller.py asks it)

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
        KubeError on other failures, so the caller relists or backs off
        (`aibom_edge.watch`). `accept`: e.g. `METADATA_WATCH` (the objects as
        PartialObjectMetadata). `decode`: parses one event line instead of
        `loads` (e.g. a `KindSchema`'s `event`, which must keep an ERROR event's
        Status whole).
        """
        session = self._require()
        self.requests["WATCH"] += 1
        await self._fresh_token()
        try:
            async with session.get(
                self.server + path,
                params={"watch": "1", **(params or {})},
                headers=self._headers(None, accept),
                timeout=WATCH_TIMEOUT,
                **self._conn_opts,
            ) as resp:
                if resp.status == 401 and self.creds.tokens is not None:
                    await self._fresh_token(force=True)
                async for event in events(resp, path, decode or loads):
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
        creds = await asyncio.to_thread(load_credentials, path, context)
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
