"""`aibom-rollup webhook` as the benchmarks run it: a child process at log level
warning (no per-review line), its log in the Webhook's folder, ready when
/readyz answers 200. The Webhook (certificates, configuration, client) is the
integration tests' (tests/integration/test_webhook.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.controlplane import child_env  # noqa: E402
from tests.integration.support import Webhook  # noqa: E402


def start_webhook(
    hook: Webhook, *, prefix: Sequence[str] = (), ready_within: float = 30.0
) -> BinaryIO:
    """Start `hook`'s process (`prefix`: e.g. taskset) with its `args`; wait until ready.

    Returns the open log file (the caller closes it after stopping the process).
    """
    flags = {
        "--cert-file": hook.dir / "tls.crt",
        "--key-file": hook.dir / "tls.key",
        "--host": "127.0.0.1",
        "--port": hook.port,
        "--kubeconfig": hook.kubeconfig,
        "--log-level": "warning",
    }
    argv = [*prefix, sys.executable, "-m", "aibom_rollup", "webhook"]
    argv += [str(part) for pair in flags.items() for part in pair]
    log = open(hook.log, "ab")  # noqa: SIM115 - the child keeps it
    hook.proc = subprocess.Popen(
        [*argv, *hook.args], cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=log
    )
    deadline = time.monotonic() + ready_within
    while True:
        try:
            if hook.request("GET", "/readyz")[0] == 200:
                return log
        except OSError:
            pass
        if hook.proc.poll() is not None or time.monotonic() > deadline:
            hook.proc.kill()
            hook.proc.wait()
            log.close()
            raise SystemExit(f"webhook not ready: {hook.log.read_text()[-2000:]}")
        time.sleep(0.2)
