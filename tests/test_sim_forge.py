"""Forged damage (harness.sim.stack_forge): bytes whose checksums match but whose content is wrong,
on disk (the `forge` late kind) and on the wire (`garble`). Each recorded seed is valid (the
damaged replica came back FAILED, as the checks demand of judged damage) and fires the probes
no other fault reaches."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from harness.sim.disk import SimDisk
from harness.sim.network import SimNetwork
from harness.sim.stack import StackConfig, StackSim
from harness.sim.stack_checks import DATA_DIR, Invariants
from harness.sim.stack_forge import FORGED_MODES, _read_at_boot
from harness.sim.swarm import LATE, parse_mix, swarm_mix
from node.errors import CorruptionError
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.state import StateMachine
from node.tablet.superblock import DataState, KeyRange, Superblock
from tests.test_tablet_snapshot import busy_state

FORGE = "forge:4,restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;snapshot=200"
SHRINK = "copy-shrink:4,restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;snapshot=200"
GARBLE = "garble:4,restart:1,heal:1;every=0.5-2;reads=linearizable;load=10x100"


def _run(tmp_path, spec: str, seed: int, workload: str, seconds: float, *names: str):
    sim = StackSim(StackConfig(seed=seed, workload=workload, seconds=seconds,
                               mix=parse_mix(spec)), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    for name in names:
        assert result.probes.get(name, 0) >= 1, name
    return sim, result


def test_forge_and_garble_are_late_kinds_drawn_on_their_own():
    for kind in ("forge", "garble", "copy-shrink"):
        assert kind in LATE
        assert 30 < sum(kind in swarm_mix(s).kinds() for s in range(200)) < 170, kind


def test_a_forged_batch_and_a_misdirected_footer_are_refused(tmp_path):
    """A batch rewritten with bytes that do not decode, its CRCs computed over them, is no torn
    write (wal.scan.undecodable_batch, wal.recover.crcs_match_refused); a finished segment
    holding another segment's footer is refused at bootstrap (wal.recover.footer_mismatch_refused)."""
    sim, _ = _run(tmp_path, FORGE, 1, "list-append", 15.0, "wal.scan.undecodable_batch",
                  "wal.recover.crcs_match_refused", "wal.recover.footer_mismatch_refused",
                  "tablet.failed.at_open")
    modes = {e[2][1] for e in sim.events if e[1] == "damage"}
    assert modes <= set(FORGED_MODES), modes


def test_a_forged_truncation_and_a_misdirected_snapshot_are_refused(tmp_path):
    """A TRUNCATE record past the log's end in place of the newest batch
    (wal.replay.bad_truncation_refused); a snapshot holding another's bytes, valid CRC
    (tablet.snapshot.wrong_contents_refused)."""
    _run(tmp_path, FORGE, 3, "list-append", 15.0, "wal.replay.bad_truncation_refused",
         "tablet.snapshot.wrong_contents_refused", "tablet.failed.at_open")


def test_a_garbled_copy_chunk_is_refused_and_fetched_again(tmp_path):
    """A tablet copy's chunk reply with two 16-bit words swapped (TCP's checksum cannot see
    it) fails the chunk's CRC at the receiver, which asks again (copy.fetch.bad_chunk)."""
    sim, _ = _run(tmp_path, GARBLE, 0, "register", 10.0, "copy.fetch.bad_chunk")
    garbled = [e[2] for e in sim.events if e[1] == "garble"]
    assert garbled and all(isinstance(v[-1], int) and v[-1] >= 1 for v in garbled), garbled


def test_a_file_cut_under_a_copy_source_is_a_short_read_and_fails_it_at_its_reboot(tmp_path):
    """A file a copy session pinned, cut short under the running source: the source's read
    comes back short (copy.source.short_read); at its reboot the replica comes back FAILED
    (judged, as the recorded value says)."""
    sim, _ = _run(tmp_path, SHRINK, 1, "list-append", 15.0, "copy.source.short_read",
                  "tablet.failed.at_open")
    cuts = [e[2] for e in sim.events if e[1] == "copy-shrink" and len(e[2]) == 10]
    assert cuts and all(v[-2] == v[0] for v in cuts), cuts


def test_a_segment_lost_under_a_copy_source_is_refused_there_and_fails_it_at_its_reboot(tmp_path):
    """copy-shrink's lost file (a drawn `keep` below LOSE_BELOW): a finished WAL segment of a
    running copy source loses its name. The leader's copy reads it (copy.source.pinned_file_missing);
    the operator's copy after it is refused at its pin (copy.pins.wal_segment_missing), where
    a FileNotFoundError went to the RPC layer as a handler failure (REMOTE_ERROR) before; the
    source's replica fails at its reboot rather than run with a hole in its log."""
    sim, _ = _run(tmp_path, SHRINK, 115, "list-append", 15.0, "copy.source.pinned_file_missing",
                  "copy.pins.wal_segment_missing", "tablet.failed.at_open")
    lost = [e[2] for e in sim.events if e[1] == "copy-shrink" and e[2][7] == "lost"]
    assert lost and lost[0][-1].endswith("refused: ILLEGAL_STATE"), lost


def test_the_network_garbles_only_what_the_picker_names():
    """`garble` swaps the two 16-bit words at the picked offset, `count` times, then stops: the
    words' ones' complement sum (TCP's checksum) is unchanged."""
    net = SimNetwork(0)
    net.garble("a", "b", 1, lambda p: 2 if p.startswith(b"xx") else None)
    assert net._garbled("a", "b", b"yy0123") == b"yy0123"
    assert net._garbled("b", "a", b"xx0123") == b"xx0123"
    out = net._garbled("a", "b", b"xx0123ab")
    assert out == b"xx2301ab" and net.garbled("a", "b") == 0
    assert net._garbled("a", "b", b"xx0123") == b"xx0123"

    def tcp_sum(data: bytes) -> int:
        s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        return s
    data = bytes(random.Random(1).randrange(256) for _ in range(64))
    net.garble("a", "b", 1, lambda p: 10)
    assert tcp_sum(net._garbled("a", "b", data)) == tcp_sum(data)


def test_only_a_cut_file_bootstrap_reads_is_judged():
    """`_read_at_boot`: a snapshot only while it is the newest of its directory (as
    SnapshotStore.load_latest, which loads that one and refuses it cut); a WAL segment always.
    The engine's side of it: the older, cut snapshot is never read, the newest cut is refused."""
    disk = SimDisk(random.Random(0))
    store = SnapshotStore("/data/data/t1", "t1", disk)
    store.pin_latest()  # nothing yet: pins index 0
    old, _ = busy_state(10)
    store.save(old.snapshot())
    store.pin_latest()  # a copy sends snapshot-10
    new, _ = busy_state(20)
    store.save(new.snapshot())
    assert store.indexes() == [10, 20]
    disk.truncate_at_rest("/data/data/t1/snapshot-10", 7)
    assert not _read_at_boot(disk, "/data/data/t1/snapshot-10")
    assert _read_at_boot(disk, "/data/data/t1/snapshot-20")
    assert _read_at_boot(disk, "/data/data/t1/wal/wal-000000001")
    assert StateMachine.from_snapshot(store.load_latest()).snapshot() == new.snapshot()
    disk.truncate_at_rest("/data/data/t1/snapshot-20", 7)
    with pytest.raises(CorruptionError):
        store.load_latest()


def test_a_cut_snapshot_is_refused_at_its_copy_source_and_else_excused_at_its_receiver(
        tmp_path, monkeypatch):
    """A snapshot cut under a copy session, then the operator's copy from that source
    (copy-shrink's `_copy_again`; the nightly matrix's swarm seed 54000091 first met such a
    second session). The source reads the snapshot's envelope first and refuses it
    (copy.source.snapshot_damaged). Without that, the cut file went out with its cut length
    and the receiver's open refused it (copy.install.open_failed): FAILED, loudly, on a disk
    no fault touched, which the checks take as the source's damage because the receiver's
    superblock names the source (`copied_from`); without that reading too, the seed fails on
    "corruption on an undamaged disk"."""
    from node.tserver import copy_source

    cfg = StackConfig(seed=4, workload="list-append", seconds=15.0, mix=parse_mix(SHRINK))
    result = StackSim(cfg, tmp_path / "refused").run()
    assert result.ok(), (result.violation, result.verdict)
    assert result.probes.get("copy.source.snapshot_damaged", 0) >= 1
    assert result.probes.get("copy.install.open_failed", 0) == 0
    monkeypatch.setattr(copy_source, "_whole_snapshot", lambda disk, path: disk.size(path))
    sent = StackSim(cfg, tmp_path / "sent").run()
    assert sent.ok(), (sent.violation, sent.verdict)
    assert sent.probes.get("copy.install.open_failed", 0) >= 1
    monkeypatch.setattr(Invariants, "_copied_damage", lambda self, host, tablet: False)
    blind = StackSim(cfg, tmp_path / "blind").run()
    assert "corruption on an undamaged disk" in (blind.violation or ""), blind.violation


def test_only_a_copy_from_a_damaged_source_excuses_a_corrupt_replica(tmp_path):
    """`_copied_damage` reads the replica's superblock: files copied from a server a storage
    fault hit are excused; from an undamaged one, or created here, they are not."""
    disk = SimDisk(random.Random(0))
    sim = SimpleNamespace(disks={"h1": disk}, flipped=set(), events=[], servers={})
    checks = Invariants(sim)
    checks._hosts = {"u2": "h2", "u3": "h3"}
    paths = TabletPaths(DATA_DIR, "t1")
    for copied_from in (None, "u2", "u9"):
        Superblock("t1", "tbl", KeyRange(), DataState.READY,
                   copied_from=copied_from).save(paths.superblock, disk)
        assert not checks._copied_damage("h1", "t1"), copied_from
    sim.flipped.add("h3")
    assert not checks._copied_damage("h1", "t1")  # from u9, a server never seen
    Superblock("t1", "tbl", KeyRange(), DataState.READY, copied_from="u3").save(
        paths.superblock, disk)
    assert checks._copied_damage("h1", "t1")
    sim.flipped.clear()
    sim.events.append((1.0, "copy-shrink", ["t1", "h3", "h1", 0.3, 0.5, "h3"]))
    assert checks._copied_damage("h1", "t1")
    sim.disks["h2"] = SimDisk(random.Random(1))
    assert not checks._copied_damage("h2", "t1")  # no superblock there
