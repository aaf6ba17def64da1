"""Files the webhook re-reads when they change: the serving certificate and key
(webhook.tls) and the caller's token (webhook.auth).

A file is known by (inode, size, mtime) of what its path leads to, followed
through symlinks: a Kubernetes Secret volume swaps a `..data` symlink
atomically, and an in-place write changes the size or mtime. The poll looks
every `interval` seconds and reloads off the event loop (reading files is
blocking I/O). What a reload does with a file that does not parse (keep the
previous content and look again next time) is the caller's rule.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileStat:
    ino: int
    size: int
    mtime_ns: int


def stat_of(path: str) -> FileStat | None:
    """The identity of the file at `path` now (None: it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStat(st.st_ino, st.st_size, st.st_mtime_ns)


async def poll(interval: float, changed: Callable[[], bool], reload: Callable[[], object]) -> None:
    """Every `interval` seconds, `reload()` in a thread when `changed()`; until cancelled."""
    while True:
        await asyncio.sleep(interval)
        if changed():
            await asyncio.to_thread(reload)
