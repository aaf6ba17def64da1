"""What goes over the wire to the API server, whoever asks: media types, JSON, answers, errors.

The request client (`aibom_edge.kube`), discovery, the watch stream, the
paged list and the credentials all speak these; they sit below all of them so
none has to import the client to name an answer or an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

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


def dumps(obj: Any) -> bytes | str:
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
