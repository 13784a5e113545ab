"""How a replica's refusal reaches the caller as an RPC error. Masters (for their catalog tablet)
and tablet servers both host replicas and answer with the same codes: a definite TOO_LARGE, a
maybe-applied REMOTE_ERROR, or NOT_LEADER with the leader's hint when there is one."""

from __future__ import annotations

from node.consensus import NotLeader
from node.errors import ReplicaError
from node.probes import probe
from node.replica.replica import TooLarge
from node.rpc import ErrorCode, RpcError


def replica_error(e: ReplicaError) -> RpcError:
    if isinstance(e, TooLarge):  # definite, and the same on every replica: not NOT_LEADER
        probe("tserver.reply.too_large")
        return RpcError(ErrorCode.TOO_LARGE, str(e))
    if e.maybe_applied:
        probe("tserver.reply.maybe_applied")
        return RpcError(ErrorCode.REMOTE_ERROR, str(e))
    probe("tserver.reply.not_leader_hint") if e.leader else probe("tserver.reply.not_leader_no_hint")
    return RpcError(ErrorCode.NOT_LEADER, str(e), detail=e.leader)


def proposal_error(e: Exception) -> RpcError:
    """A refused proposal (config change, leadership transfer) as the caller should see it."""
    if isinstance(e, ReplicaError):
        return replica_error(e)
    if isinstance(e, NotLeader):
        return RpcError(ErrorCode.NOT_LEADER, "not the leader", detail=e.leader)
    return RpcError(ErrorCode.ILLEGAL_STATE, f"{type(e).__name__}: {e}")
