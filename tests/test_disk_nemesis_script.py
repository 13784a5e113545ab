"""The disk nemesis's damage script (nemeses/disk.py `_DAMAGE`), run as the harness runs it on a
host (`python3 -c`), against WAL segments in the engine's format."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace

import pytest

from harness.deployment import Holds
from harness.systems.tessera.deployment import TesseraDB
from nemeses.disk import damage_args
from node.entry import Entry, EntryType
from node.wal.errors import WalCorruption
from node.wal.reader import read_log
from tests.test_wal_reader import BATCHES, TABLET, build, entries, put


def damage(root, seed: int, mode: str) -> dict:
    layout = replace(TesseraDB(hosts=[], wheels=[], remotes={}).disk_layout(), root=str(root))
    out = subprocess.run(damage_args(layout, seed, [], mode),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("value", [0, 0x61], ids=["zero-filled", "ordinary"])
def test_newest_flip_hits_the_newest_batch_and_the_reader_refuses_it(tmp_path, seed, value):
    """Anywhere in the newest batch, header or data (a zero-filled value's too): refused,
    unless the flip hit a sector stamp, which changes no data."""
    wal = tmp_path / "wals" / TABLET
    wal.mkdir(parents=True)
    finished, _ = build([entries(1, 2)], seq=1)
    newest = [Entry(1, 7, EntryType.REPLICATE, bytes([value]) * 1400)]
    unfinished, offsets = build(BATCHES[1:] + [newest], seq=2, footer=False)
    put(wal, 1, finished)
    put(wal, 2, unfinished + bytes(4096))  # preallocated, unwritten space after it
    done = damage(tmp_path, seed, "newest-flip")
    assert done["mode"] == "newest-flip" and done["batch"] == offsets[-1]
    assert done["batch_end"] == len(unfinished) and done["file"].endswith("002")
    assert offsets[-1] <= done["offset"] < done["batch_end"]
    if done["stamp"]:
        assert len(read_log(str(wal), TABLET).entries) == 6
        return
    with pytest.raises(WalCorruption) as err:
        read_log(str(wal), TABLET)
    assert err.value.offset == offsets[-1]


def test_newest_flip_without_an_unfinished_segment_flips_some_bit(tmp_path):
    wal = tmp_path / "wals" / TABLET
    wal.mkdir(parents=True)
    put(wal, 1, build([entries(1, 2)], seq=1)[0])
    done = damage(tmp_path, 0, "newest-flip")
    assert done["mode"] == "bitflip"


@pytest.mark.parametrize("seed", range(6))
def test_a_truncated_newest_segment_of_a_real_log_is_refused_not_cut_as_torn(tmp_path, seed):
    """The nemesis's truncation of the newest, preallocated, unfinished segment a real Log
    left at a crash: bootstrap must refuse it wherever the cut falls. It used to cut the
    shortened batch as a torn tail and come back RUNNING without fsynced entries (found by
    `tessera test --nemesis all --seed 41` as incompatible list orders)."""
    import shutil

    from node.wal import Log, LogOptions
    from tests.test_wal_log import append_durably, entry

    live, wal = tmp_path / "live", tmp_path / "wals" / TABLET
    with Log.open(str(live), TABLET, LogOptions(log_segment_size_mb=64 / 1024)) as log:
        for i in range(1, 9):
            append_durably(log, [entry(i, size=40)])
        shutil.copytree(live, wal)  # the crash image: the newest segment never finished
    done = damage(tmp_path, seed, "truncate")
    assert done["mode"] == "truncate" and done["to"] < done["from"]
    with pytest.raises(WalCorruption):
        read_log(str(wal), TABLET)


class _Shrunk(Holds):
    """Just enough of a Deployment for DiskCorruption.start: two tablets' WAL segments under
    `root`, one of them a group that cannot spare a replica now."""

    held: dict = {}

    def _targets(self, host, daemon):
        return [daemon]

    def __init__(self, root, fragile: set[str]):
        self.layout = replace(TesseraDB(hosts=[], wheels=[], remotes={}).disk_layout(),
                              root=str(root), log="")
        self.fragile = fragile

    def disk_layout(self):
        return self.layout

    def cannot_spare(self):
        return set(self.fragile)

    def kill(self, host, daemon):
        pass

    def start(self, host, daemon, by=""):
        pass

    def damaged(self, host, done):
        return {"tablet": done["group"], "state": "FAILED"}


class _LocalRemote:
    def run(self, argv, check=True):
        done = subprocess.run(argv, capture_output=True, text=True, check=check)
        done.exit_status = done.returncode  # as harness.control.Result names it
        return done


@pytest.mark.parametrize("seed", range(8))
def test_a_group_that_cannot_spare_a_replica_is_never_damaged(tmp_path, seed):
    """One damaged replica of a tablet the membership fault shrank to two voters is a majority
    of it: the disk nemesis must pick another group (otherwise the tablet stays
    leaderless and the convergence check reports a bug that is the faults' doing)."""
    from nemeses.disk import DiskCorruption

    for tablet in ("shrunk-0000", "whole-0001"):
        wal = tmp_path / "tserver" / "wals" / tablet
        wal.mkdir(parents=True)
        put(wal, 1, build([entries(1, 3, size=200)], seq=1)[0])
        put(wal, 2, build([entries(4, 6, size=200)], seq=2)[0])
    db = _Shrunk(tmp_path / "tserver", {"shrunk-0000"})
    nemesis = DiskCorruption(db=db, hosts=["n1"], remotes={"n1": _LocalRemote()})
    done = nemesis.start({"host": "n1", "damage_seed": seed})
    assert done["group"] == "whole-0001", done
    # the damage read back from the file by a process of its own: the byte as flipped, the
    # file at its cut length, or no file by the lost one's name (never a WAL's newest segment)
    assert done["observed"]["ok"], done
    if done["mode"] == "lose":
        assert done["file"].endswith("wal-000000001") and not os.path.exists(done["file"])
    elif done["mode"] != "truncate":
        assert done["observed"]["byte"] == done["before"] ^ (1 << done["bit"])
    db.fragile.add("whole-0001")
    nemesis.damaged.clear()
    assert "skipped" in nemesis.start({"host": "n1", "damage_seed": seed})


def test_lose_takes_any_file_of_a_replica_but_its_newest_wal_segment(tmp_path):
    """Under a running server the lose mode deletes one file (the directory synced after): a
    superblock, a snapshot, consensus metadata or a WAL segment, never the newest one."""
    taken = {}
    for seed in range(40):
        root = tmp_path / str(seed)
        wal = root / "wals" / TABLET
        wal.mkdir(parents=True)
        put(wal, 1, build([entries(1, 3, size=200)], seq=1)[0])
        put(wal, 2, build([entries(4, 6, size=200)], seq=2, footer=False)[0])
        for sub in ("consensus-meta", "tablet-meta"):
            (root / sub).mkdir()
            (root / sub / TABLET).write_bytes(b"m" * 100)
        (root / "data" / TABLET).mkdir(parents=True)
        (root / "data" / TABLET / "snapshot-1").write_bytes(b"s" * 100)
        done = damage(root, seed, "lose")
        assert done["group"] == TABLET and not os.path.exists(done["file"]), done
        assert not done["file"].endswith("wal-000000002"), done
        taken[done["kind"]] = done["file"].rsplit("/", 2)[-2:]
    assert sorted(taken) == ["cmeta", "snapshot", "superblock", "wal"], taken
