"""The body of an AdmissionReview: how large the API server can make it, reading it
in bounded memory, and decoding it by its size.

How large. The API server refuses request bodies over 3 MiB
(MaxRequestBodyBytes), but the review it sends us is its own JSON encoding of
the decoded object, and Go's encoder writes `<`, `>`, `&` (and U+2028, U+2029,
each byte of invalid UTF-8) as a six-byte `\\u003c`: a 3 MiB object of `<` is
an 18 MiB review. An UPDATE carries the object and oldObject. So:

    MAX_BODY = 2 x 6 x 3 MiB + 1 MiB (request metadata: userInfo, options) = 37 MiB

(A Pod padded with 1,350,000 `<` is a 1.35 MB request and a 16 MB review; the
old limit of 7 MiB answered it 413, failurePolicy Ignore admitted it, and the
stamp values the tenant wrote stayed.) Objects etcd can store are smaller
(1.5 MiB by default), so a real review stays well under this.

Bounded memory. A review up to 1 MiB is read whole and parsed whole
(`admission.parse_review`, orjson). A larger one is read in steps into one
buffer of its Content-Length, under a budget of `BUDGET` bytes for all large
bodies at once (a review waits for room, within the body timeout), and
decoded through a schema that keeps what the webhook reads (request fields,
each object's apiVersion, kind and metadata, a Pod's containers and a
template's: name and image) and skips the rest without making Python objects
of it (msgspec). 30 MiB of small JSON objects cost 190 MiB parsed whole,
nothing this way.

A body over MAX_BODY (a protobuf request whose defaults expand more than six
times, an etcd that stores larger objects) is still answered: its first
MAX_BODY bytes are kept, the rest read and dropped, and the request's fields
and the object's metadata, which the API server writes first, are read from
that prefix (`prefix_review`). The review is then answered as any other,
from its metadata: an error would be failurePolicy Ignore keeping whatever
the stamp keys hold. Only a body whose object metadata is not in the prefix
(no object etcd could store) is refused (413).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from aiohttp import web

from webhook.admission import BadReview, Review, parse_review, review_of

MiB = 1 << 20
REQUEST_LIMIT = 3 * MiB  # the API server's request body limit (MaxRequestBodyBytes)
ESCAPE_FACTOR = 6  # a `<` of the request is `\u003c` in the review
MAX_BODY = 2 * ESCAPE_FACTOR * REQUEST_LIMIT + MiB
SMALL = MiB  # read and parsed whole up to here
BUDGET = 2 * MAX_BODY  # bytes of large bodies held at once
_STEP = 256 * 1024


class BodyBudget:
    """Bytes of large bodies held at once: `hold(n)` waits until they fit."""

    def __init__(self, total: int = BUDGET) -> None:
        self.total = total
        self.held = 0
        self._room = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        size = min(size, self.total)  # one body alone always fits
        async with self._room:
            await self._room.wait_for(lambda: self.held + size <= self.total)
            self.held += size
        try:
            yield
        finally:
            async with self._room:
                self.held -= size
                self._room.notify_all()


@dataclass(frozen=True, slots=True)
class Read:
    """What was read: the review (`Review.partial`: decoded from the first
    `MAX_BODY` bytes of a larger body) and how many bytes the body had."""

    review: Review
    size: int


async def read_review(request: web.Request, *, budget: BodyBudget, limit: int = MAX_BODY) -> Read:
    """Read and decode one body (the module docstring); BadReview when it is not a
    review we can answer. The caller bounds the time it may take."""
    length = request.content_length
    if length is not None and length <= min(SMALL, limit):
        data = await request.read()
        return Read(parse_review(data), len(data))
    async with budget.hold(min(length or limit, limit)):
        buf, size = await _collect(request, length, limit)
        if size > limit:
            return Read(prefix_review(buf), size)
        if size <= SMALL:
            return Read(parse_review(buf), size)
        return Read(large_review(buf), size)


async def _collect(request: web.Request, length: int | None, limit: int) -> tuple[bytearray, int]:
    """The body's first `limit` bytes and its whole length. The buffer is allocated
    at the announced length and filled in place, so it is never copied while it
    grows; the rest of a body over `limit` is read and dropped (the API server
    reads our answer only once it has sent everything)."""
    buf = bytearray(min(length, limit)) if length is not None else bytearray()
    size = kept = 0
    async for chunk in request.content.iter_chunked(_STEP):
        size += len(chunk)
        keep = chunk[: max(0, limit - kept)]
        if keep:
            buf[kept : kept + len(keep)] = keep  # in place while within the announced length
            kept += len(keep)
    del buf[kept:]
    return buf, size


# -- large bodies: a schema of what the webhook reads ------------------------------------------


# Fields in snake case, their JSON names in camel case (`rename`).
class _Container(msgspec.Struct):
    name: Any = None
    image: Any = None


class _PodSpec(msgspec.Struct, rename="camel"):
    containers: list[_Container] | None = None
    init_containers: list[_Container] | None = None


class _Template(msgspec.Struct):
    spec: _PodSpec | None = None


class _Spec(_PodSpec):
    template: _Template | None = None


class _Object(msgspec.Struct, rename="camel"):
    api_version: Any = None
    kind: Any = None
    metadata: Any = None
    spec: msgspec.Raw = msgspec.Raw(b"null")


class _Request(msgspec.Struct, rename="camel"):
    uid: Any = None
    kind: Any = None
    namespace: Any = None
    name: Any = None
    operation: Any = None
    sub_resource: Any = None
    user_info: Any = None
    object: msgspec.Raw = msgspec.Raw(b"null")
    old_object: msgspec.Raw = msgspec.Raw(b"null")


class _Review(msgspec.Struct, rename="camel"):
    api_version: Any = None
    kind: Any = None
    request: _Request | None = None


_REVIEW = msgspec.json.Decoder(_Review)
_OBJECT = msgspec.json.Decoder(_Object)
_SPEC = msgspec.json.Decoder(_Spec)


def large_review(body: bytes | bytearray) -> Review:
    """A review over SMALL: decoded through the schema above (the rest of each object
    skipped, never made into Python objects). Same answers as `parse_review` for
    anything the API server sends (a unit test compares them)."""
    try:
        doc = _REVIEW.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadReview(f"body is not an AdmissionReview ({exc})") from None
    req = doc.request
    out: dict[str, Any] = {"apiVersion": doc.api_version, "kind": doc.kind}
    if req is not None:
        request: dict[str, Any] = {
            k: v
            for k, v in (
                ("uid", req.uid),
                ("kind", req.kind),
                ("namespace", req.namespace),
                ("name", req.name),
                ("operation", req.operation),
                ("subResource", req.sub_resource),
                ("userInfo", req.user_info),
            )
            if v is not None
        }
        for key, raw in (("object", req.object), ("oldObject", req.old_object)):
            request[key] = _object(raw)
        out["request"] = request
    return review_of(out)


def _object(raw: msgspec.Raw) -> Any:
    """An object as the webhook reads it: apiVersion, kind, metadata, and of its spec
    only the containers (a Pod's, a Pod template's): name and image."""
    try:
        obj = _OBJECT.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        # Not an object (null, or what no API server sends): small, or refused.
        if len(raw) > SMALL:
            raise BadReview("request.object is not a JSON object") from None
        return orjson.loads(bytes(raw))
    out: dict[str, Any] = {"apiVersion": obj.api_version, "kind": obj.kind}
    if obj.metadata is not None:
        out["metadata"] = obj.metadata
    try:
        spec: _Spec | None = _SPEC.decode(obj.spec)
    except (msgspec.DecodeError, RecursionError):
        spec = None  # none, or of another shape (a CRD's): it runs no Pod we read
    if spec is not None:
        kept = _containers(spec)
        if spec.template is not None and spec.template.spec is not None:
            kept["template"] = {"spec": _containers(spec.template.spec)}
        out["spec"] = kept
    return {k: v for k, v in out.items() if v is not None}


def _containers(spec: _PodSpec) -> dict[str, Any]:
    out = {}
    for field, items in (("containers", spec.containers), ("initContainers", spec.init_containers)):
        if items is not None:
            out[field] = [{"name": c.name, "image": c.image} for c in items]
    return out


# -- a body over the limit: its prefix -----------------------------------------------------

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_SPACE = re.compile(rb"[ \t\n\r]*")
_TOKEN = re.compile(rb'["{}\[\]]')
_SCALAR = re.compile(rb"[^,}\]\s]+")


class _Cut(Exception):
    """The prefix ends before the value does."""


class _Cursor:
    """A read-only walk over a JSON prefix: keys, and the spans of values."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.pos = 0

    def _space(self) -> None:
        match = _SPACE.match(self.data, self.pos)
        self.pos = match.end() if match else self.pos
        if self.pos >= len(self.data):
            raise _Cut

    def take(self, char: bytes) -> bool:
        self._space()
        if self.data[self.pos : self.pos + 1] == char:
            self.pos += 1
            return True
        return False

    def key(self) -> str | None:
        """The next key of the object being walked (None: it ended)."""
        if self.take(b"}"):
            return None
        self.take(b",")
        self._space()
        match = _STRING.match(self.data, self.pos)
        if match is None:
            raise _Cut
        self.pos = match.end()
        if not self.take(b":"):
            raise _Cut
        value: str = orjson.loads(match.group())
        return value

    def value(self) -> Any:
        """The next value, decoded (small ones: request fields, metadata)."""
        start = self.skip()
        return orjson.loads(self.data[start : self.pos])

    def skip(self) -> int:
        """Step over the next value; returns where it started."""
        self._space()
        start, data = self.pos, self.data
        first = data[start : start + 1]
        if first == b'"':
            match = _STRING.match(data, start)
            if match is None:
                raise _Cut
            self.pos = match.end()
        elif first in (b"{", b"["):
            depth, pos = 0, start
            while True:
                token = _TOKEN.search(data, pos)
                if token is None:
                    raise _Cut
                char = token.group()
                if char == b'"':
                    string = _STRING.match(data, token.start())
                    if string is None:
                        raise _Cut
                    pos = string.end()
                    continue
                depth += 1 if char in (b"{", b"[") else -1
                pos = token.end()
                if depth == 0:
                    break
            self.pos = pos
        else:
            match = _SCALAR.match(data, start)
            if match is None or match.end() >= len(data):
                raise _Cut
            self.pos = match.end()
        return start


_HEADER = ("uid", "kind", "namespace", "name", "operation", "subResource", "userInfo")


def prefix_review(prefix: bytes | bytearray) -> Review:
    """A review from the first bytes of a body too large to keep: the request's
    fields and the object's apiVersion, kind and metadata (the API server writes
    them before the object's spec and before oldObject). 413 when they are not in
    the prefix."""
    cursor = _Cursor(prefix)
    doc: dict[str, Any] = {}
    request: dict[str, Any] = {}
    try:
        if not cursor.take(b"{"):
            raise BadReview("body is not JSON: expected an AdmissionReview")
        while (key := cursor.key()) is not None:
            if key != "request":
                doc[key] = cursor.value()
                continue
            if not cursor.take(b"{"):
                raise BadReview("request is not an object")
            while (field := cursor.key()) is not None:
                if field in _HEADER:
                    request[field] = cursor.value()
                elif field == "object":
                    request["object"] = _object_head(cursor)
                    break
                else:
                    cursor.skip()
            break
    except (_Cut, ValueError):
        pass
    obj = request.get("object")
    if not isinstance(obj, dict) or "metadata" not in obj or "uid" not in request:
        raise BadReview(
            f"request body too large, and the object's metadata is not within its first "
            f"{len(prefix)} bytes",
            status=413,
        )
    doc["request"] = request
    return review_of(doc, partial=True)


def _object_head(cursor: _Cursor) -> dict[str, Any]:
    """apiVersion, kind and metadata of the object at the cursor (they come first)."""
    out: dict[str, Any] = {}
    if not cursor.take(b"{"):
        raise _Cut
    while (key := cursor.key()) is not None:
        if key in ("apiVersion", "kind", "metadata"):
            out[key] = cursor.value()
            if {"apiVersion", "kind", "metadata"} <= out.keys():
                break
        else:
            cursor.skip()
    return out
