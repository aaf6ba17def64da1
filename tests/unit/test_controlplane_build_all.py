"""The harness's `build_all`: one component that cannot be built stops nothing else.

A clone without `shared/upstream` beside it cannot build the operators the Go module
proxy refuses (Grove, Dynamo, the NIM operator): their builds raise `SourceMissing`,
what requires them is not built either, everything else is, and `build` exits 0 only
when every failure is a missing source tree (the tests that need them skip, saying so).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import tests.controlplane.__main__ as cli
from tests.controlplane import BuildError, SourceMissing
from tests.controlplane.component import Component


def fake(name: str, requires: tuple[str, ...] = (), error: BuildError | None = None) -> Any:
    built: list[str] = []

    class Fake(Component):
        summary: ClassVar[str] = name
        log: ClassVar[list[str]] = built

        @classmethod
        def build(cls) -> None:
            if error is not None:
                raise error
            cls.log.append(name)

    Fake.name = name
    Fake.requires = requires
    return Fake


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    reg = {
        "grove": fake("grove", error=SourceMissing("grove: the module proxy refuses it")),
        "dynamo": fake("dynamo", requires=("grove",)),
        "kwok": fake("kwok"),
        "broken": fake("broken", error=BuildError("go build failed (exit 2)")),
        "after": fake("after", requires=("kwok",)),
    }
    monkeypatch.setattr(cli, "REGISTRY", reg)
    monkeypatch.setattr(cli, "ensure_binaries", lambda: None)
    return reg


def test_a_missing_source_tree_stops_only_what_needs_it(registry: dict[str, Any]) -> None:
    failed = cli.build_all(["grove", "dynamo", "kwok", "after"])
    assert sorted(failed) == ["dynamo", "grove"]
    assert isinstance(failed["grove"], SourceMissing)
    # What requires it is "missing" too, and says why.
    assert isinstance(failed["dynamo"], SourceMissing)
    assert "requires grove, which was not built" in str(failed["dynamo"])
    assert registry["kwok"].log == ["kwok"] and registry["after"].log == ["after"]
    assert registry["dynamo"].log == []  # never tried
    assert cli.report_unbuilt(failed) == 0  # nothing is broken: the tests skip


def test_a_broken_build_is_reported_and_fails_the_command(
    registry: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    failed = cli.build_all(["broken", "kwok"])
    assert list(failed) == ["broken"] and registry["kwok"].log == ["kwok"]
    assert not isinstance(failed["broken"], SourceMissing)
    assert cli.report_unbuilt(failed) == 1
    assert "not built: broken (BUILD FAILED): go build failed" in capsys.readouterr().err


def test_the_control_plane_itself_still_raises(
    registry: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_go() -> None:
        raise BuildError("the Go toolchain ('go') is not on PATH")

    monkeypatch.setattr(cli, "ensure_binaries", no_go)
    with pytest.raises(BuildError, match="not on PATH"):
        cli.build_all(["kwok"])
