"""aibom_edge.heap: glibc's thresholds are pinned, and the environment wins."""

from __future__ import annotations

import ctypes
import platform

import pytest

from aibom_edge import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_thresholds_are_pinned_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in heap._ENV:
        monkeypatch.delenv(name, raising=False)
    calls: list[tuple[int, int]] = []
    real = ctypes.CDLL(None).mallopt

    class Libc:
        def __init__(self) -> None:

            def mallopt(param: int, value: int) -> int:
                calls.append((param, value))
                return int(real(param, value))

            self.mallopt = mallopt

    monkeypatch.setattr(ctypes, "CDLL", lambda _name: Libc())
    assert heap.pin_malloc_thresholds() is True
    assert calls == [(-3, heap.THRESHOLD), (-1, heap.THRESHOLD)]


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: pytest.fail("libc touched"))
    assert heap.pin_malloc_thresholds() is False


def test_no_mallopt_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in heap._ENV:
        monkeypatch.delenv(name, raising=False)

    class NoMallopt:
        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", lambda _name: NoMallopt())
    assert heap.pin_malloc_thresholds() is False
