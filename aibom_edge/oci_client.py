"""An OCI registry client, through the ORAS project's Python SDK (`oras` on PyPI): the trail's I/O.

Synchronous (it is built on `requests`): the annotator calls it with
`asyncio.to_thread`, never on its event loop. What we take from the library:
the registry protocol (upload sessions, blob and manifest PUTs, container
names and URLs, Basic and bearer-token auth, docker config files). What we add, and why:

- `upload_manifest` sends the manifest as given, so the OCI 1.1
  `artifactType` and `subject` are ours to set (its `push` has neither an
  `artifactType` nor a way to push bytes that are not a file);
- no retries in here: the library's `do_request` retries up to 5 times with
  fixed sleeps of 3 to 83 s (`time.sleep` in the calling thread); the
  exporter owns retries (backoff, metrics, a durable backlog), so each call
  is one attempt (`Registry.do_request.__wrapped__`);
- timeouts: `requests` has none by default, and a registry that accepts the
  connection and never answers would hold a thread forever;
- errors: one `OciError` carrying the HTTP status (and `Retry-After`),
  which the exporter maps to its backoff; never a traceback for the user.

TLS is always verified, against the system roots or a given CA file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import quote

import oras.auth
import oras.container
import oras.provider
import requests
import requests.compat

from aibom_core.trail import EMPTY_CONFIG, EMPTY_CONFIG_BYTES, MANIFEST_MEDIA_TYPE
from aibom_edge.oci import INDEX_MEDIA_TYPE, MANIFEST_ACCEPT, Endpoint, OciError


class _Session(requests.Session):
    """A session whose requests time out (the library passes no timeout)."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self._timeout = timeout

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self._timeout)
        return super().request(*args, **kwargs)


# One attempt per call: the library's retry decorator sleeps in this thread.
_ONE_ATTEMPT = oras.provider.Registry.do_request.__wrapped__


class _Registry(oras.provider.Registry):  # type: ignore[misc]
    def do_request(  # type: ignore[no-untyped-def]  # noqa: PLR0917 (the library's signature)
        self, url, method="GET", data=None, headers=None, json=None, stream=False
    ):
        headers = dict(headers or {})
        basic = getattr(self.auth, "_basic_auth", None)
        if isinstance(self.auth, oras.auth.BasicAuth) and basic:
            # Sent up front: without it every request is a 401 and a second try.
            headers.setdefault("Authorization", f"Basic {basic}")
        return _ONE_ATTEMPT(self, url, method, data, headers, json, stream)


class Client:
    """One registry. Every method is blocking: call it off the event loop."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        verify: bool | str = endpoint.ca_file or True
        self._backend = "token"
        self._reg = self._make(verify)
        self._verify = verify
        self._ready = False

    def reload(self) -> None:
        """Read the credentials file again (a rotated Secret), on the next request."""
        self._backend = "token"
        self._reg = self._make(self._verify)
        self._ready = False

    def _make(self, verify: bool | str) -> _Registry:
        reg = _Registry(hostname=self.endpoint.host, tls_verify=verify, auth_backend=self._backend)
        reg.session = _Session(self.endpoint.timeout)
        # As the library does: some registries set cookies and then ask for CSRF tokens.
        reg.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        reg.auth.session = reg.session
        if self.endpoint.auth_file:
            if not os.path.isfile(self.endpoint.auth_file):
                raise OciError(f"registry credentials {self.endpoint.auth_file}: no such file")
            container = oras.container.Container(f"{self.endpoint.host}/x", self.endpoint.host)
            reg.auth.load_configs(container, configs=[self.endpoint.auth_file])
        return reg

    def _url(self, path: str) -> str:
        return f"https://{self.endpoint.host}{path}"

    def _container(self, repository: str, reference: str = "") -> oras.container.Container:
        ref = f"{self.endpoint.host}/{repository}"
        if reference.startswith("sha256:"):
            ref += f"@{reference}"
        elif reference:
            ref += f":{reference}"
        return oras.container.Container(ref, registry=self.endpoint.host)

    def _call(self, what: str, method: str, path: str, **kw: Any) -> requests.Response:
        self._probe()
        try:
            resp: requests.Response = self._reg.do_request(  # type: ignore[no-untyped-call]
                self._url(path), method, **kw
            )
        except requests.exceptions.SSLError as exc:
            raise OciError(f"{what}: TLS: {_short(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise OciError(f"{what}: {type(exc).__name__}: {_short(exc)}") from None
        except ValueError as exc:
            raise _library_error(what, exc) from None
        return resp

    def _probe(self) -> None:
        """`GET /v2/` once: Basic auth (htpasswd) or bearer tokens, as the registry asks."""
        if self._ready:
            return
        try:
            resp = self._reg.session.get(self._url("/v2/"), verify=self._verify)
        except requests.exceptions.SSLError as exc:
            raise OciError(f"{self.endpoint.host}: TLS: {_short(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise OciError(f"{self.endpoint.host}: {type(exc).__name__}: {_short(exc)}") from None
        challenge = resp.headers.get("Www-Authenticate", "")
        basic = getattr(self._reg.auth, "_basic_auth", None)
        if challenge.lower().startswith("basic") and basic and self._backend != "basic":
            # htpasswd registries (distribution's own auth) ask for Basic credentials on
            # every request; the token backend would look for a token realm instead.
            self._backend = "basic"
            self._reg = self._make(self._verify)
            self._reg.auth._basic_auth = basic
        if resp.status_code >= 500 or resp.status_code == 429:
            _raise(f"{self.endpoint.host}/v2/", resp)
        self._ready = True

    # -- reads ---------------------------------------------------------------------------------

    def _get_manifest(
        self, repository: str, reference: str, *, method: str = "GET", accept: str = MANIFEST_ACCEPT
    ) -> requests.Response | None:
        """One manifest request: None when it does not exist, else a checked answer."""
        c = self._container(repository, reference)
        what = f"{method} {c}"
        resp = self._call(
            what, method, f"/v2/{c.api_prefix}/manifests/{reference}", headers={"Accept": accept}
        )
        if resp.status_code == 404:
            return None
        _check(what, resp)
        return resp

    def head_manifest(self, repository: str, reference: str) -> dict[str, Any] | None:
        """`{mediaType, digest, size}` of a manifest (a subject descriptor), None if absent."""
        resp = self._get_manifest(repository, reference, method="HEAD")
        if resp is None:
            return None
        media = resp.headers.get("Content-Type", "").split(";")[0].strip()
        digest = resp.headers.get("Docker-Content-Digest", "")
        size = int(resp.headers.get("Content-Length") or 0)
        if not media or not digest or not size:
            # Some registries (and proxies) answer HEAD without these: GET then.
            got = self._get_manifest(repository, reference)
            if got is None:
                return None
            media = got.headers.get("Content-Type", "").split(";")[0].strip()
            digest = got.headers.get("Docker-Content-Digest", "") or reference
            size = len(got.content)
        return {"mediaType": media, "digest": digest, "size": size}

    def manifest(self, repository: str, reference: str) -> dict[str, Any]:
        resp = self._get_manifest(repository, reference)
        body = resp.json() if resp is not None else None
        if not isinstance(body, dict):
            raise OciError(f"GET {repository}:{reference}: no such manifest", status=404)
        return body

    def blob(self, repository: str, digest: str) -> bytes:
        c = self._container(repository)
        resp = self._call(f"GET {c} blob {digest}", "GET", f"/v2/{c.api_prefix}/blobs/{digest}")
        _check(f"GET {c} blob {digest}", resp)
        return bytes(resp.content)

    def tags(self, repository: str) -> list[str]:
        """Every tag of a repository ([] when the repository does not exist)."""
        c = self._container(repository)
        out: list[str] = []
        path = f"/v2/{c.api_prefix}/tags/list?n=1000"
        while path:
            resp = self._call(f"list tags of {c}", "GET", path)
            if resp.status_code == 404:
                return out
            _check(f"list tags of {c}", resp)
            out.extend(str(t) for t in (resp.json().get("tags") or []))
            path = _next(resp)
        return out

    def catalog(self) -> list[str]:
        """Every repository (`/v2/_catalog`, paginated; not every registry serves it)."""
        out: list[str] = []
        path = "/v2/_catalog?n=1000"
        while path:
            resp = self._call("list repositories", "GET", path)
            _check("list repositories (/v2/_catalog)", resp)
            out.extend(str(r) for r in (resp.json().get("repositories") or []))
            path = _next(resp)
        return out

    def referrers(self, repository: str, digest: str, artifact_type: str) -> list[dict[str, Any]]:
        """The OCI 1.1 referrers of a manifest, of one artifact type (descriptors): the
        referrers API, else (a registry without it, such as distribution v3) the
        referrers tag schema's index `<alg>-<hex>`, as `oras discover` reads it."""
        c = self._container(repository)
        what = f"referrers of {c}@{digest}"
        query = quote(artifact_type, safe="")
        resp = self._call(
            what, "GET", f"/v2/{c.api_prefix}/referrers/{digest}?artifactType={query}"
        )
        if resp.status_code == 404:
            index = self._fallback_index(repository, digest)
            found = index.get("manifests") or [] if index is not None else []
        else:
            _check(what, resp)
            found = resp.json().get("manifests") or []
        # A registry may ignore the filter (it then does not set OCI-Filters-Applied).
        return [m for m in found if isinstance(m, dict) and m.get("artifactType") == artifact_type]

    def _fallback_index(self, repository: str, digest: str) -> dict[str, Any] | None:
        resp = self._get_manifest(repository, digest.replace(":", "-"), accept=INDEX_MEDIA_TYPE)
        body = resp.json() if resp is not None else None
        return body if isinstance(body, dict) else None

    # -- writes --------------------------------------------------------------------------------

    def has_blob(self, repository: str, digest: str) -> bool:
        c = self._container(repository)
        resp = self._call(f"HEAD {c} blob {digest}", "HEAD", f"/v2/{c.api_prefix}/blobs/{digest}")
        if resp.status_code == 404:
            return False
        _check(f"HEAD {c} blob {digest}", resp)
        return True

    def push_blob(self, repository: str, data: bytes, digest: str) -> None:
        """Upload a blob unless the repository has it (the library's `upload_blob`, which
        asks first, and reads a file: the bytes go through a temporary one)."""
        c = self._container(repository)
        self._probe()
        layer = {"mediaType": "application/octet-stream", "digest": digest, "size": len(data)}
        with tempfile.NamedTemporaryFile(prefix="aibom-blob-") as tmp:
            tmp.write(data)
            tmp.flush()
            try:
                resp = self._reg.upload_blob(tmp.name, c, layer)
            except requests.exceptions.RequestException as exc:
                raise OciError(f"upload {digest} to {c}: {_short(exc)}") from None
            except ValueError as exc:
                raise _library_error(f"upload {digest} to {c}", exc) from None
        _check(f"upload {digest} to {c}", resp)

    def push_manifest(self, repository: str, reference: str, body: Mapping[str, Any]) -> str:
        """PUT a manifest (by tag, or by its digest); returns its digest."""
        return self._put_manifest(repository, reference, body).headers.get(
            "Docker-Content-Digest"
        ) or manifest_digest(body)

    def _put_manifest(
        self, repository: str, reference: str, body: Mapping[str, Any]
    ) -> requests.Response:
        c = self._container(repository, reference)
        self._probe()
        try:
            resp: requests.Response = self._reg.upload_manifest(dict(body), c)
        except requests.exceptions.RequestException as exc:
            raise OciError(f"push manifest {c}: {_short(exc)}") from None
        except ValueError as exc:
            raise _library_error(f"push manifest {c}", exc) from None
        _check(f"push manifest {c}", resp)
        return resp

    def attach(self, repository: str, body: Mapping[str, Any]) -> str:
        """Push a manifest with a `subject` by its digest. A registry that serves the
        referrers API says so (`OCI-Subject`); for one that does not, the referrers tag
        schema of OCI distribution 1.1: the index tagged `<alg>-<hex>` of the subject
        lists the referrer (read, extended, written back: the one tag we rewrite, by
        the spec's design; callers serialise updates of one subject)."""
        digest = manifest_digest(body)
        resp = self._put_manifest(repository, digest, body)
        if resp.headers.get("OCI-Subject"):
            return digest
        subject = dict(body["subject"])
        index = self._fallback_index(repository, str(subject["digest"])) or {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [],
        }
        listed = [m for m in index.get("manifests") or [] if isinstance(m, dict)]
        if any(m.get("digest") == digest for m in listed):
            return digest
        entry: dict[str, Any] = {
            "mediaType": str(body.get("mediaType", MANIFEST_MEDIA_TYPE)),
            "digest": digest,
            "size": len(manifest_bytes(body)),
        }
        if body.get("artifactType"):
            entry["artifactType"] = body["artifactType"]
        if body.get("annotations"):
            entry["annotations"] = dict(body["annotations"])
        index = {**index, "manifests": [*listed, entry]}
        tag = str(subject["digest"]).replace(":", "-")
        c = self._container(repository, tag)
        try:
            put = self._reg.do_request(  # type: ignore[no-untyped-call]
                self._url(f"/v2/{c.api_prefix}/manifests/{tag}"),
                "PUT",
                data=manifest_bytes(index),
                headers={"Content-Type": INDEX_MEDIA_TYPE},
            )
        except requests.exceptions.RequestException as exc:
            raise OciError(f"push referrers index {c}: {_short(exc)}") from None
        _check(f"push referrers index {c}", put)
        return digest

    def push_empty_config(self, repository: str) -> None:
        self.push_blob(repository, EMPTY_CONFIG_BYTES, str(EMPTY_CONFIG["digest"]))


def manifest_bytes(body: Mapping[str, Any]) -> bytes:
    """The bytes `upload_manifest` sends (requests' own JSON encoding of `json=`)."""
    encoder: Any = getattr(requests.compat, "json")  # noqa: B009 (not in its __all__)
    return bytes(encoder.dumps(dict(body), allow_nan=False).encode("utf-8"))


def manifest_digest(body: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(manifest_bytes(body)).hexdigest()


def _next(resp: requests.Response) -> str:
    link = resp.links.get("next", {}).get("url", "")
    if not link:
        return ""
    return link if link.startswith("/") else "/" + link.split("/", 3)[-1]


def _check(what: str, resp: requests.Response) -> None:
    if resp.status_code in (200, 201, 202, 204):
        return
    _raise(what, resp)


def _raise(what: str, resp: requests.Response) -> None:
    retry = resp.headers.get("Retry-After")
    try:
        retry_after: float | None = float(retry) if retry else None
    except ValueError:
        retry_after = None
    raise OciError(
        f"{what}: HTTP {resp.status_code}{_errors(resp)}",
        status=resp.status_code,
        retry_after=retry_after,
    )


def _errors(resp: requests.Response) -> str:
    """The registry's own words (the OCI error body), short."""
    try:
        body = resp.json()
    except ValueError:
        text = resp.text.strip()[:200]
        return f": {text}" if text else ""
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list):
        return ""
    words = [
        f"{e.get('code', '')} {e.get('message', '')}".strip() for e in errors if isinstance(e, dict)
    ]
    return (": " + "; ".join(words))[:300] if words else ""


def _library_error(what: str, exc: ValueError) -> OciError:
    """The library raises ValueError for a refused authentication ("Cannot respond to
    request for authentication") and for an upload session the registry would not open
    ("Issue retrieving session url: <its error body>", e.g. a full disk): 401, else 500."""
    status = 401 if "authentication" in str(exc) else 500
    return OciError(f"{what}: {_short(exc)}", status=status)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def dumps(body: Any) -> str:
    return json.dumps(body, indent=2, sort_keys=True)
