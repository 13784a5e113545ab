"""The swarm's `frame=N` (harness.sim.swarm.FRAME_MB): the servers' RPC frame limit lowered to N
MiB (--rpc-max-message-size, Kudu's rpc_max_message_size), the same on every server, as the
flag must be, with the copy chunk the daemon then requires (a fetch's reply must fit the
frame). The application's client keeps its own limit, the simulator's 8 MiB: nobody told it,
though the register workload's wide values now reach up to the servers' limit. A value within
the request's envelope of it is answered TOO_LARGE once and its connection closed
(rpc.server.frame_too_large: the client did not refuse it unsent), one just under it refused
before it is proposed (raft.propose.too_large).
"""

from __future__ import annotations

from node.rpc.wire import ENVELOPE_RESERVE
from node.tserver.copy_client import CHUNK_BYTES


def frame_options(mix) -> tuple[int | None, dict]:
    """A server's frame limit under `mix` (None: the simulator's) and the ServerOptions
    keywords that go with it."""
    if not mix.frame_mb:
        return None, {}
    frame = mix.frame_mb << 20
    return frame, {"tablet_copy_transfer_chunk_size_bytes": min(CHUNK_BYTES, frame - ENVELOPE_RESERVE)}
