"""The elector's fencing (annotator.leader), on a fake clock and a fake Lease API.

The Lease API here is a dict with resourceVersions (409 on a stale write),
and it can hang every request, as a partitioned API server does: the test is
about what the leader does when it cannot renew. Against the real API
server: tests/integration/test_annotator_faults.py (failover).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from aibom_core.kinds import default_registry
from aibom_edge.kube import KubeResponse
from annotator.controller import Controller
from annotator.leader import LeaderElector
from annotator.lease import ElectionConfig
from annotator.plan import DocRef
from annotator.settings import Settings
from annotator.workqueue import TokenBucket
from annotator.writer import NotLeader, Writer
from tests.unit.fakeclock import FakeClock

CFG = ElectionConfig(identity="me", namespace="sys", name="lock")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/sys/leases"
PATH = f"{LEASES}/lock"


class LeaseApi:
    """GET/POST/PUT of one Lease with optimistic concurrency; `hang` stalls every request."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.hang = False
        self.calls: list[tuple[str, str, float | None]] = []
        self.writes: list[tuple[str, str]] = []  # non-Lease writes that reached the server
        self.requests: dict[str, int] = {}  # Kube's counter, read by the controller's metrics

    async def request(
        self, method: str, path: str, *, json: Any = None, timeout: float | None = None, **_: Any
    ) -> KubeResponse:
        self.calls.append((method, path, timeout))
        if self.hang:
            await asyncio.Event().wait()
        if not path.startswith("/apis/coordination.k8s.io/"):
            self.writes.append((method, path))
            return KubeResponse(200, {"metadata": {"name": "x"}}, {})
        if method == "GET":
            if self.lease is None:
                return KubeResponse(404, {}, {})
            return KubeResponse(200, copy.deepcopy(self.lease), {})
        body = copy.deepcopy(json)
        if method == "POST":
            if self.lease is not None:
                return KubeResponse(409, {}, {})
        elif self.lease is None or body["metadata"].get("resourceVersion") != str(self.rv):
            return KubeResponse(409, {}, {})
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return KubeResponse(200, copy.deepcopy(body), {})


def elector(api: LeaseApi, clock: FakeClock, changes: list[bool]) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]  # the fake Lease API has Kube's request()
        CFG,
        on_change=changes.append,
        clock=clock.now,
        wall=lambda: 1_700_000_000 + clock.now(),
        sleep=clock.sleep,
    )


async def test_leadership_ends_at_the_renew_deadline_while_a_renewal_hangs() -> None:
    # Today's elector checks the deadline only when a step ends: a renewal
    # hanging on a dead connection kept it leading (and writing) far past it.
    api, clock = LeaseApi(), FakeClock()
    changes: list[bool] = []
    el = LeaderElector(api, CFG, on_change=changes.append, clock=clock.now)  # type: ignore[arg-type]
    await el.step()
    assert el.is_leader and changes == [True]
    clock.t = 2.0
    api.hang = True
    renewal = asyncio.create_task(el.step())
    await clock.settle()
    clock.t = 9.9
    assert el.is_leader  # before the deadline: still ours
    clock.t = 10.0
    assert not el.is_leader, "still leading at the renew deadline with the renewal hanging"
    renewal.cancel()
    await asyncio.gather(renewal, return_exceptions=True)


async def test_no_write_after_the_renew_deadline_even_mid_step() -> None:
    # The writer is gated on the controller's is_leader(): it must refuse at
    # write time once the deadline has passed, not after the elector's step.
    api, clock = LeaseApi(), FakeClock()
    settings = Settings(registry=default_registry(), tool_version="0")
    ctl = Controller(api, settings, election=CFG)  # type: ignore[arg-type]
    assert ctl.elector is not None
    ctl.elector._clock = clock.now  # inject the fake clock (old and new elector alike)
    ctl._start_workers = lambda: None  # type: ignore[method-assign]  # no worker tasks here
    await ctl.elector.step()
    assert ctl.is_leader()
    doc = DocRef(namespace="ns", name="aibom-x", uid="u", resource_version="1", for_uid="r")
    assert await ctl.writer.delete_configmap(doc)
    assert api.writes == [("DELETE", "/api/v1/namespaces/ns/configmaps/aibom-x")]
    api.hang = True
    renewal = asyncio.create_task(ctl.elector.step())
    await clock.settle()
    clock.t = 10.5
    api.hang = False  # the API answers again, but the deadline has passed
    with pytest.raises(NotLeader):
        await ctl.writer.delete_configmap(doc)
    assert len(api.writes) == 1, "a write went out after the renew deadline"
    renewal.cancel()
    await asyncio.gather(renewal, return_exceptions=True)


async def test_the_watchdog_stops_the_workers_at_the_deadline_not_when_the_step_ends() -> None:
    api, clock = LeaseApi(), FakeClock()
    changes: list[bool] = []
    changed_at: list[float] = []

    def on_change(leading: bool) -> None:
        changes.append(leading)
        changed_at.append(clock.now())

    el = elector(api, clock, changes)
    el.on_change = on_change
    run = asyncio.create_task(el.run())
    await clock.settle()
    assert changes == [True]
    await clock.advance(4.0)  # two renewals
    # What the API server saw: the Lease created, then renewed twice (each stored).
    lease_writes = [m for m, path, _ in api.calls if path.startswith(LEASES) and m != "GET"]
    assert lease_writes == ["POST", "PUT", "PUT"] and api.rv == 3
    api.hang = True
    renewed_at = 4.0  # the last successful renewal started then
    await clock.advance(renewed_at + CFG.renew_deadline - clock.t - 0.2)
    assert changes == [True]
    await clock.advance(0.3)
    assert changes == [True, False], "on_change(False) did not come at the deadline"
    assert changed_at[-1] == pytest.approx(renewed_at + CFG.renew_deadline, abs=0.11)
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


async def test_a_write_starting_near_the_deadline_is_bounded_by_it() -> None:
    api, clock = LeaseApi(), FakeClock()
    changes: list[bool] = []
    el = elector(api, clock, changes)
    await el.step()
    writer = Writer(
        api,  # type: ignore[arg-type]
        is_leader=lambda: el.is_leader,
        bucket=TokenBucket(100, 10),
        stamp_bucket=TokenBucket(100, 10),
        identity="me",
        lease_left=el.remaining,
    )
    clock.t = 8.5
    await writer.delete_configmap(
        DocRef(namespace="n", name="c", uid="u", resource_version="", for_uid="r")
    )
    method, _, timeout = api.calls[-1]
    assert method == "DELETE" and timeout == pytest.approx(1.5)
    # Renewals themselves are bounded by the deadline too.
    api.hang = True
    step = asyncio.create_task(el.step())
    await clock.settle()
    assert api.calls[-1][0] == "GET" and api.calls[-1][2] == pytest.approx(1.5)
    step.cancel()
    await asyncio.gather(step, return_exceptions=True)


async def test_renewing_again_after_losing_at_the_deadline_needs_the_lease_unchanged() -> None:
    api, clock = LeaseApi(), FakeClock()
    changes: list[bool] = []
    el = elector(api, clock, changes)
    await el.step()
    clock.t = 11.0
    assert not el.is_leader
    # Someone else took it meanwhile (our record is stale): 409, no leadership.
    assert api.lease is not None
    api.lease["spec"]["holderIdentity"] = "other"
    api.rv += 1
    api.lease["metadata"]["resourceVersion"] = str(api.rv)
    await el.step()
    assert not el.is_leader and changes == [True, False]


async def test_standby_takes_over_only_after_the_lease_duration_on_its_own_clock() -> None:
    api, clock = LeaseApi(), FakeClock()
    a_changes: list[bool] = []
    b_changes: list[bool] = []
    a = elector(api, clock, a_changes)
    b = LeaderElector(
        api,  # type: ignore[arg-type]
        ElectionConfig(identity="b", namespace="sys", name="lock"),
        on_change=b_changes.append,
        clock=clock.now,
        wall=lambda: 1_700_000_000 + clock.now(),
        sleep=clock.sleep,
    )
    await a.step()  # a leads from t=0; then a dies (no more renewals)
    await b.step()  # b sees the record at t=0
    for t in (2.0, 8.0, 14.9):
        clock.t = t
        await b.step()
        assert not b.is_leader
    # a's own fence ended a's leadership at t=10, 5 s before b may start.
    assert not a.is_leader
    clock.t = 15.0
    await b.step()
    assert b.is_leader and b_changes == [True]
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 1


async def test_a_running_standby_takes_over_when_the_lease_runs_out_not_a_retry_later() -> None:
    """Rounds every 2 s from t=1 would find the lease seen at t=1 expired only at
    t=17; the standby looks again at t=16 (+ a hair) and takes it then."""
    api, clock = LeaseApi(), FakeClock()
    a = elector(api, clock, [])
    await a.step()  # a leads from t=0, then dies
    b_changes: list[bool] = []
    b = LeaderElector(
        api,  # type: ignore[arg-type]
        ElectionConfig(identity="b", namespace="sys", name="lock"),
        on_change=b_changes.append,
        clock=clock.now,
        wall=lambda: 1_700_000_000 + clock.now(),
        sleep=clock.sleep,
    )
    clock.t = 1.0
    run = asyncio.create_task(b.run())
    await clock.settle()
    assert b.pause() == CFG.retry_period  # 15 s left: the usual round
    await clock.advance(14.9, step=0.05)  # t=15.9
    assert b_changes == [] and b.pause() <= 0.2
    await clock.advance(0.2, step=0.05)  # t=16.1
    assert b_changes == [True], "the standby waited for its next round"
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "b"
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


async def test_a_failed_round_waits_the_full_retry_period_not_the_expiry() -> None:
    api, clock = LeaseApi(), FakeClock()
    await elector(api, clock, []).step()  # another holder from t=0
    b = LeaderElector(
        api,  # type: ignore[arg-type]
        ElectionConfig(identity="b", namespace="sys", name="lock"),
        on_change=lambda _: None,
        clock=clock.now,
        wall=lambda: 1_700_000_000 + clock.now(),
        sleep=clock.sleep,
    )
    await b.step()
    clock.t = 14.0
    await b.step()
    assert b.pause() == pytest.approx(1.01)  # the lease seen at t=0 runs out at t=15
    api.hang = True
    step = asyncio.create_task(b.step())
    await clock.settle()
    step.cancel()  # the read times out: a failed round
    await asyncio.gather(step, return_exceptions=True)
    clock.t = 20.0
    assert b.pause() == CFG.retry_period, "a failing API would be polled in a hot loop"


async def test_release_hands_the_lease_over_and_stops_writing_first() -> None:
    api, clock = LeaseApi(), FakeClock()
    changes: list[bool] = []
    el = elector(api, clock, changes)
    await el.step()
    await el.release()
    assert not el.is_leader and el.remaining() == 0.0 and changes == [True, False]
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == ""
    assert api.lease["spec"]["leaseDurationSeconds"] == 1
