"""The webhook's flags become one `Settings`; its defaults are the flags' own (the
bounds of the numeric flags: test_webhook_limits)."""

from __future__ import annotations

import argparse
import dataclasses

from webhook.flags import Settings, configure_parser, settings_of


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure_parser(p)
    return p.parse_args(["--cert-file", "tls.crt", "--key-file", "tls.key", *argv])


def _plain(s: Settings) -> dict[str, object]:
    """The settings but the registry (compared by its kinds)."""
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "registry"}


def test_the_defaults_of_settings_are_the_flags_defaults() -> None:
    got = settings_of(_parse())
    want = Settings(cert_file="tls.crt", key_file="tls.key")
    assert _plain(got) == _plain(want)
    assert (got.registry.tracked, got.registry.walk_only) == (
        want.registry.tracked,
        want.registry.walk_only,
    )


def test_every_flag_reaches_the_settings() -> None:
    got = settings_of(
        _parse(
            "--port=9443",
            "--walk-deadline=2.5",
            "--no-owner-watch",
            "--max-connections=7",
            "--sar-cache-size=3",
            "--max-depth=4",
            "--annotation-prefix=x.example/",
        )
    )
    assert (got.port, got.walk_deadline, got.owner_watch) == (9443, 2.5, False)
    assert (got.max_connections, got.sar_cache_size, got.max_depth) == (7, 3, 4)
    assert got.keys.prefix == "x.example/"
    names = {f.name for f in dataclasses.fields(Settings)}
    flags = set(vars(_parse())) - {"kinds", "annotation_prefix"}
    assert flags <= names, flags - names
