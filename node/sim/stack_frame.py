"""The swarm's `frame=N` (node.sim.swarm.FRAME_MB): an operator lowers the servers' RPC frame
limit (--rpc-max-message-size) to N MiB, and each server takes it at its next start.

A server's first boot runs with the simulator's limit (node.sim.stack.MAX_FRAME); every later
boot (a restart after a crash, a power loss, a disk fault, damage) with N MiB, and with the copy
chunk the daemon then requires (its fetch's reply must fit the frame). The client keeps its own
limit: the application was not reconfigured. So, with wide values, for a while the servers of
one cluster disagree: a client's write past a restarted server's frame is answered once and its
connection closed (rpc.server.frame_too_large), an old leader's AppendEntries is refused by a
restarted follower, and a restarted leader holds entries written under the old limit that it
may no longer send (rpc.outbox.too_large_unsent): the follower that needs them is copied.
"""

from __future__ import annotations

from node.rpc.wire import ENVELOPE_RESERVE
from node.tserver.copy_client import CHUNK_BYTES


def frame_options(sim, host: str, booted: bool) -> tuple[int | None, dict]:
    """`host`'s frame limit for this boot (None: the simulator's) and the ServerOptions
    keywords that go with it: none on its first boot (`booted` False) or without a `frame=`
    draw."""
    mb = sim.cfg.mix.frame_mb
    if not mb or not booted:
        return None, {}
    frame = mb << 20
    return frame, {"tablet_copy_transfer_chunk_size_bytes": min(CHUNK_BYTES, frame - ENVELOPE_RESERVE)}
