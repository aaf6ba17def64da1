"""A watch stream (`?watch=1`): its answer checked, its lines split into events.

The request client (`aibom_edge.kube.Kube.watch`) opens the stream with its
identity; what arrives is read here: a 410 (as a status or as an ERROR event)
is `WatchExpired` (relist), any other failure a `KubeError` carrying the
status and the server's `Retry-After`, so the caller (`aibom_edge.reflector`)
relists or backs off by those, never by the text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from aibom_edge.wire import KubeError, WatchExpired, retry_after

# Lines of a watch stream are whole objects (up to the API server's ~3 MiB
# limit, wrapped in an event); we split the stream ourselves, so no line limit.
WATCH_CHUNK = 1 << 16
# Connecting may take this long; reading never times out (a watch is quiet for
# minutes: the server ends it after its timeoutSeconds).
WATCH_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)


async def events(
    resp: aiohttp.ClientResponse, path: str, parse: Callable[[bytes], Any]
) -> AsyncIterator[dict[str, Any]]:
    """The events of an opened watch response, one dict each (`parse`d from its line),
    until the server ends the stream. Raises as the module doc says."""
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
                raise_on_error_event(path, event)
                yield event
    if buf.strip():
        event = parse(buf)
        raise_on_error_event(path, event)
        yield event


def raise_on_error_event(path: str, event: Any) -> None:
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
