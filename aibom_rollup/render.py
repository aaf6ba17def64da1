"""What `kubectl aibom` prints: explanations, trees and document summaries. Pure.

Functions of data to text (or to plain JSON-able data for `-o json|yaml`);
the command module does the reading and the writing. Colour is an argument
(the caller decides from the terminal), so piped output is plain.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aibom_core.digests import observed_digests
from aibom_core.explain import Explanation
from aibom_core.graph import OwnershipGraph
from aibom_core.images import parse_image
from aibom_core.kinds import POD
from aibom_core.objects import Obj, ObjRef
from aibom_core.stamp import Keys, Stamp, mirror_deployment, stamp_of
from aibom_core.walk import Reason, WalkResult

_COLOURS = {
    "root": "1;32",
    "rolled-up": "32",
    "unresolved": "33",
    "uncovered": "31",
    "unproven": "1;31",
    "ok": "32",
    "dim": "2",
}


def paint(text: str, style: str, *, colour: bool) -> str:
    code = _COLOURS.get(style)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def clean(text: str) -> str:
    """Names come from the cluster: never let one move the cursor or fake a line."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


# -- explain -----------------------------------------------------------------

_WHY = {
    Reason.NOT_FOUND.value: "no object of that kind and name exists in the namespace: the owner "
    "was deleted, or the reference names something that never existed",
    Reason.UID_MISMATCH.value: "an object of that kind and name exists, but its UID is not the "
    "one the reference names: the owner was re-created, and this child belonged to the old one",
    Reason.FORBIDDEN.value: "the reader may not GET this kind (RBAC); the webhook and the "
    "annotator need read access to every owner kind",
    Reason.NO_MATCH.value: "the API server does not serve this kind (is its CRD installed?)",
    Reason.DEPTH_EXCEEDED.value: "the chain is longer than --max-depth hops",
    Reason.CYCLE.value: "the ownerReferences form a cycle",
    Reason.TIMEOUT.value: "the API server did not answer in time",
    Reason.UNPROVEN.value: "nobody proved that whoever set this controller reference may "
    "update the owner or its finalizers (the provenance rule): the edge is not followed",
    Reason.UNCHECKED.value: "the provenance check itself failed (SubjectAccessReview error "
    "or timeout): the edge is not followed",
}


def explanation_data(ex: Explanation, keys: Keys) -> dict[str, Any]:
    return {
        "object": _ref_data(ex.subject),
        "hops": [
            {
                "child": h.child.kind_name,
                "owner": {"group": h.group, "kind": h.kind, "name": h.name},
                "referencedUID": h.ref_uid or None,
                "foundUID": h.found_uid,
                "verdict": h.verdict,
                "tracked": h.tracked,
            }
            for h in ex.hops
        ],
        "walk": {
            "rollup": ex.result.status.value,
            "root": ex.result.root.kind_name if ex.result.root else None,
            "reason": str(ex.result.failure) if ex.result.failure else None,
        },
        "expectedStamp": ex.expected.annotations(keys),
        "mirroredFrom": ex.mirrored_from,
        "carriedStamp": ex.carried.annotations(keys) if ex.carried else None,
        "agrees": ex.agrees,
        "differences": list(ex.differences),
    }


def _ref_data(ref: ObjRef) -> dict[str, str]:
    return {
        "namespace": ref.namespace,
        "group": ref.group,
        "kind": ref.kind,
        "name": ref.name,
        "uid": ref.uid,
    }


def explain_text(ex: Explanation, keys: Keys, *, colour: bool) -> str:
    s = ex.subject
    lines = [f"{clean(s.kind_name)}  (namespace {clean(s.namespace)}, uid {s.uid or '-'})"]
    if not ex.hops:
        lines.append("  no controller ownerReference: the walk starts and ends here")
    else:
        lines.append("  walk (controller ownerReferences, the UID checked at every hop):")
    for i, h in enumerate(ex.hops, 1):
        owner = clean(f"{h.kind}/{h.name}") + (f" ({h.group})" if h.group else "")
        tag = " [tracked]" if h.tracked else ""
        if h.ok:
            check = paint("ok", "ok", colour=colour) + f"  uid {h.ref_uid}"
        elif h.verdict == Reason.UID_MISMATCH.value:
            check = paint(h.verdict, "unresolved", colour=colour) + (
                f"  reference names uid {h.ref_uid}, found {h.found_uid or 'nothing'}"
            )
        else:
            check = paint(h.verdict, "unresolved", colour=colour)
        lines.append(f"    {i}. {clean(h.child.kind_name)} -> {owner}{tag}: {check}")
        if not h.ok:
            lines.append(f"       why: {_WHY.get(h.verdict, h.verdict)}")
    if ex.hops and ex.hops[-1].ok:
        lines.append(
            f"    top: {clean(ex.hops[-1].kind)}/{clean(ex.hops[-1].name)} has no controller"
        )
    r = ex.result
    verdict = paint(r.status.value, r.status.value, colour=colour)
    root = f" -> {clean(r.root.kind_name)}" if r.root else ""
    lines.append(f"  verdict: {verdict}{root}" + (f"  ({r.failure})" if r.failure else ""))
    lines.append(f"  {_MEANING[r.status.value]}")
    lines.append("  stamp the webhook gives now: " + _stamp_line(ex.expected, keys))
    if ex.mirrored_from:
        lines.append(
            f"    (mirrors {clean(ex.mirrored_from)}: Kubernetes' deployment controller copies a "
            "Deployment's annotations onto its ReplicaSets, so the ReplicaSet keeps its "
            "Deployment's values; its root is the same)"
        )
    carried = _stamp_line(ex.carried, keys) if ex.carried else "(none)"
    lines.append("  stamp the object carries:    " + carried)
    if ex.agrees:
        lines.append("  " + paint("the carried stamp is current", "ok", colour=colour))
    else:
        lines.append("  " + paint("the carried stamp differs:", "unresolved", colour=colour))
        lines += [f"    - {clean(d)}" for d in ex.differences]
        if ex.carried is not None and ex.carried.rollup == "unproven":
            lines.append(
                "    (the webhook or the annotator refused an edge of this chain: who wrote a "
                "controller reference is known only at admission, so this command cannot "
                "re-check it; the carried verdict stands, see docs/provenance-guard.md)"
            )
        elif ex.carried is not None:
            lines.append(
                "    (a stale stamp: the owner changed after admission, or the stamp was "
                "written by hand; the annotator repairs it in an opted-in namespace)"
            )
    return "\n".join(lines) + "\n"


_MEANING = {
    "root": "a tracked kind at the top of its chain: it has its own AIBOM",
    "rolled-up": "covered by the AIBOM of the root named above",
    "unresolved": "the walk failed before any tracked ancestor; a tracked object is then its "
    "own root, anything else is of unknown coverage",
    "uncovered": "no tracked kind owns it and it is not one: no AIBOM covers it",
    "unproven": "an edge of its chain was not proven to be made by a controller of the "
    "owner: it is not absorbed",
}


def _stamp_line(stamp: Stamp, keys: Keys) -> str:
    parts = [
        f"{k.removeprefix(keys.prefix)}={clean(v)}" for k, v in stamp.annotations(keys).items()
    ]
    return " ".join(parts)


# -- tree --------------------------------------------------------------------


@dataclass
class Image:
    container: str
    image: str
    digest: str | None


@dataclass
class Node:
    ref: ObjRef
    walk: str  # the object's own walk status
    stamp: Stamp  # the stamp the webhook gives (mirrored for a Deployment's ReplicaSet)
    mirrored_from: str | None
    images: list[Image]
    children: list[Node] = field(default_factory=list)


def tree_of(graph: OwnershipGraph, key: str, results: dict[str, WalkResult], keys: Keys) -> Node:
    """The subtree below `key` through valid (UID-checked) edges; each object once."""
    seen: set[str] = set()

    def build(k: str) -> Node:
        seen.add(k)
        ref, obj = graph.ref(k), graph.get(k)
        assert ref is not None and obj is not None
        parent = graph.parent_of(k)
        own = stamp_of(results[k])
        chain = results[k].chain
        stamp = mirror_deployment(
            own,
            subject=ref.group_kind,
            owner=graph.get(parent) if parent else None,
            keys=keys,
            first_hop=chain[0] if chain else None,
        )
        mirrored = None
        if stamp != own and parent is not None:
            pref = graph.ref(parent)
            mirrored = pref.kind_name if pref else None
        node = Node(
            ref=ref,
            walk=results[k].status.value,
            stamp=stamp,
            mirrored_from=mirrored,
            images=_images(obj) if ref.group_kind == POD else [],
        )
        node.children = [build(c) for c in graph.children_of(k) if c not in seen]
        return node

    return build(key)


def _images(pod: Obj) -> list[Image]:
    digests = {(d.container, d.image): d.digest for d in observed_digests(pod)}
    out = []
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        if isinstance(c, dict) and isinstance(c.get("image"), str):
            name = str(c.get("name", ""))
            out.append(Image(name, c["image"], digests.get((name, c["image"]))))
    return out


def tree_data(node: Node) -> dict[str, Any]:
    out: dict[str, Any] = {
        **_ref_data(node.ref),
        "rollup": node.walk,
        "root": node.stamp.root,
        "rootUID": node.stamp.root_uid,
    }
    if node.stamp.reason:
        out["reason"] = node.stamp.reason
    if node.mirrored_from:
        out["stampMirrors"] = node.mirrored_from
        out["stampRollup"] = node.stamp.rollup
    if node.images:
        out["images"] = [
            {"container": i.container, "image": i.image, "digest": i.digest} for i in node.images
        ]
    out["children"] = [tree_data(c) for c in node.children]
    return out


def tree_text(nodes: Sequence[Node], *, colour: bool, wide: bool) -> str:
    lines: list[str] = []
    for top in nodes:
        _tree_lines(top, "", "", lines, colour=colour, wide=wide, top_root=top.stamp.root)
    return "\n".join(lines) + ("\n" if lines else "")


def _tree_lines(
    node: Node,
    lead: str,
    child_lead: str,
    lines: list[str],
    *,
    colour: bool,
    wide: bool,
    top_root: str | None,
) -> None:
    status = paint(node.walk, node.walk, colour=colour)
    line = f"{lead}{clean(node.ref.kind_name)}  [{status}"
    if node.mirrored_from:
        line += f"; stamp mirrors {clean(node.mirrored_from)}"
    line += "]"
    if node.walk == "rolled-up" and node.stamp.root and node.stamp.root != top_root:
        line += f" -> {clean(node.stamp.root)}"
    if node.stamp.reason:
        line += f"  ({clean(node.stamp.reason)})"
    if wide:
        line += paint(f"  uid={node.ref.uid}", "dim", colour=colour)
    lines.append(line)
    for img in node.images:
        digest = img.digest or "no digest reported"
        if img.digest and not wide:
            digest = img.digest[:19] + "…"
        lines.append(f"{child_lead}    image {clean(img.container)}: {clean(img.image)} @ {digest}")
    for i, child in enumerate(node.children):
        last = i == len(node.children) - 1
        _tree_lines(
            child,
            child_lead + ("└── " if last else "├── "),
            child_lead + ("    " if last else "│   "),
            lines,
            colour=colour,
            wide=wide,
            top_root=top_root,
        )


_DOT_FILL = {
    "root": "#b7e1a1",
    "rolled-up": "#dff0d8",
    "unresolved": "#fcf8e3",
    "uncovered": "#f2dede",
    "unproven": "#f2b8b8",
}


def tree_dot(nodes: Sequence[Node]) -> str:
    """Graphviz: owners above their children, a box per object, filled by status."""
    out = ["digraph aibom {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled"];']
    for top in nodes:
        _dot(top, out)
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_id(ref: ObjRef) -> str:
    return _dot_str(f"{ref.namespace}/{ref.group}/{ref.kind}/{ref.name}/{ref.uid}")


def _dot_str(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot(node: Node, out: list[str]) -> None:
    label = f"{node.ref.kind}/{node.ref.name}\n{node.walk}"
    if node.mirrored_from:
        label += f" (stamp mirrors {node.mirrored_from})"
    for img in node.images:
        label += f"\n{img.image}" + (f"\n{img.digest[:19]}…" if img.digest else "")
    fill = _DOT_FILL.get(node.walk, "#ffffff")
    out.append(f"  {_dot_id(node.ref)} [label={_dot_str(label)}, fillcolor={_dot_str(fill)}];")
    for child in node.children:
        _dot(child, out)
        out.append(f"  {_dot_id(node.ref)} -> {_dot_id(child.ref)};")


# -- documents ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    type: str
    name: str
    version: str
    confidence: str
    digests: tuple[str, ...]  # "sha256:<hex>", every one the pods reported
    reference: str  # the image as the spec wrote it (containers only)

    @property
    def digest(self) -> str:
        return (
            self.digests[0] + (f" (+{len(self.digests) - 1})" if len(self.digests) > 1 else "")
            if self.digests
            else ""
        )


def document_rows(body: Any) -> list[Row]:
    """The components of a CycloneDX document, one row each: what a summary table shows."""
    rows = []
    for c in body.get("components") or [] if isinstance(body, dict) else []:
        if not isinstance(c, dict):
            continue
        pairs = [(p.get("name"), p.get("value")) for p in c.get("properties") or []]
        props = dict(pairs)
        hashes = [h.get("content", "") for h in c.get("hashes") or [] if isinstance(h, dict)]
        rows.append(
            Row(
                type=str(c.get("type", "")),
                name=str(c.get("name", "")),
                version=str(c.get("version", "")),
                confidence=str(props.get("aibom.confidence", "")),
                digests=tuple(f"sha256:{h}" for h in hashes if h),
                reference=str(props.get("aibom.image.reference", "")),
            )
        )
    return rows


def owned_of(body: Any) -> list[str]:
    comp = (body.get("metadata") or {}).get("component") if isinstance(body, dict) else None
    props = comp.get("properties") or [] if isinstance(comp, dict) else []
    owned = [(p.get("name", ""), p.get("value", "")) for p in props if isinstance(p, dict)]
    return [
        str(v)
        for n, v in sorted(
            (x for x in owned if str(x[0]).startswith("aibom.rollup.owned.")),
            key=lambda x: int(str(x[0]).rpartition(".")[2] or 0),
        )
    ]


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """kubectl's plain column layout: upper-case headers, columns padded by three spaces."""
    body = [[clean(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [list(header), *body]
    ]
    return "\n".join(lines) + "\n"


def image_matches(row: Row, query: str) -> bool:
    """Whether a container component is the image `query` names.

    `sha256:<hex>` or a bare 64-hex digest matches the digest; `repo@sha256:`
    both; `repo:tag` the repository and tag; `repo` the repository, any tag.
    """
    if row.type != "container":
        return False
    q = query.strip()
    bare = q.lower()
    if len(bare) == 64 and all(ch in "0123456789abcdef" for ch in bare):
        bare = f"sha256:{bare}"
    if bare.startswith("sha256:"):
        return bare in row.digests
    parsed, mine = parse_image(q), parse_image(row.reference or row.name)
    if parsed is None or mine is None or parsed.repository != mine.repository:
        return False
    if parsed.digest is not None:
        return parsed.digest in row.digests or parsed.digest == mine.digest
    written_tag = ":" in q.rpartition("/")[2]
    return not written_tag or parsed.tag == mine.tag


# -- CSV -----------------------------------------------------------------------

#: What a spreadsheet reads as the start of a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A cell a spreadsheet shows as text: a value that would start a formula
    (``=HYPERLINK(...)`` as a model name) gets a leading ``'``, and control
    characters are escaped as everywhere else."""
    text = clean(text)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


def csv_text(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """RFC 4180 CSV (quoted where needed, CRLF line ends), every cell through csv_cell."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows([csv_cell(c) for c in row] for row in rows)
    return buf.getvalue()
