"""kube-controller-manager: Kubernetes' own controllers (deployment, replicaset,
statefulset, job, cronjob, garbage collector, namespace, serviceaccount, ...), as
``system:kube-controller-manager`` with per-controller ServiceAccount credentials."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.controlplane.apiserver import SERVICE_CLUSTER_IP_RANGE
from tests.controlplane.process import Process, status_of_get


@dataclass
class KubeControllerManager:
    bin_dir: Path
    work_dir: Path
    log_dir: Path
    port: int
    kubeconfig: Path
    ca_file: Path
    ca_key_file: Path
    sa_key_file: Path
    extra_args: Sequence[str] = ()
    process: Process | None = field(init=False, default=None)

    def args(self) -> list[str]:
        return [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.work_dir}",
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.sa_key_file}",
            f"--root-ca-file={self.ca_file}",
            f"--cluster-signing-cert-file={self.ca_file}",
            f"--cluster-signing-key-file={self.ca_key_file}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--profiling=false",
            "--v=1",
            *self.extra_args,
        ]

    def start(
        self, controllers_run: Callable[[], bool], *, timeout: float, also: Sequence[Process] = ()
    ) -> Process:
        """Start it; return once ``/healthz`` answers and ``controllers_run()`` (the
        control plane checks that the serviceaccount controller made ``default``)."""
        self.process = Process(
            "kube-controller-manager", self.args(), self.log_dir / "kube-controller-manager.log"
        ).start()
        self.process.wait_ready(
            "kube-controller-manager /healthz and the default ServiceAccount",
            lambda: self.healthy() and controllers_run(),
            timeout,
            also=also,
        )
        return self.process

    def healthy(self) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=2, context=ctx)
        return status_of_get(conn, "/healthz") == 200
