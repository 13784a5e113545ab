"""A WAL segment lost while the replica's newest segment holds no entries yet (as right after a
restart): the newest segment's header says how far the log reached before it, so bootstrap
refuses the log instead of booting a replica that acknowledged entries as one that never logged
any. The disk fault's lose mode found this on the netns cluster: the replica ran on with an
empty log, its votes free for any candidate (tests/test_nemeses_e2e.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import pytest
from replica_net import TABLET as REPLICA_TABLET
from replica_net import options
from test_replica_lifecycle import leading_with_session, single_replica
from test_wal_log import TABLET, append_durably, entry

from node import probes
from node.errors import CorruptionError
from node.replica.replica import Replica
from node.tablet.paths import TabletPaths
from node.wal import Log, LogOptions


def test_an_older_segment_lost_behind_an_empty_newest_one_is_refused_at_bootstrap(tmp_path):
    async def lead_and_stop():
        r = single_replica(tmp_path)
        await leading_with_session(r)  # its log: the leader's no-op, a session's open
        await r.stop()
    asyncio.run(lead_and_stop())
    paths = TabletPaths(tmp_path / "a", REPLICA_TABLET)

    def replica() -> Replica:
        return Replica("a", paths, lambda *_: None, dataclasses.replace(options()))

    restarted = replica()
    restarted.open()  # a restart: a new, empty newest segment, and no entry after it
    held = restarted.wal.last_index
    restarted.wal.close()
    assert held and held >= 2
    segments = sorted(os.listdir(paths.wal_dir))
    assert segments == ["wal-000000001", "wal-000000002"], segments
    os.unlink(paths.wal_dir / "wal-000000001")  # lost while the server ran
    with probes.expect("replica.bootstrap.wal_base_past_snapshot"), \
            pytest.raises(CorruptionError, match=f"after index {held} but the snapshot ends at 0"):
        replica().open()


def test_segments_collected_below_the_snapshot_are_not_taken_for_lost(tmp_path):
    """Log GC deletes a segment only once all it holds is below every anchor (the snapshot's
    among them), so the oldest segment left never claims more than the snapshot holds."""
    log = Log.open(str(tmp_path), TABLET, LogOptions(log_segment_size_mb=4 / 1024))
    i = 0
    while len(log.segments()) < 8:
        i += 1
        append_durably(log, [entry(i, size=256)])
    snapshot = i // 2
    log.register_anchor("core", snapshot + 1)
    assert log.gc()
    log.close()
    again = Log.open(str(tmp_path), TABLET)
    assert 0 < again.base_index <= snapshot
    assert again.recovered[0].index <= snapshot + 1
    again.close()
