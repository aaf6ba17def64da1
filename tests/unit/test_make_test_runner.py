"""``python -m tests.run``: the phases it is told to skip are skipped, without a traceback."""

from __future__ import annotations

import pytest

from tests import run


def test_skipping_every_phase_runs_nothing_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--skip", "builds,lint,unit,integration"]) == 0
    out = capsys.readouterr().out
    for phase in run.PHASES:
        assert f"{phase:<12}" in out and "skipped" in out


def test_an_unknown_phase_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--skip", "lnit"])
    assert exc.value.code == 2
    assert "unknown phase(s) lnit" in capsys.readouterr().err
