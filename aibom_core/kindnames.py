"""Naming an object the way kubectl users do: `deploy/web`, `pods/x`, `Deployment/web`. Pure.

`kubectl aibom` accepts every form kubectl accepts for a kind (Kind, plural,
singular, short name, any of them `.group`-qualified, case-insensitive) and
the stamp's own form `<Kind>/<name>`, as `aibom.dev/root` shows it, so a
value can be pasted from an annotation. The kinds come from the API server's
discovery when live, or from `BUILTIN_KINDS` plus the kinds a dump holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aibom_core.kinds import BUILTIN_KINDS, KindInfo, KindRegistry, group_kind_of
from aibom_core.objects import Obj


class TargetError(ValueError):
    """A name that names no kind, or more than one; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: KindInfo
    name: str


def with_registry(kinds: Iterable[KindInfo], registry: KindRegistry) -> list[KindInfo]:
    """`kinds` plus an entry for every registry kind they lack, named as the registry
    says (`KindRegistry.kind_info`: the plural configured, else the one rule)."""
    out = list(kinds)
    have = {k.group_kind for k in out}
    for gk in sorted(registry.tracked | registry.walk_only):
        if gk not in have:
            out.append(registry.kind_info(gk))
    return out


def offline_kinds(registry: KindRegistry, objects: Iterable[Obj] = ()) -> list[KindInfo]:
    """The kinds known without an API server: the catalogue (`BUILTIN_KINDS`), the kinds
    of `objects` (a dump's) and the registry's."""
    known = list(BUILTIN_KINDS)
    have = {k.group_kind for k in known}
    for obj in objects:
        gk = group_kind_of(obj)
        if gk not in have and gk.kind:
            have.add(gk)
            known.append(registry.kind_info(gk))
    return with_registry(known, registry)


def resolve_kind(token: str, kinds: Iterable[KindInfo], registry: KindRegistry) -> KindInfo:
    """The kind `token` names (`deploy`, `Deployment`, `deployments.apps`, ...)."""
    if not token:
        raise TargetError("no kind given (expected KIND/NAME, e.g. deploy/web)")
    pool = list(kinds)
    exact = [k for k in pool if k.kind == token]  # the stamp's own form wins outright
    candidates = exact or _by_name(token, pool)
    if not candidates:
        raise TargetError(f'the server does not have a resource type "{token}"')
    if len(candidates) > 1:
        preferred = [k for k in candidates if registry.is_known(k.group_kind)]
        candidates = preferred or candidates
    if len(candidates) > 1:
        names = ", ".join(f"{k.plural}.{k.group or 'core'}" for k in sorted(candidates, key=_key))
        raise TargetError(f'"{token}" is ambiguous ({names}): qualify it as KIND.GROUP/NAME')
    return candidates[0]


def _key(k: KindInfo) -> tuple[str, str]:
    return (k.group, k.kind)


def _by_name(token: str, pool: list[KindInfo]) -> list[KindInfo]:
    low = token.lower()
    plain = [k for k in pool if low in k.names()]
    if plain or "." not in low:
        return plain
    name, _, group = low.partition(".")
    return [k for k in pool if k.group.lower() == group and name in k.names()]


def parse_target(words: list[str], kinds: Iterable[KindInfo], registry: KindRegistry) -> Target:
    """`KIND/NAME` or `KIND NAME`, as kubectl takes them."""
    if len(words) == 1 and "/" in words[0]:
        kind, _, name = words[0].partition("/")
    elif len(words) == 2 and "/" not in words[0]:
        kind, name = words
    else:
        raise TargetError(
            "expected KIND/NAME or KIND NAME (e.g. deploy/web, Deployment/web), "
            f"got {' '.join(words)!r}"
        )
    if not name or "/" in name:
        raise TargetError(f"{'/'.join(words)!r}: the name must be one path segment")
    return Target(kind=resolve_kind(kind, kinds, registry), name=name)
