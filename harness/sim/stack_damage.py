"""The whole-stack simulator's aimed WAL damage (harness.sim.stack): bits flipped where a reader
could mistake them for a torn write, or where they fail a voter's replica. Each takes the
StackSim it acts on: its disks, servers and the power loss and boot it drives."""

from __future__ import annotations

import asyncio
import functools

from harness.sim.stack_checks import DATA_DIR

TORN_POLL_S = 0.0005  # torn: how often it looks for a WAL group being synced
TORN_WAIT_S = 2.0  # torn: how long it looks before giving up


def flip_newest(sim, value: list):
    """Power loss on a tablet server, then one bit flipped anywhere in the newest intact
    batch of a tablet's newest, unfinished WAL segment (header or data), read back at the
    reboot. The batch survived the power loss whole, so it was synced, and its entries may
    have been acknowledged: the flip must fail the replica loudly (stack_checks
    `_check_newest_flip`), never be cut as a torn tail. A header flip is the one a reader could take for a torn
    write (its length cannot be trusted); a data flip next to zero runs (a zero-padded
    value, a timestamp's zero low byte at a sector's start) is the other.
    A flip of a sector stamp (node.wal.segment) changes no data and is not judged.
    `value`: [host, a random bit number, taken modulo the batch's bits], or as recorded,
    [host, path, offset, bit, tablet]."""
    from node.wal.segment import is_stamp

    host = value[0]
    if host not in sim.down:
        sim._crash(host)
    disk = sim.disks[host]
    if len(value) == 5:
        path, offset, bit, tablet = value[1:5]
    else:
        meta = DATA_DIR / "tablet-meta"
        heads = []
        for tablet in sorted(disk.listdir(meta)) if disk.isdir(meta) else []:
            if tablet.startswith("."):  # a temporary file a failed write left, as open_all skips
                continue
            scan = newest_segment(disk, tablet)
            if scan is not None and scan.footer is None and scan.records:
                heads.append((tablet, scan, scan.records[-1].offset))
        if not heads:
            sim._boot(host)
            return [host, "no unfinished WAL segment with a batch"]
        tablet, scan, start = heads[value[1] % len(heads)]
        path, drawn = scan.path, value[1] // len(heads) % ((scan.end - start) * 8)
        offset, bit = start + drawn // 8, drawn % 8
        if is_stamp(scan.header, start, offset):
            tablet = None  # a sector's written mark, not data: nothing to judge
    disk.flip_bit(path=path, at=(offset, bit))
    sim.flipped.add(host)
    if tablet is not None:
        sim.must_fail[host] = (tablet, "a bit flipped in its newest, synced WAL batch (the "
                                       "batch was cut as a torn tail, not refused)")
    sim._boot(host)
    return [host, path, offset, bit, tablet]


async def torn_tail(sim, value: list) -> list:
    """Power loss on a tablet server while one of its WAL groups is being synced: its disk
    made slow (fsyncs of up to `slow` s, unless it has a disk fault already), then the loss at
    the first instant a WAL segment holds a write across a sector no sync has finished (a group is
    durable only at the end of its sync: node.wal.log `_step`), then the reboot. That group was
    never acknowledged, so the crash may keep a prefix of it torn at a sector, which bootstrap
    must cut (probe wal.recover.torn_tail_cut) without losing anything acknowledged: the
    checker's verdict says so. value: [host, slow]; recorded with the virtual seconds waited,
    or why it did not fire."""
    from node.wal.segment import parse_segment_name

    host, slow = value[:2]
    if host in sim.down:
        return [host, slow, "skipped: down"]
    slowed = host not in sim.disk_faults
    if slowed:
        sim._set_disk_fault(host, "slow", [host, "slow", round(slow / 10, 6), slow])
    t0 = sim.loop.time()
    try:
        while sim.loop.time() - t0 < TORN_WAIT_S and host not in sim.down:
            if any(parse_segment_name(p.rsplit("/", 1)[-1]) for p in sim.disks[host].unsynced()):
                sim._crash(host)
                sim._boot(host)
                return [host, slow, round(sim.loop.time() - t0, 6)]
            await asyncio.sleep(TORN_POLL_S)
        return [host, slow, "skipped: no WAL group was being synced"]
    finally:
        if slowed:
            sim._clear_disk_fault(host)


def flip_wal_batch(sim, host: str, tablet: str) -> list | None:
    """Power loss on `host`, one bit flipped in the data of an intact batch of `tablet`'s
    newest WAL segment there (not a stamp), and the reboot: the replica FAILs."""
    return _flip_across_power_loss(sim, host, functools.partial(_first_batch, tablet))


def flip_wal_batch_at_rest(sim, host: str, tablet: str) -> list | None:
    """`flip_wal_batch` on a host already down, left down: [path, offset, 0], or None."""
    return _flip_at_rest(sim, host, functools.partial(_first_batch, tablet))


def _first_batch(tablet: str, disk) -> tuple[str, int] | None:
    """Where the first batch's data of `tablet`'s newest WAL segment on `disk` starts (past
    a stamp), or None."""
    from node.wal.segment import is_stamp

    scan = newest_segment(disk, tablet)
    if scan is None or not scan.records:
        return None
    start = scan.records[0].offset + 16  # the first batch's data
    return scan.path, start + 1 if is_stamp(scan.header, start - 16, start) else start


def flip_cmeta(sim, host: str, tablet: str) -> list | None:
    """Power loss on `host`, one bit flipped in the middle of `tablet`'s consensus metadata
    there (its checksum then fails), and the reboot: a READY replica FAILs at its open; a
    tombstone keeps the metadata, which then tells no term or vote to vote with
    (node.tserver.copy.tombstone_vote)."""
    from node.tablet.paths import TabletPaths

    def middle(disk):
        path = str(TabletPaths(DATA_DIR, tablet).consensus_meta)
        if not disk.exists(path) or disk.size(path) == 0:
            return None
        return path, disk.size(path) // 2

    return _flip_across_power_loss(sim, host, middle)


def _flip_across_power_loss(sim, host: str, locate) -> list | None:
    """Power loss on `host`; bit 0 of the byte `locate(disk)` names, (path, offset), flipped
    at rest; the reboot. [path, offset, 0], or None (rebooted untouched) when it names none."""
    sim._crash(host)
    flipped = _flip_at_rest(sim, host, locate)
    sim._boot(host)
    return flipped


def _flip_at_rest(sim, host: str, locate) -> list | None:
    """Bit 0 of the byte `locate(disk)` names flipped on `host`'s disk, its server down."""
    found = locate(sim.disks[host])
    if found is None:
        return None
    path, offset = found
    sim.disks[host].flip_bit(path=path, at=(offset, 0))
    sim.flipped.add(host)
    return [path, offset, 0]


def newest_segment(disk, tablet: str):
    """A scan of `tablet`'s newest WAL segment on `disk`, or None if it has none, or if the
    replica there is not READY: a copy cut part-way leaves COPYING, with segment files written
    at the offsets of the chunks that came (a header missing, say), which start-up tombstones
    and never reads, so a bit flipped there is no damage a replica must fail on."""
    from node.errors import CorruptionError
    from node.tablet.paths import TabletPaths
    from node.tablet.superblock import DataState, Superblock
    from node.wal.segment import parse_segment_name, scan_segment

    paths = TabletPaths(DATA_DIR, tablet)
    try:
        if Superblock.load(paths.superblock, disk).data_state is not DataState.READY:
            return None
    except (CorruptionError, OSError):  # damaged or gone: not a replica start-up runs
        return None
    wal = paths.wal_dir
    segs = sorted((s, n) for n in (disk.listdir(wal) if disk.isdir(wal) else [])
                  if (s := parse_segment_name(n)) is not None)
    return scan_segment(str(wal / segs[-1][1]), disk=disk) if segs else None


# -- disk damage at a power loss (the damage fault) ----------------------------------------------
# What a disk, a file system or an operator does to a server's files while it is down, each
# mode on one file chosen by the seed, then the reboot. The damaged replica must come back
# FAILED (the server refuse to start, for its own files), never run on having silently lost
# what it had synced; only damage to nothing the replica needs may pass, and the mode says
# which. `judged` in the recorded value: the tablet that must FAIL, "server" (it must refuse to
# start), or None (nothing it needs was touched: the history and the state checks judge).
SECTOR = 512
DAMAGE_MODES = ("truncate", "zero", "delete", "misplace", "flip", "mid-roll")
# The damage-file fault's modes (harness.sim.swarm.LATE), each the damage of the mode it names aimed
# at one kind of file: cmeta-other-tablet, another READY replica's consensus metadata in place
# of a READY replica's (a misplace; the open must refuse it: cmeta.load.wrong_tablet);
# footer-flip, a bit flipped in a finished WAL segment's footer past its magic (a flip; the
# scan sees a footer whose CRC fails, wal.scan.footer_damaged, and bootstrap refuses the
# segment). Both judged: the replica must come back FAILED.
AIMED_MODES = {"cmeta-other-tablet": "misplace", "footer-flip": "flip"}
ROLL_WAIT_S = 4.0  # mid-roll: how long it looks for a segment being rolled before giving up
# Damage seeds' WAL segments roll past this (MiB): the simulator's minute writes far less than
# the engine's 8 MiB per tablet, and rolls give the delete and misplace modes several segments
# and mid-roll its window
DAMAGE_SEGMENT_MB = 1 / 128
# Damage seeds' tablet servers running with log_preallocate_segments off (Kudu's flag): their
# segments' headers say nothing was preallocated, so a cut newest segment cannot be told
# from one that ended there, and the truncate mode leaves their newest segments alone
UNPREALLOCATED = (1, 3)  # indexes into the tablet servers: ts2 and ts4


def damaging(mix) -> bool:
    """Whether the mix turns the damage or the full fault on: its disks then model
    preallocation and its logs roll small segments."""
    return bool({"damage", "full", "damage-file", "forge", "copy-shrink", "lose", "lose-snapshot"}
                & set(mix.kinds()))


def baseline_faults(mix):
    """A disk's faults when none is injected: the mix's fsync latency (swarm FSYNC_MS), and in
    damage seeds preallocation modelled (stack_damage.damaging)."""
    from harness.sim.disk import SimFaults

    ms = mix.fsync_ms
    return SimFaults(fsync_latency=(ms / 1e4, ms / 1e3) if ms else (0.0, 0.0),
                     preallocate=damaging(mix))


def log_options(sim, host: str):
    """The engine's WAL options on `host`: its own, but the mix's group commit queue
    (`wal-queue`), and in damage seeds small segments, not preallocated on the UNPREALLOCATED
    tablet servers."""
    from node.wal import LogOptions

    kb = sim.cfg.mix.wal_queue_kb
    queue = {"group_commit_queue_size_bytes": kb << 10} if kb else {}
    if not damaging(sim.cfg.mix):
        return LogOptions(faults=sim.cfg.faults, **queue)
    off = {sim.tservers[i] for i in UNPREALLOCATED if i < len(sim.tservers)}
    return LogOptions(faults=sim.cfg.faults, log_segment_size_mb=DAMAGE_SEGMENT_MB,
                      log_preallocate_segments=host not in off, **queue)


async def damage(sim, value: list) -> list:
    """The damage fault on `value[0]`: a power loss, one file damaged by `value[1]`'s mode, the
    reboot. `value`: [host, mode, random bits] as drawn (stack_faults), or as recorded,
    [host, mode, path, arg, judged] (mid-roll: [host, mode, waited, tmp path]).
    - truncate: a file cut short (a lost extent, an interrupted copy): the instance or peers
      file, a replica's superblock, consensus metadata or newest snapshot (cut anywhere), a
      finished WAL segment (half the time just its footer), or the newest, unfinished one
      with a synced batch, cut inside its batches, only where it was preallocated (its
      header says so): elsewhere a cut newest segment is a log that ended there to any reader.
    - zero: one 512-byte sector reads back as zeros (a lost write, a remapped sector): any
      sector of those files or of a finished segment; of the newest, unfinished segment only
      its header's or one an intact batch follows, since a zero sector in its last batch is
      what a torn write leaves, which bootstrap cuts (a batch torn can never have been
      acknowledged: the same bytes cannot tell it from one that was).
    - delete: a file lost (fsck's lost+found, an rm): a WAL segment between two others (a
      sequence gap), the oldest one (judged only if it held entries the snapshot does not
      cover and a later segment holds one: the log then starts past the snapshot; if nothing
      above the snapshot was in it, it needed nothing), the consensus metadata, or the peers
      file (a cache of addresses the masters give again: not judged). Not the newest segment,
      the superblock nor the instance: a log that ends early, a replica that was never there
      and a server that is new are what those leave to any reader.
    - misplace: a file holding another's bytes (a misdirected write, an operator's copy): a
      file of another tablet in place of the same kind of file (superblock, consensus
      metadata, newest snapshot, WAL segment, of the same number if there is one), a file of
      another kind in a replica's (a superblock as its consensus metadata, a WAL segment as
      its superblock, ...), instance and peers swapped, or another replica's finished segment
      of the same tablet where its indexes cannot continue the log (it starts at another
      index, or truncates past the log's end). A peer's segment that fits the log, or a
      peer's metadata, would be a log or a vote the replica never had that no reader can tell.
    - flip: a bit flipped in a finished WAL segment (header, batches or footer; the "flip"
      fault's files are rarely those); a sector stamp's flip changes no data and is not judged.
    - mid-roll: no damage: a power loss while a new WAL segment is preallocated under its
      temporary name and not yet renamed in (bootstrap deletes it), then the reboot."""
    import random

    host, mode = value[:2]
    if mode == "mid-roll":
        return await _mid_roll(sim, host)
    if host not in sim.down:
        sim._crash(host)
    disk = sim.disks[host]
    if len(value) == 5:
        path, arg, judged = value[2:5]
    else:
        found = _draw(sim, host, mode, random.Random(value[2]))
        if found is None:
            sim._boot(host)
            return [host, mode, f"skipped: no file to {mode} on {host}"]
        path, arg, judged = found
    what = _do(sim, disk, mode, path, arg)
    sim.flipped.add(host)
    sim.start_failures.pop(host, None)  # a failure to start before this is history
    if judged is not None:
        sim.must_fail[host] = (None if judged == "server" else judged, what)
    sim._boot(host)
    return [host, mode, path, arg, judged]


def _do(sim, disk, mode: str, path: str, arg) -> str:
    """Apply one recorded damage; what it did, in words."""
    name = path.removeprefix(f"{DATA_DIR}/")
    size = disk.size(path)
    from harness.sim.stack_forge import FORGED_MODES

    mode = AIMED_MODES.get(mode, FORGED_MODES.get(mode, mode))
    if mode == "write":
        offset, data = arg
        disk.write_at_rest(path, offset, bytes.fromhex(data))
        return f"{len(data) // 2} bytes at {offset} of {name} forged (their checksums match)"
    if mode == "truncate":
        disk.truncate_at_rest(path, arg)
        return f"{name} cut from {size} to {arg} bytes"
    if mode == "zero":
        disk.zero_at_rest(path, arg, SECTOR)
        return f"the sector at {arg} of {name} zeroed"
    if mode == "delete":
        disk.lose_at_rest(path)
        return f"{name} lost"
    if mode == "misplace":
        source_host, source = arg
        disk.misplace_at_rest(path, sim.disks[source_host], source)
        return f"{name} overwritten with {source_host}'s {source.removeprefix(f'{DATA_DIR}/')}"
    if mode == "flip":
        disk.flip_bit(path=path, at=tuple(arg))
        return f"bit {arg[1]} at {arg[0]} of {name} flipped"
    raise ValueError(f"unknown damage mode {mode!r}")


async def _mid_roll(sim, host: str) -> list:
    """Power loss at the first instant a WAL directory on `host` holds a segment under its
    temporary name (preallocated, not yet renamed in), then the reboot."""
    from node.wal.segment import TMP_PREFIX

    if host in sim.down:
        return [host, "mid-roll", "skipped: down"]
    t0 = sim.loop.time()
    wals = DATA_DIR / "wals"
    while sim.loop.time() - t0 < ROLL_WAIT_S and host not in sim.down:
        disk = sim.disks[host]
        for tablet in disk.listdir(wals) if disk.isdir(wals) else []:
            tmp = [n for n in disk.listdir(wals / tablet) if n.startswith(TMP_PREFIX)]
            if tmp:
                sim._crash(host)
                sim._boot(host)
                return [host, "mid-roll", round(sim.loop.time() - t0, 6), str(wals / tablet / tmp[0])]
        await asyncio.sleep(TORN_POLL_S)
    return [host, "mid-roll", "skipped: no segment was being rolled"]


def _draw(sim, host: str, mode: str, rng) -> tuple[str, object, str | None] | None:
    """(path, arg, judged) of a `mode` damage on the down host's files, or None if it has no
    file that mode applies to. Which kind of file first (each kind the mode applies to alike),
    then which file: a tablet's many WAL segments do not crowd out its few other files."""
    disk = sim.disks[host]
    tablets = _ready_tablets(disk)
    from harness.sim.stack_forge import FORGED_MODES, draw

    if mode in AIMED_MODES or mode in FORGED_MODES:
        picks = (_aimed(disk, host, mode, tablets, rng) if mode in AIMED_MODES
                 else draw(sim, disk, host, mode, {t: _scans(disk, t) for t in tablets},
                           _newest_snapshot, rng))
        return picks[rng.randrange(len(picks))] if picks else None
    choices = []  # (kind of file, path, arg, judged); arg None: drawn below
    for tablet in tablets:
        choices += _tablet_choices(sim, host, disk, mode, tablet, tablets, rng)
    server = [str(DATA_DIR / n) for n in ("instance", "peers") if disk.exists(DATA_DIR / n)]
    if mode in ("truncate", "zero"):
        choices += [("server", p, None, "server") for p in server]
    elif mode == "delete" and disk.exists(DATA_DIR / "peers"):
        choices.append(("peers", str(DATA_DIR / "peers"), None, None))
    elif mode == "misplace" and len(server) == 2:
        choices += [("server", server[0], [host, server[1]], "server"),
                    ("server", server[1], [host, server[0]], "server")]
    if not choices:
        return None
    kinds = sorted({c[0] for c in choices})
    kind = kinds[rng.randrange(len(kinds))]
    picks = [c[1:] for c in choices if c[0] == kind]
    path, arg, judged = picks[rng.randrange(len(picks))]
    if mode == "truncate" and arg is None:
        arg = rng.randrange(disk.size(path))
    elif mode == "zero":
        if arg is None:
            arg = rng.randrange(-(-disk.size(path) // SECTOR)) * SECTOR
        if _only_stamps(disk, path, arg, _stamped_at(disk, path)):
            judged = None  # zeros already, but for a stamp: no data changed
    elif mode == "flip" and _stamped_at(disk, path)(arg[0]):
        judged = None  # a sector's written mark, not data
    return path, arg, judged


def _aimed(disk, host: str, mode: str, tablets: list[str], rng) -> list:
    """The (path, arg, judged) of each damage an AIMED_MODES `mode` may do on the down host."""
    from node.tablet.paths import TabletPaths
    from node.wal import format as fmt

    if mode == "cmeta-other-tablet":
        cmetas = {t: str(TabletPaths(DATA_DIR, t).consensus_meta) for t in tablets}
        cmetas = {t: p for t, p in cmetas.items() if disk.exists(p)}
        return [(p, [host, q], t) for t, p in cmetas.items() for o, q in cmetas.items() if o != t]
    magic = len(fmt.FOOTER_MAGIC)
    return [(s.path, [s.size - fmt.FOOTER_SIZE + magic + rng.randrange(fmt.FOOTER_SIZE - magic),
                      rng.randrange(8)], t)
            for t in tablets for s in _scans(disk, t) if s.footer is not None]


def _tablet_choices(sim, host, disk, mode, tablet, tablets, rng) -> list:
    """The `mode` damages of one READY replica's files: (kind of file, path, arg, judged),
    arg None for one drawn later (a length, a sector)."""
    from node.tablet.paths import TabletPaths
    from node.wal import format as fmt

    paths = TabletPaths(DATA_DIR, tablet)
    files = {"superblock": str(paths.superblock), "cmeta": str(paths.consensus_meta)}
    snap = _newest_snapshot(disk, paths.snapshot_dir)
    if snap is not None:
        files["snapshot"] = snap
    files = {k: p for k, p in files.items() if disk.exists(p)}
    scans = _scans(disk, tablet)
    out = []
    if mode == "truncate":
        out += [(k, p, None, tablet) for k, p in files.items()]
        for s in scans:
            if s.footer is not None:
                cut = s.size - fmt.FOOTER_SIZE if rng.random() < 0.5 else None
                out.append(("finished", s.path, cut, tablet))
            elif s.records and s.header.prealloc and s is scans[-1]:
                out.append(("newest", s.path, rng.randrange(s.end), tablet))
    elif mode == "zero":
        out += [(k, p, None, tablet) for k, p in files.items()]
        for s in scans:
            if s.footer is not None:
                out.append(("finished", s.path, None, tablet))
            else:  # the header's sector, or one an intact batch follows
                last = s.records[-1].offset if s.records else 0
                sectors = [0, *range(SECTOR, last - SECTOR + 1, SECTOR)]
                out.append(("newest", s.path, sectors[rng.randrange(len(sectors))], tablet))
    elif mode == "flip":
        out += [("finished", s.path, [rng.randrange(s.size), rng.randrange(8)], tablet)
                for s in scans if s.footer is not None]
    elif mode == "delete":
        if "cmeta" in files:
            out.append(("cmeta", files["cmeta"], None, tablet))
        out += [("middle", s.path, None, tablet) for s in scans[1:-1]]  # a sequence gap
        if len(scans) > 1:
            snapshot = _index_of(snap)
            held = [e.index for r in scans[0].records for e in r.entries if e.index > snapshot]
            rest = _replayed(scans[1:], snapshot)
            if not held:  # nothing the snapshot does not hold
                out.append(("oldest", scans[0].path, None, None))
            elif rest and rest != _replayed(scans, snapshot):  # the log starts past it
                out.append(("oldest", scans[0].path, None, tablet))
    elif mode == "misplace":
        out += _misplacements(sim, host, disk, tablet, tablets, files, scans)
    return out


def _misplacements(sim, host, disk, tablet, tablets, files, scans) -> list:
    """Files put in place of `tablet`'s: another tablet's of the same kind, another kind's, and
    another replica's segment of the same tablet where its indexes cannot continue the log."""
    from node.tablet.paths import TabletPaths

    out = []
    for other in tablets:
        if other == tablet:
            continue
        theirs = TabletPaths(DATA_DIR, other)
        pairs = [("superblock", str(theirs.superblock)), ("cmeta", str(theirs.consensus_meta)),
                 ("snapshot", _newest_snapshot(disk, theirs.snapshot_dir))]
        out += [("other tablet's", files[k], [host, p], tablet) for k, p in pairs
                if k in files and p is not None and disk.exists(p)]
        their_scans = {s.header.seq: s for s in _scans(disk, other)}
        for s in scans:
            src = their_scans.get(s.header.seq) or next(iter(their_scans.values()), None)
            if src is not None:
                out.append(("other tablet's segment", s.path, [host, src.path], tablet))
    kinds = [(k, p) for k, p in files.items() if k != "snapshot"]
    kinds += [("wal", scans[0].path)] if scans else []
    out += [("other kind's", dst, [host, src], tablet) for k, dst in kinds for j, src in kinds
            if k != j]
    for peer in sim.masters + sim.tservers:
        if peer == host or peer not in sim.disks:
            continue
        peer_scans = {s.header.seq: s for s in _scans(sim.disks[peer], tablet, durable=True)}
        for i, s in enumerate(scans):
            theirs = peer_scans.get(s.header.seq)
            if (i == 0 or theirs is None or theirs.footer is None or not s.records
                    or not theirs.records or s.records[0].kind.name != "ENTRIES"
                    or not any(r.entries or r.kind.name == "TRUNCATE" for t in scans[:i]
                               for r in t.records)):
                continue
            expected, first = s.records[0].entries[0].index, theirs.records[0]
            if (first.kind.name == "ENTRIES" and first.entries[0].index != expected) or (
                    first.kind.name == "TRUNCATE" and first.after_index >= expected):
                out.append(("peer's segment", s.path, [peer, theirs.path], tablet))
    return out


def _replayed(scans, snapshot: int) -> list[tuple[int, int]]:
    """(index, term) of each entry above `snapshot` that replaying `scans` leaves: a
    truncation drops what is above its index, entries add on."""
    log: list[tuple[int, int]] = []
    for scan in scans:
        for r in scan.records:
            if r.kind.name == "TRUNCATE":
                log = [x for x in log if x[0] <= r.after_index]
            log += [(e.index, e.term) for e in r.entries]
    return [x for x in log if x[0] > snapshot]


def _ready_tablets(disk) -> list[str]:
    """The tablets of the host's READY replicas (not tombstones, not copies under way)."""
    from node.tablet.superblock import DataState, Superblock

    meta = DATA_DIR / "tablet-meta"
    out = []
    for name in sorted(disk.listdir(meta)) if disk.isdir(meta) else []:
        try:
            if Superblock.load(meta / name, disk).data_state is DataState.READY:
                out.append(name)
        except Exception:  # a temporary file, a damaged superblock: not a target
            continue
    return out


def _scans(disk, tablet: str, durable: bool = False) -> list:
    """Scans of `tablet`'s WAL segments on `disk`, oldest first ([] if one is unreadable).
    With `durable`, of what a crash would keep (another host's, running)."""
    from node.tablet.paths import TabletPaths
    from node.wal.errors import WalCorruption
    from node.wal.segment import parse_segment_name, scan_segment

    wal = TabletPaths(DATA_DIR, tablet).wal_dir
    names = sorted((s, n) for n in (disk.listdir(wal) if disk.isdir(wal) else [])
                   if (s := parse_segment_name(n)) is not None)
    try:
        if durable:
            return [_scan_bytes(str(wal / n), disk.durable_bytes(wal / n)) for _, n in names]
        return [scan_segment(str(wal / n), disk=disk) for _, n in names]
    except (WalCorruption, FileNotFoundError):
        return []


def _scan_bytes(path: str, data: bytes):
    from node.wal.segment import scan_segment

    return scan_segment(path, disk=_BytesDisk(data))


class _BytesDisk:
    """Just enough of a Disk to scan one file's bytes."""

    def __init__(self, data: bytes):
        self.data = data

    def read(self, path, offset: int = 0, length: int = -1) -> bytes:
        return self.data[offset:] if length < 0 else self.data[offset:offset + length]


def _newest_snapshot(disk, directory) -> str | None:
    import re

    found = [int(m.group(1)) for n in (disk.listdir(directory) if disk.isdir(directory) else [])
             if (m := re.fullmatch(r"snapshot-(\d+)", n))]
    return str(directory / f"snapshot-{max(found)}") if found else None


def _index_of(snapshot: str | None) -> int:
    return int(snapshot.rsplit("-", 1)[1]) if snapshot else 0


def _stamped_at(disk, path: str):
    """A test of whether an offset of the file at `path` holds a sector stamp inside a WAL
    batch's data (node.wal.segment): never, for a file that is not a readable segment."""
    from node.wal.errors import WalCorruption
    from node.wal.segment import is_stamp, parse_segment_name, scan_segment

    if parse_segment_name(path.rsplit("/", 1)[-1]) is None:
        return lambda offset: False
    try:
        scan = scan_segment(path, disk=disk)
    except WalCorruption:
        return lambda offset: False

    def at(offset: int) -> bool:
        starts = [r.offset for r in scan.records if r.offset <= offset]
        return bool(starts) and offset < scan.end and is_stamp(scan.header, starts[-1], offset)
    return at


def _only_stamps(disk, path: str, offset: int, stamped) -> bool:
    """Whether zeroing the sector at `offset` changes no byte but a stamp."""
    data = disk.read(path, offset, SECTOR)
    return not any(data[1:]) and (not data[:1] or not data[0] or stamped(offset))
