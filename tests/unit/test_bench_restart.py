"""bench/annotator_bench.py's restart measurement, its pure parts: the list ceiling's
continue token, the page size it lists with, and which run is reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import annotator_bench as bench

from aibom_edge.reflector import DEFAULT_PAGE_SIZE


def page(token: str | None, items: list[dict[str, object]]) -> bytes:
    meta: dict[str, object] = {"resourceVersion": "42"}
    if token is not None:
        meta["continue"] = token
    body = {"kind": "PodList", "metadata": meta, "items": items}
    return json.dumps(body, separators=(",", ":")).encode()  # as the API server writes it


def spaced(raw: bytes) -> bytes:
    return json.dumps(json.loads(raw)).encode()


def test_the_continue_token_is_read_from_the_lists_metadata() -> None:
    assert bench._continue_token(page("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", [])) == {
        "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"
    }
    assert bench._continue_token(page(None, [{"metadata": {"name": "a"}}])) == {}
    assert bench._continue_token(spaced(page("t", []))) == {"continue": "t"}


def test_an_items_text_is_never_taken_for_the_token() -> None:
    # The last page has no token; an annotation that looks like one must not
    # make the ceiling client ask for a page that does not exist.
    item: dict[str, object] = {
        "metadata": {"annotations": {"x": "y"}, "name": "p"},
        "continue": "forged",
    }
    assert bench._continue_token(page(None, [item])) == {}
    assert bench._continue_token(page("real", [item])) == {"continue": "real"}


def test_the_ceiling_lists_with_the_annotators_page_size() -> None:
    assert bench.page_size_of([]) == DEFAULT_PAGE_SIZE
    assert bench.page_size_of(["--trust-owner-references", "--page-size=250"]) == 250
    assert bench.page_size_of(["--page-size", "300"]) == 300


def test_the_median_run_is_one_real_run() -> None:
    runs = [
        {"restart_seconds": 19.6, "list_ceiling_seconds": 10.7},
        {"restart_seconds": 15.8, "list_ceiling_seconds": 8.1},
        {"restart_seconds": 16.4, "list_ceiling_seconds": 11.5},
    ]
    assert bench.median_run(runs) is runs[2]
    assert bench.median_run(runs[:2]) is runs[1]  # the lower of an even count
    assert bench.median_run(runs[:1]) is runs[0]
