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
import contextlib
import json
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from aibom_core.kinds import GroupKind
from aibom_core.objects import OwnerRef
from aibom_core.walk import Fetched, Reason

log = logging.getLogger("aibom_rollup.kube")

USER_AGENT = "aibom-rollup"
# Lines of a watch stream are whole objects (up to the API server's ~3 MiB
# limit, wrapped in an event); we split the stream ourselves, so no line limit.
WATCH_CHUNK = 1 << 16
AGGREGATED_DISCOVERY = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;q=0.9"
)


class KubeError(Exception):
    """A request failed in a way the caller must handle (connection, bad config)."""


class WatchExpired(KubeError):
    """The watch's resourceVersion is too old (410 Gone): relist."""


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


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    token: str | None
    token_file: str | None
    verify: bool
    tls_server_name: str | None = None


def _load_credentials(kubeconfig: str | None, context: str | None) -> Credentials:
    """Read a kubeconfig (or the in-cluster config) with the kubernetes library. Sync."""
    from kubernetes import client, config  # heavy; only at start-up
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    token_file: str | None = None
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path or Path("~/.kube/config").expanduser().exists():
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=cfg, persist_config=False
            )
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    except ConfigException as exc:
        raise KubeError(f"cannot load Kubernetes configuration: {exc}") from None
    except OSError as exc:
        raise KubeError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    token = None
    if auth:
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
    return Credentials(
        server=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        token=token,
        token_file=token_file,
        verify=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None),
    )


def _ssl_context(creds: Credentials) -> ssl.SSLContext | bool:
    if not creds.server.startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=creds.ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not creds.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if creds.cert_file and creds.key_file:
        ctx.load_cert_chain(creds.cert_file, creds.key_file)
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
    ) -> None:
        self.creds = creds
        self.server = creds.server
        self._ssl = _ssl_context(creds)
        self._pool_size = pool_size
        self._timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        self._token = creds.token
        self._token_read_at = 0.0
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
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, content_type: str | None, accept: str | None = None) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": accept} if accept else {}
        token = self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _current_token(self) -> str | None:
        # Bound service-account tokens rotate: re-read the projected file each minute.
        if self.creds.token_file and time.monotonic() - self._token_read_at > 60:
            with contextlib.suppress(OSError):
                self._token = Path(self.creds.token_file).read_text().strip()
            self._token_read_at = time.monotonic()
        return self._token

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
    ) -> KubeResponse:
        """One API request; HTTP errors are responses, connection problems KubeError."""
        session = self._require()
        body: bytes | str | None = data
        if json is not None:
            body = _dumps(json)
            content_type = content_type or "application/json"
        self.requests[method] += 1
        try:
            async with session.request(
                method,
                self.server + path,
                params=params,
                data=body,
                headers=self._headers(content_type, accept),
                timeout=aiohttp.ClientTimeout(total=timeout or self._timeout),
            ) as resp:
                raw = await resp.read()
                ctype = resp.headers.get("Content-Type", "")
                parsed: Any = raw.decode("utf-8", "replace")
                if "json" in ctype and raw:
                    with contextlib.suppress(ValueError):
                        parsed = _loads(raw)
                return KubeResponse(resp.status, parsed, resp.headers)
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched:
        """GET an owner for the walk; the walk itself checks the UID."""
        try:
            res = await self.discovery.resource(owner.group_kind)
        except KubeError:
            return Fetched(failure=Reason.TIMEOUT)
        if res is None:
            return Fetched(failure=Reason.NO_MATCH)
        try:
            resp = await self.request("GET", res.path(namespace, owner.name), timeout=timeout)
        except (TimeoutError, KubeError):
            return Fetched(failure=Reason.TIMEOUT)
        if resp.status == 200 and isinstance(resp.body, dict):
            return Fetched(obj=resp.body)
        if resp.status == 404:
            return Fetched(failure=Reason.NOT_FOUND)
        if resp.status in (401, 403):
            return Fetched(failure=Reason.FORBIDDEN)
        # 429 / 5xx: the API did not give an answer in time.
        return Fetched(failure=Reason.TIMEOUT)

    # -- provenance (issue 12): what the webhook's edge check reads -----------

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

    async def namespace_labels(self, name: str, *, timeout: float) -> Mapping[str, str] | None:
        """A namespace's labels (None: it does not exist); KubeError on other answers."""
        resp = await self.request("GET", f"/api/v1/namespaces/{name}", timeout=timeout)
        if resp.status == 404:
            return None
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise KubeError(f"GET namespace {name}: HTTP {resp.status}")
        labels = (resp.body.get("metadata") or {}).get("labels")
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    async def binding_exists(self, name: str, *, timeout: float) -> bool:
        """Whether a ValidatingAdmissionPolicyBinding of this name exists."""
        path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{name}"
        resp = await self.request("GET", path, timeout=timeout)
        if resp.status == 404:
            return False
        if resp.status != 200:
            raise KubeError(f"GET {path}: HTTP {resp.status}")
        return True

    async def watch(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (`?watch=1`), one dict each; ends when the server ends it.

        Raises WatchExpired on 410 Gone (as a status or as an ERROR event) and
        KubeError on other failures, so the caller relists or backs off.
        """
        session = self._require()
        query = {"watch": "1", **(params or {})}
        self.requests["WATCH"] += 1
        try:
            async with session.get(
                self.server + path,
                params=query,
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
            ) as resp:
                if resp.status == 410:
                    raise WatchExpired(f"watch {path}: 410 Gone")
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")[:300]
                    raise KubeError(f"watch {path}: HTTP {resp.status}: {text}")
                buf = b""
                async for chunk in resp.content.iter_chunked(WATCH_CHUNK):
                    buf += chunk
                    while (nl := buf.find(b"\n")) >= 0:
                        line, buf = buf[:nl], buf[nl + 1 :]
                        if line.strip():
                            event = _loads(line)
                            _raise_on_error_event(path, event)
                            yield event
                if buf.strip():
                    event = _loads(buf)
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
        await self._kube.open()
        return self._kube

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._kube is not None:
            await self._kube.close()


def _raise_on_error_event(path: str, event: Any) -> None:
    if not isinstance(event, dict) or event.get("type") != "ERROR":
        return
    status = event.get("object") or {}
    if status.get("code") == 410:
        raise WatchExpired(f"watch {path}: {status.get('message', '410 Gone')}")
    raise KubeError(f"watch {path}: {status.get('message', status)}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _loads(raw: bytes) -> Any:
    return json.loads(raw)
