"""What the offline commands read: dumps (`kubectl get -A -o json`, YAML, a
directory of them, stdin) and directories of AIBOM documents (`scan -o DIR`,
exported documents). An I/O edge: files in, bytes and a :class:`Dump` out."""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aibom_core.dump import Dump, DumpError, load
from aibom_edge.options import UsageError

INPUT_SUFFIXES = (".json", ".yaml", ".yml")
# A CycloneDX document names its format at the top level. In a dump the word can
# only stand inside a string (a ConfigMap's document), where its quotes are escaped.
_BOM_FORMAT = re.compile(rb'(?:^|[^\\])"bomFormat"\s*:\s*"CycloneDX"')
_PEEK = 4096


def input_files(path: str) -> Iterator[tuple[bytes, str]]:
    """(bytes, name) of each input: ``-`` (stdin), a file, or every .json/.yaml/.yml
    file under a directory, in name order."""
    if path == "-":
        if sys.stdin.isatty():
            raise UsageError("no input: give a FILE or DIR, or pipe `kubectl get -A -o json`")
        yield sys.stdin.buffer.read(), "<stdin>"
        return
    p = Path(path)
    if p.is_dir():
        files = sorted(
            f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in INPUT_SUFFIXES
        )
        if not files:
            raise UsageError(f"{path}: no .json, .yaml or .yml files in this directory")
    elif p.exists():
        files = [p]
    else:
        raise UsageError(f"{path}: no such file or directory")
    for f in files:
        try:
            yield f.read_bytes(), str(f)
        except OSError as exc:
            raise UsageError(f"{f}: {exc.strerror or exc}") from None


def read_dump(paths: Sequence[str]) -> Dump:
    """The objects of a dump (a usage error, exit 2, when it cannot be read)."""
    # A short-lived batch over acyclic JSON trees: the cyclic garbage collector
    # would only rescan the growing heap again and again (a third of the time
    # of a 100,000-object scan). Reference counting still frees everything.
    gc.disable()

    def inputs() -> Iterator[tuple[bytes, str]]:
        for path in paths or ["-"]:
            yield from input_files(path)

    try:
        return load(inputs())
    except DumpError as exc:
        raise UsageError(str(exc)) from None


def is_document(data: bytes) -> bool:
    """Whether a file is a CycloneDX document (rather than objects of a dump)."""
    return _BOM_FORMAT.search(data[:_PEEK].lstrip()) is not None


@dataclass(frozen=True)
class Offline:
    """What the inputs hold: the objects of a dump, or AIBOM documents (never both)."""

    dump: Dump | None
    documents: list[tuple[bytes, str]]


def read_offline(paths: Sequence[str]) -> Offline:
    """A dump, or a set of documents (a directory `scan -o DIR` wrote, exported
    documents); inputs that mix the two are a usage error."""
    documents: list[tuple[bytes, str]] = []
    objects: list[tuple[bytes, str]] = []
    for path in paths or ["-"]:
        for data, name in input_files(path):
            (documents if is_document(data) else objects).append((data, name))
    if documents and objects:
        raise UsageError(
            f"the inputs mix AIBOM documents ({documents[0][1]}) and objects of a dump"
            f" ({objects[0][1]}): give one or the other"
        )
    if documents:
        return Offline(dump=None, documents=documents)
    try:
        return Offline(dump=load(iter(objects)), documents=[])
    except DumpError as exc:
        raise UsageError(str(exc)) from None
