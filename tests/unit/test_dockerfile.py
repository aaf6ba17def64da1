"""The Dockerfile agrees with the package and the manifests (there is no Docker engine here).

What a `docker build` would find out late, or a cluster much later: a COPY of
a file that is not there (or that .dockerignore keeps out of the context), a
package the image forgets, an ENTRYPOINT that is not the console script, a
runtime dependency constraints.txt does not pin, a USER the manifests'
runAsUser contradicts, and a flag in a Deployment's args that the CLI does not
accept (renamed or removed).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.unit.manifest_docs import REPO, components, containers, expand_args, of_kind, parse_cli

DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
IMAGE_NAME = "aibom-rollup"


# -- a small Dockerfile reader ----------------------------------------------


@dataclass
class Instruction:
    op: str
    args: str
    line: int

    def words(self) -> list[str]:
        return shlex.split(self.args, comments=False)

    def exec_form(self) -> list[str]:
        value = json.loads(self.args)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self
        return value


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, op: str) -> list[Instruction]:
        return [i for i in self.instructions if i.op == op]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for ins in self.all("ENV"):
            for word in ins.words():
                key, sep, value = word.partition("=")
                assert sep, f"line {ins.line}: use ENV KEY=VALUE"
                out[key] = value
        return out


def read_instructions(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = n
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        joined = " ".join(b.strip() for b in buf)
        op, _, args = joined.partition(" ")
        out.append(Instruction(op.upper(), args.strip(), start))
        buf = []
    assert not buf, "the Dockerfile ends inside a continued line"
    return out


def read_stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with `${ARG}` in FROM resolved."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in read_instructions(text):
        if ins.op == "ARG" and not stages:
            key, _, default = ins.args.partition("=")
            args[key] = default
        elif ins.op == "FROM":
            words = ins.words()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        else:
            assert stages, f"line {ins.line}: {ins.op} before FROM"
            stages[-1].instructions.append(ins)
    return args, stages


def copy_parts(ins: Instruction) -> tuple[dict[str, str], list[str], str]:
    """(flags, sources, destination) of a shell-form COPY."""
    words = ins.words()
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    assert len(words) >= 2, f"line {ins.line}: COPY needs a source and a destination"
    return flags, words[:-1], words[-1]


_ARGS, STAGES = read_stages(DOCKERFILE.read_text(encoding="utf-8"))
BUILDER = next(s for s in STAGES if s.name == "builder")
RUNTIME = STAGES[-1]


# -- .dockerignore, with Docker's rules --------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Go's filepath.Match plus `**` (any number of directories), as Docker reads it."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            ch = pattern[i]
            out.append({"*": "[^/]*", "?": "[^/]"}.get(ch, re.escape(ch)))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        rules.append((negate, _pattern_regex(pattern.strip("/"))))
    return rules


IGNORE_RULES = _ignore_rules()


def in_context(rel: str) -> bool:
    """Whether `docker build .` sends the file at repo-relative `rel` (last match wins)."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, rx in IGNORE_RULES:
        if any(rx.match(p) for p in prefixes):
            excluded = not negate
    return not excluded


def test_dockerignore_reader_follows_docker() -> None:
    assert in_context("aibom_core/walk.py")
    assert not in_context("aibom_core/__pycache__/walk.cpython-311.pyc")
    for secret in (".git/config", ".venv/bin/python", "manifests/tls/tls.key", "tests/x.py"):
        assert not in_context(secret), secret
    assert not in_context("certs/generated/tls.key")


# -- the stages --------------------------------------------------------------


def test_two_stages_on_the_same_slim_python() -> None:
    assert len(STAGES) >= 2 and RUNTIME is not BUILDER
    # The venv's interpreter is a symlink into the base image: same image both sides.
    assert BUILDER.image == RUNTIME.image
    m = re.fullmatch(r"python:(3\.\d+)-slim(-\w+)?(@sha256:[0-9a-f]{64})?", RUNTIME.image)
    assert m, f"not a slim Python image: {RUNTIME.image}"
    assert m[1] == "3.11"  # the version the tests and constraints.txt are made with
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(f"{m[1]}.0")


def test_every_copy_source_exists_and_is_sent() -> None:
    for stage in STAGES:
        for ins in stage.all("COPY") + stage.all("ADD"):
            assert ins.op == "COPY", f"line {ins.line}: COPY, not ADD"
            flags, sources, _ = copy_parts(ins)
            if "from" in flags:
                continue
            for src in sources:
                path = REPO / src
                assert path.exists(), f"line {ins.line}: COPY {src}: not in the repository"
                files = [path] if path.is_file() else sorted(path.rglob("*.py"))
                assert files, f"line {ins.line}: COPY {src}: no Python files in it"
                for f in files:
                    rel = f.relative_to(REPO).as_posix()
                    assert in_context(rel), f"line {ins.line}: .dockerignore keeps {rel} out"


def test_the_builder_copies_every_package_and_build_input() -> None:
    copied = {
        src.strip("/")
        for ins in BUILDER.all("COPY")
        for src in copy_parts(ins)[1]
        if "from" not in copy_parts(ins)[0]
    }
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = {p.removesuffix("*").rstrip(".") for p in find}
    missing = top_level - copied
    assert not missing, f"packages the image would not contain: {sorted(missing)}"
    readme = PYPROJECT["project"]["readme"]
    assert {"pyproject.toml", "constraints.txt", readme} <= copied


def test_runtime_gets_only_the_venv_from_the_builder() -> None:
    copies = [copy_parts(i) for i in RUNTIME.all("COPY")]
    assert copies, "the runtime stage copies nothing"
    builder_runs = " ".join(i.args for i in BUILDER.all("RUN"))
    venv = None
    for flags, sources, dest in copies:
        assert flags.get("from") == BUILDER.name, f"runtime COPY of {sources} not from the builder"
        for src in sources:
            assert src in builder_runs, f"{src} is not made by a RUN of the builder"
            venv = dest
    assert venv is not None
    # The console script is on PATH from the venv; nothing else is installed.
    env = RUNTIME.env()
    assert env["PATH"].split(":")[0] == f"{venv.rstrip('/')}/bin"
    runs = " ".join(i.args for i in RUNTIME.all("RUN"))
    for tool in ("pip install", "apt-get install", "apt install", "gcc", "build-essential"):
        assert tool not in runs, f"runtime stage runs {tool!r}"
    assert re.search(r"pip uninstall[^&]*\bpip\b", runs), "pip stays in the runtime image"


def test_builder_installs_with_the_constraints() -> None:
    runs = [i.args for i in BUILDER.all("RUN")]
    wheel = [r for r in runs if "pip wheel" in r]
    assert wheel and all("-c constraints.txt" in r for r in wheel)
    install = [r for r in runs if "install" in r and "pip" in r]
    assert install and all("--no-index" in r and "-c constraints.txt" in r for r in install)


def test_runtime_works_on_a_read_only_root() -> None:
    env = RUNTIME.env()
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    # HOME is where the Deployments mount an emptyDir (test_manifests_static).
    assert env["HOME"] == "/tmp"
    # Bytecode is compiled in the builder, since the container cannot write it.
    assert any("compileall" in i.args for i in BUILDER.all("RUN"))


# -- entrypoint and user vs the package and the manifests --------------------


def test_entrypoint_is_the_console_script() -> None:
    (entry,) = RUNTIME.all("ENTRYPOINT")
    argv = entry.exec_form()
    scripts = PYPROJECT["project"]["scripts"]
    assert argv == [IMAGE_NAME] and IMAGE_NAME in scripts
    # It names a callable that exists (the same one the installed script runs).
    (ep,) = [
        e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == IMAGE_NAME
    ]
    assert ep.value == scripts[IMAGE_NAME]
    assert callable(ep.load())


def _user() -> tuple[int, int | None]:
    (user,) = RUNTIME.all("USER")
    uid, _, gid = user.args.partition(":")
    assert uid.isdigit(), "USER must be numeric, or the kubelet cannot verify runAsNonRoot"
    assert not gid or gid.isdigit()
    return int(uid), int(gid) if gid else None


def test_user_is_numeric_non_root_and_matches_the_manifests() -> None:
    uid, gid = _user()
    assert uid != 0 and gid != 0
    runs = " ".join(i.args for i in RUNTIME.all("RUN"))
    assert f"--uid {uid}" in runs, "the user has no passwd entry"
    deployments = list(of_kind(components(), "Deployment"))
    assert deployments
    for dep in deployments:
        pod = dep["spec"]["template"]["spec"].get("securityContext") or {}
        for c in containers(dep):
            sc = c.get("securityContext") or {}
            where = f"{dep['metadata']['name']}/{c['name']}"
            assert sc.get("runAsUser", pod.get("runAsUser")) == uid, where
            group = sc.get("runAsGroup", pod.get("runAsGroup"))
            assert group is None or group == gid, where


def _image_containers() -> dict[str, dict[str, Any]]:
    """Deployment name -> its container running this image."""
    out = {}
    for dep in of_kind(components(), "Deployment"):
        for c in containers(dep):
            repo, _, _ = c["image"].rpartition(":")
            if repo.rsplit("/", 1)[-1] == IMAGE_NAME:
                assert dep["metadata"]["name"] not in out, "one such container per Deployment"
                out[dep["metadata"]["name"]] = c
    return out


@pytest.mark.parametrize("deployment", sorted(_image_containers()))
def test_manifest_args_are_accepted_by_the_cli(deployment: str) -> None:
    container = _image_containers()[deployment]
    # No `command`: the image's ENTRYPOINT (the console script) gets `args`.
    (entry,) = RUNTIME.all("ENTRYPOINT")
    assert container.get("command", entry.exec_form()) == entry.exec_form()
    args = parse_cli(expand_args(container))
    assert args.command == deployment.removeprefix(f"{IMAGE_NAME}-")
    # The tag is the release the manifests were written for.
    assert container["image"].rpartition(":")[2] == PYPROJECT["project"]["version"]


def test_both_processes_run_from_the_image() -> None:
    assert set(_image_containers()) == {
        f"{IMAGE_NAME}-webhook",
        f"{IMAGE_NAME}-annotator",
    }


# -- pinned dependencies ------------------------------------------------------


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"constraints.txt: {line!r} is not NAME==VERSION"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _runtime_closure() -> list[tuple[Requirement, str]]:
    """Every requirement installing the package pulls in, with who asked for it."""
    todo = [(Requirement(r), "pyproject.toml") for r in PYPROJECT["project"]["dependencies"]]
    seen: set[tuple[str, frozenset[str]]] = set()
    out: list[tuple[Requirement, str]] = []
    while todo:
        req, parent = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        out.append((req, parent))
        for text in importlib.metadata.requires(req.name) or []:
            sub = Requirement(text)
            extras = req.extras or {""}
            # Markers against this interpreter (the image's: python 3.11 on Linux).
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append((sub, req.name))
    return out


def test_constraints_pin_every_runtime_dependency() -> None:
    pins = _pins()
    closure = _runtime_closure()
    assert len(closure) > len(PYPROJECT["project"]["dependencies"])
    for req, parent in closure:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (needed by {parent}) is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, but {parent} wants {req}"
        )
