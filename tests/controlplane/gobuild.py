"""The one builder for every Go program the harness runs: build once, cache, lock, progress.

A :class:`GoBuild` says what to build; :func:`ensure` builds it unless its cache
folder already holds it, and returns that folder (``bin/`` inside, plus any
files the build renders, such as a release's manifests). Two kinds of source:

- **a module of ours** (``module=``): a folder of ``modules/`` holding a
  ``go.mod`` whose ``tool`` directives name upstream's own main packages, and
  a complete, committed ``go.sum``; built with ``-mod=readonly``, so upstream
  code is built as published and nothing of it is copied here. For everything
  the Go module proxy serves (the control plane, LWS, helm, promtool, ...).
- **an upstream source tree** (``source=``): for operators whose modules the
  proxy refuses. :class:`SourceTree` pins the upstream module and version;
  the build takes it from the proxy where it is served, else from a source
  tree beside the checkout (``paths.upstream_source_dirs``), copies it, applies
  the smallest patch kept in this repository, and builds with upstream's own
  ``go.mod`` (through ``-modfile=`` a copy that adds ``replace`` directives
  for modules the proxy refuses, when needed).

The cache key (:func:`key`) is a hash of what the repository says about the
build (``go.mod``/``go.sum`` of our module, or the pinned module, version,
commit, patch and replaces; the flags; a recipe number), never of a source
tree's files: a machine whose cache holds the build needs no source tree.
Concurrent callers wait on ``<folder>/.lock`` for one build; progress goes to
stderr every ``progress_interval`` seconds and the full ``go build -v`` output
to ``<folder>/build.log``. Binaries never go into the repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from tests.controlplane.paths import MODULES_DIR, cache_dir, log, upstream_source_dirs


class BuildError(RuntimeError):
    """A Go build of the harness failed, or its source could not be found."""


class SourceMissing(BuildError):
    """The module proxy refuses an upstream module and no source tree of it is on
    this machine: not a broken build, one that cannot be made here (a clone without
    ``shared/upstream`` beside it). Tests that need it skip and say why."""


@dataclass(frozen=True)
class SourceTree:
    """An upstream module the proxy may refuse: where its code comes from.

    ``module``/``version`` are tried on the Go module proxy first (``go mod
    download``); where it refuses, the tree ``tree`` is looked up under
    :func:`paths.upstream_source_dirs` (it must hold ``marker``). ``build_dir``
    is the folder of the main module inside the tree (``.`` for its root).
    ``patch`` (a unified diff, ``-p1`` from the tree's root) is applied to the
    copy; ``replaces`` (module -> folder under the upstream source dir) become
    ``replace`` directives of a copy of its go.mod (``-modfile=``), each only
    where the proxy refuses that module at the version go.mod requires; ``vendor``
    builds from the tree's own ``vendor/`` (no proxy at all).
    """

    module: str
    version: str
    commit: str
    tree: str
    build_dir: str = "."
    marker: str = "go.mod"
    patch: Path | None = None
    replaces: Mapping[str, str] = field(default_factory=dict)
    vendor: bool = False
    #: other modules the main module's go.mod replaces with a relative path
    #: (``../scheduler/api``): on the proxy route each is downloaded there too.
    siblings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GoBuild:
    """One Go build: main packages of a module of ours or of an upstream source tree."""

    name: str
    version: str
    #: binary name -> main package (an import path, or ``./cmd`` in a source tree)
    mains: Mapping[str, str]
    module: Path | None = None
    source: SourceTree | None = None
    ldflags: str = "-s -w"
    tags: tuple[str, ...] = ()
    #: (binary, args, text its output must contain) before the build is kept
    check: tuple[str, tuple[str, ...], str] | None = None
    #: ``go mod verify`` before building (our modules: every module is checked)
    verify: bool = False
    estimate: str = "a few minutes"
    recipe: str = "1"
    #: more work after a good build: ``render(source_dir, staging_dir)`` may write
    #: files (a release's manifests) into the staging folder, kept beside ``bin/``
    render: Callable[[Path, Path], None] | None = None
    #: the files (or folders) ``render`` writes (a cache hit needs them too)
    outputs: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.module is None) == (self.source is None):
            raise ValueError(f"{self.name}: give exactly one of module= and source=")


def go_ldflags(variables: Mapping[str, Mapping[str, str]]) -> str:
    """``-ldflags`` of a release build: no symbol table or DWARF (``-s -w``), and each
    package's string variables set (``-X package.name=value``), in the order given."""
    settings = (
        f"-X {package}.{name}={value}"
        for package, values in variables.items()
        for name, value in values.items()
    )
    return " ".join(["-s -w", *settings])


def module_dir(name: str) -> Path:
    """The folder of one of our Go modules (``modules/<name>``)."""
    return MODULES_DIR / name


def module_source(module_folder: Path, module: str) -> Path:
    """Where the Go module cache holds ``module`` at the version our module in
    ``module_folder`` pins (downloaded, checked against its go.sum, if needed): a
    release's own ``config/`` and samples are read from there."""
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    res = subprocess.run(
        [find_go(), "mod", "download", "-json", module],
        cwd=module_folder, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise BuildError(f"go mod download {module} failed: {res.stderr[-2000:]}")
    return Path(json.loads(res.stdout)["Dir"])


def key(build: GoBuild) -> str:
    """``<name>-<version>-<16 hex>``: any change to what is built gives a new folder."""
    digest = hashlib.sha256()

    def feed(label: str, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        digest.update(label.encode() + b"\0" + raw + b"\0")

    feed("recipe", build.recipe)
    feed("ldflags", build.ldflags)
    feed("tags", ",".join(build.tags))
    feed("mains", json.dumps(dict(build.mains), sort_keys=True))
    feed("outputs", ",".join(build.outputs))
    if build.module is not None:
        for name in ("go.mod", "go.sum"):
            feed(name, (build.module / name).read_bytes())
    if build.source is not None:
        src = build.source
        feed("source", f"{src.module}@{src.version} {src.commit} {src.build_dir} {src.vendor}")
        feed("replaces", json.dumps(dict(src.replaces), sort_keys=True))
        feed("siblings", json.dumps(dict(src.siblings), sort_keys=True))
        if src.patch is not None:
            feed("patch", src.patch.read_bytes())
    return f"{build.name}-{build.version}-{digest.hexdigest()[:16]}"


def folder(build: GoBuild) -> Path:
    """Where the build of the current key lives (it may not exist yet)."""
    return cache_dir() / "builds" / key(build)


def binary(build: GoBuild, name: str | None = None) -> Path:
    """A binary of the build, built unless cached (the first one by default)."""
    return ensure(build) / "bin" / (name or next(iter(build.mains)))


def _have(build: GoBuild, key_dir: Path) -> bool:
    return all(os.access(key_dir / "bin" / name, os.X_OK) for name in build.mains) and all(
        (key_dir / name).exists() for name in build.outputs
    )


def ensure(build: GoBuild, *, progress_interval: float = 15.0) -> Path:
    """Build unless cached; return the build's folder (``bin/`` and rendered files).

    A cache hit costs a hash of a few files. Concurrent callers (pytest-xdist
    workers, ``make demo`` beside ``make test``) wait on the folder's lock and
    reuse the first one's build.
    """
    key_dir = folder(build)
    if _have(build, key_dir):
        return key_dir
    key_dir.mkdir(parents=True, exist_ok=True)
    with open(key_dir / ".lock", "w") as lock:
        if not _try_lock(lock):
            log(f"another process is building {key_dir.name}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not _have(build, key_dir):
            _build(build, key_dir, progress_interval)
    return key_dir


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def find_go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise BuildError("the Go toolchain ('go') is not on PATH; the test harness builds with it")
    return go


def tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(data[-lines:])


def _build(build: GoBuild, key_dir: Path, progress_interval: float) -> None:
    staging = Path(tempfile.mkdtemp(prefix="bin.", dir=key_dir))
    work = key_dir / "src"
    try:
        extra: list[str] = []
        if build.module is not None:
            cwd, mod = build.module, "readonly"
        else:
            assert build.source is not None
            cwd, extra = _prepare_source(build.source, work)
            mod = "vendor" if build.source.vendor else "mod"
        _go_build(
            build, cwd, out=staging / "bin", extra=extra, mod=mod, key_dir=key_dir,
            progress_interval=progress_interval,
        )  # fmt: skip
        for name, package in build.mains.items():
            _name_after(staging / "bin", package, name)
        if build.check is not None:
            name, args, expect = build.check
            out = subprocess.run(
                [str(staging / "bin" / name), *args], capture_output=True, text=True, check=False
            )
            if expect not in out.stdout + out.stderr:
                raise BuildError(
                    f"built {name} {' '.join(args)} says {(out.stdout + out.stderr)[:300]!r},"
                    f" not {expect!r}"
                )
        if build.render is not None:
            build.render(cwd, staging)
        for name in ("bin", *build.outputs):
            target = key_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            (staging / name).replace(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _go_env(build: GoBuild, mod: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(build.env)
    env["CGO_ENABLED"] = "0"
    # Our go.sum files are committed: a build never rewrites go.mod/go.sum.
    env["GOFLAGS"] = f"-mod={mod} -buildvcs=false"
    return env


def _go_build(
    build: GoBuild,
    cwd: Path,
    *,
    out: Path,
    extra: Sequence[str],
    mod: str,
    key_dir: Path,
    progress_interval: float,
) -> None:
    go = find_go()
    out.mkdir(parents=True)
    env = _go_env(build, mod)
    packages = list(build.mains.values())
    tag_args = ["-tags", ",".join(build.tags)] if build.tags else []
    log_path = key_dir / "build.log"
    what = f"{build.name} {build.version} ({', '.join(build.mains)})"
    log(
        f"building {what} into {key_dir}; a cold build takes {build.estimate} on 2 cores"
        f" (log: {log_path})"
    )
    start = time.monotonic()
    # Resolving the graph downloads the pinned modules (checked against go.sum)
    # on a cold module cache; `go mod verify` then re-checks every one.
    steps = [[go, "list", *extra, "-deps", *tag_args, *packages]]
    steps += [[go, "mod", "verify", *extra]] if build.verify else []
    log(f"resolving the package graph ({', '.join(' '.join(s[1:3]) for s in steps)})")
    total = 0
    for step in steps:
        res = subprocess.run(step, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise BuildError(
                f"go {' '.join(step[1:3])} in {cwd} failed (exit {res.returncode}):\n"
                f"{res.stderr[-4000:]}"
            )
        if step[1] == "list":
            total = len(res.stdout.split())
    log(f"{total} packages to compile ({time.monotonic() - start:.0f} s so far)")
    cmd = [go, "build", "-v", "-trimpath", *extra, *tag_args, "-ldflags", build.ldflags]
    cmd += ["-o", str(out) + os.sep, *packages]
    code = _run_with_progress(
        cmd, cwd=cwd, env=env, log_path=log_path, total=total, start=start,
        progress_interval=progress_interval,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    if code != 0:
        raise BuildError(
            f"go build failed (exit {code}) after {elapsed:.0f} s; "
            f"last lines of {log_path}:\n{tail(log_path)}"
        )
    log(f"built {what} in {elapsed:.0f} s")


def _run_with_progress(
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    total: int,
    start: float,
    progress_interval: float,
) -> int:
    """Run ``go build -v``, its output to ``log_path``, a progress line every interval."""
    count = 0
    last = ""
    with open(log_path, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
        )  # fmt: skip
        assert proc.stdout is not None
        lines: list[str] = []
        lock = threading.Lock()

        def pump(stream: IO[str]) -> None:
            for line in stream:
                out.write(line)
                out.flush()
                with lock:
                    lines.append(line.rstrip("\n"))

        reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            while True:
                try:
                    proc.wait(timeout=progress_interval)
                    break
                except subprocess.TimeoutExpired:
                    pass
                with lock:
                    count += len(lines)
                    last = lines[-1] if lines else last
                    lines.clear()
                done = f"{count}/~{total}" if total else str(count)
                log(
                    f"still building: {time.monotonic() - start:.0f} s, {done} packages"
                    f" compiled; last: {last}"
                )
        except BaseException:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
        reader.join(timeout=10)
    return proc.returncode


def _name_after(out: Path, package: str, name: str) -> None:
    """Rename what ``go build -o out/`` wrote for ``package`` to ``name`` (go names a
    binary after the package path's last element, or the one before a major-version
    suffix: go.etcd.io/etcd/server/v3 gives ``server``)."""
    parts = package.rstrip("/").split("/")
    last = parts[-2] if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]
    if last != name:
        (out / last).rename(out / name)


# --------------------------------------------------------------------------- source trees

_DOWNLOAD_TIMEOUT: Final = 600.0


def _download(module: str, version: str) -> Path | None:
    """The module's folder in the module cache, or None where the proxy refuses it."""
    env = dict(os.environ, GOFLAGS="-mod=mod", GO111MODULE="on")
    with tempfile.TemporaryDirectory() as empty:  # outside any module
        res = subprocess.run(
            [find_go(), "mod", "download", "-json", f"{module}@{version}"], cwd=empty, env=env,
            capture_output=True, text=True, check=False, timeout=_DOWNLOAD_TIMEOUT,
        )  # fmt: skip
    if res.returncode != 0:
        log(f"the module proxy does not serve {module}@{version}; using a source tree")
        return None
    return Path(json.loads(res.stdout)["Dir"])


def _find_tree(source: SourceTree) -> Path:
    tried = []
    for base in upstream_source_dirs():
        path = base / source.tree
        tried.append(str(path))
        if (path / source.build_dir / source.marker).is_file():
            return path
    raise SourceMissing(
        f"{source.module}@{source.version}: the module proxy refuses it and no source tree"
        f" was found (tried {', '.join(tried)}); set AIBOM_UPSTREAM_SRC to the folder that"
        f" holds {source.tree}/ (commit {source.commit})"
    )


def _locate(relative: str) -> Path:
    for base in upstream_source_dirs():
        if (base / relative).is_dir():
            return base / relative
    raise SourceMissing(
        f"{relative} not found under {', '.join(map(str, upstream_source_dirs()))} (set"
        " AIBOM_UPSTREAM_SRC to the folder that holds it)"
    )


def _served(gomod: str, module: str) -> bool:
    """Whether the proxy serves `module` at the version go.mod requires (then no
    ``replace`` is needed: a machine with no source trees builds from the proxy)."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod, re.MULTILINE)
    return found is not None and _download(module, found.group(1)) is not None


def _prepare_source(source: SourceTree, work: Path) -> tuple[Path, list[str]]:
    """Copy the tree into ``work``, patch it, write the modfile; return (cwd, go args)."""
    shutil.rmtree(work, ignore_errors=True)
    downloaded = _download(source.module, source.version)
    if downloaded is not None:
        main = work / source.build_dir
        shutil.copytree(downloaded, main, symlinks=True)
        for relative, spec in source.siblings.items():
            mod, _, ver = spec.partition("@")
            got = _download(mod, ver)
            if got is None:
                raise BuildError(f"the proxy serves {source.module} but not its sibling {spec}")
            shutil.copytree(got, main / relative, symlinks=True)
    else:
        shutil.copytree(
            _find_tree(source), work, symlinks=True, ignore=shutil.ignore_patterns(".git")
        )
        main = work / source.build_dir
    for path in work.rglob("*"):  # the module cache is read-only; the copy must be patchable
        with contextlib.suppress(OSError):
            path.chmod(path.stat().st_mode | 0o200)
    if source.patch is not None:
        res = subprocess.run(
            ["git", "apply", "-p1", "--whitespace=nowarn", str(source.patch)],
            cwd=work, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise BuildError(f"patch {source.patch.name} does not apply: {res.stderr.strip()}")
    extra: list[str] = []
    gomod = (main / "go.mod").read_text()
    refused = {mod: rel for mod, rel in source.replaces.items() if not _served(gomod, mod)}
    if refused:
        modfile = main / "go.aibom.mod"
        lines = [gomod]
        lines += [f"replace {mod} => {_locate(rel)}\n" for mod, rel in refused.items()]
        modfile.write_text("".join(lines))
        shutil.copyfile(main / "go.sum", main / "go.aibom.sum")
        extra = [f"-modfile={modfile}"]
    return main, extra
