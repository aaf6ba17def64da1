"""Seeded generator of malformed and hostile AdmissionReview bodies, and the answer oracle.

Shared by the unit fuzz test (tests/unit/test_webhook_fuzz.py, a few
thousand cases) and the benchmark (bench/webhook_fuzz.py, 100,000 against
the real listening process). Deterministic: the same seed gives the same
bodies, byte for byte.

Families: bodies that are not JSON (random bytes, truncations, deep nesting,
invalid UTF-8, NaN, huge numbers), JSON that is not a review (wrong top-level
types, wrong apiVersion/kind), reviews with a wrong type in every request
field, and well-formed reviews of hostile objects (unknown and look-alike
kinds, metadata of the wrong shape, huge annotations, deep and malformed
ownerReference lists, hostile names, owner chains with cycles).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import ssl
import time
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

API = "admission.k8s.io/v1"
KINDS = [
    ("", "v1", "Pod"),
    ("apps", "v1", "ReplicaSet"),
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "StatefulSet"),
    ("batch", "v1", "Job"),
    ("nvidia.com", "v1alpha1", "DynamoGraphDeployment"),
    ("nvidia.com", "v1alpha1", "DynamoComponentDeployment"),
    ("grove.io", "v1alpha1", "PodClique"),
    ("example.com", "v1", "Widget"),  # unknown
    ("apps", "v1", "deployment"),  # look-alike (case)
    ("", "v1", "ConfigMap"),
]
HOSTILE_STRINGS = [
    "",
    "a\nts=0 level=error msg=forged",
    'q"uote',
    "k=v",
    "\x1b[2J\x1b[31m",
    "\u2028\u2029\x85",
    "日本語",
    "\x00nul",
    "../../etc/passwd",
    "~1/~0",
    "x" * 300,
    " ",
    "\ud800"[:0] + "surrogate-free",
]
# Owners the fake API source knows (namespace "ns"): a chain and a cycle.
KNOWN_OWNERS: list[dict[str, Any]] = [
    {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "d",
            "namespace": "ns",
            "uid": "uid-d",
            "annotations": {"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"},
        },
    },
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "c1",
            "namespace": "ns",
            "uid": "uid-c1",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "c2",
                    "uid": "uid-c2",
                    "controller": True,
                }
            ],
        },
    },
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "c2",
            "namespace": "ns",
            "uid": "uid-c2",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "c1",
                    "uid": "uid-c1",
                    "controller": True,
                }
            ],
        },
    },
]


def _junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value of any type (bounded depth)."""
    pick = rng.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 2**63 - 1, -(2**63), 1.5, 1e308])
    if pick == 3:
        return rng.choice(HOSTILE_STRINGS)
    if pick == 4:
        return ""
    if pick == 5:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(1, 20)))
    if pick == 6:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice([*HOSTILE_STRINGS, "name", "uid"]): _junk(rng, depth + 1) for _ in range(3)}


def _owner_ref(rng: random.Random) -> Any:
    roll = rng.randrange(10)
    if roll == 0:
        return _junk(rng)
    if roll < 4:
        known = rng.choice(KNOWN_OWNERS)
        meta = known["metadata"]
        ref = {
            "apiVersion": known["apiVersion"],
            "kind": known["kind"],
            "name": meta["name"],
            "uid": meta["uid"] if rng.random() < 0.7 else "uid-other",
            "controller": True,
        }
    else:
        group, version, kind = rng.choice(KINDS)
        ref = {
            "apiVersion": rng.choice(
                [f"{group}/{version}" if group else version, "", "/", "a/b/c"]
            ),
            "kind": kind,
            "name": rng.choice([*HOSTILE_STRINGS, "owner"]),
            "uid": rng.choice(["u1", "", "uid-g"]),
            "controller": rng.choice([True, True, False, "true", 1, None]),
        }
    if rng.random() < 0.2:  # a wrong type in one field
        ref[rng.choice(list(ref))] = _junk(rng)
    return ref


def _object(rng: random.Random, group: str, version: str, kind: str) -> Any:
    if rng.random() < 0.05:
        return _junk(rng)
    meta: dict[str, Any] = {
        "name": rng.choice([*HOSTILE_STRINGS, "obj"]),
        "namespace": rng.choice(["ns", "other", *HOSTILE_STRINGS[:4]]),
        "uid": rng.choice(["", "uid-x", "uid-g"]),
    }
    roll = rng.random()
    if roll < 0.05:
        meta["annotations"] = {"big": "x" * rng.choice([1 << 16, 1 << 20])}
    elif roll < 0.15:
        meta["annotations"] = _junk(rng)
    elif roll < 0.35:
        meta["annotations"] = {
            "aibom.dev/rollup": rng.choice(["root", "forged", *HOSTILE_STRINGS[:3]]),
            "aibom.dev/root": rng.choice(HOSTILE_STRINGS),
        }
    refs_roll = rng.random()
    if refs_roll < 0.05:
        meta["ownerReferences"] = [_owner_ref(rng) for _ in range(rng.choice([500, 5000]))]
    elif refs_roll < 0.1:
        meta["ownerReferences"] = _junk(rng)
    elif refs_roll < 0.8:
        meta["ownerReferences"] = [_owner_ref(rng) for _ in range(rng.randrange(1, 4))]
    if rng.random() < 0.1:
        meta[rng.choice(list(meta))] = _junk(rng)
    obj: dict[str, Any] = {
        "apiVersion": f"{group}/{version}" if group else version,
        "kind": kind,
        "metadata": meta if rng.random() > 0.03 else _junk(rng),
    }
    if rng.random() < 0.1:
        obj[rng.choice(["apiVersion", "kind"])] = _junk(rng)
    return obj


def _review(rng: random.Random, i: int) -> dict[str, Any]:
    group, version, kind = rng.choice(KINDS)
    op = rng.choice(["CREATE", "UPDATE", "CREATE", "DELETE", "CONNECT"])
    obj = _object(rng, group, version, kind)
    req: dict[str, Any] = {
        "uid": f"fuzz-{i}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": op,
        "namespace": "ns",
        "name": "obj",
        "userInfo": {"username": "fuzz"},
        "object": obj,
        "oldObject": obj if op == "UPDATE" else None,
        "dryRun": False,
    }
    if rng.random() < 0.05:
        req["subResource"] = rng.choice(["status", "scale", ""])
    return {"apiVersion": API, "kind": "AdmissionReview", "request": req}


def _wrong_types(rng: random.Random, i: int) -> dict[str, Any]:
    doc = _review(rng, i)
    req = doc["request"]
    field = rng.choice(
        [
            "uid",
            "operation",
            "kind",
            "namespace",
            "name",
            "object",
            "oldObject",
            "dryRun",
            "subResource",
            "userInfo",
            "request",
            "apiVersion",
            "kind.kind",
            "kind.group",
        ]
    )
    if field == "request":
        doc["request"] = _junk(rng)
    elif field == "apiVersion":
        doc["apiVersion"] = _junk(rng)
    elif field.startswith("kind."):
        if isinstance(req["kind"], dict):
            req["kind"][field[5:]] = _junk(rng)
    else:
        req[field] = _junk(rng)
    return doc


def _not_json(rng: random.Random, i: int) -> bytes:
    roll = rng.randrange(8)
    valid = json.dumps(_review(rng, i)).encode()
    if roll == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if roll == 1:
        return valid[: rng.randrange(1, max(2, len(valid)))]
    if roll == 2:
        return b"[" * rng.choice([1025, 10_000, 200_000])
    if roll == 3:
        return b'{"a":' * rng.choice([1025, 50_000])
    if roll == 4:
        return b'{"apiVersion": "\xff\xfe"}'
    if roll == 5:
        return b'{"apiVersion": NaN, "x": 1e999}'
    if roll == 6:
        return b"\xef\xbb\xbf" + valid  # BOM
    return b""


def bodies(seed: int, count: int) -> Iterator[tuple[int, bytes]]:
    """(index, body) for `count` hostile bodies; the same for the same seed."""
    rng = random.Random(seed)
    for i in range(count):
        family = rng.randrange(10)
        if family < 2:
            yield i, _not_json(rng, i)
        elif family < 3:
            yield i, json.dumps(_junk(rng)).encode()
        elif family < 5:
            yield i, json.dumps(_wrong_types(rng, i)).encode()
        else:
            yield i, json.dumps(_review(rng, i)).encode()


def apply_patch(obj: Any, ops: list[dict[str, Any]]) -> Any:
    """A strict RFC 6902 applier for add/replace/remove (raises when an op cannot apply)."""
    doc = json.loads(json.dumps(obj))
    for op in ops:
        path = op["path"]
        assert path.startswith("/"), path
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            assert isinstance(parent, dict), f"{path}: parent is not an object"
            parent = parent[t]
        assert isinstance(parent, dict), f"{path}: parent is not an object"
        last = tokens[-1]
        if op["op"] == "add":
            parent[last] = op["value"]
        elif op["op"] == "replace":
            assert last in parent, f"replace of missing {path}"
            parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return doc


def check_answer(sent: bytes, status: int, content_type: str, answer: bytes) -> str:
    """Raise AssertionError unless the answer is well-formed; return its class."""
    if status != 200:
        assert status in (400, 413, 415), f"HTTP {status}: {answer[:200]!r}"
        assert content_type.startswith("text/plain"), content_type
        return f"http-{status}"
    doc = json.loads(answer)
    assert doc["apiVersion"] == API and doc["kind"] == "AdmissionReview", doc
    resp = doc["response"]
    req = json.loads(sent)["request"]
    assert resp["uid"] == req["uid"] and resp["allowed"] is True, resp
    assert set(resp) <= {"uid", "allowed", "patchType", "patch"}, resp
    if "patch" not in resp:
        return "allowed"
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"], validate=True))
    assert isinstance(ops, list) and ops
    for op in ops:
        assert op["path"].startswith("/metadata/annotations"), op
        if op["op"] != "remove":
            assert op["path"] == "/metadata/annotations" or isinstance(op["value"], str), op
    patched = apply_patch(req["object"], ops)
    assert isinstance(patched["metadata"]["annotations"], dict)
    return "patched"


def rss_mib(pid: int) -> float:
    """A process's resident set (VmRSS), MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for process {pid}")


@dataclass
class FuzzRun:
    """What `send_reviews` saw: answers by class, failures, RSS samples, wall time."""

    classes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    rss: dict[int, float] = field(default_factory=dict)
    wall: float = 0.0


async def send_reviews(
    url: str,
    ctx: ssl.SSLContext,
    *,
    seed: int,
    count: int,
    concurrency: int,
    pid: int,
    marks: Collection[int],
) -> FuzzRun:
    """POST `bodies(seed, count)` to a webhook over `concurrency` keep-alive
    connections, check every answer with `check_answer`, and sample the
    process's RSS when `marks` answers are in (the bench's 100,000 and the
    memory test's 3,000)."""
    run = FuzzRun()
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=64)
    done = 0

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal done
        while (item := await queue.get()) is not None:
            i, data = item
            try:
                async with http.post(
                    url, data=data, headers={"Content-Type": "application/json"}
                ) as resp:
                    answer = await resp.read()
                    run.classes[check_answer(data, resp.status, resp.content_type, answer)] += 1
            except Exception as exc:  # the oracle's verdict, or a dropped connection
                run.failures.append(f"case {i}: {type(exc).__name__}: {str(exc)[:200]}")
            done += 1
            if done in marks:
                run.rss[done] = rss_mib(pid)

    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    began = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        workers = [asyncio.create_task(worker(http)) for _ in range(concurrency)]
        for item in bodies(seed, count):
            await queue.put(item)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    run.wall = time.monotonic() - began
    run.rss[done] = rss_mib(pid)
    return run
