"""The annotator's work queue and token bucket, on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from annotator.workqueue import Backoff, QueueShutDown, TokenBucket, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def drain(q: WorkQueue[str]) -> list[str]:
    out = []
    while (k := q.poll()) is not None:
        out.append(k)
        q.done(k)
    return out


def test_adds_coalesce_until_taken() -> None:
    q: WorkQueue[str] = WorkQueue("t", now=Clock())
    for k in ["a", "b", "a", "a", "c", "b"]:
        q.add(k)
    assert len(q) == 3
    assert drain(q) == ["a", "b", "c"]
    assert q.idle()


def test_key_added_while_processing_is_requeued_once_on_done() -> None:
    q: WorkQueue[str] = WorkQueue("t", now=Clock())
    q.add("a")
    assert q.poll() == "a"
    q.add("a")
    q.add("a")
    # Never handed to a second worker while the first holds it.
    assert q.poll() is None
    q.done("a")
    assert q.poll() == "a"
    q.done("a")
    assert q.poll() is None


def test_add_after_waits_and_earliest_wins() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue("t", now=clock)
    q.add_after("a", 5)
    q.add_after("a", 2)
    q.add_after("a", 9)
    assert len(q) == 1
    assert q.poll() is None
    assert q.next_ready_in() == pytest.approx(2)
    clock.t += 2
    assert q.poll() == "a"
    q.done("a")
    clock.t += 10  # the superseded 5 s and 9 s entries do not fire again
    assert q.poll() is None
    assert q.idle()


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 0.005), (1, 0.01), (2, 0.02), (10, 5.12), (20, 300.0), (200, 300.0)],
)
def test_backoff_is_exponential_and_capped(failures: int, delay: float) -> None:
    assert Backoff(base=0.005, cap=300).delay(failures) == pytest.approx(delay)


def test_rate_limited_adds_back_off_per_item_and_forget_resets() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue("t", now=clock, backoff=Backoff(base=1, cap=100))
    assert q.add_rate_limited("a") == 1
    assert q.add_rate_limited("a") == 2
    assert q.add_rate_limited("b") == 1  # per item
    assert q.failures("a") == 2
    q.forget("a")
    assert q.failures("a") == 0
    assert q.add_rate_limited("a") == 1


def test_overall_bucket_limits_retries() -> None:
    clock = Clock()
    q: WorkQueue[int] = WorkQueue(
        "t", now=clock, backoff=Backoff(base=0.001), limiter=TokenBucket(10, 2, now=clock)
    )
    delays = [q.add_rate_limited(i) for i in range(5)]
    # Two from the burst, then one every 100 ms.
    assert delays[:2] == [pytest.approx(0.001)] * 2
    assert delays[2:] == [pytest.approx(0.1), pytest.approx(0.2), pytest.approx(0.3)]


def test_token_bucket_refills_at_rate_up_to_burst() -> None:
    clock = Clock()
    b = TokenBucket(5, 3, now=clock)
    assert [b.reserve() for _ in range(3)] == [0, 0, 0]
    assert b.reserve() == pytest.approx(0.2)
    clock.t += 100  # long idle: only `burst` tokens saved up
    assert [b.reserve() for _ in range(3)] == [0, 0, 0]
    assert b.reserve() > 0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_token_bucket_rejects_nonsense(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="token bucket"):
        TokenBucket(rate, burst)


async def settle() -> None:
    """Let every runnable task run until it waits (a few turns of the event loop):
    nothing else is scheduled, so whatever could finish now has."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_get_waits_for_add_and_for_delay() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    getter = asyncio.create_task(q.get())
    await settle()
    assert not getter.done()
    q.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"
    q.done("x")
    q.add_after("y", 0.05)
    assert await asyncio.wait_for(q.get(), 1) == "y"


async def test_shut_down_releases_waiters() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    getter = asyncio.create_task(q.get())
    await settle()
    q.shut_down()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(getter, 1)
    q.add("late")
    assert len(q) == 0


async def test_wait_idle_returns_once_the_last_key_is_done() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    await asyncio.wait_for(q.wait_idle(), 1)  # idle from the start
    q.add("a")
    waiter = asyncio.create_task(q.wait_idle())
    key = await q.get()
    await settle()
    assert not waiter.done()  # in progress is not idle
    q.done(key)
    await asyncio.wait_for(waiter, 1)
