"""Leader election rules (client-go's), as tables on injected clocks."""

from __future__ import annotations

from typing import Any

import pytest

from annotator.lease import (
    ElectionConfig,
    LeaseRecord,
    Wait,
    Write,
    decide,
    micro_time,
    observe,
    release_body,
)

CFG = ElectionConfig(identity="me", namespace="sys", name="lock")
WALL = "2026-10-05T12:00:00.000000Z"


def lease(
    holder: str, *, renew: str = WALL, rv: str = "7", transitions: int = 3, duration: int = 15
) -> dict[str, Any]:
    return {
        "metadata": {"name": "lock", "namespace": "sys", "resourceVersion": rv},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": "2026-10-05T11:00:00.000000Z",
            "renewTime": renew,
            "leaseTransitions": transitions,
        },
    }


def test_no_lease_creates_one() -> None:
    obs = observe(None, None, now=0)
    d = decide(obs, config=CFG, now=0, wall=WALL)
    assert isinstance(d, Write) and d.create and d.acquiring
    assert d.body["spec"]["holderIdentity"] == "me"
    assert d.body["spec"]["leaseDurationSeconds"] == 15
    assert "resourceVersion" not in d.body["metadata"]


@pytest.mark.parametrize(
    ("elapsed", "expect"),
    [(0, Wait), (14.9, Wait), (15.1, Write)],
)
def test_a_silent_holder_is_waited_out_on_our_clock(elapsed: float, expect: type) -> None:
    first = observe(None, lease("other"), now=100)
    # The holder wrote nothing new: the same record read again later.
    again = observe(first, lease("other"), now=100 + elapsed)
    assert again.seen_at == 100
    d = decide(again, config=CFG, now=100 + elapsed, wall=WALL)
    assert isinstance(d, expect)
    if isinstance(d, Wait):
        assert d.expires == 100 + 15  # first seen at 100, not re-read at 100 + elapsed
    if isinstance(d, Write):
        assert d.acquiring and not d.create
        assert d.body["metadata"]["resourceVersion"] == "7"
        assert d.body["spec"]["leaseTransitions"] == 4
        assert d.body["spec"]["acquireTime"] == WALL


def test_a_renewing_holder_is_never_taken_over() -> None:
    obs = observe(None, lease("other", renew="t1"), now=0)
    for i in range(1, 20):
        # renewTime changes each read: the clock restarts.
        obs = observe(obs, lease("other", renew=f"t{i + 1}", rv=str(i)), now=i * 2.0)
        assert isinstance(decide(obs, config=CFG, now=i * 2.0, wall=WALL), Wait)


def test_clock_skew_in_renew_time_does_not_matter() -> None:
    # A renewTime far in the past (the holder's clock is behind) is still fresh.
    obs = observe(None, lease("other", renew="1999-01-01T00:00:00.000000Z"), now=50)
    assert isinstance(decide(obs, config=CFG, now=51, wall=WALL), Wait)


def test_released_lease_is_taken_at_once() -> None:
    obs = observe(None, lease("", duration=1), now=0)
    d = decide(obs, config=CFG, now=0, wall=WALL)
    assert isinstance(d, Write) and d.acquiring


def test_own_lease_is_renewed_keeping_acquire_time_and_transitions() -> None:
    obs = observe(None, lease("me"), now=0)
    d = decide(obs, config=CFG, now=1, wall=WALL)
    assert isinstance(d, Write) and not d.acquiring and not d.create
    assert d.body["spec"]["acquireTime"] == "2026-10-05T11:00:00.000000Z"
    assert d.body["spec"]["leaseTransitions"] == 3
    assert d.body["spec"]["renewTime"] == WALL


def test_release_empties_the_holder_only_when_ours() -> None:
    mine = observe(None, lease("me"), now=0)
    body = release_body(mine, config=CFG, wall=WALL)
    assert body is not None
    assert body["spec"]["holderIdentity"] == ""
    assert body["spec"]["leaseDurationSeconds"] == 1
    assert body["metadata"]["resourceVersion"] == "7"
    assert release_body(observe(None, lease("other"), now=0), config=CFG, wall=WALL) is None
    assert release_body(observe(None, None, now=0), config=CFG, wall=WALL) is None


@pytest.mark.parametrize(
    ("retry", "renew", "duration"), [(2, 2, 15), (2, 15, 15), (0, 10, 15), (3, 2, 15)]
)
def test_config_needs_retry_below_deadline_below_duration(
    retry: float, renew: float, duration: float
) -> None:
    with pytest.raises(ValueError, match="retry period"):
        ElectionConfig(
            "me", "ns", "n", lease_duration=duration, renew_deadline=renew, retry_period=retry
        )


def test_empty_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="identity"):
        ElectionConfig("", "ns", "n")


def test_record_round_trip_and_micro_time() -> None:
    rec = LeaseRecord.of(lease("x"))
    assert LeaseRecord.of({"spec": rec.spec()}) == rec
    assert micro_time(0) == "1970-01-01T00:00:00.000000Z"
    assert micro_time(1.5) == "1970-01-01T00:00:01.500000Z"
