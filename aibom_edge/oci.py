"""Where the audit trail lives, and how a registry request failed: the light half of the OCI edge.

`Endpoint` (host, repository prefix, CA, credentials file, timeout) and
`OciError` (a failed request, with the HTTP status and `Retry-After`) are what
the command line and the annotator's flags need; the client itself, built on
the ORAS SDK and `requests`, is `aibom_edge.oci_client` (imported only by
what talks to a registry, so `kubectl aibom` and `aibom-rollup scan` do not
load it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from aibom_core.trail import MANIFEST_MEDIA_TYPE

MANIFEST_ACCEPT: Final = ", ".join(
    (
        MANIFEST_MEDIA_TYPE,
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)
DEFAULT_TIMEOUT: Final = 30.0
INDEX_MEDIA_TYPE: Final = "application/vnd.oci.image.index.v1+json"


class OciError(Exception):
    """A registry request that failed: `status` 0 when no HTTP answer came."""

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def reason(self) -> str:
        """A metric label: `unreachable`, `auth` (401/403), `throttled` (429), `server`
        (5xx), `refused` (another 4xx)."""
        if self.status == 0:
            return "unreachable"
        if self.status in (401, 403):
            return "auth"
        if self.status == 429:
            return "throttled"
        return "server" if self.status >= 500 else "refused"


@dataclass(frozen=True)
class Endpoint:
    """Where the trail lives: `host[:port]` and a repository prefix (maybe empty)."""

    host: str
    prefix: str = ""
    ca_file: str | None = None
    auth_file: str | None = None  # a docker config (a dockerconfigjson Secret's file)
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def parse(cls, text: str, **kw: Any) -> Endpoint:
        """`registry.example:5000/aibom` -> host `registry.example:5000`, prefix `aibom`."""
        text = text.strip().removeprefix("https://").rstrip("/")
        if not text or text.startswith(("http://", "/")) or "://" in text:
            raise ValueError(f"registry {text!r}: give HOST[:PORT][/PREFIX] (TLS is always used)")
        host, _, prefix = text.partition("/")
        return cls(host=host, prefix=prefix, **kw)
