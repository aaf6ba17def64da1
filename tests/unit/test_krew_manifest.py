"""The krew manifest template names the plugin the package installs."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.controlplane import REPO_ROOT

MANIFEST = REPO_ROOT / "plugins" / "krew" / "aibom.yaml"


def test_the_krew_template_renders_to_a_plugin_for_the_installed_executable() -> None:
    text = MANIFEST.read_text()
    # What krew-release-bot does at release time, with a stand-in tag and archive.
    text = re.sub(
        r"\{\{addURIAndSha \"([^\"]+)\" \.TagName \}\}",
        lambda m: f"uri: {m.group(1)}\n      sha256: {'0' * 64}",
        text,
    ).replace("{{ .TagName }}", "v0.1.0")
    plugin = yaml.safe_load(text)
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "aibom"
    (platform,) = plugin["spec"]["platforms"]
    assert platform["uri"].endswith("/v0.1.0/kubectl-aibom.tar.gz")
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert platform["bin"] in scripts  # the executable the package installs
    assert scripts[platform["bin"]] == "aibom_rollup.kubectl_aibom:main"
