"""The default namespace of every command-line reader: one answer (aibom_edge.kubeconfig)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aibom_edge import kubeconfig
from aibom_edge.kubeconfig import context_namespace, kubeconfig_path

CONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts:
  - {name: a, context: {cluster: c, user: u, namespace: team-a}}
  - {name: b, context: {cluster: c, user: u}}
current-context: a
"""


@pytest.fixture
def no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No kubeconfig anywhere (as in a Pod); returns where the SA namespace file goes."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    sa = tmp_path / "namespace"
    monkeypatch.setattr(kubeconfig, "SA_NAMESPACE", sa)
    return sa


def test_the_contexts_namespace(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    assert context_namespace(str(path), None) == "team-a"  # the current context
    assert context_namespace(str(path), "b") == "default"  # a context without one
    assert context_namespace(str(path), "nosuch") == "default"


def test_kubeconfig_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert kubeconfig_path(None) == str(path)
    assert context_namespace(None, None) == "team-a"


def test_in_a_pod_the_service_accounts_namespace(no_kubeconfig: Path) -> None:
    assert kubeconfig_path(None) is None  # what the client loads too: in-cluster
    no_kubeconfig.write_text("team-b\n")
    assert context_namespace(None, None) == "team-b"


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_no_service_account_namespace_is_default(no_kubeconfig: Path, content: str | None) -> None:
    # `verify` read an empty file as the namespace "" (and listed
    # /api/v1/namespaces//configmaps); `kubectl aibom` said `default`.
    if content is not None:
        no_kubeconfig.write_text(content)
    assert context_namespace(None, None) == "default"


def test_an_unreadable_kubeconfig_is_not_the_service_accounts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_kubeconfig: Path
) -> None:
    # The client loads the kubeconfig named (and reports it broken), never the
    # in-cluster account: the namespace is not the account's either.
    no_kubeconfig.write_text("team-b")
    broken = tmp_path / "broken"
    broken.write_text("contexts: 3\n")
    assert context_namespace(str(broken), None) == "default"
