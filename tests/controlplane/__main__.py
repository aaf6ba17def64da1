"""``python -m tests.controlplane {build,up,down,status}``: see ``--help``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.controlplane import (
    ETCD_VERSION,
    K8S_VERSION,
    REGISTRY,
    REPO_ROOT,
    BuildError,
    ControlPlane,
    ControlPlaneError,
    SourceMissing,
    cache_dir,
    ensure_binaries,
    kubectl_env,
    webhook_caller,
)
from tests.controlplane.gotools import TOOLS, ensure_tool


def _description() -> str:
    names = "\n".join(f"  {name:<14} {cls.summary}" for name, cls in sorted(REGISTRY.items()))
    tools = ", ".join(TOOLS)
    return f"""\
A real Kubernetes {K8S_VERSION} control plane (etcd {ETCD_VERSION}, kube-apiserver,
kube-controller-manager, kubectl) and the real components around it, built from
Go modules (tests/controlplane/modules/, or upstream source trees where the module
proxy refuses a module) and cached under {cache_dir()} (AIBOM_CACHE_DIR moves it).

commands:
  build   build the binaries unless cached (about 7 min the first time), print their folder;
          --with NAMES also builds those components, --all every component and tool
  up      start a control plane in the background, install the CRDs from the shared
          upstream folder (AIBOM_SHARED_DIR), start the components of --with, print the
          kubeconfig path and return
  down    stop the control plane that 'up' started and remove its data
  status  tell whether one is running, and where its kubeconfig is
  list    the components and tools, one line each

components (--with a,b; each runs as its own ServiceAccount with its release's RBAC):
{names}
tools (build --all): {tools}

There is no kubelet: Pods stay Pending unless --with kwok (kube-scheduler binds them to
kwok's fake Nodes, whose Stages report them Running with their image digests).
Logs of each process: <state dir>/data/logs/.
"""


def state_dir() -> Path:
    """Where `up` keeps its state and data ($AIBOM_UP_DIR moves it, e.g. for a test)."""
    env = os.environ.get("AIBOM_UP_DIR")
    return Path(env) if env else cache_dir() / "up"


def state_file() -> Path:
    return state_dir() / "state.json"


def _read_state() -> dict[str, Any] | None:
    try:
        data = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _print_info(state: dict[str, Any]) -> None:
    print(f"kubeconfig: {state['kubeconfig']}")
    print(f"server:     {state['server']}")
    print(f"kubectl:    {state['kubectl']}")
    print(f"logs:       {state['logs']}")
    for name, info in state.get("components", {}).items():
        print(f"{name + ':':<16}{info['summary']} as {info['user'] or 'itself'}")
    # kubectl's discovery cache as the harness sets it (process.kubectl_env):
    # ~/.kube/cache, keyed by host:port, can hold what an earlier control plane
    # on the same port served.
    cache = kubectl_env(state["kubeconfig"])["KUBECACHEDIR"]
    print(
        f"use:        export KUBECONFIG={state['kubeconfig']} KUBECACHEDIR={cache};"
        f" {state['kubectl']} get ns"
    )
    print(f"stop:       cd {REPO_ROOT} && {sys.executable} -m tests.controlplane down")


def _names(value: str | None) -> list[str]:
    """``--with a,b``: known component names, in order (argparse reports the unknown)."""
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        known = ", ".join(sorted(REGISTRY))
        raise argparse.ArgumentTypeError(
            f"unknown component(s) {', '.join(unknown)}; known: {known}"
        )
    return names


def build_all(names: list[str], *, tools: bool = False) -> dict[str, BuildError]:
    """Build the control plane, the components ``names`` (and what they require) and,
    with ``tools``, the Go tools: what a test run or the demo needs before it starts.

    The control plane's own build raises. Any other failure is kept, by name, and the
    rest are still built: one operator that cannot be built here stops nothing else.
    A component that requires one that was not built is not built either (its error
    is of the same class, :class:`SourceMissing` included). Returns what was not built.
    """
    ensure_binaries()
    failed: dict[str, BuildError] = {}
    seen: set[str] = set()

    def build(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for needed in REGISTRY[name].requires:
            build(needed)
            if needed in failed:
                cause = failed[needed]
                failed[name] = type(cause)(f"requires {needed}, which was not built: {cause}")
                return
        try:
            REGISTRY[name].build()
        except BuildError as exc:
            failed[name] = exc

    for name in names:
        build(name)
    for tool in TOOLS if tools else ():
        try:
            ensure_tool(tool)
        except BuildError as exc:
            failed[tool] = exc
    return failed


def report_unbuilt(failed: dict[str, BuildError]) -> int:
    """Print one ``not built:`` line per failure; 1 if any is a broken build, 0 if every
    one only lacks its source tree here (the tests that need them skip and say so)."""
    for name, exc in sorted(failed.items()):
        kind = "no source tree here" if isinstance(exc, SourceMissing) else "BUILD FAILED"
        print(f"not built: {name} ({kind}): {exc}", file=sys.stderr)
    return 1 if any(not isinstance(e, SourceMissing) for e in failed.values()) else 0


def cmd_build(args: argparse.Namespace) -> int:
    names = sorted(REGISTRY) if args.all else args.with_
    code = report_unbuilt(build_all(names, tools=args.all))
    print(ensure_binaries())
    return code


def cmd_list(_: argparse.Namespace) -> int:
    for name, cls in sorted(REGISTRY.items()):
        print(f"{name:<14} {cls.summary}")
    for name, tool in TOOLS.items():
        print(f"{name:<14} {name} {tool.version} (a tool: built, never started)")
    return 0


def cmd_status(_: argparse.Namespace) -> int:
    state = _read_state()
    if state and _alive(int(state["pid"])) and state.get("status") == "ready":
        print(f"running (supervisor pid {state['pid']})")
        _print_info(state)
        return 0
    print("not running")
    return 1


def cmd_up(args: argparse.Namespace) -> int:
    state = _read_state()
    if state and _alive(int(state["pid"])):
        missing = [n for n in args.with_ if n not in state.get("components", {})]
        if missing:
            print(
                f"already running (supervisor pid {state['pid']}) without {', '.join(missing)};"
                f" run 'down' first, then 'up --with {','.join(args.with_)}'",
                file=sys.stderr,
            )
            return 1
        print(f"already running (supervisor pid {state['pid']})")
        _print_info(state)
        return 0
    # In the foreground, so the builds' progress shows; what was asked for must run.
    failed = build_all(args.with_)
    if failed:
        report_unbuilt(failed)
        return 1
    directory = state_dir()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    log = directory / "supervisor.log"
    cmd = [sys.executable, "-m", "tests.controlplane", "_serve"]
    if args.no_crds:
        cmd.append("--no-crds")
    if args.webhook_client:
        cmd += ["--webhook-client", args.webhook_client]
    if args.with_:
        cmd += ["--with", ",".join(args.with_)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        state = _read_state()
        if state and state.get("status") == "ready":
            print(f"control plane {K8S_VERSION} is up (supervisor pid {proc.pid})")
            _print_info(state)
            return 0
        if proc.poll() is not None:
            print(
                f"the control plane failed to start (exit {proc.returncode}); {log}:",
                file=sys.stderr,
            )
            print(log.read_text(errors="replace")[-6000:], file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(f"timed out after {args.timeout:.0f} s; stopping it. {log}:", file=sys.stderr)
    print(log.read_text(errors="replace")[-6000:], file=sys.stderr)
    _stop(proc.pid, None)
    return 1


def _stop(pid: int, state: dict[str, Any] | None, grace: float = 60.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # Fallback: the supervisor could not clean up; each child leads its own group.
    for child in (state or {}).get("pids", {}).values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(child), signal.SIGKILL)


def cmd_down(_: argparse.Namespace) -> int:
    state = _read_state()
    if not state:
        print("not running")
        return 0
    pid = int(state["pid"])
    if _alive(pid):
        _stop(pid, state)
        print(f"stopped (supervisor pid {pid})")
    else:
        _stop(pid, state)
        print("was not running; cleaned up")
    shutil.rmtree(state_dir(), ignore_errors=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The detached supervisor: runs the control plane until SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    directory = state_dir()
    caller = None
    if args.webhook_client:
        # kube-apiserver authenticates to the webhook at this host:port.
        caller = webhook_caller(directory / "webhook-caller", webhook_host=args.webhook_client)
    cp = ControlPlane(
        data_dir=directory / "data",
        keep_data_dir=False,
        admission_config_file=caller.config_file if caller else None,
    )
    try:
        cp.start()
        if not args.no_crds:
            print(f"installed CRDs: {', '.join(cp.install_crds())}", flush=True)
        for name in args.with_:
            cp.start_component(name)
        # What --with named, and what those require (kwok's kube-scheduler).
        running = {name: c for name in cp.running_components if (c := cp.component(name))}
        state: dict[str, Any] = {
            "status": "ready",
            "pid": os.getpid(),
            "kubeconfig": str(cp.kubeconfig),
            "server": cp.server,
            "kubectl": str((cp.bin_dir or ensure_binaries()) / "kubectl"),
            "logs": str(directory / "data" / "logs"),
            "pids": cp.pids,
            "version": K8S_VERSION,
            "components": {name: c.info() for name, c in running.items()},
        }
        if caller is not None:
            state["webhook_caller"] = {
                "host": args.webhook_client,
                "client_ca_file": str(caller.client_ca_file),
                "token_file": str(caller.token_file),
            }
        tmp = state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(state_file())
        print(f"ready: {json.dumps(state)}", flush=True)
        while not stop.wait(2.0):
            if not cp.running:
                print("a control-plane process exited; stopping", file=sys.stderr, flush=True)
                for name, path in cp.log_files.items():
                    print(f"--- {name}: {path}", file=sys.stderr, flush=True)
                return 1
        return 0
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        cp.stop()
        with contextlib.suppress(OSError):
            state_file().unlink()
        print("stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.controlplane",
        description=_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{build,up,down,status,list}"
    )
    build = sub.add_parser("build", help="build the binaries unless cached")
    build.add_argument("--all", action="store_true", help="every component and tool")
    build.set_defaults(func=cmd_build)
    up = sub.add_parser("up", help="start in the background and install the CRDs")
    up.set_defaults(func=cmd_up)
    serve = sub.add_parser("_serve")  # internal: the detached supervisor that `up` starts
    serve.set_defaults(func=cmd_serve)
    # `up` hands these on to `_serve` (cmd_up): declared once, for both.
    for p in (up, serve):
        p.add_argument("--no-crds", action="store_true", help="do not install the CRDs")
        p.add_argument(
            "--webhook-client",
            metavar="HOST:PORT",
            help="kube-apiserver authenticates to the admission webhook at HOST:PORT with a "
            "client certificate and a bearer token (AdmissionConfiguration); state.json names "
            "the files the webhook needs (client CA, token)",
        )
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness")
    sub.add_parser("down", help="stop what 'up' started").set_defaults(func=cmd_down)
    sub.add_parser("status", help="is one running?").set_defaults(func=cmd_status)
    sub.add_parser("list", help="the components and tools").set_defaults(func=cmd_list)
    for p in (build, up, serve):
        p.add_argument(
            "--with",
            dest="with_",
            type=_names,
            default=[],
            metavar="NAMES",
            help="components to build (and, for up, start), comma-separated: "
            + ", ".join(sorted(REGISTRY)),
        )
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ControlPlaneError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
