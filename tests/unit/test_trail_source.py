"""`--at TIME` reads documents from the registry: a version that is no JSON
document (anyone with push rights can write one) is a warning, never a traceback,
and the others are still answered."""

from __future__ import annotations

import asyncio
import json

from aibom_core.kinds import default_registry
from aibom_core.trail import RootId, Version, digest_of
from aibom_rollup.trail_source import RegistrySource

GOOD = json.dumps({"bomFormat": "CycloneDX", "components": []}).encode()
BAD = b"\x1f\x8b not json"


def _version(name: str, data: bytes) -> Version:
    return Version(
        root=RootId("ns", "Deployment", name, group="apps"),
        cluster="c",
        digest=digest_of(data),
        size=len(data),
        input_hash="h",
        created="2026-01-01T00:00:00Z",
    )


class FakeTrail:
    def __init__(self, docs: dict[str, bytes]) -> None:
        self.docs = docs

    async def repositories(self) -> list[str]:
        return sorted(self.docs)

    async def versions(self, repository: str) -> list[Version]:
        return [_version(repository, self.docs[repository])]

    async def document(self, repository: str, version: Version) -> bytes:
        return self.docs[repository]


def test_a_version_that_is_no_json_is_skipped_with_a_reason() -> None:
    source = RegistrySource(
        FakeTrail({"good": GOOD, "bad": BAD}),  # type: ignore[arg-type]
        "2026-06-01T00:00:00Z",
        registry=default_registry(),
    )
    docs = asyncio.run(source.documents(None, None))
    assert [d.root for d in docs] == ["Deployment/good"]
    assert len(source.skipped) == 1
    assert source.skipped[0].startswith(f"bad@{digest_of(BAD)}: not a JSON document")
