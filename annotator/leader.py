"""Leader election: the async driver of the rules in `annotator.lease`.

Every `retry_period` it reads the Lease and writes what `lease.decide`
says (take it, renew it) or waits; a standby whose view of the holder's
record runs out before its next round looks again at that moment, so a
takeover comes `lease_duration` after it saw the dead leader's last
renewal, not up to one more `retry_period` later. Leadership starts when a write
succeeds; it ends when someone else holds the Lease, on `release()`
(graceful shutdown, which hands the Lease over at once), or at the renew
deadline: `renew_deadline` seconds (monotonic clock) after the *start* of
the last successful write of the Lease.

Fencing. The deadline is not checked "between steps": `is_leader` compares
the monotonic clock with the deadline every time it is read, so a write
gated on it (`annotator.writer`) is refused the instant the deadline
passes, even while a renewal hangs on a dead connection; `remaining()`
bounds the timeout of a write that starts just before the deadline, so no
write of ours is still in flight after it; and a watchdog task calls
`on_change(False)` at the deadline (the controller stops its workers) without
waiting for the hung step to end. Why this is safe: a standby takes the Lease
only after it has seen the same record unchanged for `lease_duration` on its
own clock, and it cannot have seen our last renewal before we sent it, so it
can start no earlier than `start + lease_duration` > `start +
renew_deadline` (15 s > 10 s by default: 5 s of margin for clock-rate
differences and request latency). That is stricter than client-go, whose
leader may keep going until `retry_period` + `renew_deadline` after its last
renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aibom_edge.kube import Kube, KubeError
from annotator.lease import (
    ElectionConfig,
    Observation,
    Wait,
    decide,
    micro_time,
    observe,
    release_body,
)

log = logging.getLogger("annotator.leader")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        config: ElectionConfig,
        *,
        on_change: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.config = config
        self.on_change = on_change
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._leading = False
        self._valid_until = -math.inf
        self._obs: Observation | None = None
        self._expires: float | None = None  # when the other holder's Lease runs out (waiting)
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases/{config.name}"
        )
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases"

    # -- the fence -------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True only while we hold the Lease AND the renew deadline has not passed (now)."""
        return self._leading and self._clock() < self._valid_until

    def remaining(self) -> float:
        """Seconds of leadership left (0 when not leading): the longest a write may take."""
        if not self._leading:
            return 0.0
        return max(0.0, self._valid_until - self._clock())

    def _set(self, leading: bool, why: str) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        log.info(
            "started leading" if leading else "stopped leading",
            extra={"identity": self.config.identity, "lease": self._path, "why": why},
        )
        self.on_change(leading)

    def _check_deadline(self) -> None:
        if self._leading and self._clock() >= self._valid_until:
            self._set(False, f"could not renew for {self.config.renew_deadline:g} s")

    async def _watchdog(self) -> None:
        """Tell the controller at the deadline, even while a renewal is still hanging."""
        while True:
            if self._leading:
                left = self._valid_until - self._clock()
                if left <= 0:
                    self._check_deadline()
                    continue
                await self._sleep(min(left, self.config.retry_period))
            else:
                await self._sleep(self.config.retry_period)

    # -- one round -------------------------------------------------------------------

    def _timeout(self) -> float:
        """A Lease request's timeout: never past our own deadline while we lead."""
        timeout = self.config.retry_period * 2
        if self._leading:
            timeout = min(timeout, self.remaining())
        return max(timeout, 0.001)

    async def _read(self) -> Any:
        resp = await self.kube.request("GET", self._path, timeout=self._timeout())
        if resp.status == 404:
            return None
        if not resp.ok:
            raise KubeError(f"GET lease: HTTP {resp.status}")
        return resp.body

    async def step(self) -> None:
        """One round: read, decide, write. Never raises for API trouble."""
        started = self._clock()
        self._expires = None  # a failed round looks again after the full retry period
        try:
            lease = await self._read()
            self._obs = observe(self._obs, lease, now=self._clock())
            decision = decide(
                self._obs, config=self.config, now=self._clock(), wall=micro_time(self._wall())
            )
            if isinstance(decision, Wait):
                self._expires = decision.expires
                self._set(False, f"the Lease is held by {decision.holder}")
                return
            if decision.create:
                resp = await self.kube.request(
                    "POST", self._collection, json=decision.body, timeout=self._timeout()
                )
            else:
                resp = await self.kube.request(
                    "PUT", self._path, json=decision.body, timeout=self._timeout()
                )
            if resp.ok and isinstance(resp.body, dict):
                self._obs = observe(self._obs, resp.body, now=self._clock())
                # Measured from before the read: the server stored our renewal
                # no earlier than that, so a standby's wait starts no earlier.
                self._valid_until = started + self.config.renew_deadline
                if self._clock() < self._valid_until:
                    self._set(True, "acquired the Lease" if decision.acquiring else "renewed")
            elif resp.status == 409:
                log.debug("lease write conflict", extra={"lease": self._path})
            else:
                log.warning(
                    "lease write failed",
                    extra={
                        "lease": self._path,
                        "status": resp.status,
                        "body": str(resp.body)[:300],
                    },
                )
        except (KubeError, TimeoutError) as exc:
            log.warning(
                "lease read/write failed",
                extra={"lease": self._path, "error": str(exc) or type(exc).__name__},
            )
        finally:
            self._check_deadline()

    async def run(self) -> None:
        watchdog = asyncio.create_task(self._watchdog(), name="lease-watchdog")
        try:
            while True:
                await self.step()
                await self._sleep(self.pause())
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog

    def pause(self) -> float:
        """How long to wait before the next round: `retry_period`, or less when the
        Lease we wait on runs out sooner (a hair after, so the next read finds it out)."""
        if self._expires is None:
            return self.config.retry_period
        return min(self.config.retry_period, max(0.0, self._expires - self._clock()) + 0.01)

    async def release(self) -> None:
        """Give the Lease up (graceful shutdown); the writers must be stopped first."""
        was = self._leading
        self._set(False, "shutting down")
        self._valid_until = -math.inf
        if not was or self._obs is None:
            return
        body = release_body(self._obs, config=self.config, wall=micro_time(self._wall()))
        if body is None:
            return
        try:
            resp = await self.kube.request("PUT", self._path, json=body, timeout=5)
            if resp.ok:
                log.info("released the Lease", extra={"lease": self._path})
            else:
                log.warning("could not release the Lease", extra={"status": resp.status})
        except (KubeError, TimeoutError) as exc:
            log.warning("could not release the Lease", extra={"error": str(exc)})
