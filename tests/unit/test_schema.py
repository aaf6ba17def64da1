"""Typed decoding of lists and watches (aibom_edge.schema): trimmed objects, no lost meaning."""

from __future__ import annotations

from typing import Any, TypedDict

import orjson
import pytest

from aibom_edge.schema import KindSchema


class Meta(TypedDict, total=False):
    name: str
    uid: str


class Item(TypedDict, total=False):
    metadata: Meta


SCHEMA = KindSchema(Item)
POD = {"metadata": {"name": "p", "uid": "u", "managedFields": [{"manager": "m"}]}, "spec": {}}
TRIMMED = {"metadata": {"name": "p", "uid": "u"}}


def test_list_pages_keep_their_own_metadata_and_trim_items() -> None:
    meta = {"continue": "tok", "resourceVersion": "7", "remainingItemCount": 3}
    page = SCHEMA.page(orjson.dumps({"kind": "PodList", "metadata": meta, "items": [POD, POD]}))
    assert page == {"metadata": meta, "items": [TRIMMED, TRIMMED]}


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_events_with_an_object_of_the_kind_are_trimmed(kind: str) -> None:
    assert SCHEMA.event(orjson.dumps({"type": kind, "object": POD})) == {
        "type": kind,
        "object": TRIMMED,
    }


@pytest.mark.parametrize(
    "event",
    [
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}},
        {
            "type": "BOOKMARK",
            "object": {
                "metadata": {
                    "resourceVersion": "12",
                    "annotations": {"k8s.io/initial-events-end": "true"},
                }
            },
        },
    ],
)
def test_statuses_and_bookmarks_are_kept_whole(event: dict[str, Any]) -> None:
    assert SCHEMA.event(orjson.dumps(event)) == event


def test_what_the_schema_refuses_is_parsed_whole() -> None:
    odd = {"metadata": {"name": "p", "uid": 12345}, "spec": {"x": 1}}  # uid not a string
    assert SCHEMA.page(orjson.dumps({"items": [odd]})) == {"items": [odd]}
    assert SCHEMA.event(orjson.dumps({"type": "ADDED", "object": odd})) == {
        "type": "ADDED",
        "object": odd,
    }
    # An event of an unforeseen shape (no object) is the parser's to judge, as before.
    assert SCHEMA.event(b'{"type":"ADDED"}') == {"type": "ADDED"}


@pytest.mark.parametrize("raw", [b"{not json", b'{"items": [', b""])
def test_malformed_json_is_an_error_as_with_the_whole_parser(raw: bytes) -> None:
    with pytest.raises(ValueError):
        SCHEMA.page(raw)
    with pytest.raises(ValueError):
        SCHEMA.event(raw)
