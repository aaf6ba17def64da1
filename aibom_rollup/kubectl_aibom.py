"""`kubectl aibom`: the roll-up of a live cluster (or a dump), explained from the shell.

Installed as the executable `kubectl-aibom`, so kubectl finds it on PATH as a
plugin. Subcommands:

  explain KIND/NAME   the walk hop by hop, the stamp the webhook would give now,
                      and how it compares with the stamp the object carries
  tree [KIND/NAME]    from a root (or every root) downward: what its AIBOM covers
  get [ROOT]          a root's AIBOM (CycloneDX JSON), or a table of AIBOMs
  find                the roots whose AIBOM has an image, model, runtime (or a
                      version range of one), agent framework or LLM API
  models              one row per model: the roots serving it, where, how sure
  runtimes            one row per runtime and version: the roots running it
  history ROOT        the root's AIBOM versions in the export registry, and what
                      each changed (`get`, `find`, `models`, `runtimes` take
                      `--at TIME`: the answer from the documents of that time)

kubectl's habits: --kubeconfig, --context, -n/--namespace, -A, -o, -l; errors
on stderr as `error: ...`; exit code 0 on success, 1 when the cluster could
not answer or the object does not exist, 2 for a usage error. Names take every
form kubectl takes (`deploy/web`, `deployments.apps/web`, `deploy web`) and
the stamp's own `<Kind>/<name>` (paste `aibom.dev/root`). `--from-file DUMP`
answers from a `kubectl get -o json` dump (or, for get, find, models and
runtimes, a directory of AIBOM documents) instead of the cluster, with the
same output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from aibom_core import query, trail
from aibom_core.explain import Explanation, explanation, traced
from aibom_core.kindnames import Target, TargetError, parse_target
from aibom_core.kinds import KindRegistry
from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE
from aibom_core.stamp import Keys
from aibom_core.walk import Rollup
from aibom_edge.kube import Kube, KubeError
from aibom_edge.kubeconfig import context_namespace
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
from aibom_rollup import render, trail_commands
from aibom_rollup.inputs import read_offline
from aibom_rollup.sources import (
    Doc,
    DocumentsSource,
    DumpSource,
    LiveSource,
    Source,
    SourceError,
)

PROG = "kubectl aibom"


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
        help="answer from a `kubectl get -A -o json` dump (file, directory or -), or from "
        "a directory of AIBOM documents (get, find, models, runtimes), instead of the cluster",
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


FIND_EPILOG = (
    "--image REF: a digest (sha256:<hex> or the bare hex), a repository (any tag), "
    "repo:tag, repo@sha256:<hex>, or a glob on the repository ('*vllm*'). --model "
    "ID[@REVISION]: e.g. Qwen/Qwen3-0.6B. --runtime NAME, NAME@VERSION, or NAME then a "
    "PEP 440 range: 'vllm<0.9', 'vllm@>=0.6,<0.9' (a version that is no PEP 440 "
    "version, such as latest, is never in a range: a note says which). --framework "
    "NAME: an agent framework (langchain, crewai, ...). --service NAME: an LLM API the "
    "workload calls (openai, anthropic, ...). Names match case-insensitively; a "
    "pattern with * ? [ is a glob."
)


def add_find_filters(p: argparse.ArgumentParser) -> None:
    """The filters of `find` (here and in `aibom-rollup find`); each may repeat."""
    g = p.add_argument_group("filters (a root must match every one given)")
    g.add_argument("--image", action="append", default=[], metavar="REF")
    g.add_argument("--model", action="append", default=[], metavar="ID[@REVISION]")
    g.add_argument("--runtime", action="append", default=[], metavar="NAME[RANGE]")
    g.add_argument("--framework", action="append", default=[], metavar="NAME")
    g.add_argument("--service", action="append", default=[], metavar="NAME")


def add_query_output(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", choices=["table", "wide", "json", "yaml", "csv"], default="table"
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
    trail_commands.add_key_options(gt)
    trail_commands.add_at_option(gt)

    fd = sub.add_parser(
        "find",
        parents=[common],
        help="the roots whose AIBOM has an image, model, runtime, framework or LLM API",
        description="One line per component of each matching root: which root, its "
        "namespace, what matched, its confidence (-o wide: the evidence that named it). "
        "Filters combine (a root must match every one given; each may repeat). Nothing "
        "matched is not an error (exit 0, a note on stderr).",
        epilog=FIND_EPILOG,
    )
    add_find_filters(fd)
    _scope_options(fd)
    add_query_output(fd)
    trail_commands.add_at_option(fd)

    for name, what in (("models", "model"), ("runtimes", "runtime")):
        inv = sub.add_parser(
            name,
            parents=[common],
            help=f"one row per {what}: the roots that use it, where, and how sure",
            description=f"The {what} inventory of the AIBOMs of the namespace (-A: of the "
            f"cluster; -l selects on the ConfigMaps' labels): one row per {what}"
            + (" and revision" if what == "model" else " and version")
            + ", with the roots that use it, their namespaces and the weakest confidence "
            "among them (-o wide: the roots by name). -o csv for a spreadsheet. Reads the "
            "AIBOM ConfigMaps with one list.",
        )
        _scope_options(inv)
        add_query_output(inv)
        trail_commands.add_at_option(inv)
    trail_commands.add_history_parser(sub, [common])
    return parser


# -- running -------------------------------------------------------------------


def _colour(args: argparse.Namespace, out: TextIO) -> bool:
    if args.color == "always":
        return True
    if args.color == "never" or os.environ.get("NO_COLOR"):
        return False
    return out.isatty()


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
        states = trail_commands.signatures(docs, await _signature_keys(args, source))
        items = [_doc_item(d) | {"signature": states[(d.namespace, d.root)]} for d in docs]
        _emit({"items": items}, fmt, out)
        return 0
    if not docs:
        where = f'namespace "{ns}"' if ns else "the cluster"
        print(f"No AIBOMs found in {where}.", file=sys.stderr)
        return 0
    header = ["NAMESPACE"] if ns is None else []
    header += ["ROOT", "OWNED", "IMAGES", "DIGESTS", "MODELS", "SIGNATURE"]
    states = trail_commands.signatures(docs, await _signature_keys(args, source))
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
            states[(d.namespace, d.root)],
        ]
        if fmt == "wide":
            row += [d.configmap, ",".join(m.name for m in models) or "-"]
        rows.append(row)
    out.write(render.table(header, rows))
    return 0


async def _signature_keys(args: argparse.Namespace, source: Source) -> Any:
    """The keys `get` checks signatures with: --key, else the cluster's published set."""
    return await trail_commands.keys_for(args, getattr(source, "kube", None))


async def cmd_history(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    target = await _target(source, args.target)
    ns = args.namespace or source.default_namespace
    root = trail.RootId(ns, target.kind.kind, target.name, group=target.kind.group)
    return await trail_commands.run_history(
        args, root=root, kube=getattr(source, "kube", None), out=out
    )


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
        out.write(f"covers: {', '.join(owned) if owned else 'itself only'}\n")
        state = trail_commands.signatures([doc], await _signature_keys(args, source))
        out.write(f"signature: {state[(doc.namespace, doc.root)]}\n\n")
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


def _filters(args: argparse.Namespace) -> list[query.Filter]:
    try:
        filters = [query.image_filter(t) for t in args.image]
        filters += [query.model_filter(t) for t in args.model]
        filters += [query.runtime_filter(t) for t in args.runtime]
        filters += [query.name_filter("--framework", "framework", t) for t in args.framework]
        filters += [query.name_filter("--service", "service", t) for t in args.service]
    except query.QueryError as exc:
        raise UsageError(str(exc)) from None
    if not filters:
        raise UsageError(
            "find needs at least one of --image, --model, --runtime, --framework, --service"
        )
    return filters


def _wanted(filters: Sequence[query.Filter]) -> str:
    if len(filters) == 1 and filters[0].option == "--image":
        return filters[0].text  # "contains <ref>", as before the other filters came
    return "matches " + " and ".join(f"{f.option} {f.text}" for f in filters)


def _where(ns: str | None) -> str:
    return f'namespace "{ns}"' if ns else "the cluster"


async def cmd_find(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    filters = _filters(args)
    ns = None if args.all_namespaces else (args.namespace or source.default_namespace)
    hits: list[tuple[Doc, query.Hit]] = []
    for d in await _documents(source, ns, args.selector):
        parts = query.parts_of(d.body)
        hits += [(d, hit) for hit in query.find(parts, filters)]
        for part in query.uncomparable(parts, filters):
            print(
                f"note: {render.clean(d.root)} (namespace {render.clean(d.namespace)}) runs "
                f"{render.clean(part.name)} at version {render.clean(part.version or '(none)')}"
                ", which no range can place: it is not in the results",
                file=sys.stderr,
            )
    if args.output in ("json", "yaml"):
        _emit([_hit_item(d, h) for d, h in hits], args.output, out)
        return 0
    if not hits and args.output != "csv":
        print(f"No AIBOM in {_where(ns)} {_contains(filters)}.{_hint(filters)}", file=sys.stderr)
        return 0
    header = ["NAMESPACE", "ROOT", "MATCHED", "NAME", "DIGEST", "CONFIDENCE"]
    wide = args.output in ("wide", "csv")
    if wide:
        header.append("EVIDENCE")
    rows = []
    for d, hit in hits:
        part = hit.part
        name = part.reference or part.name
        if part.version and not part.reference:
            name += f"@{part.version}"
        digests = ", ".join(part.digests) if wide else (part.digests[0] if part.digests else "")
        none = "" if args.output == "csv" else "-"
        row = [d.namespace, d.root, part.role, name, digests or none, part.confidence or none]
        if wide:
            row.append(", ".join(loc for _, loc in part.evidence) or none)
        rows.append(row)
    out.write(render.csv_text(header, rows) if args.output == "csv" else render.table(header, rows))
    return 0


def _hint(filters: Sequence[query.Filter]) -> str:
    """For ``--image vllm``: a word is a repository (docker.io/library/vllm), not a part of one."""
    words = [
        f.text for f in filters if f.option == "--image" and not any(c in f.text for c in "/:@*?[")
    ]
    return f" (a glob matches a part of a repository: --image '*{words[0]}*')" if words else ""


def _contains(filters: Sequence[query.Filter]) -> str:
    wanted = _wanted(filters)
    return wanted if wanted.startswith("matches ") else f"contains {wanted}"


def _hit_item(d: Doc, hit: query.Hit) -> dict[str, Any]:
    part = hit.part
    item: dict[str, Any] = {
        "namespace": d.namespace,
        "root": d.root,
        "configMap": d.configmap,
        "matched": list(hit.options),
        "component": {
            "kind": part.role,
            "name": part.name,
            "version": part.version or None,
            "bomRef": part.bom_ref,
        },
        "confidence": part.confidence,
        "evidence": [{"source": s, "locator": loc} for s, loc in part.evidence],
        "digests": list(part.digests),
    }
    if part.role == "image":
        item["image"] = part.reference or part.name
    return item


async def cmd_models(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    return await _inventory(args, source, out, role="model", title=("MODEL", "REVISION"))


async def cmd_runtimes(args: argparse.Namespace, source: Source, keys: Keys, out: TextIO) -> int:
    return await _inventory(args, source, out, role="runtime", title=("RUNTIME", "VERSION"))


async def _inventory(
    args: argparse.Namespace, source: Source, out: TextIO, *, role: str, title: tuple[str, str]
) -> int:
    ns = None if args.all_namespaces else (args.namespace or source.default_namespace)
    docs = await _documents(source, ns, args.selector)
    rows = query.inventory(((d.namespace, d.root, query.parts_of(d.body)) for d in docs), role)
    if args.output in ("json", "yaml"):
        key = "model" if role == "model" else "runtime"
        version = "revision" if role == "model" else "version"
        data = [
            {
                key: r.name,
                version: r.version or None,
                "namespaces": list(r.namespaces),
                "weakestConfidence": r.weakest,
                "roots": [
                    {"namespace": u.namespace, "root": u.root, "confidence": u.confidence}
                    for u in r.uses
                ],
            }
            for r in rows
        ]
        _emit({"items": data}, args.output, out)
        return 0
    if not rows and args.output != "csv":
        print(f"No {role}s in the AIBOMs of {_where(ns)}.", file=sys.stderr)
        return 0
    header = [*title, "ROOTS", "NAMESPACES", "CONFIDENCE"]
    wide = args.output in ("wide", "csv")
    if wide:
        header.append("ROOT NAMES")
    table = []
    none = "" if args.output == "csv" else "-"
    for r in rows:
        line = [r.name, r.version or none, str(len(r.uses)), ",".join(r.namespaces), r.weakest]
        if wide:
            line.append(",".join(f"{u.namespace}/{u.root}" for u in r.uses))
        table.append(line)
    write = render.csv_text if args.output == "csv" else render.table
    out.write(write(header, table))
    return 0


COMMANDS = {
    "explain": cmd_explain,
    "tree": cmd_tree,
    "get": cmd_get,
    "find": cmd_find,
    "models": cmd_models,
    "runtimes": cmd_runtimes,
    "history": cmd_history,
}


def offline_source(
    args: argparse.Namespace, registry: KindRegistry, keys: Keys, *, paths: Sequence[str] = ()
) -> Source:
    """The source of ``--from-file`` (or of ``aibom-rollup``'s offline inputs): a dump,
    or a set of AIBOM documents."""
    offline = read_offline(list(paths) or [args.from_file])
    if offline.dump is None:
        return DocumentsSource(offline.documents, registry=registry)
    return DumpSource(
        offline.dump,
        registry=registry,
        prefix=keys.prefix,
        tool_version=tool_version(),
        max_depth=args.max_depth,
    )


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    registry: KindRegistry = registry_of(args)
    keys = keys_of(args)
    args.max_depth = max_depth_of(args)
    command = COMMANDS[args.command]
    if args.from_file and getattr(args, "at", None):
        raise UsageError("--at reads the export registry: give it without --from-file")
    if args.from_file:
        return await command(args, offline_source(args, registry, keys), keys, out)
    namespace = await asyncio.to_thread(context_namespace, args.kubeconfig, args.context)
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
        if getattr(args, "at", None):
            at = await trail_commands.at_source(args, kube, registry, namespace)
            return await command(args, at, keys, out)
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
        "--model",
        "--runtime",
        "--framework",
        "--service",
        *trail_commands.VALUED,
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
