"""`aibom-rollup`: the command line (an I/O edge over the pure core).

Subcommands:
  scan       offline: read a `kubectl get -A -o json` dump, write or summarise AIBOMs
  tree       offline: print the ownership forest with every object's stamp
  find       offline: the roots whose AIBOM has an image, model, runtime, framework or API
  models     offline: one row per model, with the roots serving it
  runtimes   offline: one row per runtime and version, with the roots running it
  history    a root's AIBOM versions in the export registry, and what each changed
  kinds      print the kind registry in effect (the YAML a user would extend)
  policy     print the provenance guard (ValidatingAdmissionPolicy) for the registry
  webhook    run the mutating admission webhook
  annotator  run the annotator controller
  certs      generate a CA and the webhook's serving certificate
  verify     check the JSF signatures of AIBOM documents (files, dumps, the cluster)
  keys       create a document-signing key; edit the published JWK set

Exit codes: 0 success, 1 runtime failure, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO

import orjson

from aibom_core.bom import Facts, FactsCache, facts_of, input_hash, render
from aibom_core.dump import Dump
from aibom_core.graph import OwnershipGraph, build_graph
from aibom_core.guard import BINDING_NAME, POLICY_NAME, SHIPPED_PATH
from aibom_core.guard import render as render_policy
from aibom_core.kinds import DEFAULT_KINDS_YAML, GroupKind
from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE, OPT_OUT_LABEL, OPT_OUT_VALUE, opted_in
from aibom_core.provenance import ProofTrust
from aibom_core.rollup import RootEntry, inventory
from aibom_core.stamp import Keys, mirror_deployment, stamp_of
from aibom_core.walk import WalkResult
from aibom_edge.files import write_atomic
from aibom_edge.options import (
    UsageError,
    add_core_options,
    add_namespace_label_option,
    add_provenance_key_option,
    command_parser,
    exit_code,
    keys_of,
    max_depth_of,
    namespace_label_of,
    positive_int,
    provenance_key_of,
    registry_of,
    tool_version,
)
from aibom_rollup.inputs import read_dump

PROG = "aibom-rollup"


def _graph(args: argparse.Namespace, dump: Dump) -> OwnershipGraph:
    # Offline provenance: a dump says nothing about who wrote an
    # ownerReference; the webhook's edge-proof is the only evidence that can
    # be checked after the fact. With --provenance-key, only edges whose proof
    # verifies count (an auditor's view: nothing is absorbed on the say-so of
    # a reference anyone who may create Pods could have written). Without it,
    # edges are taken as written, as before, and stderr says so.
    key = provenance_key_of(args)
    trust = None
    if key is not None:
        trust = ProofTrust(key=key, keys=keys_of(args))
    else:
        print(
            f"{PROG}: note: ownerReferences taken as written, not verified "
            "(give --provenance-key to count only edges the webhook proved)",
            file=sys.stderr,
        )
    return build_graph(dump.objects, registry_of(args), max_depth=max_depth_of(args), trust=trust)


def _namespaces(args: argparse.Namespace, dump: Dump) -> list[str] | None:
    if not args.opted_in_only:
        return None
    opted = dump.namespaces.items()
    return sorted(ns for ns, labels in opted if opted_in(labels))


# -- scan --------------------------------------------------------------------

# The last offline command's dump and index, kept past its return: freeing a
# 100,000-object dump dict by dict takes ~0.3 s, and the program ends right
# after (`main` leaves by `_exit_now`: the kernel drops the pages at once).
# Only the last command's: a test calling `main` many times holds one dump.
_kept: list[object] = []


def _keep(*heap: object) -> None:
    _kept[:] = heap


def _exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's teardown (nothing is left to run: no
    logging, no atexit work of ours), after flushing stdout and stderr."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # as exit_code: a reader that stopped early is no error
        pass
    except OSError as exc:
        print(f"{PROG}: error: stdout: {exc.strerror or exc}", file=sys.stderr)
        code = code or 1
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


class _Documents:
    """`DIR/<namespace>/<name>` files, each replaced atomically, in few system calls.

    A reader sees the old document or the new one, never part of one: each
    is written to a hidden temporary file beside it (`.<name>.<pid>-<n>.tmp`,
    mode 0600) and renamed over it; nothing is left behind on an error. Per
    document: open, write, close and rename, relative to the namespace's
    directory, which is opened once per namespace (the roots come sorted by
    namespace). Like before, nothing waits for the disk (no fsync).

    A document whose file already holds exactly its bytes is left as it is
    (a scan into the DIR of the last one rewrites only what changed, and
    keeps the others' inodes and times): one open and read instead of a new
    file, and of the inode the rename would free (on ext4, recently freed
    inodes make the next file creations slower).

    `fresh`: `root` is a staging directory nobody else reads (`_Staging`), so
    each document is created under its own name (open, write, close): no
    check for an old file, no temporary name, no rename per document.
    """

    _CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW

    def __init__(self, root: Path, *, fresh: bool = False) -> None:
        self.root = root
        self.fresh = fresh
        self._namespace: str | None = None
        self._fd = -1
        self._tag = str(os.getpid())
        self.written = 0
        self.unchanged = 0

    def __enter__(self) -> _Documents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._namespace = -1, None

    def _dir(self, namespace: str) -> int:
        if namespace != self._namespace:
            self.close()
            path = self.root / namespace
            path.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._namespace = namespace
        return self._fd

    @staticmethod
    def _holds(dir_fd: int, name: str, data: bytes) -> bool:
        """The file `name` is a regular file of exactly these bytes (never follows a link)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            return os.read(fd, len(data) + 1) == data  # a short read only means a rewrite
        except OSError:  # a directory
            return False
        finally:
            os.close(fd)

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)

    def write(self, namespace: str, name: str, data: bytes) -> None:
        dir_fd = self._dir(namespace)
        if self.fresh:
            self._write_all(os.open(name, self._CREATE, 0o600, dir_fd=dir_fd), data)
            self.written += 1
            return
        if self._holds(dir_fd, name, data):
            self.unchanged += 1
            return
        attempt = 0
        while True:
            tmp = f".{name}.{self._tag}-{attempt}.tmp"
            try:
                fd = os.open(tmp, self._CREATE, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:  # left behind by a killed run that had our pid
                attempt += 1
                if attempt > 100:
                    raise
        try:
            self._write_all(fd, data)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            self.written += 1
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


class _Staging:
    """A new -o DIR, built beside it and renamed into place once, complete.

    When DIR does not exist yet (the first scan of a cluster), the documents
    go into a hidden sibling directory (`.<DIR name>.<pid>-<n>.tmp`), which
    becomes DIR by one rename at the end: DIR appears with every document or
    not at all, and each document costs three system calls instead of five
    (`_Documents(fresh=True)`). On an error the staging directory is removed.
    A DIR that already exists (even empty: it may be a mount point, or
    someone's working directory) is written into document by document.
    """

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        parent = out_dir.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{parent}: {exc.strerror or exc}") from None
        attempt = 0
        while True:
            self.path = parent / f".{out_dir.name}.{os.getpid()}-{attempt}.tmp"
            try:
                self.path.mkdir()
                return
            except FileExistsError:  # left behind by a killed run that had our pid
                attempt += 1
                if attempt > 100:
                    raise
            except OSError as exc:
                raise UsageError(f"{out_dir}: {exc.strerror or exc}") from None

    @staticmethod
    def wanted(out_dir: Path) -> bool:
        return out_dir.name not in ("", ".", "..") and not os.path.lexists(out_dir)

    def publish(self) -> None:
        try:
            os.rename(self.path, self.out_dir)
        except OSError as exc:  # e.g. DIR made, and filled, by someone else meanwhile
            raise UsageError(f"{self.out_dir}: {exc.strerror or exc}") from None

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _file_name(entry: RootEntry, out_dir: Path) -> tuple[str, str]:
    """The namespace directory and file name of a root's document, each one path part."""
    name = f"{entry.configmap_name}.json"
    for part in (entry.ref.namespace, name):
        if part in ("", ".", "..") or "/" in part or "\x00" in part:
            raise UsageError(
                f"{entry.ref.namespace}/{entry.ref.kind}/{entry.ref.name}: the namespace or "
                f"name cannot be a file name under {out_dir}"
            )
    return entry.ref.namespace, name


def _summary(entry: RootEntry, facts: Facts, digest: str) -> dict[str, Any]:
    return {
        "namespace": entry.ref.namespace,
        "kind": entry.ref.kind,
        "name": entry.ref.name,
        "uid": entry.ref.uid,
        "rollup": entry.status.value,
        **({"rollupReason": entry.reason} if entry.reason else {}),
        "configMap": entry.configmap_name,
        "owned": [f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in entry.owned],
        **({"unproven": list(facts.unproven)} if facts.unproven else {}),
        "pods": len(entry.pods),
        "images": list(facts.images),
        "digests": list(facts.digests),
        "models": list(facts.models),
        "inputHash": digest,
    }


def _print_json(data: Any, out: TextIO) -> None:
    """Indented JSON (orjson: ~40x the stdlib encoder), UTF-8, one trailing newline."""
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    buffer = getattr(out, "buffer", None)
    if buffer is not None:  # bytes as they are, whatever the terminal's encoding
        out.flush()
        buffer.write(text)
    else:
        out.write(text.decode())


def cmd_scan(args: argparse.Namespace, out: TextIO) -> int:
    dump = read_dump(args.inputs)
    graph = _graph(args, dump)
    registry = graph.registry
    version = tool_version()
    cache = FactsCache()  # a fleet's roots repeat a few templates: read each once
    roots = inventory(graph, namespaces=_namespaces(args, dump))
    _keep(dump, graph, roots)
    if not args.output:  # the summary needs the facts, not the rendered document
        summaries = []
        for entry in roots:
            facts = facts_of(entry.view, registry, cache=cache)
            summaries.append(_summary(entry, facts, input_hash(facts, tool_version=version)))
        _print_json({"roots": summaries}, out)
        return 0
    out_dir = Path(args.output)
    # Every file name is checked before anything is written.
    named = [(entry, *_file_name(entry, out_dir)) for entry in roots]
    staging = _Staging(out_dir) if _Staging.wanted(out_dir) else None

    def write(share: Sequence[_Named]) -> tuple[int, int]:
        target = out_dir if staging is None else staging.path
        with _Documents(target, fresh=staging is not None) as documents:
            for entry, namespace, name in share:
                facts = facts_of(entry.view, registry, cache=cache)
                digest = input_hash(facts, tool_version=version)
                data = render(facts, tool_version=version, digest=digest)
                try:
                    documents.write(namespace, name, data)
                except OSError as exc:
                    raise UsageError(
                        f"{out_dir / namespace / name}: {exc.strerror or exc}"
                    ) from None
        return documents.written, documents.unchanged

    try:
        written, unchanged = _in_parallel(write, named, jobs=_jobs(args.jobs, len(named)))
        if staging is not None:
            staging.publish()
    except BaseException:
        if staging is not None:
            staging.discard()
        raise
    print(
        f"wrote {written} AIBOM document(s) under {out_dir}"
        + (f" ({unchanged} more unchanged)" if unchanged else ""),
        file=sys.stderr,
    )
    return 0


# A root and its document's file: namespace folder and file name.
_Named = tuple[RootEntry, str, str]
# Below this many roots a second process costs more than it saves.
_MIN_ROOTS_PER_JOB = 500


def _jobs(wanted: int | None, roots: int) -> int:
    """--jobs as given (at most one per root), else the usable CPUs, at most 4,
    and at most one per _MIN_ROOTS_PER_JOB roots."""
    if wanted is not None:
        return max(1, min(wanted, roots))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, min(cpus, 4, roots // _MIN_ROOTS_PER_JOB))


def _in_parallel(
    work: Callable[[Sequence[_Named]], tuple[int, int]],
    roots: Sequence[_Named],
    *,
    jobs: int,
) -> tuple[int, int]:
    """`work` over contiguous shares of `roots`, the first in this process and
    each other one in a forked child, which inherits the graph and the facts
    cache as they are (copy on write; `gc.freeze` keeps the collector from
    touching, hence copying, them). A child reports its two counts, or its
    error, through a pipe. Each document is written by exactly one process,
    atomically, with the same bytes whichever it is: the output does not
    depend on `jobs`. The first error (in share order) is raised here, as the
    one process would have raised it: a UsageError as such, anything else as
    an internal error."""
    if jobs <= 1 or not hasattr(os, "fork"):
        return work(roots)
    size = -(-len(roots) // jobs)
    shares = [roots[i : i + size] for i in range(0, len(roots), size)]
    gc.freeze()
    children: list[tuple[int, int]] = []
    reports: list[Any] = []
    try:
        for share in shares[1:]:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(read_end)
                try:
                    report = orjson.dumps(work(share))
                except UsageError as exc:
                    report = orjson.dumps({"usage": str(exc)})
                except BaseException as exc:
                    report = orjson.dumps({"internal": f"{type(exc).__name__}: {exc}"})
                with contextlib.suppress(OSError):
                    os.write(write_end, report)
                os._exit(0)
            os.close(write_end)
            children.append((pid, read_end))
        written, unchanged = work(shares[0])
    finally:
        for pid, read_end in children:
            with os.fdopen(read_end, "rb") as pipe:
                raw = pipe.read()
            os.waitpid(pid, 0)
            reports.append(orjson.loads(raw) if raw else {"internal": "a writer process died"})
        gc.unfreeze()
    for report in reports:
        if isinstance(report, dict):
            if "usage" in report:
                raise UsageError(report["usage"])
            raise RuntimeError(f"a writer process failed: {report['internal']}")
        written, unchanged = written + report[0], unchanged + report[1]
    return written, unchanged


# -- tree --------------------------------------------------------------------


def _record(
    graph: OwnershipGraph, key: str, keys: Keys, results: dict[str, WalkResult]
) -> dict[str, Any]:
    ref = graph.ref(key)
    obj = graph.get(key)
    assert ref is not None and obj is not None
    parent = graph.parent_of(key)
    result = results[key]
    stamp = mirror_deployment(
        stamp_of(result),
        subject=ref.group_kind,
        owner=graph.get(parent) if parent else None,
        keys=keys,
        first_hop=result.chain[0] if result.chain else None,
    )
    return {
        "namespace": ref.namespace,
        "kind": ref.kind,
        "group": ref.group,
        "name": ref.name,
        "uid": ref.uid,
        "annotations": stamp.annotations(keys),
        "root": stamp.root,
        "root-uid": stamp.root_uid,
        "rollup": stamp.rollup,
        "rollup-reason": stamp.reason,
    }


def _forest(graph: OwnershipGraph) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """Per namespace, (depth, key) in display order; every object exactly once."""
    by_ns: dict[str, list[str]] = {}
    for key in graph:
        ref = graph.ref(key)
        assert ref is not None
        by_ns.setdefault(ref.namespace, []).append(key)

    def order(k: str) -> tuple[str, str, str]:
        r = graph.ref(k)
        assert r is not None
        return (r.kind, r.name, r.uid)

    for ns in sorted(by_ns):
        keys = sorted(by_ns[ns], key=order)
        seen: set[str] = set()
        rows: list[tuple[int, str]] = []
        tops = [k for k in keys if graph.parent_of(k) is None]
        # Members of an ownership cycle have no top: they come last.
        for start in [*tops, *keys]:
            stack = [(start, 0)]
            while stack:
                cur, depth = stack.pop()
                if cur in seen:
                    continue
                seen.add(cur)
                rows.append((depth, cur))
                stack.extend((c, depth + 1) for c in reversed(graph.children_of(cur)))
        yield ns, rows


def cmd_tree(args: argparse.Namespace, out: TextIO) -> int:
    dump = read_dump(args.inputs)
    graph = _graph(args, dump)
    keys = keys_of(args)
    results = graph.resolve_all()
    _keep(dump, graph, results)
    if args.output_format == "json":
        records = [_record(graph, k, keys, results) for _, rows in _forest(graph) for _, k in rows]
        _print_json(records, out)
        return 0
    for ns, rows in _forest(graph):
        out.write(f"namespace {ns}\n")
        for depth, key in rows:
            rec = _record(graph, key, keys, results)
            # The object's own walk status; a ReplicaSet whose stamp copies its
            # Deployment's says so, rather than reading as a second root.
            status = results[key].status.value
            line = f"{'  ' * (depth + 1)}{rec['kind']}/{rec['name']}  [{status}"
            parent = graph.parent_of(key)
            parent_ref = graph.ref(parent) if parent and rec["rollup"] != status else None
            if parent_ref is not None:
                line += f"; stamp mirrors {parent_ref.kind_name}"
            line += "]"
            if status == "rolled-up":
                line += f" -> {rec['root']}"
            if rec["rollup-reason"]:
                line += f"  ({rec['rollup-reason']})"
            out.write(line + "\n")
    return 0


# -- kinds -------------------------------------------------------------------


def cmd_kinds(args: argparse.Namespace, out: TextIO) -> int:
    if not args.kinds:
        out.write(DEFAULT_KINDS_YAML)
        return 0
    reg = registry_of(args)

    def entry(gk: GroupKind) -> str:
        resource, short = reg.resources.get(gk), reg.short_names.get(gk)
        extra = f", resource: {resource}" if resource else ""
        extra += f", shortNames: [{', '.join(short)}]" if short else ""
        return f"  - {{group: {gk.group!r}, kind: {gk.kind}{extra}}}"

    lines = ["tracked:", *(entry(gk) for gk in sorted(reg.tracked))]
    lines += ["walkOnly:", *(entry(gk) for gk in sorted(reg.walk_only))]
    out.write("\n".join(lines) + "\n")
    return 0


# -- policy ------------------------------------------------------------------


def cmd_policy(args: argparse.Namespace, out: TextIO) -> int:
    try:
        text = render_policy(registry_of(args), namespace_label_of(args))
    except ValueError as exc:
        raise UsageError(f"--namespace-label: {exc}") from None
    if not args.output or args.output == "-":
        out.write(text)
        return 0
    target = Path(args.output)
    try:
        write_atomic(target, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{target}: {exc.strerror or exc}") from None
    print(
        f"wrote ValidatingAdmissionPolicy {POLICY_NAME} and its binding to {target}",
        file=sys.stderr,
    )
    return 0


# -- parser ------------------------------------------------------------------

# Process subcommands live in their packages, one floor below this one (the
# layers contract in pyproject.toml; docs/architecture.md). Each is imported
# only when used, so the offline commands do not pay for aiohttp or the
# kubernetes client; the imports are written out, not importlib, so the import
# contracts see these edges.


def _webhook() -> ModuleType:
    import webhook.main

    return webhook.main


def _annotator() -> ModuleType:
    import annotator.main

    return annotator.main


def _certs() -> ModuleType:
    import certs.main

    return certs.main


def _verify() -> ModuleType:
    from aibom_rollup import verify

    return verify


def _keys() -> ModuleType:
    from aibom_rollup import keys

    return keys


_PLUGINS: dict[str, tuple[Callable[[], ModuleType], str, str]] = {
    "webhook": (
        _webhook,
        "webhook.main",
        "run the mutating admission webhook (HTTPS, AdmissionReview v1)",
    ),
    "annotator": (_annotator, "annotator.main", "run the annotator: one AIBOM ConfigMap per root"),
    "certs": (_certs, "certs.main", "generate a CA and the webhook serving certificate"),
    "verify": (_verify, "aibom_rollup.verify", "check the JSF signatures of AIBOM documents"),
    "keys": (
        _keys,
        "aibom_rollup.keys",
        "create a document-signing key; edit the published JWK set",
    ),
}


def _offline_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    func: Runner,
    *,
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """A command reading a dump: its inputs, and running `func`; `_offline_options` after
    the command's own options."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("inputs", nargs="*", metavar="FILE|DIR|-", help="inputs (default: stdin)")
    p.set_defaults(func=func)
    return p


def _offline_options(p: argparse.ArgumentParser) -> None:
    """What every command reading a dump takes: the core options and the provenance key."""
    add_core_options(p)
    add_provenance_key_option(p, help_text=_OFFLINE_KEY_HELP)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser, sub = command_parser(
        PROG,
        description="One AI workload, one AIBOM: resolve every object's root by walking "
        "UID-checked controller ownerReferences, and keep one CycloneDX AIBOM per root.",
        epilog="Offline: kubectl get deploy,sts,ds,rs,job,cronjob,pod,lws,dgd,dcd,nimservice "
        "-A -o json | aibom-rollup scan",
    )

    scan = _offline_command(
        sub,
        "scan",
        cmd_scan,
        help="offline: AIBOMs of a kubectl dump",
        description="Read `kubectl get -A -o json` output (a List), multi-document YAML, "
        "or a directory of them, and resolve every root. With -o DIR, write "
        "DIR/<namespace>/aibom-<kind>-<name>.json per root (CycloneDX 1.6); "
        "without, print a JSON summary (roots, owned, images, digests, models).",
    )
    scan.add_argument("-o", "--output", metavar="DIR", help="write one document per root here")
    scan.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        metavar="N",
        help="with -o: processes that build and write the documents (default: the usable "
        f"CPUs, at most 4, and at most one per {_MIN_ROOTS_PER_JOB} roots); the output is "
        "the same for every N",
    )
    scan.add_argument(
        "--opted-in-only",
        action="store_true",
        help=f"only namespaces of the dump labelled {OPT_IN_LABEL}={OPT_IN_VALUE}",
    )
    _offline_options(scan)

    tree = _offline_command(
        sub,
        "tree",
        cmd_tree,
        help="offline: the ownership forest with each object's stamp",
        description="Print the ownership forest of a dump: every object under its "
        "controller, with the stamp the webhook would give it (status, root, reason). "
        "-o json prints one record per object with namespace, kind, name, uid and the "
        "four annotation values (root, root-uid, rollup, rollup-reason).",
    )
    tree.add_argument(
        "-o", "--output", dest="output_format", choices=["text", "json"], default="text"
    )
    _offline_options(tree)

    _query_commands(sub)

    kinds = sub.add_parser(
        "kinds",
        help="print the kind registry in effect",
        description="Print the tracked and walk-only kinds (YAML). With --kinds FILE, the "
        "registry after merging FILE; use the output as a starting point for your own.",
    )
    kinds.add_argument("--kinds", metavar="FILE", help="a registry file to merge and show")
    kinds.set_defaults(func=cmd_kinds)

    pol = sub.add_parser(
        "policy",
        help="print the provenance guard (ValidatingAdmissionPolicy) for the kind registry",
        description=f"Print the ValidatingAdmissionPolicy {POLICY_NAME} and its binding "
        f"{BINDING_NAME} (YAML), generated from the kind registry: in namespaces with the "
        f"opt-in label (unless labelled {OPT_OUT_LABEL}={OPT_OUT_VALUE}), the API "
        "server refuses a CREATE or UPDATE that adds or changes a controller ownerReference "
        "to a kind of the registry unless the requester may update that owner's "
        "<resource>/finalizers or the owner itself. Give the same --kinds FILE as the "
        "webhook and the annotator "
        "(an entry's `resource:` names its plural when the guess, lowercased kind + s, is "
        "wrong), and the annotator's --namespace-label: it calls a namespace guarded only "
        f"when the live binding is this one. The shipped copy is {SHIPPED_PATH}; see "
        "docs/provenance-guard.md.",
    )
    pol.add_argument("--kinds", metavar="FILE", help="a registry file to merge (as for scan)")
    add_namespace_label_option(
        pol.add_argument_group("binding"),
        help_text="the opt-in label the binding selects: the annotator's --namespace-label",
    )
    pol.add_argument("-o", "--output", metavar="FILE", help="write the YAML here instead of stdout")
    pol.set_defaults(func=cmd_policy)

    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (loader, module, help_text) in _PLUGINS.items():
        if wanted is not None and wanted != name:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        try:
            mod = loader()
        except ModuleNotFoundError as exc:
            if exc.name and not module.startswith(exc.name):
                raise
            sub.add_parser(name, help=f"{help_text} (not available in this build)")
            continue
        p = sub.add_parser(name, help=help_text, description=mod.__doc__)
        mod.configure_parser(p)
        p.set_defaults(func=_runner(mod.run))
    return parser


def _query_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`find`, `models`, `runtimes` over a dump or a directory of documents: the
    commands of `kubectl aibom`, with the same filters and output (every namespace
    unless -n)."""
    from aibom_rollup import kubectl_aibom as plugin
    from aibom_rollup import trail_commands, trail_source

    helps = {
        "find": "offline: the roots whose AIBOM has an image, model, runtime, framework or API",
        "models": "offline: one row per model, with the roots serving it",
        "runtimes": "offline: one row per runtime and version, with the roots running it",
    }
    for name, help_text in helps.items():
        p = _offline_command(
            sub,
            name,
            cmd_query,
            help=help_text,
            description=f"`kubectl aibom {name}` over a `kubectl get -A -o json` dump (the "
            "AIBOM ConfigMaps it holds, else documents built from its workloads, as scan "
            "does) or a directory of AIBOM documents (`scan -o DIR`, exported documents). "
            "Every namespace unless -n.",
        )
        if name == "find":
            plugin.add_find_filters(p)
            p.epilog = plugin.FIND_EPILOG
        p.add_argument("-n", "--namespace", metavar="NS", help="only this namespace")
        plugin.add_query_output(p)
        add_core_options(p)
        trail_commands.add_at_option(p)
        p.set_defaults(query=name)
    h = sub.add_parser(
        "history",
        help="a root's AIBOM versions in the export registry, and what each changed",
        description="`kubectl aibom history` without kubectl: every version of ROOT's AIBOM "
        "the annotator exported to --registry (its --export-registry), oldest first: time, "
        "input hash, digest, signature state (against --key; without one, signed versions "
        "are unknown-key), and what changed from the version before.",
    )
    h.add_argument("target", nargs="+", metavar="ROOT", help="e.g. Deployment/web, dgd/vllm-agg")
    h.add_argument("-n", "--namespace", metavar="NS", default="default", help="its namespace")
    h.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    trail_source.add_trail_options(h)
    trail_commands.add_key_options(h)
    add_core_options(h)
    h.set_defaults(func=cmd_history)


def cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    from aibom_rollup import kubectl_aibom as plugin
    from aibom_rollup import trail_commands

    args.all_namespaces = not args.namespace
    args.selector = None
    args.max_depth = max_depth_of(args)
    keys = keys_of(args)

    async def run() -> int:
        if args.at:
            if args.inputs:
                raise UsageError("--at reads the export registry: give it without FILE|DIR")
            at = await trail_commands.at_source(args, None, registry_of(args), "default")
            return await plugin.COMMANDS[args.query](args, at, keys, out)
        source = plugin.offline_source(args, registry_of(args), keys, paths=args.inputs or ["-"])
        return await plugin.COMMANDS[args.query](args, source, keys, out)

    return _trail_failures(lambda: asyncio.run(run()))


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    from aibom_core import trail
    from aibom_core.kindnames import TargetError, offline_kinds, parse_target
    from aibom_rollup import trail_commands

    registry = registry_of(args)
    try:
        target = parse_target(args.target, offline_kinds(registry), registry)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    root = trail.RootId(args.namespace, target.kind.kind, target.name, group=target.kind.group)
    return _trail_failures(
        lambda: asyncio.run(trail_commands.run_history(args, root=root, kube=None, out=out))
    )


def _trail_failures(call: Callable[[], int]) -> int:
    """The registry (or a source) could not answer: one line, exit 1."""
    from aibom_rollup.sources import SourceError

    try:
        return call()
    except SourceError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


_OFFLINE_KEY_HELP = (
    "the webhook's provenance key (base64 text, as `certs` writes provenance.key): count "
    "only controller edges whose aibom.dev/edge-proof verifies; other objects are "
    "`unproven`, never absorbed (listed as aibom.rollup.unproven.<i>). Without it, "
    "ownerReferences are taken as written"
)

Runner = Callable[[argparse.Namespace, TextIO], int]


def _runner(run: Callable[[argparse.Namespace], int]) -> Runner:
    def call(args: argparse.Namespace, out: TextIO) -> int:
        return run(args)

    return call


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None  # the command itself, not a caller in this process
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    code = exit_code(lambda: int(args.func(args, sys.stdout)), prefix=f"{PROG}: ", debug=args.debug)
    if program and args.func in (cmd_scan, cmd_tree):
        _exit_now(code)  # a whole dump in memory: let the kernel free it
    return code


if __name__ == "__main__":
    sys.exit(main())
