"""Leader election: the async driver of the rules in `annotator.lease`.

Every `retry_period` it reads the Lease and writes what `lease.decide`
says (take it, renew it) or waits. Leadership starts when a write
succeeds; it ends when renewing has failed for `renew_deadline`, when
someone else holds the Lease, or on `release()` (graceful shutdown, which
hands the Lease over at once). `on_change(True/False)` tells the controller
to start or stop its writers; it is called before `is_leader` is read by
anyone who writes after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aibom_rollup.kube import Kube, KubeError
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
    ) -> None:
        self.kube = kube
        self.config = config
        self.on_change = on_change
        self._clock = clock
        self._wall = wall
        self.is_leader = False
        self._obs: Observation | None = None
        self._renewed_at = 0.0
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases/{config.name}"
        )
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases"
        self.holder = ""

    def _set(self, leading: bool, why: str) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        log.info(
            "started leading" if leading else "stopped leading",
            extra={"identity": self.config.identity, "lease": self._path, "why": why},
        )
        self.on_change(leading)

    def _check_deadline(self) -> None:
        if self.is_leader and self._clock() - self._renewed_at > self.config.renew_deadline:
            self._set(False, f"could not renew for {self.config.renew_deadline:.0f} s")

    async def _read(self) -> Any:
        resp = await self.kube.request("GET", self._path, timeout=self.config.retry_period * 2)
        if resp.status == 404:
            return None
        if not resp.ok:
            raise KubeError(f"GET lease: HTTP {resp.status}")
        return resp.body

    async def step(self) -> None:
        """One round: read, decide, write. Never raises for API trouble."""
        try:
            lease = await self._read()
            self._obs = observe(self._obs, lease, now=self._clock())
            decision = decide(
                self._obs, config=self.config, now=self._clock(), wall=micro_time(self._wall())
            )
            if isinstance(decision, Wait):
                self.holder = decision.holder
                self._set(False, f"the Lease is held by {decision.holder}")
                return
            if decision.create:
                resp = await self.kube.request(
                    "POST",
                    self._collection,
                    json=decision.body,
                    timeout=self.config.retry_period * 2,
                )
            else:
                resp = await self.kube.request(
                    "PUT", self._path, json=decision.body, timeout=self.config.retry_period * 2
                )
            if resp.ok and isinstance(resp.body, dict):
                self._obs = observe(self._obs, resp.body, now=self._clock())
                self._renewed_at = self._clock()
                self.holder = self.config.identity
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
            log.warning("lease read/write failed", extra={"lease": self._path, "error": str(exc)})
        finally:
            self._check_deadline()

    async def run(self) -> None:
        while True:
            await self.step()
            await asyncio.sleep(self.config.retry_period)

    async def release(self) -> None:
        """Give the Lease up (graceful shutdown); the writers must be stopped first."""
        was = self.is_leader
        self._set(False, "shutting down")
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
