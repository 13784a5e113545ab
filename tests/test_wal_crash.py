"""The real crash test: a child process appends (entries and, now and then, suffix
truncations and a GC past an anchor) and acknowledges each operation only from its durability callback; the parent
SIGKILLs it at random moments, sometimes while it is still bootstrapping. After every kill the
log on disk must be exactly the state after some prefix of the issued operations that contains
every acknowledged one: nothing acknowledged is lost, nothing is reordered, nothing has a gap."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from node.entry import Entry, EntryType
from node.wal import read_log

KILLS = 60
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import os, random, sys
from node.entry import Entry, EntryType
from node.wal import Log, LogOptions

seed, directory = int(sys.argv[1]), sys.argv[2]
rng = random.Random(seed)
out = lambda s: os.write(1, s.encode())
# Small segments and a small queue, so kills land in rolls, preallocation and back-pressure.
log = Log.open(directory, "crash", LogOptions(log_segment_size_mb=0.03, group_commit_queue_size_bytes=16384))
last = log.last_index or 0
term = max((e.term for e in log.recovered), default=0) + 1
out(f"R {last}\n")

def payload(term, index):
    return f"{term}:{index};".encode() * (index % 7 + 1)

def acked(op):
    return lambda err: out(f"K {op}\n" if err is None else f"E {op} {err!r}\n")

op = 0
while True:
    op += 1
    if op % 300 == 0 and last > 60:
        out(f"G {last - 50}\n")
        log.register_anchor("test", last - 50)
        log.gc()
    if last > 5 and rng.random() < 0.03:
        after = last - rng.randint(0, 5)
        out(f"I {op} T {after}\n")
        res = log.truncate_suffix(after)
        last = after
    else:
        n = rng.randint(1, 4)
        out(f"I {op} A {last + 1} {n} {term}\n")
        res = log.reserve([Entry(term, i, EntryType.REPLICATE, payload(term, i)) for i in range(last + 1, last + n + 1)])
        last += n
    log.async_append(res, acked(op))
"""


def payload(term: int, index: int) -> bytes:
    return f"{term}:{index};".encode() * (index % 7 + 1)


def apply(state: list[Entry], op: list[str]) -> None:
    """Apply one issued operation to the model, in place (`state` holds contiguous indexes)."""
    base = state[0].index if state else 1
    if op[0] == "T":
        del state[int(op[1]) - base + 1 :]
        return
    first, n, term = map(int, op[1:])
    assert first == (state[-1].index + 1 if state else 1), "the test's model and the child disagree"
    state.extend(Entry(term, i, EntryType.REPLICATE, payload(term, i)) for i in range(first, first + n))


def holds(model: list[Entry], on_disk: list[Entry]) -> bool:
    """The disk holds the model, except for a prefix that GC may have deleted."""
    if not model or not on_disk:
        return model == on_disk
    skip = on_disk[0].index - model[0].index
    return skip >= 0 and model[-1] == on_disk[-1] and model[skip:] == on_disk


def _started(out_path: str) -> bool:
    with open(out_path, "rb") as f:
        return f.read(2) == b"R "


def run_and_kill(directory: str, out_path: str, rng: random.Random) -> list[str]:
    with open(out_path, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(rng.randrange(1 << 30)), directory],
            stdout=out, stderr=subprocess.PIPE, cwd=REPO,
        )
    try:
        if rng.random() < 0.15:  # anywhere, including mid-bootstrap and mid-repair
            time.sleep(rng.uniform(0, 0.3))
        else:
            deadline = time.monotonic() + 60
            while not _started(out_path):
                assert child.poll() is None, child.stderr.read().decode()
                assert time.monotonic() < deadline, "child never got ready"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.005, 0.3))
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        err = child.stderr.read().decode()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL, f"child died by itself ({child.returncode}): {err}"
    with open(out_path) as f:
        lines = f.read().split("\n")
    return lines[:-1]  # the last is "" or a line the kill cut short (a write may stop at a page)


@pytest.mark.slow
@pytest.mark.e2e
def test_sigkill_never_loses_an_acknowledged_entry(tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    directory = str(tmp_path / "wal")
    state: list[Entry] = []
    total_acked = anchor = 0
    for kill in range(KILLS):
        lines = run_and_kill(directory, str(tmp_path / "out"), rng)
        where = f"seed {seed}, kill {kill}"
        issued: list[list[str]] = []
        acked: list[int] = []
        for line in lines:
            kind, *rest = line.split()
            if kind == "R":
                assert int(rest[0]) == (state[-1].index if state else 0), f"{where}: bootstrap saw {rest[0]}"
            elif kind == "I":
                assert int(rest[0]) == len(issued) + 1
                issued.append(rest[1:])
            elif kind == "K":
                acked.append(int(rest[0]))
            elif kind == "G":
                anchor = int(rest[0])
            else:
                pytest.fail(f"{where}: append failed: {line}")
        # Callbacks run in order, so the acknowledged operations are exactly the first ones.
        assert acked == list(range(1, len(acked) + 1)), f"{where}: acks out of order"
        # A child killed before Log.open created the directory leaves no log at all.
        on_disk = read_log(directory, "crash").entries if os.path.isdir(directory) else []
        if on_disk and anchor:
            assert on_disk[0].index <= anchor, f"{where}: GC deleted entries above the anchor {anchor}"
        model = list(state)
        for op in issued[: len(acked)]:
            apply(model, op)
        matched = holds(model, on_disk)
        for op in issued[len(acked) :]:
            if matched:
                break
            apply(model, op)
            matched = holds(model, on_disk)
        assert matched, (
            f"{where}: the log on disk ({len(on_disk)} entries) is not the state after any prefix "
            f"of the {len(issued)} issued operations that holds the {len(acked)} acknowledged"
        )
        state = on_disk
        total_acked += len(acked)
    assert total_acked > KILLS  # the child really did work between kills
