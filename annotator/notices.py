"""Warnings logged once per cause: a kind that cannot be listed, a key file that
cannot be read, a kind whose stamps may not be patched, ... are said once, not
at every event, and said again only after their cause cleared (`clear`)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("annotator")


class Notices:
    def __init__(self) -> None:
        self.logged: set[tuple[str, ...]] = set()

    def once(self, marker: tuple[str, ...], msg: str, **fields: Any) -> None:
        if marker in self.logged:
            return
        self.logged.add(marker)
        log.warning(msg, extra=fields)

    def clear(self, marker: tuple[str, ...]) -> None:
        """The cause is gone: a later one is news, logged again (once)."""
        self.logged.discard(marker)
