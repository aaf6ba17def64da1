"""Credentials come from the `kubernetes` library's loaders, all of their settings kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aibom_edge.kube import Kube, _load_credentials


def kubeconfig(tmp_path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path = tmp_path / "config"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [
                    {"name": "one", "context": {"cluster": "c", "user": "u"}},
                    {"name": "two", "context": {"cluster": "c", "user": "u", "namespace": "x"}},
                ],
                "current-context": "one",
            }
        )
    )
    return path


def test_tls_server_name_and_proxy_url_reach_the_connection(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {
            "server": "https://10.0.0.1:6443",
            "insecure-skip-tls-verify": True,
            "tls-server-name": "kubernetes.default.svc",
            "proxy-url": "http://proxy.example:3128",
        },
        {"token": "static-token"},
    )
    creds = _load_credentials(str(path), "two")
    assert creds.server == "https://10.0.0.1:6443"
    assert creds.tls_server_name == "kubernetes.default.svc"
    assert creds.proxy == "http://proxy.example:3128"
    assert creds.token == "static-token"
    kube = Kube(creds)
    assert kube._conn_opts == {
        "server_hostname": "kubernetes.default.svc",
        "proxy": "http://proxy.example:3128",
    }


def test_an_exec_plugin_is_run_again_when_its_token_nears_expiry(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, sys\n"
        f"p = {str(counter)!r}\n"
        "n = int(open(p).read()) + 1 if os.path.exists(p) else 1\n"
        "open(p, 'w').write(str(n))\n"
        "json.dump({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': f'tok-{n}', 'expirationTimestamp': '2000-01-01T00:00:00Z'}},"
        " sys.stdout)\n"
    )
    path = kubeconfig(
        tmp_path,
        {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [str(plugin)],
                "interactiveMode": "Never",
            }
        },
    )
    creds = _load_credentials(str(path), None)
    runs = int(counter.read_text())
    assert creds.token == f"tok-{runs}" and creds.tokens is not None
    # Already expired: due (no I/O to tell), and fetching runs the plugin again.
    creds.tokens._checked -= 2
    assert creds.tokens.due()
    assert creds.tokens.fetch() == f"tok-{runs + 1}"
    assert creds.tokens.fetch(force=True) == f"tok-{int(counter.read_text())}"
    assert int(counter.read_text()) > runs + 1


async def test_proxy_environment_applies_only_without_proxy_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path, {"server": "https://127.0.0.1:6443"}, {"token": "t"})
    for name in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    async with Kube(_load_credentials(str(path), None)) as kube:
        assert kube._session is not None and not kube._session.trust_env
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    creds = _load_credentials(str(path), None)
    # The environment's proxy is not pinned on every request (NO_PROXY must apply).
    assert creds.proxy is None
    async with Kube(creds) as kube:
        assert kube._session is not None and kube._session.trust_env
        assert "proxy" not in kube._conn_opts
