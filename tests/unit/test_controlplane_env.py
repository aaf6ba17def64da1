"""kubectl's discovery cache never crosses from one control plane to another.

kubectl caches discovery on disk by `host_port` for hours; the harness's
control planes reuse loopback ports, and the shared ~/.kube/cache once served
one control plane's API versions to the next one on that port (the demo asked
for a Dynamo version its API server did not serve).
"""

from __future__ import annotations

from pathlib import Path

from tests.controlplane import child_env, kubectl_env


def test_child_env_keeps_kubectl_out_of_the_users_cache() -> None:
    env = child_env({"HOME": "/home/u", "KUBECONFIG": "/x", "HTTPS_PROXY": "http://p"})
    cache = Path(env["KUBECACHEDIR"])
    assert cache.is_dir()
    assert not cache.is_relative_to(Path.home() / ".kube")
    assert "KUBECONFIG" not in env and "HTTPS_PROXY" not in env


def test_each_control_plane_has_its_own_kubectl_cache(tmp_path: Path) -> None:
    one, two = tmp_path / "cp-1/admin/kubeconfig", tmp_path / "cp-2/admin/kubeconfig"
    env_one, env_two = kubectl_env(one), kubectl_env(two)
    assert env_one["KUBECONFIG"] == str(one)
    assert env_one["KUBECACHEDIR"] == str(tmp_path / "cp-1/admin/kubectl-cache")
    assert env_one["KUBECACHEDIR"] != env_two["KUBECACHEDIR"]
    assert env_one["KUBERC"] == "off"
