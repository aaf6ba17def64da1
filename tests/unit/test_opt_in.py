"""The opt-in label: one parser and one reading of it for every process."""

from __future__ import annotations

import argparse

import pytest

from aibom_core.opt_in import DEFAULT_OPT_IN, guard_opted_out, opted_in, parse_label
from aibom_edge.options import UsageError, add_namespace_label_option, namespace_label_of
from annotator.flags import configure_parser as annotator_parser
from annotator.flags import settings_of
from webhook.main import configure_parser as webhook_parser


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("aibom.dev/enabled=true", ("aibom.dev/enabled", "true")),
        ("team", ("team", "true")),
        (" a = b ", ("a", "b")),
        ("a=", ("a", "")),
    ],
)
def test_parse_label(spec: str, want: tuple[str, str]) -> None:
    assert parse_label(spec) == want


def test_parse_label_rejects_empty_key() -> None:
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_label("=x")


@pytest.mark.parametrize(
    ("labels", "label", "want"),
    [
        ({"aibom.dev/enabled": "true"}, DEFAULT_OPT_IN, True),
        ({"aibom.dev/enabled": "false"}, DEFAULT_OPT_IN, False),
        ({}, DEFAULT_OPT_IN, False),
        (None, DEFAULT_OPT_IN, False),
        ({"team": "ml"}, ("team", "ml"), True),
        ({"aibom.dev/enabled": "true"}, ("team", "ml"), False),
    ],
)
def test_opted_in(labels: dict[str, str] | None, label: tuple[str, str], want: bool) -> None:
    assert opted_in(labels, label) is want


def test_guard_opted_out() -> None:
    assert guard_opted_out({"aibom.dev/provenance-guard": "disabled"})
    assert not guard_opted_out({"aibom.dev/provenance-guard": "enabled"})
    assert not guard_opted_out({})
    assert not guard_opted_out(None)


def test_namespace_label_flag_defaults_to_the_opt_in_label() -> None:
    p = argparse.ArgumentParser()
    add_namespace_label_option(p.add_argument_group("g"), help_text="h")
    assert namespace_label_of(p.parse_args([])) == DEFAULT_OPT_IN
    assert namespace_label_of(p.parse_args(["--namespace-label", "team=ml"])) == ("team", "ml")
    with pytest.raises(UsageError, match="--namespace-label: must look like KEY=VALUE"):
        namespace_label_of(p.parse_args(["--namespace-label", "=x"]))


def test_the_annotator_takes_the_flag_and_the_webhook_does_not() -> None:
    """The opt-in label decides which namespaces the annotator documents (the
    webhook's own scope is its configuration's namespaceSelector). The webhook
    took it to tell guarded namespaces, which prove no edge (docs/provenance-guard.md)."""
    p = argparse.ArgumentParser()
    annotator_parser(p)
    assert namespace_label_of(p.parse_args(["--namespace-label", "team"])) == ("team", "true")
    assert p.parse_args([]).namespace_label == "aibom.dev/enabled=true"
    hook = argparse.ArgumentParser()
    webhook_parser(hook)
    with pytest.raises(SystemExit):
        hook.parse_args(["--cert-file", "c", "--key-file", "k", "--namespace-label", "team"])


def test_the_annotator_refuses_an_empty_key() -> None:
    p = argparse.ArgumentParser()
    annotator_parser(p)
    with pytest.raises(UsageError, match="--namespace-label"):
        settings_of(p.parse_args(["--namespace-label", "=x"]))
