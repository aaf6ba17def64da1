"""The `aibom-rollup annotator` command line: flags, help, and errors that say what is wrong."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aibom_edge.options import UsageError
from aibom_rollup.cli import build_parser
from annotator.flags import configure_parser, settings_of
from tests.unit.clihelp import help_of


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure_parser(p)
    return p.parse_args(list(argv))


def test_help_names_every_operational_flag() -> None:
    out = help_of("annotator")
    for flag in (
        "--kubeconfig",
        "--namespace-label",
        "--lease-namespace",
        "--lease-name",
        "--identity",
        "--metrics-port",
        "--health-port",
        "--leader-elect",
        "--stamp-repair",
        "--max-document-bytes",
        "--kinds",
    ):
        assert flag in out, flag
    assert "Exit codes" in out


def test_defaults_are_the_documented_ones() -> None:
    settings, election = settings_of(parse())
    assert settings.namespace_label == ("aibom.dev/enabled", "true")
    assert settings.stamp_mode == "opted-in"
    assert settings.size_limit == 1 << 20
    assert election is not None
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15, 10, 2)
    assert election.name == "aibom-rollup-annotator"
    _, none = settings_of(parse("--no-leader-elect"))
    assert none is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--namespace-label", "=x"], "--namespace-label"),
        (["--lease-duration", "5", "--renew-deadline", "10"], "--renew-deadline"),
        (["--max-depth", "0"], "--max-depth"),
        (["--annotation-prefix", "nope"], "annotation prefix"),
        (["--kinds", "/nonexistent/kinds.yaml"], "/nonexistent/kinds.yaml"),
    ],
)
def test_bad_configuration_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        settings_of(parse(*argv))


@pytest.mark.parametrize(
    "argv", [["--workers", "x"], ["--lease-duration", "15.5"], ["--stamp-repair", "some"]]
)
def test_what_is_not_a_value_of_the_flag_is_refused_by_the_parser(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_the_cli_dispatches_to_the_annotator() -> None:
    args = build_parser(["annotator"]).parse_args(["annotator", "--no-leader-elect"])
    assert args.command == "annotator" and args.leader_elect is False


def test_fault_flags_reach_the_settings() -> None:
    args = parse(
        "--watch-idle-timeout=7",
        "--api-retries=3",
        "--lease-duration=20",
        "--renew-deadline=12",
        "--retry-period=3",
    )
    settings, election = settings_of(args)
    assert settings.watch_idle_timeout == 7.0 and args.api_retries == 3
    assert election is not None
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
        20.0,
        12.0,
        3.0,
    )
    assert settings_of(parse())[0].watch_idle_timeout == 90.0
    with pytest.raises(UsageError, match="--api-retries"):
        settings_of(parse("--api-retries=-1"))
    with pytest.raises(UsageError, match="--renew-deadline"):
        settings_of(parse("--renew-deadline=20"))


def test_a_runtime_failure_exits_1_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    """Exit 1 on a runtime failure (docs/annotator.md): here its metrics port is taken."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [sys.executable, "-m", "aibom_rollup", "annotator", "--kubeconfig", str(config)]
        args += ["--no-leader-elect", "--bind-address", "127.0.0.1", "--metrics-port", str(port)]
        args += ["--health-port", "0", "--log-format", "logfmt"]
        out = subprocess.run(args, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if "level=error" in line]
    assert len(errors) == 1, out.stderr
    assert "cannot serve the metrics/health endpoints" in errors[0]
