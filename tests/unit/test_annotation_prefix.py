"""`--annotation-prefix` is refused at start, by the webhook and the annotator alike.

A prefix that is not a DNS-1123 subdomain + `/` makes every stamped key
invalid: the API server would reject every patched object (every CREATE in
opted-in namespaces denied). Both processes share one validator
(`aibom_core.stamp.prefix_problem`, through `Keys`): one line on stderr,
exit code 2, no traceback, before anything else starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aibom_core.stamp import Keys, prefix_problem
from aibom_rollup.cli import main

BAD = [
    "Bad_Prefix/",  # upper case and `_`
    "a..b/",  # empty label
    "-aibom.dev/",  # starts with `-`
    "aibom.dev-/",  # ends with `-`
    "aibom dev/",  # space
    "x" * 254 + "/",  # 254 characters
    "/",  # empty subdomain
    "aibom.dev",  # no `/`
    "a/b/",  # two `/`
    "aibom.dev/\n",  # control character after the `/`
]
GOOD = ["aibom.dev/", "example.com/", "a/", "x" * 253 + "/", "a-b.c-d.e1/"]


@pytest.mark.parametrize("prefix", BAD)
def test_bad_prefixes_have_a_reason(prefix: str) -> None:
    assert prefix_problem(prefix)
    with pytest.raises(ValueError, match="annotation prefix"):
        Keys(prefix)


@pytest.mark.parametrize("prefix", GOOD)
def test_good_prefixes(prefix: str) -> None:
    assert prefix_problem(prefix) is None
    assert Keys(prefix).rollup == prefix + "rollup"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    assert main(["certs", "--out-dir", str(out), "--no-config"]) == 0
    return out


@pytest.mark.parametrize("prefix", ["Bad_Prefix/", "a..b/", "x" * 254 + "/"])
@pytest.mark.parametrize("command", ["webhook", "annotator"])
def test_refused_at_start_with_one_line_and_exit_2(
    command: str, prefix: str, certs: Path, tmp_path: Path
) -> None:
    args = [sys.executable, "-m", "aibom_rollup", command, "--annotation-prefix", prefix]
    if command == "webhook":
        # Valid certificate files: the prefix is what must stop it.
        args += ["--cert-file", str(certs / "tls.crt"), "--key-file", str(certs / "tls.key")]
        args += ["--port", "1"]
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    out = subprocess.run(args, check=False, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("aibom-rollup: error: --annotation-prefix: "), lines[0]
    assert "Traceback" not in out.stderr and out.stdout == ""
