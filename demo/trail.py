"""The audit trail in `make demo`: a local registry, the annotator exporting to it, a history.

The registry is the harness's component (`up --with registry`: the CNCF
distribution registry, TLS from the cluster CA, htpasswd); `up` records its
address, user, password and CA in its state file. `annotator_args` gives the
annotator its export flags (credentials written as a dockerconfigjson file,
as a Secret would be mounted); `show` waits for the graph's versions to land
and prints `kubectl aibom history` and the signature states of `get`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

CLUSTER_ID = "demo"


def registry_of(up_state: dict[str, Any]) -> dict[str, Any] | None:
    info = up_state.get("components", {}).get("registry")
    return info if isinstance(info, dict) and info.get("url") else None


def annotator_args(registry: dict[str, Any], state: Path) -> list[str]:
    """The export flags (docs/annotator.md, Export) for the demo's registry."""
    host = str(registry["url"]).removeprefix("https://")
    token = base64.b64encode(f"{registry['username']}:{registry['password']}".encode()).decode()
    creds = state / "registry-credentials.json"
    creds.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    creds.chmod(0o600)
    return [
        "--export-registry", f"{host}/aibom",
        "--export-registry-credentials", str(creds),
        "--export-ca-file", str(registry["ca_file"]),
        "--export-cluster-id", CLUSTER_ID,
    ]  # fmt: skip


def env_of(registry: dict[str, Any], state: Path) -> dict[str, str]:
    """What `kubectl aibom history` and `--at` read the trail with."""
    host = str(registry["url"]).removeprefix("https://")
    return {
        "AIBOM_EXPORT_REGISTRY": f"{host}/aibom",
        "AIBOM_EXPORT_CREDENTIALS": str(state / "registry-credentials.json"),
        "AIBOM_EXPORT_CA_FILE": str(registry["ca_file"]),
        "AIBOM_CLUSTER_ID": CLUSTER_ID,
    }


def show(kubectl: str, env: dict[str, str], ns: str, root: str, timeout: float = 60) -> None:
    """Wait until the root's current document is in the registry, then print its history
    (the document is exported a moment after it is written)."""
    deadline = time.monotonic() + timeout
    proc = None
    while time.monotonic() < deadline:
        proc = subprocess.run(
            [kubectl, "aibom", "history", root, "-n", ns, "-o", "json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        cm = subprocess.run(
            [kubectl, "get", "configmap", "-n", ns, "-o", "json",
             f"aibom-{root.split('/', maxsplit=1)[0].lower()}-{root.split('/')[1]}"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        if proc.returncode == 0 and cm.returncode == 0:
            versions = json.loads(proc.stdout)["versions"]
            want = json.loads(cm.stdout)["metadata"]["annotations"].get("aibom.dev/input-hash")
            if versions and versions[-1]["inputHash"] == want:
                break
        time.sleep(1)
    table = subprocess.run(
        [kubectl, "aibom", "history", root, "-n", ns],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    print((table.stdout + table.stderr).rstrip())
    print(f"  (the registry: {env['AIBOM_EXPORT_REGISTRY']}; versions are never overwritten)")


def plugin_env(
    base: dict[str, str], registry: dict[str, Any] | None, state: Path
) -> dict[str, str]:
    env = dict(base)
    if registry is not None:
        env |= env_of(registry, state)
    env.setdefault("PATH", os.environ.get("PATH", ""))
    return env
