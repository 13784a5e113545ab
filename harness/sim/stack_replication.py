"""The whole-stack simulator's end check on replica counts (harness.sim.stack): healed, every
tablet of the test table comes back to its replication factor.

The masters' repair adds before it removes (3-4-3), and a replaced member that came back before
its removal was never removed: the tablet kept four voters for good, a copy's worth of disk and
a quorum's worth of traffic more, and no check saw it (docs/decisions/re-replication.md). A
tablet short of voters is the liveness probe's."""

from __future__ import annotations

import asyncio

# After the liveness writes, every tablet must be back to its replication factor within this:
# a few reconcile rounds past the masters' silence limit
REPLICATED_S = 30.0


async def check_replication(servers: dict, tablets: set[str], factor: int) -> str | None:
    """Waits up to REPLICATED_S for no tablet of `tablets` to have more voters than `factor`;
    the violation if one still has, else None."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REPLICATED_S
    while over := over_replicated(servers, tablets, factor):
        if loop.time() > deadline:
            return (f"replication: {len(over)} tablet(s) kept more than {factor} voters "
                    f"{REPLICATED_S:g} s after the heal: {over}")
        await asyncio.sleep(1.0)
    return None


def over_replicated(servers: dict, tablets: set[str], factor: int) -> dict[str, list[str]]:
    """Each of `tablets` whose newest committed config has more voters than `factor`: its
    voters."""
    return {tid: v for tid, (_, v) in newest_configs(servers, tablets).items() if len(v) > factor}


def newest_configs(servers: dict, tablets: set[str]) -> dict[str, tuple[int, list[str]]]:
    """Each of `tablets` -> (opid index, voters) of the newest committed config that a running
    replica on `servers` (host -> server) holds."""
    newest: dict[str, tuple[int, list[str]]] = {}
    for server in servers.values():
        for tid, r in getattr(server, "replicas", {}).items():
            if tid in tablets and not r.failed:
                c = r.core.committed_config
                if c.opid_index >= newest.get(tid, (-1, []))[0]:
                    newest[tid] = (c.opid_index, sorted(c.voters()))
    return newest
