"""harness.sim.seed_pool: seeds on worker processes that may die. A worker killed by a signal (a
segfault at the memory bound, the OOM killer) must end as a lost seed, never as a run that
waits for ever or a seed reported as passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.sim.seed_pool import DIED, run_in_order


def _square_or_die(n: int) -> int:
    if n == 3:
        os.kill(os.getpid(), signal.SIGSEGV)
    return n * n


def _slow(n: int) -> int:
    time.sleep(0.2 if n == 0 else 30)
    return n


def test_a_dead_worker_loses_its_seed_and_the_run_goes_on_in_order():
    got = []
    out = run_in_order(_square_or_die, list(range(6)), 1, lambda n, why: ("lost", n, why),
                       on_result=got.append)
    assert out == [0, 1, 4, ("lost", 3, DIED), 16, 25] and got == out


def test_with_two_workers_a_death_loses_only_its_own_seed():
    out = run_in_order(_square_or_die, list(range(8)), 2, lambda n, why: ("lost", n))
    assert out == [0, 1, 4, ("lost", 3), 16, 25, 36, 49]


def _raise(n: int) -> int:
    raise ValueError(f"seed {n} broke")


def test_an_exception_in_a_seed_is_raised_in_the_caller():
    with pytest.raises(ValueError, match="seed 0 broke"):
        run_in_order(_raise, [0], 1, lambda n, why: None)


def test_every_seed_runs_in_a_fresh_process_with_the_hash_seed_fixed():
    out = run_in_order(_pid_and_hash, list(range(4)), 2, lambda n, why: None)
    assert len({pid for pid, _ in out}) == 4  # nothing one seed leaves reaches the next
    fixed = subprocess.run([sys.executable, "-c", "print(hash('tessera'))"], text=True,
                           capture_output=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert {h for _, h in out} == {int(fixed.stdout)}  # each worker hashes as PYTHONHASHSEED=0


def _pid_and_hash(n: int) -> tuple[int, int]:
    return os.getpid(), hash("tessera")


def test_stop_and_deadline_end_the_run_without_waiting_for_seeds_in_flight():
    out = run_in_order(_square_or_die, list(range(6)), 1, lambda n, why: None,
                       stop=lambda r: r == 1)
    assert out == [0, 1]
    t0 = time.monotonic()
    out = run_in_order(_slow, [0, 1, 2], 2, lambda n, why: None, deadline=time.monotonic() + 1)
    assert out == [0] and time.monotonic() - t0 < 20  # seed 1's 30 s sleep was killed


def _first_slow(n: int) -> int:
    time.sleep(30 if n == 0 else 0.2)
    return n


def test_at_the_deadline_seeds_that_finished_behind_a_running_one_are_kept():
    """Seed 0 still runs at the deadline while seed 1 finished: seed 1 is in the results (it
    once was dropped with every other result behind the gap, and a matrix cell whose seeds all
    finished out of order said valid over none)."""
    got = []
    t0 = time.monotonic()
    out = run_in_order(_first_slow, [0, 1], 2, lambda n, why: None,
                       deadline=time.monotonic() + 2, on_result=got.append)
    assert out == [1] and got == [1] and time.monotonic() - t0 < 20


def test_a_generator_of_seeds_is_read_as_workers_free_up_after_the_results_before():
    """The matrix's steered seeds (harness.sim.steer) choose each next seed from the results
    before it: with one worker, the generator's next arg is taken only after every earlier
    result went to on_result, and a seed that dies is still lost as its own."""
    got: list = []
    seen_when_taken: list[int] = []

    def args():
        for n in range(5):
            seen_when_taken.append(len(got))
            yield n

    out = run_in_order(_square_or_die, args(), 1, lambda n, why: ("lost", n), on_result=got.append)
    assert out == got == [0, 1, 4, ("lost", 3), 16]
    assert seen_when_taken == [0, 1, 2, 3, 4]
