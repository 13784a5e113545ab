"""The RPC schema between clients, tablet servers and masters: one typed Struct per request and
response, so a body of the wrong shape is refused by the transport before any handler runs.

Method names are `<service>.<call>`. Errors travel as RpcError codes; NOT_LEADER carries the
leader's UUID (or None) as its detail so clients can go straight to it.
"""

from __future__ import annotations

import msgspec

from node.consensus import Message
from node.tablet.ops import Op, Result
from node.tablet.superblock import Partition


class Peer(msgspec.Struct, frozen=True, array_like=True):
    uuid: str
    host: str
    port: int

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)


# -- tablet server --------------------------------------------------------------------------

class CreateTablet(msgspec.Struct, frozen=True):
    tablet_id: str
    table_name: str
    partition: Partition
    peers: list[Peer]  # the initial config: every peer a voter


class DeleteTablet(msgspec.Struct, frozen=True):
    tablet_id: str


class Write(msgspec.Struct, frozen=True):
    tablet_id: str
    op: Op
    session: int = 0
    seq: int = 0
    acked_below: int = 0


class Read(msgspec.Struct, frozen=True):
    tablet_id: str
    op: Op


class OpResult(msgspec.Struct, frozen=True):
    result: Result


class Consensus(msgspec.Struct, frozen=True):
    tablet_id: str
    messages: list[Message]
    peers: list[Peer] = []  # addresses the sender knows, so replies find their way back


class Ack(msgspec.Struct, frozen=True):
    ok: bool = True


class Empty(msgspec.Struct, frozen=True):
    pass


class TabletReport(msgspec.Struct, frozen=True):
    tablet_id: str
    table_name: str
    state: str  # RUNNING | FAILED | TOMBSTONED
    role: str = ""
    term: int = 0
    leader: str | None = None
    commit: int = 0
    applied: int = 0
    config: list[list] = []
    error: str | None = None


class ServerStatus(msgspec.Struct, frozen=True):
    uuid: str
    host: str
    port: int
    tablets: list[TabletReport]


# -- master ---------------------------------------------------------------------------------

class TSHeartbeat(msgspec.Struct, frozen=True):
    server: ServerStatus
    http_port: int = 0


class TSHeartbeatResponse(msgspec.Struct, frozen=True):
    leader: bool  # only the leader master acts on reports; followers record liveness
    tservers: list[Peer] = []


class CreateTable(msgspec.Struct, frozen=True):
    name: str
    num_tablets: int = 1
    replication_factor: int = 3


class TableName(msgspec.Struct, frozen=True):
    name: str


class TabletLocation(msgspec.Struct, frozen=True):
    tablet_id: str
    partition: Partition
    replicas: list[Peer]
    leader: str | None = None


class TableLocations(msgspec.Struct, frozen=True):
    name: str
    table_id: str
    tablets: list[TabletLocation]


class TableList(msgspec.Struct, frozen=True):
    tables: list[str]


class MasterInfo(msgspec.Struct, frozen=True):
    uuid: str
    role: str
    leader: str | None
    term: int
    masters: list[Peer]
    tservers: list[Peer]
