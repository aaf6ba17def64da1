"""etcd: one member on loopback, throwaway data (the control plane's storage)."""

from __future__ import annotations

import http.client
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tests.controlplane.process import Process


@dataclass
class Etcd:
    """``bin_dir/etcd`` serving ``http://127.0.0.1:client_port`` from ``data_dir``."""

    bin_dir: Path
    data_dir: Path
    log_dir: Path
    client_port: int
    peer_port: int
    process: Process | None = field(init=False, default=None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> Process:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.process = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # throwaway data: skip fsync, much faster on shared disks
                "--log-level=warn",
            ],
            self.log_dir / "etcd.log",
        ).start()
        self.process.wait_ready("etcd /health", self.healthy, timeout)
        return self.process

    def healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=2)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        return resp.status == 200 and json.loads(body).get("health") == "true"
