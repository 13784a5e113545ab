"""The whole-stack simulator's aimed WAL damage (node.sim.stack): bits flipped where a reader
could mistake them for a torn write, or where they fail a voter's replica. Each takes the
StackSim it acts on: its disks, servers and the power loss and boot it drives."""

from __future__ import annotations

import asyncio

from node.sim.stack_checks import DATA_DIR

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
        sim.newest_flips[host] = tablet
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
    from node.wal.segment import is_stamp

    sim._crash(host)
    disk = sim.disks[host]
    scan = newest_segment(disk, tablet)
    if scan is None or not scan.records:
        sim._boot(host)
        return None
    start = scan.records[0].offset + 16  # the first batch's data
    offset = start + 1 if is_stamp(scan.header, start - 16, start) else start
    disk.flip_bit(path=scan.path, at=(offset, 0))
    sim.flipped.add(host)
    sim._boot(host)
    return [scan.path, offset, 0]


def newest_segment(disk, tablet: str):
    """A scan of `tablet`'s newest WAL segment on `disk`, or None if it has none."""
    from node.tablet.paths import TabletPaths
    from node.wal.segment import parse_segment_name, scan_segment

    wal = TabletPaths(DATA_DIR, tablet).wal_dir
    segs = sorted((s, n) for n in (disk.listdir(wal) if disk.isdir(wal) else [])
                  if (s := parse_segment_name(n)) is not None)
    return scan_segment(str(wal / segs[-1][1]), disk=disk) if segs else None
