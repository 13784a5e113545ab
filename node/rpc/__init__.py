"""Async TCP RPC between daemons and from clients.

Frames are a 4-byte big-endian length and a msgpack envelope (schema version, call id, method,
timeout, the intended recipient's UUID, and a body decoded lazily by the method's own typed schema).
Requests are multiplexed on one connection per peer address and answered out of order by call id.

Why these choices:
- timeouts travel as a *relative* duration, never an absolute time: nodes' wall clocks are skewed
  on purpose by the clock nemesis, so only the receiver's monotonic clock can enforce a deadline;
- the recipient UUID is checked before dispatch, so a request that reaches a process now
  listening on a reused address is refused instead of applied (tablet-copy seed, "Other Failure
  Recovery");
- errors say whether the request may have been delivered (`RpcError.maybe_delivered`): the client
  library must report such an op as unknown, never as failed.
"""

from node.rpc.client import RpcClient
from node.rpc.errors import ErrorCode, RpcError
from node.rpc.server import RpcServer

__all__ = ["ErrorCode", "RpcClient", "RpcError", "RpcServer"]
