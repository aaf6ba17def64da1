"""The keys the work queues carry. Pure.

A reconcile is level-based and keyed by root, the way controller-runtime
keys by namespace/name: the key says *which* document to make true, never
what happened. The UID is the identity (names are reused after a delete);
kind and name ride along for logs and metric labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from aibom_core.objects import ObjRef


@dataclass(frozen=True, slots=True, order=True)
class RootKey:
    """Make the document of this (possible) root true."""

    namespace: str
    uid: str
    group: str
    kind: str
    name: str

    @classmethod
    def of(cls, ref: ObjRef) -> RootKey:
        return cls(ref.namespace, ref.uid, ref.group, ref.kind, ref.name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class SweepKey:
    """Check every document of a namespace (it stopped opting in; a stray appeared)."""

    namespace: str

    def __str__(self) -> str:
        return f"namespace {self.namespace}"


DocKey = RootKey | SweepKey
