"""The whole-stack simulator's `dying-disk` fault: a tablet leader's disk turns slow, and while
its writes wait for room in the WAL's queue it starts failing its syncs too, as a dying disk
retries and remaps sectors for seconds before it gives up (harness.sim.stack_faults draws it:
tablet, leader L, L's fsync time, the share of syncs that fail, and `after`).

L's replica fails on the first failed sync of its WAL, with writes held for the queue and more
parked behind them (node.replica.wal_writes): none of those was proposed, so each caller is
owed a definite refusal, at once (node.replica.inbox), and the checkers hold the refusal to the
truth: a write refused as never proposed that a later read sees fails the register's
linearizability and list-append's Elle checks. The disk faults of the swarm's other draws are
one mode at a time on a host (slow, or failing, never both), and a failure seldom met writes
waiting: no seed had a replica fail with writes waiting.
`after` s later the disk is replaced and L reboots (StackSim._clear_disk_fault)."""

from __future__ import annotations

import asyncio

# How long the fault waits for L to park writes behind a full WAL queue: at once under load
# with a small queue (the bundle's wal-queue), never on a quiet tablet.
WAIT_S = 4.0


async def dying_disk(sim, value: list):
    """Slow L's disk; once L parks writes (or WAIT_S passed), fail its syncs as well; `after`
    s later replace the disk, which reboots L."""
    tablet, leader, slow, rate, after = value
    if leader in sim.disk_faults or leader in sim.down:
        return [*value, "skipped: L's disk has a fault or L is down"]
    sim._set_disk_fault(leader, "slow", [leader, "slow", round(slow / 2, 6), slow])
    parked = await until_parking(sim, leader, tablet)
    sim._set_disk_fault(leader, "eio", [leader, "eio", rate])  # the latency stays on
    await asyncio.sleep(after)
    sim._clear_disk_fault(leader)
    return [*value, "parked" if parked else "never parked"]


async def until_parking(sim, host: str, tablet: str) -> bool:
    """Wait, up to WAIT_S, until `host`'s replica of `tablet` parks the writes it is handed
    (its own wait for room in the WAL's queue); whether it did."""
    deadline = sim.loop.time() + WAIT_S
    while sim.loop.time() < deadline:
        replica = getattr(sim.servers.get(host), "replicas", {}).get(tablet)
        if replica is None or replica.failed:
            return False
        if replica.writes.held:
            return True
        await asyncio.sleep(0.01)
    return False
