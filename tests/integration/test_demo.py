"""`make demo` end to end: the README's main command works and shows the product.

Runs demo/run.py with its own state folders and free ports (a demo you left
running is not touched), checks what it prints and what is in the cluster,
then `demo/run.py down`.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from demo.run import COMPONENTS as DEMO_COMPONENTS
from tests.controlplane import REPO_ROOT, child_env, kubectl_path
from tests.integration.support import free_port

#: The demo starts these (demo/run.py COMPONENTS): built before the first test, and
#: the module skips where one cannot be built here (no source tree), as the
#: operators' own modules do. The `components` fixture is not used: the demo starts
#: its own control plane and components.
pytestmark = [pytest.mark.integration, pytest.mark.components(*DEMO_COMPONENTS)]


# Lines the demo must print.
DEMO_OUTPUT = (
    # The stamps as kubectl prints them, the tree, the documents.
    "aibom.dev/root: DynamoGraphDeployment/vllm-agg",
    "aibom.dev/rollup: uncovered",
    "Pod/vllm-0-1  [rolled-up] -> LeaderWorkerSet/vllm",
    # The real Dynamo operator's names (the worker's carries its spec hash).
    "aibom.rollup.owned.3 = DynamoComponentDeployment/vllm-agg-vllmdecodeworker-",
    "documents of rolled-up children: none",
    # The kubectl plugin, run by the real kubectl (README's quick tour).
    "==> kubectl aibom tree dgd/vllm-agg -n aibom-demo",
    "DynamoGraphDeployment/vllm-agg  [root]",
    "verdict: rolled-up -> DynamoGraphDeployment/vllm-agg",
    "the carried stamp is current",
    # The LWS, NIM, KServe and KubeRay chains are the real operators' (their
    # controller references and field managers), not played.
    *(f"{what:50s} controller: {by}" for what, by in (
        ("StatefulSet/vllm-0", "Pod/vllm-0"),
        ("Deployment/meta-llama-3-2-1b-instruct", "NIMService/meta-llama-3-2-1b-instruct"),
        ("Deployment/huggingface-llama2-predictor", "InferenceService/huggingface-llama2"),
    )),
    "controller: RayService/rayservice-sample",
    "managers: lws",
    "[real  ] LeaderWorkerSet -> leader StatefulSet",
    # So are the Dynamo and Grove chains (their operators' field managers).
    *(f"{what:50s} controller: {by}" for what, by in (
        ("Deployment/vllm-agg-frontend", "DynamoComponentDeployment/vllm-agg-frontend"),
        ("PodClique/vllm-disagg-0-frontend", "PodCliqueSet/vllm-disagg"),
    )),
    "managers: dynamo-operator",
    "managers: grove-operator",
    "PodCliqueSet/vllm-disagg  [rolled-up] -> DynamoGraphDeployment/vllm-disagg",
    "PodCliqueSet/prefill  [root]",
    "[real  ] DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment",
    "[real  ] DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pods",
    "[real  ] NIMService -> Deployment",
    "[real  ] InferenceService -> Deployment",
    "[real  ] RayService -> RayCluster",
    # Pod statuses and their digests: kube-scheduler and kwok's Stages, not the script.
    "[real  ] Pod -> Node, Pod status (Running, imageID digests)",
    "every container's imageID reported by kwok",
    # Signed by default, exported to the local registry, its history shown.
    "==> kubectl aibom history dgd/vllm-agg -n aibom-demo",
    "history of DynamoGraphDeployment/vllm-agg (namespace aibom-demo)",
    "(first version)",
)  # fmt: skip


def test_make_demo(tmp_path: Path) -> None:
    env = child_env(dict(os.environ))
    env.update(
        AIBOM_UP_DIR=str(tmp_path / "up"),
        AIBOM_DEMO_DIR=str(tmp_path / "demo"),
        AIBOM_DEMO_WEBHOOK_PORT=str(free_port()),
        AIBOM_DEMO_METRICS_PORT=str(free_port()),
        AIBOM_DEMO_HEALTH_PORT=str(free_port()),
    )
    demo = [sys.executable, str(REPO_ROOT / "demo" / "run.py")]
    try:
        run = subprocess.run(
            demo, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False
        )
        out = run.stdout
        assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
        missing = [line for line in DEMO_OUTPUT if line not in out]
        assert not missing, missing
        state = json.loads((tmp_path / "up" / "state.json").read_text())
        cms = subprocess.run(
            [str(kubectl_path()), "--kubeconfig", state["kubeconfig"], "get", "configmaps",
             "-n", "aibom-demo", "-l", "app.kubernetes.io/managed-by=aibom-rollup", "-o", "json"],
            capture_output=True, text=True, check=True, env=child_env(),
        )  # fmt: skip
        # The demo's webhook answers only the API server (it stamped
        # everything above); a stranger without its client certificate gets 401.
        assert "callers authenticated" in out
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        port = env["AIBOM_DEMO_WEBHOOK_PORT"]
        stranger = urllib.request.Request(
            f"https://127.0.0.1:{port}/mutate", data=b"{}", method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            urllib.request.urlopen(stranger, timeout=10, context=ctx)
            raise AssertionError("the demo webhook answered a stranger")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        names = sorted(c["metadata"]["name"] for c in json.loads(cms.stdout)["items"])
        assert names == [
            "aibom-cronjob-nightly-eval",
            "aibom-deployment-web",
            "aibom-dynamographdeployment-vllm-agg",
            "aibom-dynamographdeployment-vllm-disagg",
            "aibom-inferenceservice-huggingface-llama2",
            "aibom-leaderworkerset-vllm",
            "aibom-nimservice-meta-llama-3-2-1b-instruct",
            "aibom-podcliqueset-prefill",
            "aibom-rayservice-rayservice-sample",
        ]
        # Signed by default: every document verifies against the published key set,
        # and the plugin's get says so.
        verify = subprocess.run(
            [sys.executable, "-m", "aibom_rollup", "verify", "--kubeconfig", state["kubeconfig"],
             "-n", "aibom-demo"],
            capture_output=True, text=True, env=child_env(), cwd=REPO_ROOT, check=False,
        )  # fmt: skip
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert [line.split()[0] for line in verify.stdout.splitlines()] == ["valid"] * 9
    finally:
        subprocess.run(
            [*demo, "down"], env=env, cwd=REPO_ROOT, capture_output=True, timeout=120, check=False
        )
    assert not (tmp_path / "up" / "state.json").exists()
