"""`aibom-rollup webhook`'s numeric flags: out of bounds is a usage error naming the flag."""

from __future__ import annotations

import pytest

from aibom_rollup.cli import main

BASE = ["webhook", "--cert-file", "missing.crt", "--key-file", "missing.key"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--port", "0", "--port must be greater than 0, got 0"),
        ("--port", "65536", "--port must be less than 65536, got 65536"),
        ("--walk-deadline", "31", "--walk-deadline must be less than or equal to 30, got 31.0"),
        ("--walk-deadline", "0", "--walk-deadline must be greater than 0, got 0.0"),
        ("--owner-cache-ttl", "-1", "--owner-cache-ttl must be greater than or equal to 0"),
        ("--owner-cache-size", "0", "--owner-cache-size must be greater than or equal to 1"),
        ("--cert-check-interval", "0", "--cert-check-interval must be greater than 0"),
        ("--shutdown-grace", "-1", "--shutdown-grace must be greater than or equal to 0"),
        ("--max-depth", "65", "--max-depth must be less than or equal to 64"),
        ("--header-timeout", "61", "--header-timeout must be less than or equal to 60"),
        ("--body-timeout", "0", "--body-timeout must be greater than 0"),
        ("--max-connections", "0", "--max-connections must be greater than or equal to 1"),
        ("--sar-cache-ttl", "-0.5", "--sar-cache-ttl must be greater than or equal to 0"),
        ("--sar-cache-size", "0", "--sar-cache-size must be greater than or equal to 1"),
    ],
)
def test_a_flag_out_of_bounds_is_named(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aibom-rollup: error: {message}"), err
    assert "Traceback" not in err


def test_bounds_are_inclusive_where_the_help_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # In bounds: validation passes and the missing certificate is what fails.
    assert main([*BASE, "--walk-deadline", "30", "--max-depth", "64", "--shutdown-grace", "0"]) == 2
    assert "missing.crt" in capsys.readouterr().err
