"""Leader election rules over a `coordination.k8s.io/v1` Lease. Pure.

The rules are client-go's `leaderelection` package, which every Kubernetes
controller uses, so operators can read our Lease like any other:

- A candidate may take the Lease when nobody holds it (empty
  `holderIdentity`, which is what a leader writes when it releases it on a
  graceful shutdown) or when the holder has not renewed it for
  `leaseDurationSeconds`. "Not renewed" is measured on *our* clock, from
  the moment we first saw the current record, never by comparing the
  `renewTime` the holder wrote with our wall clock: the two machines' clocks
  need not agree.
- The leader renews every `retry_period`; if it cannot renew for
  `renew_deadline` (shorter than the lease duration) it stops leading
  before anyone else may start, so two leaders never write at once.
- Every write carries the resourceVersion it read (optimistic concurrency):
  of two candidates racing for an expired Lease, one gets 409 Conflict.

Times: `now` is a monotonic clock reading (seconds); `wall` is the
RFC 3339 MicroTime the API stores in `renewTime` / `acquireTime`, both
injected by the caller.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from aibom_core.objects import Obj

LEASE_API_VERSION = "coordination.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    identity: str
    namespace: str
    name: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if not (0 < self.retry_period < self.renew_deadline < self.lease_duration):
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period} / {self.renew_deadline} / {self.lease_duration}"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election-relevant part of a Lease's spec."""

    holder: str
    duration: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: Obj) -> LeaseRecord:
        spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            out["acquireTime"] = self.acquire_time
        if self.renew_time:
            out["renewTime"] = self.renew_time
        return out


@dataclass(frozen=True, slots=True)
class Observation:
    """The Lease as we last read it, and when (our clock) that record first appeared."""

    record: LeaseRecord | None
    resource_version: str | None
    seen_at: float


def observe(prev: Observation | None, lease: Obj | None, *, now: float) -> Observation:
    """Fold a fresh read of the Lease (None: it does not exist) into the observation.

    The clock restarts only when the record changed: a holder that keeps
    renewing changes `renewTime` each time; a dead one leaves it frozen.
    """
    record = LeaseRecord.of(lease) if lease is not None else None
    meta = lease.get("metadata") if lease is not None else None
    rv = str(meta.get("resourceVersion")) if isinstance(meta, dict) else None
    if prev is not None and prev.record == record:
        return Observation(record=record, resource_version=rv, seen_at=prev.seen_at)
    return Observation(record=record, resource_version=rv, seen_at=now)


@dataclass(frozen=True, slots=True)
class Write:
    """Write this Lease: `create` (POST) or update (PUT with the resourceVersion read)."""

    create: bool
    body: dict[str, Any]
    acquiring: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Somebody else holds a valid Lease; look again after the retry period, or at
    `expires` (our clock) if that comes first: the moment the record, unchanged
    since we first saw it, runs out."""

    holder: str
    expires: float


def expires_at(obs: Observation, *, config: ElectionConfig) -> float:
    """When the record we see runs out on our clock: `duration` after we first saw it."""
    duration = (obs.record.duration if obs.record else 0) or config.lease_duration
    return obs.seen_at + duration


def held_by_other(obs: Observation, *, config: ElectionConfig, now: float) -> bool:
    rec = obs.record
    if rec is None or not rec.holder or rec.holder == config.identity:
        return False
    return now < expires_at(obs, config=config)


def decide(obs: Observation, *, config: ElectionConfig, now: float, wall: str) -> Write | Wait:
    """What to do after reading the Lease: take or renew it, or wait."""
    rec = obs.record
    if rec is None:
        return Write(
            create=True,
            body=lease_body(
                config,
                LeaseRecord(
                    holder=config.identity,
                    duration=int(config.lease_duration),
                    acquire_time=wall,
                    renew_time=wall,
                    transitions=0,
                ),
                resource_version=None,
            ),
            acquiring=True,
        )
    if held_by_other(obs, config=config, now=now):
        return Wait(holder=rec.holder, expires=expires_at(obs, config=config))
    ours = rec.holder == config.identity
    new = LeaseRecord(
        holder=config.identity,
        duration=int(config.lease_duration),
        acquire_time=rec.acquire_time if ours and rec.acquire_time else wall,
        renew_time=wall,
        transitions=rec.transitions if ours else rec.transitions + 1,
    )
    return Write(
        create=False,
        body=lease_body(config, new, resource_version=obs.resource_version),
        acquiring=not ours,
    )


def release_body(obs: Observation, *, config: ElectionConfig, wall: str) -> dict[str, Any] | None:
    """The update that gives the Lease up (graceful shutdown), or None if it is not ours.

    client-go's release: empty holder, 1 s duration, so a standby takes over
    at its next retry instead of waiting out the lease.
    """
    rec = obs.record
    if rec is None or rec.holder != config.identity:
        return None
    released = LeaseRecord(
        holder="",
        duration=1,
        acquire_time=wall,
        renew_time=wall,
        transitions=rec.transitions,
    )
    return lease_body(config, released, resource_version=obs.resource_version)


def lease_body(
    config: ElectionConfig, record: LeaseRecord, *, resource_version: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": config.name, "namespace": config.namespace}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": meta,
        "spec": record.spec(),
    }


def micro_time(epoch_seconds: float) -> str:
    """RFC 3339 with microseconds in UTC, the MicroTime format of Lease times."""
    stamp = _dt.datetime.fromtimestamp(epoch_seconds, tz=_dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
