"""The annotator's numeric flags (`annotator.flags.Limits`): one check per bound.

Each bound is tried just outside (a UsageError naming the flag) and on its
edge (accepted), so a bound that moves or disappears fails here.
"""

from __future__ import annotations

import argparse

import pytest

from aibom_edge.options import UsageError
from aibom_rollup.cli import main
from annotator.configmap import MAX_DATA_BYTES
from annotator.flags import MIN_DOCUMENT_BYTES, configure_parser, settings_of

# (flag, refused value, the message's start, the accepted value on the edge)
BOUNDS = [
    ("--workers", "0", "--workers must be greater than or equal to 1, got 0", "1"),
    ("--write-qps", "0", "--write-qps must be greater than 0, got 0.0", "0.001"),
    ("--write-qps", "inf", "--write-qps must be a finite number, got inf", "1e6"),
    ("--write-burst", "0", "--write-burst must be greater than or equal to 1", "1"),
    ("--stamp-qps", "-1", "--stamp-qps must be greater than 0, got -1.0", "0.5"),
    ("--stamp-qps", "nan", "--stamp-qps must be a finite number", "0.5"),
    ("--stamp-burst", "0", "--stamp-burst must be greater than or equal to 1", "1"),
    ("--stamp-settle", "-0.5", "--stamp-settle must be greater than or equal to 0", "0"),
    ("--rediscovery-interval", "0", "--rediscovery-interval must be greater than 0", "0.1"),
    ("--sync-timeout", "0", "--sync-timeout must be greater than 0", "0.1"),
    ("--page-size", "0", "--page-size must be greater than or equal to 1", "1"),
    (
        "--max-document-bytes",
        str(MIN_DOCUMENT_BYTES - 1),
        f"--max-document-bytes must be greater than or equal to {MIN_DOCUMENT_BYTES}",
        str(MIN_DOCUMENT_BYTES),
    ),
    (
        "--max-document-bytes",
        str(MAX_DATA_BYTES + 1),
        f"--max-document-bytes must be less than or equal to {MAX_DATA_BYTES}",
        str(MAX_DATA_BYTES),
    ),
    ("--watch-timeout", "0", "--watch-timeout must be greater than or equal to 1", "1"),
    ("--watch-timeout", "3601", "--watch-timeout must be less than or equal to 3600", "3600"),
    ("--watch-idle-timeout", "0", "--watch-idle-timeout must be greater than 0", "0.5"),
    ("--api-retries", "-1", "--api-retries must be greater than or equal to 0, got -1", "0"),
    ("--lease-duration", "0", "--lease-duration must be greater than or equal to 1", None),
    ("--metrics-port", "-1", "--metrics-port must be greater than or equal to 0", "0"),
    ("--metrics-port", "65536", "--metrics-port must be less than or equal to 65535", "65535"),
    ("--health-port", "65536", "--health-port must be less than or equal to 65535", "65535"),
    ("--max-depth", "0", "--max-depth must be greater than or equal to 1", "1"),
    ("--max-depth", "65", "--max-depth must be less than or equal to 64", "64"),
]


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure_parser(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(("flag", "bad", "message", "edge"), BOUNDS)
def test_a_flag_just_out_of_bounds_is_named_and_its_edge_accepted(
    flag: str, bad: str, message: str, edge: str | None
) -> None:
    with pytest.raises(UsageError) as refused:
        settings_of(parse(f"{flag}={bad}"))
    assert str(refused.value).startswith(message), refused.value
    if edge is not None:
        settings_of(parse(f"{flag}={edge}"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--lease-duration=10", "--renew-deadline=10"],
            "--renew-deadline (10) must be less than --lease-duration (10)",
        ),
        (
            ["--renew-deadline=2", "--retry-period=2"],
            "--retry-period (2) must be less than --renew-deadline (2)",
        ),
    ],
)
def test_lease_timings_that_do_not_fit_together_name_both_flags(
    argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError) as refused:
        settings_of(parse(*argv))
    assert str(refused.value).startswith(message), refused.value
    # Without leader election the Lease timings are not used, so not checked.
    _, election = settings_of(parse(*argv, "--no-leader-elect"))
    assert election is None
    # Just inside: accepted, and they reach the election config as given.
    _, election = settings_of(parse("--lease-duration=11", "--renew-deadline=10.5"))
    assert election is not None and (election.lease_duration, election.renew_deadline) == (
        11,
        10.5,
    )


def test_the_command_exits_2_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["annotator", "--write-burst=0"]) == 2
    err = capsys.readouterr().err
    assert err == "aibom-rollup: error: --write-burst must be greater than or equal to 1, got 0\n"
