"""The no-effects contract (tools/purity.py) finds what the import contracts cannot."""

from __future__ import annotations

from tools.purity import Effect, effects_in


def test_clock_environment_files_and_console_are_found() -> None:
    source = (
        "import datetime\n"
        "def f(env):\n"
        "    t = datetime.datetime.now()\n"
        "    u = datetime.date.today()\n"
        "    v = env.environ\n"
        "    print(open('x').read())\n"
    )
    assert effects_in("m", source) == [
        Effect("m", 3, ".now"),
        Effect("m", 4, ".today"),
        Effect("m", 5, ".environ"),
        Effect("m", 6, "open()"),
        Effect("m", 6, "print()"),
    ]


def test_pure_code_and_parsing_a_timestamp_pass() -> None:
    source = (
        "from datetime import datetime\n"
        "def f(text, now):\n"
        "    return datetime.fromisoformat(text) < now\n"
    )
    assert effects_in("m", source) == []
