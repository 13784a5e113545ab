"""The whole-stack simulator's `master-cut` fault: every master cut off from one or two tablet
servers, which still reach each other, the client and the other servers (a partial partition
between the control plane and part of the data plane, as a firewall rule or a switch between
racks makes it). The masters keep hearing a majority of servers, so the silence they see
counts (TSManager.silence_heard).

What it finds: a master judged a replica failed by its own view alone. Every tablet with a
member on a cut server got a replacement, a copy, and lost that member, while its leader heard
every member throughout; the data of the cut servers moved onto the ones the masters heard.
Safe, and costly: a copy per tablet, and a cluster unbalanced after the cut heals.

`moved_by_master_cut` is its check. In a run whose faults are only these cuts (and restarts
and heals, which then have nothing to restart), no replica ever failed, so no tablet's
committed config may have changed: one that did moved data for nothing. In a run with other
faults a replacement may be due, and the check says nothing."""

from __future__ import annotations

import random

CUT_S = (8.0, 20.0)  # past the masters' silence limit (FAILED_AFTER_S) and a reconcile round
ONLY = frozenset(("master-cut", "restart", "heal"))  # the runs `moved_by_master_cut` judges


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """One or two running tablet servers, and how long they stay cut off from the masters;
    the masters keep hearing at least three servers. Value: [servers, seconds]."""
    up = [h for h in chooser.sim.tservers if h not in chooser.sim.down]
    if len(up) < 4:
        return None, None
    cut = sorted(rng.sample(up, rng.randint(1, min(2, len(up) - 3))))
    return "master-cut", [cut, round(rng.uniform(*CUT_S), 3)]


async def master_cut(sim, value: list) -> list:
    """Cut every master's link to each of `value`'s servers for its seconds (a heal ends the
    cuts sooner)."""
    servers, seconds = value
    for master in sim.masters:
        for server in servers:
            sim._cut(master, server, seconds)
    return value


def moved_by_master_cut(kinds: list[str], configs: dict[str, tuple[int, list[str]]]) -> str | None:
    """The violation if the run's fault `kinds` are master cuts alone and a tablet's newest
    committed config (`configs`: tablet -> (opid index, voters)) is not its first one."""
    if "master-cut" not in kinds or not set(kinds) <= ONLY:
        return None
    changed = {tid: voters for tid, (index, voters) in sorted(configs.items()) if index > 0}
    if not changed:
        return None
    return (f"master-cut: {len(changed)} tablet(s) changed members while only the masters were "
            f"cut off from servers (no replica failed): {changed}")
