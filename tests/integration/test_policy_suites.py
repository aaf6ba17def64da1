"""The shipped policies under their engines' own test tools: ``kyverno test``, ``gator verify``.

The suites live beside the policies (manifests/policies/kyverno/tests,
manifests/policies/gatekeeper/tests) and share the stamped Pods of
manifests/policies/testdata; each rule has a passing and a refused case. The
tools are the engines' CLIs built from the engines' modules (tests/controlplane/
gotools.py: ``kyverno-cli``, ``gator``); no cluster is involved. Each suite is
also shown to fail when its policy loses a value it must refuse, and the Kyverno
policies to follow their ``prefix`` variable (the Gatekeeper suite has its own
prefix case).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.controlplane import child_env
from tests.controlplane.gotools import ensure_tool
from tests.integration.support import MANIFESTS

pytestmark = [pytest.mark.integration, pytest.mark.gotools("kyverno-cli", "gator")]

POLICIES = MANIFESTS / "policies"
KYVERNO = ("kyverno", "tests")
GATEKEEPER = ("gatekeeper", "tests")


def kyverno_test(policies: Path) -> subprocess.CompletedProcess[str]:
    """``kyverno test`` of the Kyverno suite under ``policies``."""
    return _run([str(ensure_tool("kyverno-cli")), "test", str(policies.joinpath(*KYVERNO))])


def gator_verify(policies: Path) -> subprocess.CompletedProcess[str]:
    """``gator verify`` of the Gatekeeper suite under ``policies``, with each case listed."""
    suite = policies.joinpath(*GATEKEEPER) / "suite.yaml"
    return _run([str(ensure_tool("gator")), "verify", "--verbose", str(suite)])


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, env=child_env(), timeout=300, check=False
    )


def copy(tmp_path: Path) -> Path:
    """A copy of manifests/policies (the suites' relative paths hold in it)."""
    target = tmp_path / "policies"
    shutil.copytree(POLICIES, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_kyverno_test_passes_every_case() -> None:
    out = kyverno_test(POLICIES)
    assert out.returncode == 0, out.stdout + out.stderr
    # One row per (policy, resource, operation): 8 results naming 16 resources.
    rows = re.findall(r"│\s*\d+\s*│.*?│\s*(Pass|Fail)\s*│", out.stdout)
    assert len(rows) == 16 and set(rows) == {"Pass"}, out.stdout
    assert "Test Summary: 16 tests passed and 0 tests failed" in out.stdout, out.stdout


def test_gator_verify_passes_every_case() -> None:
    out = gator_verify(POLICIES)
    assert out.returncode == 0, out.stdout + out.stderr
    # Cases are indented under their test: 10 + 3 + 2.
    cases = re.findall(r"^ +--- PASS: (\S+)", out.stdout, re.MULTILINE)
    assert len(cases) == 15 and "FAIL" not in out.stdout, out.stdout


def test_the_suites_fail_when_a_policy_stops_refusing_unproven(tmp_path: Path) -> None:
    """Mutation: a policy that lets `unproven` through fails its engine's suite."""
    policies = copy(tmp_path)
    for name in ("require-aibom-coverage.yaml", "audit-aibom-coverage.yaml"):
        edit(policies / "kyverno" / name, "['uncovered', 'unproven']", "['uncovered']")
    edit(policies / "gatekeeper" / "template.yaml", '{"uncovered", "unproven"}', '{"uncovered"}')
    out = kyverno_test(policies)
    assert out.returncode != 0 and "tests failed" in out.stdout, out.stdout
    assert not re.search(r"Test Summary: \d+ tests passed and 0 tests failed", out.stdout)
    out = gator_verify(policies)
    assert out.returncode != 0, out.stdout
    failed = re.findall(r"^ +--- FAIL: (\S+)", out.stdout, re.MULTILINE)
    assert failed == ["forged-pod-refused-with-its-reason", "forged-pod-listed-with-its-reason"]


def test_kyverno_policies_follow_their_prefix_variable(tmp_path: Path) -> None:
    """The webhook run with --annotation-prefix example.org/ stamps example.org/rollup:
    the policies with that prefix judge it; with the default they would not."""
    policies = copy(tmp_path)
    for pod in (policies / "testdata").glob("pod-*.yaml"):
        pod.write_text(pod.read_text().replace("aibom.dev/", "example.org/"))
    out = kyverno_test(policies)
    assert out.returncode != 0, out.stdout  # the default prefix misses every stamp
    for name in ("require-aibom-coverage.yaml", "audit-aibom-coverage.yaml"):
        edit(policies / "kyverno" / name, "\"'aibom.dev/'\"", "\"'example.org/'\"")
    out = kyverno_test(policies)
    assert out.returncode == 0, out.stdout + out.stderr
