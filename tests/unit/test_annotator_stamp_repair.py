"""Stamp repairs as docs/annotator.md (*Stamps*) states them, on a running Controller.

The controller here is the real one (its queues, workers, Writer, token
buckets and ledger); only the API server is a stand-in that records every
request and its time: a stamp repair is a JSON merge patch of an object, a
document write a server-side apply of a ConfigMap. Timing claims are checked
as lower bounds measured on the monotonic clock (a delay the code must
wait), never as upper bounds a loaded machine could miss; absences are
checked once the controller has demonstrably finished the work in question.
Repairs against the real API server: tests/integration/test_annotator.py.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from aibom_core.kinds import NAMESPACE, GroupKind, default_registry
from aibom_core.objects import Obj
from aibom_edge.kube import ApiResource, KubeResponse
from annotator.controller import Controller
from annotator.flags import settings_of
from annotator.ledger import RepairLedger
from annotator.settings import Settings
from annotator.workqueue import WorkQueue
from annotator.writer import APPLY, MERGE
from tests.unit.kobj import mk
from tests.unit.test_annotator_main import parse

REG = default_registry()
DEPLOYMENT = GroupKind("apps", "Deployment")
STATEFULSET = GroupKind("apps", "StatefulSet")
SERVED = {
    DEPLOYMENT: ApiResource("apps", "v1", "Deployment", "deployments", True),
    STATEFULSET: ApiResource("apps", "v1", "StatefulSet", "statefulsets", True),
}
OPTED_IN = "ns"
ELSEWHERE = "other"  # a namespace that is not opted in
CONTESTED_LOG = "another writer keeps undoing stamp repairs of this kind"


@dataclass
class Request:
    at: float  # time.monotonic() when it reached the server
    method: str
    path: str
    content_type: str | None


@dataclass
class Served:
    """Discovery as the controller reads it once the informers run: every kind here is served."""

    resources: dict[GroupKind, ApiResource]

    def cached(self, gk: GroupKind) -> ApiResource | None:
        return self.resources.get(gk)


@dataclass
class Api:
    """Kube's `request` for writes: every one is recorded and succeeds (200)."""

    log: list[Request] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set by every request
    requests: Counter[str] = field(default_factory=Counter)  # read by the controller's metrics
    discovery: Served = field(default_factory=lambda: Served(SERVED))

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content_type: str | None = None,
        **_: Any,
    ) -> KubeResponse:
        self.log.append(Request(time.monotonic(), method, path, content_type))
        self.arrived.set()
        self.requests[method] += 1
        body = copy.deepcopy(json) or {}
        body.setdefault("metadata", {}).update(uid=f"uid-{path}", resourceVersion="100")
        return KubeResponse(200, body, {})

    def stamp_patches(self, name: str | None = None) -> list[Request]:
        """Stamp repairs (merge patches), of one object when `name` is given."""
        return [
            r
            for r in self.log
            if r.content_type == MERGE and (name is None or r.path.endswith(f"/{name}"))
        ]

    def documents(self) -> list[Request]:
        """Document writes (server-side applies of ConfigMaps)."""
        return [r for r in self.log if r.content_type == APPLY]


class Healthy:
    """An informer whose cache is synced and current (what `Controller.watched` asks)."""

    healthy = True


async def until(api: Api, done: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait until the requests the controller made satisfy `done` (bounded, for failures)."""
    async with asyncio.timeout(within):
        while True:
            api.arrived.clear()
            if done():
                return
            await api.arrived.wait()


async def checked(queue: WorkQueue[Any], *, within: float = 10.0) -> None:
    """Wait until every key queued (or delayed) is processed (bounded, for failures)."""
    async with asyncio.timeout(within):
        await queue.wait_idle()


def namespace(name: str, *, opted_in: bool) -> Obj:
    labels = {"aibom.dev/enabled": "true"} if opted_in else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def deployment(name: str, *, ns: str = OPTED_IN, rv: int = 1, stamped: bool = False) -> Obj:
    """A Deployment with no owner (its own root); `stamped`: it carries the right stamp."""
    obj = mk("Deployment", name, ns=ns)
    meta = obj["metadata"]
    meta["resourceVersion"] = str(rv)
    if stamped:
        meta["annotations"] = {
            "aibom.dev/root": f"Deployment/{name}",
            "aibom.dev/root-uid": meta["uid"],
            "aibom.dev/rollup": "root",
        }
    return obj


def kind_of(obj: Obj) -> GroupKind:
    return STATEFULSET if obj["kind"] == "StatefulSet" else DEPLOYMENT


Start = Callable[..., tuple[Api, Controller]]


def leading_controller(api: Api, objects: Iterable[Obj], **settings: Any) -> Controller:
    """A controller whose caches hold a namespace opted in, one that is not and
    `objects`, synced: leadership starts its workers and one full resync."""
    c = Controller(
        api,  # type: ignore[arg-type]  # the stand-in has what the controller uses of Kube
        Settings(registry=REG, tool_version="t", **settings),
        election=None,
    )
    for gk in SERVED:
        c.supervisor.informers[gk] = Healthy()  # type: ignore[assignment]
    c.state.upsert(NAMESPACE, namespace(OPTED_IN, opted_in=True))
    c.state.upsert(NAMESPACE, namespace(ELSEWHERE, opted_in=False))
    for obj in objects:
        c.state.upsert(kind_of(obj), obj)
    c.state.bulk = False
    c.synced.set()
    c._leadership(True)
    return c


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """`start(objects, **settings)`: a stand-in API and a leading controller over it,
    stopped at the end of the test (its workers cancelled at once)."""
    started: list[Controller] = []

    def run(objects: Iterable[Obj], **settings: Any) -> tuple[Api, Controller]:
        api = Api()
        started.append(leading_controller(api, objects, **settings))
        return api, started[-1]

    yield run
    for c in started:
        await c.stop(grace=0)


def skipped(c: Controller, reason: str) -> float:
    value = c.metrics.registry.get_sample_value(
        "aibom_annotator_stamp_checks_skipped_total", {"reason": reason}
    )
    return value or 0.0


def test_the_flags_reach_the_settings_with_the_documented_defaults() -> None:
    settings, _ = settings_of(parse())
    assert settings.stamp_mode == "opted-in"
    assert (settings.stamp_settle, settings.stamp_qps, settings.stamp_burst) == (2.0, 10.0, 50)
    flags = ("--stamp-repair", "all", "--stamp-settle", "0.5")
    settings, _ = settings_of(parse(*flags, "--stamp-qps", "3", "--stamp-burst", "4"))
    assert settings.stamp_mode == "all"
    assert (settings.stamp_settle, settings.stamp_qps, settings.stamp_burst) == (0.5, 3.0, 4)
    settings, _ = settings_of(parse("--stamp-repair", "off"))
    assert settings.stamp_mode == "off"


# -- (a) where repairs are made: --stamp-repair opted-in | all | off --


async def test_all_repairs_in_namespaces_that_are_not_opted_in(start: Start) -> None:
    objects = [deployment("here"), deployment("there", ns=ELSEWHERE)]
    api, c = start(objects, stamp_mode="all", stamp_settle=0.0)
    await checked(c.stamps)
    assert [r.path for r in api.stamp_patches("there")] == [
        f"/apis/apps/v1/namespaces/{ELSEWHERE}/deployments/there"
    ]
    assert len(api.stamp_patches("here")) == 1
    repairs = {"kind": "Deployment"}
    assert c.metrics.registry.get_sample_value("aibom_annotator_stamp_repairs_total", repairs) == 2


async def test_opted_in_repairs_only_in_opted_in_namespaces(start: Start) -> None:
    objects = [deployment("here"), deployment("there", ns=ELSEWHERE)]
    api, c = start(objects, stamp_settle=0.0)  # the default: opted-in
    await checked(c.stamps)
    assert len(api.stamp_patches("here")) == 1
    # A change of the object outside the scope is not judged either.
    c.intake.upsert(DEPLOYMENT, deployment("there", ns=ELSEWHERE, rv=2))
    await checked(c.stamps)
    assert api.stamp_patches("there") == []
    assert len(api.stamp_patches()) == 1


async def test_off_repairs_nothing(start: Start) -> None:
    objects = [deployment("here"), deployment("there", ns=ELSEWHERE)]
    api, c = start(objects, stamp_mode="off", stamp_settle=0.0)
    # The controller is leading and working: the opted-in root's document is written.
    await until(api, lambda: len(api.documents()) == 1)
    c.intake.upsert(DEPLOYMENT, deployment("here", rv=2))
    await checked(c.docs)
    await checked(c.stamps)
    assert api.stamp_patches() == []
    assert c.metrics.registry.get_sample_value(
        "aibom_annotator_stamp_repairs_total", {"kind": "Deployment"}
    ) in (None, 0.0)


# -- (b) a stamp is judged --stamp-settle seconds after the object changed --


async def test_a_stamp_is_judged_only_after_the_settle_delay(start: Start) -> None:
    settle = 1.0
    api, c = start([], stamp_settle=settle)
    changed = time.monotonic()
    c.intake.upsert(DEPLOYMENT, deployment("late"))
    c.intake.upsert(DEPLOYMENT, deployment("fixed"))
    # Within the delay the webhook stamps `fixed` (its UPDATE reaches the cache).
    # No await in between, so on any machine this comes before a worker could run
    # (the test waited 50 loop turns here and failed when they took over 1 s).
    c.intake.upsert(DEPLOYMENT, deployment("fixed", rv=2, stamped=True))
    await until(api, lambda: len(api.stamp_patches("late")) == 1)
    # Not judged before the delay (a worker that did not wait would patch at once;
    # a lower bound on the monotonic clock, which no load can make fail).
    assert api.stamp_patches("late")[0].at - changed >= settle
    # `fixed` was judged from the cache as it was then: nothing to repair.
    await checked(c.stamps)
    assert api.stamp_patches("fixed") == []


async def test_an_object_that_keeps_changing_is_still_judged(start: Start) -> None:
    # The delay runs from the first change not yet judged: a later change does
    # not push the check back (a Pod whose status changes every second would
    # otherwise never be judged), and the check reads the cache as it is then.
    settle = 0.5
    api, c = start([], stamp_settle=settle)
    changes: list[float] = []
    async with asyncio.timeout(10):
        while not api.stamp_patches("busy"):
            changes.append(time.monotonic())
            c.intake.upsert(DEPLOYMENT, deployment("busy", rv=len(changes)))
            await asyncio.sleep(settle / 10)  # changes come faster than the settle delay
    judged = api.stamp_patches("busy")[0].at
    assert judged - changes[0] >= settle
    assert sum(t < judged for t in changes) >= 2  # it did change again within the delay


# -- (c) repairs have their own token bucket (--stamp-qps, --stamp-burst) --


async def test_repairs_are_spread_by_the_stamp_bucket(start: Start) -> None:
    qps, n = 10.0, 4
    objects = [deployment(f"d{i}") for i in range(n)]
    api, c = start(objects, stamp_settle=0.0, stamp_qps=qps, stamp_burst=1)
    await checked(c.stamps)
    assert len(api.stamp_patches()) == n
    times = [r.at for r in api.stamp_patches()]
    # One token at once, then one every 1/qps seconds, on the bucket's schedule
    # (a wake-up that comes late does not push the next token back, so single
    # gaps may be shorter; the span may not). A millisecond of slack: the event
    # loop may wake a timer up to its clock resolution early.
    assert times[-1] - times[0] >= (n - 1) / qps - 0.001
    await checked(c.docs)
    assert len(api.documents()) == n


async def test_document_writes_are_not_held_back_by_the_stamp_bucket(
    start: Start,
) -> None:
    objects = [deployment("d0"), deployment("d1")]
    # One repair now, the next in 100 s.
    api, c = start(objects, stamp_settle=0.0, stamp_qps=0.01, stamp_burst=1)
    await until(api, lambda: len(api.stamp_patches()) == 1 and len(api.documents()) == 2)
    # With the stamp bucket empty, a new root's document is written at once.
    c.intake.upsert(DEPLOYMENT, deployment("new", stamped=True))
    await until(api, lambda: any(r.path.endswith("/aibom-deployment-new") for r in api.documents()))
    assert len(api.stamp_patches()) == 1  # the second repair still waits for its token


# -- (d) the ledger: repaired twice within 10 minutes, then left alone --


async def test_a_stamp_undone_after_each_repair_is_left_alone_for_the_window(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="annotator")
    fighters = [deployment("a"), deployment("b"), mk("StatefulSet", "s")]
    fighters[2]["metadata"]["resourceVersion"] = "1"
    api, c = start(fighters, stamp_settle=0.0)
    # The documented limit and window are the controller's ledger's.
    assert (c.stamp_repair.ledger.limit, c.stamp_repair.ledger.window) == (2, 600.0)
    now = [0.0]
    c.stamp_repair.ledger = RepairLedger(
        limit=c.stamp_repair.ledger.limit, window=c.stamp_repair.ledger.window, now=lambda: now[0]
    )
    names = [o["metadata"]["name"] for o in fighters]

    def undo(rv: int) -> None:
        """Another writer puts the old annotations back (a new resourceVersion, no stamp)."""
        for obj in fighters:
            reverted = copy.deepcopy(obj)
            reverted["metadata"]["resourceVersion"] = str(rv)
            c.intake.upsert(kind_of(obj), reverted)

    await checked(c.stamps)
    assert [len(api.stamp_patches(n)) for n in names] == [1, 1, 1]
    now[0] = 60.0
    undo(2)
    await checked(c.stamps)
    assert [len(api.stamp_patches(n)) for n in names] == [2, 2, 2]
    assert skipped(c, "contested") == 0
    now[0] = 120.0
    undo(3)
    await checked(c.stamps)
    assert skipped(c, "contested") == 3
    now[0] = 300.0
    undo(4)
    await checked(c.stamps)
    assert skipped(c, "contested") == 6
    assert [len(api.stamp_patches(n)) for n in names] == [2, 2, 2]
    lines = [r for r in caplog.records if r.getMessage().startswith(CONTESTED_LOG)]
    assert sorted(getattr(r, "kind", "") for r in lines) == ["apps/Deployment", "apps/StatefulSet"]
    # Once the first repairs leave the window, the objects are repaired again.
    now[0] = 600.0 + 1
    undo(5)
    await checked(c.stamps)
    assert [len(api.stamp_patches(n)) for n in names] == [3, 3, 3]
    assert skipped(c, "contested") == 6


async def test_an_object_whose_root_keeps_changing_is_repaired_every_time(start: Start) -> None:
    """The ledger counts repairs undone, not repairs: a Deployment adopted, adopted by
    another owner, then released, all within the window, gets a repair each time (it
    used to be left contested, with the wrong root, after the second)."""
    owners = [mk("StatefulSet", n) for n in ("a", "b")]
    for o in owners:
        o["metadata"]["resourceVersion"] = "1"
    api, c = start([*owners, deployment("d")], stamp_settle=0.0, trust_owner_references=True)
    now = [0.0]
    c.stamp_repair.ledger = RepairLedger(
        limit=c.stamp_repair.ledger.limit, window=c.stamp_repair.ledger.window, now=lambda: now[0]
    )
    await checked(c.stamps)
    assert len(api.stamp_patches("d")) == 1
    for rv, owner in enumerate((owners[0], owners[1], None), start=2):
        now[0] += 60.0
        changed = mk("Deployment", "d", owner) if owner is not None else mk("Deployment", "d")
        changed["metadata"]["resourceVersion"] = str(rv)
        c.intake.upsert(DEPLOYMENT, changed)
        await checked(c.stamps)
    assert len(api.stamp_patches("d")) == 4
    assert skipped(c, "contested") == 0
