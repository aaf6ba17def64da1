"""Lists and watches of one kind decoded straight into the fields a reader keeps.

A Pod as the API server sends it is ~4.5 KB of JSON, of which the annotator
keeps a few hundred bytes (annotator/slim.py): `managedFields`, probes,
resources, tolerations, the token volume and the conditions are parsed into
Python objects only to be thrown away, and the parse and the freeing were two
thirds of the annotator's CPU per Pod at 100,000 Pods. `msgspec` decodes JSON
against a schema (here a TypedDict: the result is still plain dicts) and skips
every key the schema does not name without building an object for it.

The schema is the reader's (it names what the reader reads); what it must
never do is lose the meaning of a response. So:

- only successful (2xx) list pages and watch events that carry an object
  (ADDED, MODIFIED, DELETED) go through the schema; a Status (an error page, an
  ERROR event) and a BOOKMARK are parsed whole;
- a body the schema refuses (a field of an unexpected type, from a server or
  a conversion webhook we did not foresee) is parsed whole instead: slower,
  never wrong, since the reader already accepts whole objects;
- the list's own metadata (continue token, resourceVersion) is parsed whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypedDict, TypeVar

import msgspec

from aibom_edge.wire import loads

T = TypeVar("T")

# Events whose object is an object of the kind (not a Status, not a bookmark).
OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class _Page(TypedDict, Generic[T], total=False):
    metadata: dict[str, Any]
    items: list[T]


class _Event(msgspec.Struct, Generic[T]):
    type: str
    object: T


class KindSchema:
    """Decoders of list pages and watch events whose objects are `item` (a TypedDict of
    the fields kept; every other field is skipped, see the module docstring).
    `fallback` parses a body whole (the client's own parser)."""

    def __init__(self, item: Any, *, fallback: Callable[[bytes], Any] = loads) -> None:
        self._page = msgspec.json.Decoder(_Page[item])
        self._event = msgspec.json.Decoder(_Event[item])
        self._fallback = fallback

    def page(self, raw: bytes) -> Any:
        """A list page (`{"metadata": ..., "items": [...]}`), its items trimmed."""
        try:
            return self._page.decode(raw)
        except msgspec.DecodeError:  # ValidationError included
            return self._fallback(raw)

    def event(self, raw: bytes) -> Any:
        """A watch event (`{"type": ..., "object": ...}`), its object trimmed when it is
        one of the kind's. Decoded once, through the schema; an event of another type
        (an ERROR's Status, a BOOKMARK: rare) is then parsed again, whole."""
        try:
            event = self._event.decode(raw)
        except msgspec.DecodeError:
            return self._fallback(raw)
        if event.type in OBJECT_EVENTS:
            return {"type": event.type, "object": event.object}
        return self._fallback(raw)
