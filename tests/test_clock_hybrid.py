"""node.clock: monotonic hybrid timestamps across clock steps and leaders; commit-wait durations."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node import clock
from node.clock import HybridClock


class FakeTime:
    """A physical clock the test moves by hand, in nanoseconds."""

    def __init__(self, ns: int = 1_700_000_000_000_000_000):
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


def test_encoding_splits_physical_and_logical():
    ts = clock.make(123_456, 7)
    assert clock.physical_us(ts) == 123_456 and clock.logical(ts) == 7
    assert clock.make(5, 4095) < clock.make(6, 0)


def test_now_follows_physical_time():
    t = FakeTime()
    c = HybridClock(max_error_us=0, now_ns=t)
    first = c.now()
    assert clock.physical_us(first) == t.ns // 1000 and clock.logical(first) == 0
    t.ns += 5_000
    assert clock.physical_us(c.now()) == t.ns // 1000


@given(steps=st.lists(st.integers(-(10**9), 10**9), max_size=200))
def test_now_strictly_increases_whatever_the_physical_clock_does(steps):
    t = FakeTime()
    c = HybridClock(max_error_us=0, now_ns=t)
    last = c.now()
    for step in steps:
        t.ns += step
        ts = c.now()
        assert ts > last
        last = ts


def test_logical_overflow_carries_into_physical_and_stays_increasing():
    t = FakeTime()
    c = HybridClock(max_error_us=0, now_ns=t)
    stamps = [c.now() for _ in range(5000)]  # physical time frozen
    assert all(b > a for a, b in zip(stamps, stamps[1:], strict=False))
    assert clock.physical_us(stamps[-1]) == t.ns // 1000 + 1


def test_update_moves_later_timestamps_past_the_observed_one():
    t = FakeTime()
    c = HybridClock(max_error_us=0, now_ns=t)
    far = clock.make(t.ns // 1000 + 10_000_000, 3)
    c.update(far)
    assert c.now() > far
    c.update(clock.make(1))  # an old timestamp never moves the clock back
    assert c.now() > far


@given(skew_us=st.integers(-500_000, 500_000), issued=st.integers(1, 100))
def test_a_new_leader_updated_from_the_log_issues_greater_timestamps(skew_us, issued):
    """The predecessor's clock runs ahead or behind; the successor sees its log's timestamps."""
    t_old, t_new = FakeTime(), FakeTime()
    t_old.ns += skew_us * 1000
    old, new = HybridClock(500_000, t_old), HybridClock(500_000, t_new)
    log = [old.now() for _ in range(issued)]
    new.update(max(log))
    assert new.now() > max(log)


@given(skew_us=st.integers(-400_000, 400_000), max_error_us=st.integers(400_000, 2_000_000))
def test_commit_wait_puts_physical_time_past_a_predecessors_timestamp(skew_us, max_error_us):
    true_ns = FakeTime().ns
    old = HybridClock(max_error_us, lambda: true_ns + skew_us * 1000)
    ts = old.now()
    t_new = FakeTime(true_ns)
    new = HybridClock(max_error_us, t_new)
    wait_s = new.wait_until_after(ts)
    assert wait_s >= 0
    t_new.ns += round(wait_s * 1e9)
    assert clock.physical_us(new.now()) > clock.physical_us(ts)
    assert new.wait_until_after(ts) == 0


def test_commit_wait_is_zero_for_old_timestamps_and_bounded_by_max_error():
    t = FakeTime()
    c = HybridClock(max_error_us=250_000, now_ns=t)
    ts = c.now()
    assert c.wait_until_after(ts) == pytest.approx(0.250001)
    t.ns += 300_000_000
    assert c.wait_until_after(ts) == 0


def test_negative_max_error_is_refused():
    with pytest.raises(ValueError):
        HybridClock(max_error_us=-1)
