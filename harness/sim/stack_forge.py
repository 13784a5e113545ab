"""Forged damage for the whole-stack simulator: bytes whose checksums match but whose content is
wrong, which every other fault of the simulator (flips, zeros, cuts, torn writes: each leaves a
CRC mismatch) never presents, though real disks and networks do.

On disk (the `forge` late kind, harness.sim.swarm.LATE; applied and recorded as the damage fault,
harness.sim.stack_damage, its modes FORGED_MODES), at a power loss, on one file, then the reboot:
- forge-batch: a WAL batch (of the newest, unfinished segment when it has one) rewritten with
  the same length of bytes that do not decode, both CRCs computed over them: a buffer corrupted
  in memory before its checksums were taken (no ECC), which no CRC can tell. The scan finds an
  intact batch it cannot decode (wal.scan.undecodable_batch); in the newest segment, that is no
  torn write (wal.recover.crcs_match_refused).
- forge-truncate: the last batch of the newest, unfinished segment replaced by a valid
  TRUNCATE record past the end of the log (the rest of the old batch zeroed): a misdirected
  write of a record meant for elsewhere. Replay refuses it (wal.replay.bad_truncation_refused).
  Only where some record precedes it: a log whose first record truncates starts anywhere, and
  the forgery would lose the batch's entries with nothing any reader could tell.
- footer-misdirect: a finished segment's footer overwritten by another finished segment's
  footer (of this or another tablet on the host) that differs: a misdirected write of a valid
  block. Its CRC matches; the counts do not (wal.recover.footer_mismatch_refused).
- snapshot-misdirect: a replica's newest snapshot holding another snapshot's bytes, a peer
  replica's of the same tablet at another index or another tablet's here (an operator's copy,
  a misdirected write of a whole file): its CRC matches, its contents name another tablet or
  index (tablet.snapshot.wrong_contents_refused).
Each is judged: the replica must come back FAILED (stack_checks `_check_damage`).

What this does not forge on disk: an older, valid version of a file (a rolled-back backup or VM
snapshot). Consensus metadata rolled back forgets a vote or a term, and a WAL rolled back loses
acknowledged entries, and nothing on the replica's own disk can tell either from the state it
really had (the term-regression and second-vote guards of node.tablet.cmeta compare a request
with what was loaded, so a rollback at rest passes them): Raft assumes durable state does not
roll back, and such a seed would judge that assumption, not the engine.

On the network (the `garble` late kind): a tablet copy's chunk arriving with two 16-bit words
swapped (harness.sim.network `garble`), which TCP's checksum cannot see. The receiver checks each
chunk's CRC, refuses it (copy.fetch.bad_chunk) and asks again. Only chunk replies are garbled:
the RPC frames carry no checksum of their own (as Kudu's, they trust TCP), so a garbled Raft
message would be a wrong message no layer of the engine claims to catch.
"""

from __future__ import annotations

import asyncio
import random
import re

from harness.sim.stack_checks import DATA_DIR

FORGED_MODES = {"forge-batch": "write", "forge-truncate": "write",
                "footer-misdirect": "write", "snapshot-misdirect": "misplace"}
UNDECODABLE = 0xC1  # the one byte msgpack never uses: data of it decodes as nothing
GARBLES = (1, 3)  # how many chunk replies the garble fault swaps words in
MIN_CHUNK = 8  # chunk data shorter than this is left alone
_SNAPSHOT = re.compile(r"snapshot-\d+")  # a snapshot file's name (node.tablet.snapshot)


def draw(sim, disk, host: str, mode: str, scans: dict, newest, rng) -> list:
    """The (path, arg, judged) of each forgery of `mode` on the down host. `scans`: each READY
    tablet's WAL segments' scans, oldest first; `newest(disk, directory)`: the path of the
    newest snapshot in a directory, or None (harness.sim.stack_damage's)."""
    if mode == "forge-batch":
        return _forge_batches(disk, scans, rng)
    if mode == "forge-truncate":
        return _forge_truncations(disk, scans, rng)
    if mode == "footer-misdirect":
        return _misdirect_footers(disk, scans)
    return _misdirect_snapshots(sim, disk, host, list(scans), newest)


def _stored(scan, data: bytes, kind, offset: int) -> bytes:
    """The bytes of a batch of `kind` holding `data`, as stored at `offset` of `scan`'s file."""
    from node.wal import format as fmt
    from node.wal.segment import stamped

    batch = fmt.encode_batch(kind, data)
    return b"".join(bytes(p) for p in stamped(batch, offset)) if scan.header.stamped else batch


def _forge_batches(disk, scans: dict, rng) -> list:
    from node.wal import format as fmt

    out = []
    for tablet, ss in scans.items():
        newest = [s for s in ss if s.footer is None and s.records]
        for s in newest or [s for s in ss if s.records]:
            r = s.records[rng.randrange(len(s.records))]
            length = fmt.parse_batch_header(disk.read(s.path), r.offset, s.end)[0]
            forged = _stored(s, bytes([UNDECODABLE]) * length, r.kind, r.offset)
            out.append((s.path, [r.offset, forged.hex()], tablet))
    return out


def _forge_truncations(disk, scans: dict, rng) -> list:
    from node.wal import format as fmt

    out = []
    for tablet, ss in scans.items():
        if not ss or ss[-1].footer is not None or not ss[-1].records:
            continue
        s, last = ss[-1], ss[-1].records[-1]
        if sum(len(t.records) for t in ss) < 2:  # nothing replayed before it: any start is valid
            continue
        top = max([e.index for t in ss for r in t.records for e in r.entries]
                  + [r.after_index for t in ss for r in t.records], default=0)  # >= replay's next - 1
        forged = _stored(s, fmt._encode(top + 1 + rng.randrange(1000)), fmt.BatchKind.TRUNCATE,
                         last.offset)
        room = s.end - last.offset
        if len(forged) <= room:
            out.append((s.path, [last.offset, (forged + bytes(room - len(forged))).hex()], tablet))
    return out


def _misdirect_footers(disk, scans: dict) -> list:
    from node.wal import format as fmt

    finished = [(t, s) for t, ss in scans.items() for s in ss if s.footer is not None]
    out = []
    for tablet, s in finished:
        for _, other in finished:
            if other.footer != s.footer:
                footer = disk.read(other.path, other.size - fmt.FOOTER_SIZE, fmt.FOOTER_SIZE)
                out.append((s.path, [s.size - fmt.FOOTER_SIZE, footer.hex()], tablet))
                break
    return out


def _misdirect_snapshots(sim, disk, host: str, tablets: list[str], newest) -> list:
    from node.tablet.paths import TabletPaths

    snaps = {t: newest(disk, TabletPaths(DATA_DIR, t).snapshot_dir) for t in tablets}
    snaps = {t: p for t, p in snaps.items() if p is not None and disk.exists(p)}
    out = [(p, [host, q], t) for t, p in snaps.items() for o, q in snaps.items() if o != t]
    for tablet, path in snaps.items():
        for peer in sim.tservers:
            if peer == host or peer not in sim.disks:
                continue
            theirs = newest(sim.disks[peer], TabletPaths(DATA_DIR, tablet).snapshot_dir)
            if (theirs is not None and _index(theirs) != _index(path)
                    and _durable(sim.disks[peer], theirs)):
                out.append((path, [peer, theirs], tablet))
    return out


def _index(snapshot: str) -> int:
    return int(snapshot.rsplit("-", 1)[1])


def _durable(disk, path: str) -> bool:
    try:
        return bool(disk.durable_bytes(path))
    except (FileNotFoundError, KeyError, ValueError):
        return False


# -- the garble fault: a copy chunk garbled past TCP's checksum ----------------------------------


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """As copy-cut's choice (a test tablet's leader L, a voter R of it up and well), then how
    many chunk replies to garble. Value: [tablet, L, R, delay, count]."""
    from harness.sim import stack_copy_cut

    kind, value = stack_copy_cut.choose(chooser, rng)
    if kind is None:
        return None, None
    tablet, leader, r, _, delay = value[:5]
    return "garble", [tablet, leader, r, delay, rng.randint(*GARBLES)]


async def garble(sim, value: list) -> list:
    """R tombstoned, so L copies the tablet back to it; once the copy's source holds R's
    session, the next `count` chunk replies from the source to R arrive garbled. Recorded as
    [*value, source, how many were garbled]."""
    from harness.sim.stack_copy_cut import WATCH_S, _copy_source, _unslow

    tablet, leader, r, delay, count = value[:5]
    server = sim.servers.get(r)
    if r in sim.down or leader in sim.down or getattr(server, "uuid", None) is None:
        return [*value[:5], "skipped: a host is down"]
    sim.net.slow(leader, r, delay)
    source = None
    try:
        done = await sim._tombstone([tablet, None, None, r])
        if not isinstance(done, list) or len(done) > 4:
            return [*value[:5], "skipped: no tombstone"]
        source = await _copy_source(sim, tablet, server.uuid)
        if source is None:
            return [*value[:5], "skipped: no copy seen"]
        sim.net.garble(source, r, count, _chunk_words)
        deadline = sim.loop.time() + WATCH_S
        while sim.net.garbled(source, r) and sim.loop.time() < deadline:
            await asyncio.sleep(0.01)
        return [*value[:5], source, count - sim.net.garbled(source, r)]
    finally:
        if source is not None:
            sim.net.garble(source, r, 0, None)
        _unslow(sim, leader, r, delay)


def _chunk_words(payload: bytes) -> int | None:
    """The offset in `payload` (RPC frames) of two differing 16-bit words inside a copy chunk's
    data, or None if it holds no copy chunk reply."""
    from node.protocol import CopyChunk
    from node.rpc import wire

    pos = 0
    while pos + wire.LENGTH.size <= len(payload):
        (n,) = wire.LENGTH.unpack_from(payload, pos)
        body = payload[pos + wire.LENGTH.size:pos + wire.LENGTH.size + n]
        start = pos + wire.LENGTH.size
        pos = start + n
        try:
            data = bytes(wire.decode_body(wire.decode_response(body).body, CopyChunk).data)
        except Exception:  # not a response, or not a chunk
            continue
        if len(data) < MIN_CHUNK:
            continue
        at = body.rfind(data)
        if at < 0:
            continue
        for i in range(0, len(data) - 3, 2):
            if data[i:i + 2] != data[i + 2:i + 4]:
                return start + at + i
    return None


# -- the copy-shrink fault: a file a copy source has pinned cut short under it -------------------


LOSE_BELOW = 0.1  # copy-shrink: a drawn `keep` below this loses the file rather than cut it


def choose_shrink(chooser, rng: random.Random) -> tuple[str | None, object]:
    """As copy-cut's choice (a test tablet's leader L, a voter R of it up and well), then how
    much of the file to keep. Value: [tablet, L, R, delay, keep (a fraction)]."""
    from harness.sim import stack_copy_cut

    kind, value = stack_copy_cut.choose(chooser, rng)
    if kind is None:
        return None, None
    tablet, leader, r, _, delay = value[:5]
    return "copy-shrink", [tablet, leader, r, delay, round(rng.random(), 6)]


async def copy_shrink(sim, value: list) -> list:
    """R tombstoned, so L copies the tablet back to it; once the copy's source holds R's
    session, the first file of its manifest at rest that bootstrap would refuse cut short (its
    snapshot, or a finished WAL segment a later one follows: never the newest segment, whose
    cut end a reader may take for a log that ended there) on the running source, as a file
    system losing an extent or an operator's truncate does. The source's read of it comes
    back short (copy.source.short_read) and the copy fails; then the source loses power and
    boots: if bootstrap still reads the cut file (`_read_at_boot`), its replica must come back
    FAILED. Between the two, an operator copies the tablet from the source again
    (`_copy_again`). Recorded as [*value, source, path, cut length, judged, the copy's outcome].

    A `keep` below LOSE_BELOW loses the file instead (its name gone: a file system check moving
    it to lost+found, an operator's rm): the source's read finds no file
    (copy.source.pinned_file_missing) and refuses the chunk. Recorded with the cut length
    "lost" and never judged: whether bootstrap needs the lost file (a segment wholly below the
    newest snapshot it does not) is for the checks to see, as for the damage fault's `delete`:
    a replica that ran on with a hole in its log would break the per-index state checksums or
    trip the Raft log's contiguity guard (a SafetyError, which the checks fail on).

    A cut snapshot is judged only while it is the newest at rest after the power loss. The
    source keeps snapshotting while the copy runs: a snapshot saved after the pin (from the
    state in memory, not from the pinned file) supersedes the pinned one, which save() keeps
    only for the copy (node.tablet.snapshot). Bootstrap loads the newest snapshot and the WAL
    after it, and never reads the older file, so a replica running again from them is right,
    not blind to the cut (a snapshot cut while pinned, a newer one saved durably before the
    reboot). Any cut finished segment is judged: the log's recovery reads
    every segment in its directory (node.wal.reader.read_log). Another copy session the
    source begins after the cut refuses a cut snapshot (copy.source.snapshot_damaged) and
    sends a cut segment with its cut length: that receiver fails at open, its files naming
    the damaged source (stack_checks `Invariants._copied_damage`)."""
    from harness.sim.stack_copy_cut import WATCH_S, _unslow, copy_under_way, holds_session

    tablet, leader, r, delay, keep = value[:5]
    try:
        source = await copy_under_way(sim, tablet, leader, r, delay)
        if source.startswith("skipped"):
            return [*value[:5], source]
        server = sim.servers[r]
        disk = sim.disks[source]
        path = _shrinkable(disk, sim.servers[source], tablet, server.uuid)
        if path is None:
            return [*value[:5], source, "skipped: no file at rest to cut"]
        if keep < LOSE_BELOW:
            cut = "lost"
            disk.lose_at_rest(path)
        else:
            cut = int(disk.size(path) * keep)
            disk.truncate_at_rest(path, cut)
        sim.flipped.add(source)
        deadline = sim.loop.time() + WATCH_S
        while sim.loop.time() < deadline and source not in sim.down and holds_session(
                sim.servers.get(source), tablet, server.uuid):
            await asyncio.sleep(0.01)
        again = await _copy_again(sim, tablet, source)
        judged = None
        if source not in sim.down:
            sim._crash(source)
            disk = sim.disks[source]
            if cut != "lost" and disk.exists(path) and disk.size(path) == cut and _read_at_boot(
                    disk, path):
                judged = tablet
                sim.start_failures.pop(source, None)
                sim.must_fail[source] = (tablet, f"{path.removeprefix('/data/')} cut to {cut} "
                                                 "bytes while its server ran")
            sim._boot(source)
        return [*value[:5], source, path, cut, judged, again]
    finally:
        _unslow(sim, leader, r, delay)


async def _copy_again(sim, tablet: str, source: str) -> str:
    """An operator's copy of `tablet` from the damaged source, once the leader's copy failed
    on it, to the first server up with no replica of the tablet (or only its tombstone; R's
    qualifies), as `kudu remote_replica copy` would be run next: the new session's manifest
    meets the cut file at the source. A cut snapshot still the newest must be refused before
    any of it is sent (copy.source.snapshot_damaged); a cut segment is sent at its cut length,
    the receiver fails at open, and its files name the damaged source (stack_checks
    `Invariants._copied_damage`). Without this copy, the source lost power as soon as the
    first session ended, and no seed began a second session on a damaged source."""
    from harness.sim.stack_recopy import copy_target, operator_copy

    if source in sim.down or getattr(sim.servers.get(source), "tablets", None) is None:
        return "skipped: source down"
    dst = copy_target(sim, tablet, source)
    if dst is None:
        return "skipped: no server without the tablet"
    # the receiver by uuid: a host named in a storage fault's record counts as damaged
    # (stack_checks `_storage_faulted`), and this one's disk is not
    uuid = sim.servers[dst].uuid
    return f"to {uuid}: {await operator_copy(sim, tablet, source, dst, 'copy-shrink')}"


def _shrinkable(disk, server, tablet: str, uuid: str) -> str | None:
    """The first file of the copy session's manifest at rest whose cut bootstrap refuses."""
    from node.wal.segment import parse_segment_name

    sources = server.copy_service.sources
    session = next((s for s in sources.sessions.values()
                    if (s.tablet_id, s.requestor) == (tablet, uuid)), None)
    if session is None:
        return None
    for path, f in zip(session.paths, session.files, strict=True):
        if f.kind == "wal":
            directory, name = path.rsplit("/", 1)
            seq = parse_segment_name(name)
            if not any((parse_segment_name(n) or 0) > seq for n in disk.listdir(directory)):
                continue  # the newest segment
        try:
            if disk.size(path) and disk.durable_bytes(path) == disk.read(path):
                if f.kind == "snapshot" or _finished(disk, path):
                    return path
        except (FileNotFoundError, ValueError):
            continue
    return None


def _read_at_boot(disk, path: str) -> bool:
    """Whether a replica's bootstrap reads the file at `path` (on `disk` as it is at rest): a
    WAL segment, yes; a snapshot, only the newest in its directory (SnapshotStore.load_latest:
    an older one is only a copy's, left by a crash before the next save() deletes it)."""
    directory, name = path.rsplit("/", 1)
    if not _SNAPSHOT.fullmatch(name):
        return True
    indexes = [_index(n) for n in disk.listdir(directory) if _SNAPSHOT.fullmatch(n)]
    return _index(name) == max(indexes)


def _finished(disk, path: str) -> bool:
    from node.wal.errors import WalCorruption
    from node.wal.segment import scan_segment

    try:
        return scan_segment(path, disk=disk).footer is not None
    except WalCorruption:
        return False
