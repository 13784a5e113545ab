"""WAL benchmark: durable appends per second and p99 latency with 1 and 32 writers, against
the disk's raw limit for one unbatched writer (64-byte write + fdatasync), all measured in the
same run in the same directory. An append counts only once the appender thread has synced its
group and told the writer.

- appends_per_s_1 / p99_ms_1: one writer thread on the seed's API: reserve(),
  async_append(entry, callback), wait for the callback.
- appends_per_s_32 / p99_ms_32: 32 asyncio writers on one loop (append_future), the way the
  tablet server appends; 32 Python threads would measure the GIL more than the log.
- asyncio_appends_per_s_1 / asyncio_p99_ms_1: one asyncio writer, the tablet server's lone
  writer. It pays the event loop's wake-up and dispatch on top (docs/benchmarks.md).

- unstamped_appends_per_s_1 / stamp_cost_1_pct, unstamped_appends_per_s_32 /
  stamp_cost_32_pct: the lone thread writer and the 32 writers on segments written as format 2
  was, without sector stamps (the anchor of what the stamps cost), in the same rounds;
  stamp_us_per_mib: CPU time to lay out a 1 MiB batch with its stamps (the pieces pwritev
  takes), the part of the cost that does not hide behind fsync.

The measurements alternate in short rounds (raw, thread writer, asyncio writer, 32 writers,
raw, ...) so that noise from other work on the machine, which can change the disk's fsync rate
severalfold within seconds, falls on all alike; each figure is the total over its rounds.

    python bench/wal.py --json [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from node.entry import Entry, EntryType  # noqa: E402
from node.wal import (  # noqa: E402
    Log,
    LogOptions,
    segment,  # noqa: E402
)
from node.wal import format as fmt  # noqa: E402

PAYLOAD = b"p" * 100


def raw_fsync(directory: str, seconds: float) -> tuple[int, float]:
    """(syncs, elapsed seconds) of a loop of 64-byte write + fdatasync in a preallocated file."""
    path = os.path.join(directory, "raw")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, 64 << 20)
        os.fsync(fd)
        buf = b"r" * 64
        n, start = 0, time.perf_counter()
        deadline = start + seconds
        while True:
            os.write(fd, buf)
            os.fdatasync(fd)
            n += 1
            if n % 16 == 0 and time.perf_counter() >= deadline:
                break
        return n, time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def thread_appends(directory: str, seconds: float, latencies: list[float]) -> float:
    """One writer thread on the seed's API: reserve(), async_append(entry, callback), wait for
    the callback. Adds each append's latency to `latencies`; returns the elapsed time."""
    wal_dir = os.path.join(directory, "wal-thread")
    log = Log.open(wal_dir, "bench", LogOptions())
    done = threading.Lock()
    done.acquire()
    errors: list[BaseException] = []

    def callback(error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)
        done.release()

    try:
        clock, record = time.perf_counter, latencies.append
        start = clock()
        deadline = start + seconds
        index = 0
        while True:
            index += 1
            t0 = clock()
            log.async_append(log.reserve([Entry(1, index, EntryType.REPLICATE, PAYLOAD)]), callback)
            done.acquire()
            t1 = clock()
            if errors:
                raise SystemExit(f"bench/wal.py: append failed: {errors[0]!r}")
            record(t1 - t0)
            if t1 >= deadline:
                return t1 - start
    finally:
        log.close()
        shutil.rmtree(wal_dir)


def asyncio_appends(directory: str, writers: int, seconds: float, latencies: list[float]) -> float:
    """Run `writers` concurrent asyncio writers for `seconds`; add each append's latency to
    `latencies`; return the elapsed time."""
    wal_dir = os.path.join(directory, f"wal-{writers}")
    log = Log.open(wal_dir, "bench", LogOptions())

    async def main() -> float:
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + seconds
        next_index = iter(range(1, 1 << 62))
        clock = time.perf_counter

        async def writer() -> None:
            record = latencies.append
            while loop.time() < stop_at:
                await log.wait_for_space()
                t0 = clock()
                await log.append_future(log.reserve([Entry(1, next(next_index), EntryType.REPLICATE, PAYLOAD)]))
                record(clock() - t0)

        start = clock()
        await asyncio.gather(*(writer() for _ in range(writers)))
        return clock() - start

    try:
        return asyncio.run(main())
    finally:
        log.close()
        shutil.rmtree(wal_dir)


@contextlib.contextmanager
def unstamped_segments():
    """New segments are written as format 2 wrote them: no sector stamps (the anchor)."""
    real_version, real_stamped = fmt.FORMAT_VERSION, segment.stamped
    fmt.FORMAT_VERSION, segment.stamped = 2, lambda batch, offset: [batch]
    try:
        yield
    finally:
        fmt.FORMAT_VERSION, segment.stamped = real_version, real_stamped


def stamp_us_per_mib() -> float:
    """CPU microseconds to lay out a 1 MiB batch with its stamps, best of 20."""
    batch, best = os.urandom(1 << 20), float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        segment.stamped(batch, 4096)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def p99_ms(latencies: list[float]) -> float:
    latencies.sort()
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000


def check_disk(directory: str) -> str:
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", directory], capture_output=True, text=True)
    fstype = out.stdout.strip() or "unknown"
    if fstype in ("tmpfs", "ramfs"):
        sys.exit(f"bench/wal.py: {directory} is on {fstype}; fsync numbers would be meaningless")
    return fstype


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line (the only output mode)")
    parser.add_argument("--quick", action="store_true", help="short rounds: the whole run under 20 s")
    parser.add_argument("--dir", default="/var/tmp", help="where to create the temporary files (a real disk)")
    args = parser.parse_args()
    rounds, seconds = (5, 0.8) if args.quick else (10, 3.0)
    fstype = check_disk(args.dir)
    directory = tempfile.mkdtemp(prefix="tessera-bench-wal-", dir=args.dir)
    syncs, raw_time = 0, 0.0
    lat_1: list[float] = []
    lat_a1: list[float] = []
    lat_32: list[float] = []
    lat_32u: list[float] = []
    lat_1u: list[float] = []
    time_1 = time_a1 = time_32 = time_32u = time_1u = 0.0
    try:
        asyncio_appends(directory, 32, 0.5, [])  # warm-up: page cache, allocator, imports
        for _ in range(rounds):
            n, elapsed = raw_fsync(directory, seconds)
            syncs, raw_time = syncs + n, raw_time + elapsed
            time_1 += thread_appends(directory, seconds, lat_1)
            time_a1 += asyncio_appends(directory, 1, seconds, lat_a1)
            time_32 += asyncio_appends(directory, 32, seconds, lat_32)
            with unstamped_segments():
                time_32u += asyncio_appends(directory, 32, seconds, lat_32u)
                time_1u += thread_appends(directory, seconds, lat_1u)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    fsync_per_s = syncs / raw_time
    appends_32 = len(lat_32) / time_32
    result = {
        "fsync_per_s": round(fsync_per_s, 1),
        "appends_per_s_1": round(len(lat_1) / time_1, 1),
        "p99_ms_1": round(p99_ms(lat_1), 3),
        "appends_per_s_32": round(appends_32, 1),
        "p99_ms_32": round(p99_ms(lat_32), 3),
        "group_speedup": round(appends_32 / fsync_per_s, 2),
        "asyncio_appends_per_s_1": round(len(lat_a1) / time_a1, 1),
        "asyncio_p99_ms_1": round(p99_ms(lat_a1), 3),
        "unstamped_appends_per_s_1": round(len(lat_1u) / time_1u, 1),
        "stamp_cost_1_pct": round(100 * (1 - len(lat_1) / time_1 / (len(lat_1u) / time_1u)), 1),
        "unstamped_appends_per_s_32": round(len(lat_32u) / time_32u, 1),
        "stamp_cost_32_pct": round(100 * (1 - appends_32 / (len(lat_32u) / time_32u)), 1),
        "stamp_us_per_mib": round(stamp_us_per_mib(), 1),
    }
    print(f"# {args.dir} ({fstype}), {rounds} rounds of {seconds:g} s per measurement", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
