"""`kubectl aibom`: the roll-up of a live cluster (or a dump), explained from the shell.

Installed as the executable `kubectl-aibom`, so kubectl finds it on PATH as a
plugin. Subcommands:

  explain KIND/NAME   the walk hop by hop, the stamp the webhook would give now,
                      and how it compares with the stamp the object carries
  tree [KIND/NAME]    from a root (or every root) downward: what its AIBOM covers
  get [ROOT]          a root's AIBOM (CycloneDX JSON), or a table of AIBOMs
  find --image REF    the roots whose AIBOM contains an image or digest

kubectl's habits: --kubeconfig, --context, -n/--namespace, -A, -o, -l; errors
on stderr as `error: ...`; exit code 0 on success, 1 when the cluster could
not answer or the object does not exist, 2 for a usage error. Names take every
form kubectl takes (`deploy/web`, `deployments.apps/web`, `deploy web`) and
the stamp's own `<Kind>/<name>` (paste `aibom.dev/root`). `--from-file DUMP`
answers from a `kubectl get -o json` dump instead of the cluster, with the
same output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from aibom_core.explain import Explanation, explanation, traced
from aibom_core.kindnames import Target, TargetError, parse_target
from aibom_core.kinds import KindRegistry
from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE
from aibom_core.stamp import Keys
from aibom_core.walk import Rollup
from aibom_edge.kube import Kube, KubeError
from aibom_edge.options import (
    UsageError,
    add_cluster_options,
    add_core_options,
    command_parser,
    exit_code,
    keys_of,
    max_depth_of,
    registry_of,
    tool_version,
)
from aibom_rollup import render
from aibom_rollup.cli import read_dump
from aibom_rollup.sources import Doc, DumpSource, LiveSource, Source, SourceError

PROG = "kubectl aibom"
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class NotFound(Exception):
    """The named object or document does not exist (exit 1)."""


# -- the parser ----------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("cluster (as kubectl)")
    add_cluster_options(g)
    g.add_argument("-n", "--namespace", metavar="NS", help="the namespace (default: the context's)")
    g.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS")
    g.add_argument(
        "--from-file",
        metavar="DUMP",
        help="answer from a `kubectl get -A -o json` dump (file, directory or -) "
        "instead of the cluster",
    )
    r = p.add_argument_group("roll-up (as the webhook and the annotator are configured)")
    add_core_options(p)
    r.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the output (auto: on a terminal, unless NO_COLOR is set)",
    )
    return p


def _scope_options(p: argparse.ArgumentParser, *, selector: bool = True) -> None:
    """-A (every namespace) and, for the commands listing AIBOMs, -l."""
    p.add_argument("-A", "--all-namespaces", action="store_true")
    if selector:
        p.add_argument(
            "-l", "--selector", metavar="SELECTOR", help="label selector on the ConfigMaps"
        )


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser, sub = command_parser(
        PROG,
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Exit codes: 0 success, 1 not found or the cluster could not answer, "
        "2 usage error. See `kubectl aibom COMMAND --help`.",
    )

    ex = sub.add_parser(
        "explain",
        parents=[common],
        help="why an object has the stamp it has, hop by hop",
        description="Walk the object's controller ownerReferences as the webhook does "
        "(GET each owner, check its UID), and print each hop and its verdict, the root, "
        "the stamp the webhook would give now, the stamp the object carries, and what "
        "differs.",
    )
    ex.add_argument("target", nargs="+", metavar="KIND/NAME", help="e.g. pod/web-0, Deployment/web")
    ex.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")

    tr = sub.add_parser(
        "tree",
        parents=[common],
        help="what a root's AIBOM covers, as a tree",
        description="From a root (or from the object named) downward through UID-checked "
        "controller edges: every object with its roll-up status, Pods with their images "
        "and digests. Without KIND/NAME: every root of the namespace (-A: of the cluster).",
    )
    tr.add_argument("target", nargs="*", metavar="KIND/NAME")
    _scope_options(tr, selector=False)
    tr.add_argument(
        "-o", "--output", choices=["text", "wide", "json", "yaml", "dot"], default="text"
    )

    gt = sub.add_parser(
        "get",
        parents=[common],
        help="a root's AIBOM, or a table of the AIBOMs",
        description="With ROOT: its AIBOM, decoded from its ConfigMap (CycloneDX JSON "
        "as stored; -o yaml; -o wide for a summary table of models, runtimes, images, "
        "digests and confidence). Without: one line per AIBOM of the namespace (-A: of "
        "the cluster; -l selects on the ConfigMaps' labels).",
    )
    gt.add_argument("target", nargs="*", metavar="ROOT", help="e.g. Deployment/web, dgd/vllm-agg")
    _scope_options(gt)
    gt.add_argument("-o", "--output", choices=["json", "yaml", "wide", "table"])

    fd = sub.add_parser(
        "find",
        parents=[common],
        help="the roots whose AIBOM contains an image or digest",
        description="REF is a digest (sha256:<hex>, or the bare hex), a repository "
        "(any tag), repo:tag, or repo@sha256:<hex>. Prints one line per matching root "
        "and image; nothing matched is not an error (exit 0, a note on stderr).",
    )
    fd.add_argument("--image", required=True, metavar="REF")
    _scope_options(fd)
    fd.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    return parser


# -- running -------------------------------------------------------------------


def _colour(args: argparse.Namespace, out: TextIO) -> bool:
    if args.color == "always":
        return True
    if args.color == "never" or os.environ.get("NO_COLOR"):
        return False
    return out.isatty()


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (as kubectl defaults it). Sync."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and not Path("~/.kube/config").expanduser().exists():
        try:
            return SA_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=path
        )
    except (ConfigException, OSError, ValueError):
        return "default"  # the client's own load reports the problem properly
    chosen = next((c for c in contexts or [] if c.get("name") == context), None)
    chosen = chosen if context else active
    ns = ((chosen or {}).get("context") or {}).get("namespace")
    return str(ns) if ns else "default"


def _emit(data: Any, fmt: str, out: TextIO) -> None:
    if fmt == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    else:
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


async def _target(source: Source, words: Sequence[str]) -> Target:
    try:
        return parse_target(list(words), await source.kinds(), source.registry)
    except TargetError as exc:
        raise UsageError(str(exc)) from None


async def cmd_explain(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    target = await _target(source, args.target)
    ns = args.namespace or source.default_namespace
    obj = await source.get(target.kind, ns, target.name)
    if obj is None:
        raise NotFound(f'{target.kind.plural} "{target.name}" not found in namespace "{ns}"')
    ex = await _explain(source, obj, ns, args.max_depth, keys)
    if args.output == "text":
        out.write(render.explain_text(ex, keys, colour=_colour(args, out)))
    else:
        _emit(render.explanation_data(ex, keys), args.output, out)
    return 0


async def _explain(source: Source, obj: Any, ns: str, max_depth: int, keys: Keys) -> Explanation:
    gen = traced(obj, registry=source.registry, max_depth=max_depth, namespace=ns)
    try:
        req = next(gen)
        while True:
            req = gen.send(await source.fetch_owner(req))
    except StopIteration as stop:
        result, record = stop.value
    return explanation(obj, registry=source.registry, keys=keys, result=result, record=record)


async def cmd_tree(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    ns = None if args.all_namespaces else (args.namespace or source.default_namespace)
    tops: list[str]
    if args.target:
        target = await _target(source, args.target)
        ns = args.namespace or source.default_namespace
        graph = await source.graph(ns)
        obj = graph.find(ns, target.kind.group_kind, target.name)
        if obj is None:
            raise NotFound(f'{target.kind.plural} "{target.name}" not found in namespace "{ns}"')
        key = next(k for k in graph if graph.get(k) is obj)
        tops = [key]
    else:
        graph = await source.graph(ns)
        tops = []
    results = graph.resolve_all()
    if not args.target:
        tops = [
            k
            for k, r in sorted(results.items(), key=lambda kv: _order(kv[1].subject))
            if (ns is None or r.subject.namespace == ns)
            and graph.registry.is_tracked(r.subject.group_kind)
            and r.status in (Rollup.ROOT, Rollup.UNRESOLVED)
        ]
    elif (r := results[tops[0]]).status is Rollup.ROLLED_UP and r.root is not None:
        print(
            f"note: {r.subject.kind_name} is rolled up into {r.root.kind_name}: its AIBOM is "
            f"that root's (kubectl aibom tree {r.root.kind_name})",
            file=sys.stderr,
        )
    nodes = [render.tree_of(graph, k, results, keys) for k in tops]
    if args.output in ("json", "yaml"):
        _emit([render.tree_data(n) for n in nodes], args.output, out)
    elif args.output == "dot":
        out.write(render.tree_dot(nodes))
    else:
        if not nodes:
            where = f'namespace "{ns}"' if ns else "the cluster"
            print(f"No roots found in {where}.", file=sys.stderr)
        out.write(render.tree_text(nodes, colour=_colour(args, out), wide=args.output == "wide"))
    return 0


def _order(ref: Any) -> tuple[str, str, str]:
    return (ref.namespace, ref.kind, ref.name)


async def cmd_get(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    if args.target:
        return await _get_one(args, source, keys, out)
    ns = None if args.all_namespaces else (args.namespace or source.default_namespace)
    docs = await _documents(source, ns, args.selector)
    fmt = args.output or "table"
    if fmt in ("json", "yaml"):
        _emit({"items": [_doc_item(d) for d in docs]}, fmt, out)
        return 0
    if not docs:
        where = f'namespace "{ns}"' if ns else "the cluster"
        print(f"No AIBOMs found in {where}.", file=sys.stderr)
        return 0
    header = ["NAMESPACE"] if ns is None else []
    header += ["ROOT", "OWNED", "IMAGES", "DIGESTS", "MODELS"]
    if fmt == "wide":
        header += ["CONFIGMAP", "MODEL NAMES"]
    rows = []
    for d in docs:
        comps = render.document_rows(d.body)
        images = [c for c in comps if c.type == "container"]
        models = [c for c in comps if c.type == "machine-learning-model"]
        row = [d.namespace] if ns is None else []
        row += [
            d.root,
            str(len(render.owned_of(d.body))),
            str(len(images)),
            str(sum(len(c.digests) for c in images)),
            str(len(models)),
        ]
        if fmt == "wide":
            row += [d.configmap, ",".join(m.name for m in models) or "-"]
        rows.append(row)
    out.write(render.table(header, rows))
    return 0


def _doc_item(d: Doc) -> dict[str, Any]:
    return {
        "namespace": d.namespace,
        "root": d.root,
        "configMap": d.configmap,
        "document": d.body,
    }


async def _get_one(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    target = await _target(source, args.target)
    ns = args.namespace or source.default_namespace
    doc = await source.document(ns, target.kind.kind, target.name)
    if doc is None:
        obj = await source.get(target.kind, ns, target.name)
        if obj is None:
            raise NotFound(f'{target.kind.plural} "{target.name}" not found in namespace "{ns}"')
        ex = await _explain(source, obj, ns, args.max_depth, keys)
        root = ex.result.root
        if root is not None and root.uid != ex.subject.uid:
            raise NotFound(
                f"{ex.subject.kind_name} is not a root: it is rolled up into "
                f"{root.kind_name} (kubectl aibom get {root.kind_name} -n {ns})"
            )
        if root is None:
            raise NotFound(
                f"{ex.subject.kind_name} is {ex.result.status.value}: no AIBOM covers it "
                f"(kubectl aibom explain {ex.subject.kind_name} -n {ns})"
            )
        raise NotFound(
            f"no AIBOM for {ex.subject.kind_name} yet: is the annotator running, and is "
            f"namespace {ns} opted in (label {OPT_IN_LABEL}={OPT_IN_VALUE})?"
        )
    fmt = args.output or "json"
    if fmt == "json":
        out.write(doc.raw.decode("utf-8"))
        out.write("\n")
    elif fmt == "yaml":
        _emit(doc.body, "yaml", out)
    else:
        rows = render.document_rows(doc.body)
        out.write(
            f"AIBOM of {render.clean(doc.root)} (namespace {doc.namespace}, "
            f"configmap {doc.configmap})\n"
        )
        owned = render.owned_of(doc.body)
        out.write(f"covers: {', '.join(owned) if owned else 'itself only'}\n\n")
        out.write(
            render.table(
                ["TYPE", "NAME", "VERSION", "CONFIDENCE", "DIGEST"],
                [
                    [r.type, r.name, r.version or "-", r.confidence or "-", r.digest or "-"]
                    for r in rows
                ],
            )
        )
    return 0


async def _documents(source: Source, ns: str | None, selector: str | None) -> list[Doc]:
    """The documents of a listing; one that cannot be read is a warning, not a failure."""
    docs = await source.documents(ns, selector)
    for why in source.skipped:
        print(f"warning: {why}", file=sys.stderr)
    source.skipped.clear()
    return docs


async def cmd_find(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    ns = None if args.all_namespaces else (args.namespace or source.default_namespace)
    docs = await _documents(source, ns, args.selector)
    hits = [
        (d, row)
        for d in docs
        for row in render.document_rows(d.body)
        if render.image_matches(row, args.image)
    ]
    if args.output in ("json", "yaml"):
        _emit(
            [
                {
                    "namespace": d.namespace,
                    "root": d.root,
                    "configMap": d.configmap,
                    "image": row.reference or row.name,
                    "digests": list(row.digests),
                    "confidence": row.confidence,
                }
                for d, row in hits
            ],
            args.output,
            out,
        )
        return 0
    if not hits:
        where = f'namespace "{ns}"' if ns else "the cluster"
        print(f"No AIBOM in {where} contains {args.image}.", file=sys.stderr)
        return 0
    header = ["NAMESPACE", "ROOT", "IMAGE", "DIGEST", "CONFIDENCE"]
    rows = [
        [
            d.namespace,
            d.root,
            row.reference or row.name,
            (", ".join(row.digests) if args.output == "wide" else row.digest) or "-",
            row.confidence or "-",
        ]
        for d, row in hits
    ]
    out.write(render.table(header, rows))
    return 0


COMMANDS = {"explain": cmd_explain, "tree": cmd_tree, "get": cmd_get, "find": cmd_find}


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    registry: KindRegistry = registry_of(args)
    keys = keys_of(args)
    args.max_depth = max_depth_of(args)
    command = COMMANDS[args.command]
    if args.from_file:
        source: Source = DumpSource(
            read_dump([args.from_file]),
            registry=registry,
            prefix=keys.prefix,
            tool_version=tool_version(),
            max_depth=args.max_depth,
        )
        return await command(args, source, keys, out)
    namespace = await asyncio.to_thread(_context_namespace, args.kubeconfig, args.context)
    opener = Kube.from_kubeconfig(
        args.kubeconfig, context=args.context, request_timeout=args.request_timeout, pool_size=8
    )
    async with opener as kube:
        live = LiveSource(
            kube,
            registry=registry,
            default_namespace=namespace,
            prefix=keys.prefix,
            max_depth=args.max_depth,
        )
        return await command(args, live, keys, out)


# Options that take a value, so `hoist` can tell a value from a subcommand.
_VALUED = frozenset(
    {
        "--kubeconfig",
        "--context",
        "-n",
        "--namespace",
        "--request-timeout",
        "--from-file",
        "--kinds",
        "--max-depth",
        "--annotation-prefix",
        "--color",
        "-o",
        "--output",
        "-l",
        "--selector",
        "--image",
    }
)
_TOP_LEVEL = frozenset({"-h", "--help", "--version", "--debug"})


def hoist(argv: Sequence[str]) -> list[str]:
    """Move options written before the subcommand after it.

    kubectl users write `kubectl aibom -n ns explain pod/x` as they write
    `kubectl -n ns get pod x`; argparse takes a subcommand's options only after it.
    """
    words = list(argv)
    before: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in COMMANDS:
            top = [w for w in before if w in _TOP_LEVEL]
            rest = [w for w in before if w not in _TOP_LEVEL]
            return [*top, word, *rest, *words[i + 1 :]]
        before.append(word)
        if word in _VALUED and i + 1 < len(words):
            before.append(words[i + 1])
            i += 1
        i += 1
    return words


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(hoist(sys.argv[1:] if argv is None else argv))
    return exit_code(
        lambda: asyncio.run(_run(args, sys.stdout)),
        prefix="",
        debug=args.debug,
        failures=(NotFound, SourceError, KubeError),
        interrupted=None,
    )


if __name__ == "__main__":
    sys.exit(main())
