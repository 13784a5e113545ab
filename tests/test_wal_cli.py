"""`tessera wal dump` on a good segment, a good directory, a torn tail and corrupt segments,
run as the real command."""

from __future__ import annotations

import subprocess
import sys

from node.entry import Entry, EntryType
from node.wal import Log, LogOptions
from node.wal.segment import scan_segment


def dump(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "wal", "dump", str(path)], capture_output=True, text=True
    )


def make_log(directory, n: int = 5) -> list[str]:
    with Log.open(str(directory), "cli-tablet", LogOptions(log_preallocate_segments=False)) as log:
        for i in range(1, n + 1):
            log.async_append(log.reserve([Entry(1, i, EntryType.REPLICATE, b"v%d" % i)]), lambda err: None)
        log.async_append(log.truncate_suffix(3), lambda err: None)
        log.async_append(log.reserve([Entry(2, 4, EntryType.NO_OP)]), lambda err: None)
        return log.segments()


def test_dump_prints_the_entries_of_a_good_segment(tmp_path):
    (segment,) = make_log(tmp_path)
    out = dump(segment)
    assert out.returncode == 0, out.stderr
    assert "tablet 'cli-tablet', seq 1" in out.stdout
    for i in range(1, 6):
        assert f"term 1 index {i} REPLICATE" in out.stdout
    assert "TRUNCATE after index 3" in out.stdout and "term 2 index 4 NO_OP" in out.stdout


def test_dump_of_a_directory_replays_the_log(tmp_path):
    make_log(tmp_path)
    Log.open(str(tmp_path), "cli-tablet").close()  # a second, empty segment
    out = dump(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "log: 4 entries after replay, next index 5" in out.stdout


def test_dump_reports_a_torn_tail_without_failing(tmp_path):
    (segment,) = make_log(tmp_path)
    data = open(segment, "rb").read()
    end = scan_segment(segment).end
    with open(segment, "wb") as f:
        f.write(data[: end - 5])  # no footer, last batch cut short
    out = dump(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "torn tail" in out.stdout and "term 1 index 5" in out.stdout


def test_dump_names_file_and_offset_of_corruption_and_fails(tmp_path):
    (segment,) = make_log(tmp_path)
    scan = scan_segment(segment)
    victim = scan.records[2].offset
    data = bytearray(open(segment, "rb").read())
    data[victim + 20] ^= 0x40
    with open(segment, "wb") as f:
        f.write(data)
    for path in (segment, tmp_path):
        out = dump(path)
        assert out.returncode == 1
        assert f"CORRUPTION in {segment} at offset {victim}" in out.stderr
        assert "term 1 index 2" in out.stdout  # what precedes the damage is still shown


def test_dump_of_a_missing_path_is_a_clear_error(tmp_path):
    out = dump(tmp_path / "nope")
    assert out.returncode == 254 and "nope" in out.stderr  # a bad argument
