"""The RPC schema between clients, tablet servers and masters: one typed Struct per request and
response, so a body of the wrong shape is refused by the transport before any handler runs.

Method names are `<service>.<call>`. Errors travel as RpcError codes; NOT_LEADER carries the
leader's UUID (or None) as its detail so clients can go straight to it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from node.consensus import Message
from node.tablet.ops import NonNegative, Op, Result, RowOp
from node.tablet.superblock import OpId, Partition


class Peer(msgspec.Struct, frozen=True, array_like=True):
    uuid: str
    host: str
    port: int

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)


# -- tablet server --------------------------------------------------------------------------

# Kudu's external consistency modes (ExternalConsistencyMode), per write:
#   CLIENT_PROPAGATED: the write is answered once applied. The client sends the highest
#     timestamp its writes were given (`propagated_timestamp`) with every write, and the
#     leader's clock witnesses it before it assigns one, so each client's writes are in
#     timestamp order in the order it made them, whatever the clocks do (reads carry no
#     timestamp yet, so what a client read is not ordered before its later writes); another
#     client's write on another tablet, invoked after this one was answered, may still get a
#     smaller timestamp.
#   COMMIT_WAIT: the write is answered only once every clock within the max error is past its
#     timestamp, so timestamps follow real-time order across clients and tablets (KUDU-430),
#     at the cost of up to the max clock error per write.
# A request that names none asks for COMMIT_WAIT, the stronger promise (the server's default;
# the client's own default is Kudu's, CLIENT_PROPAGATED).
CLIENT_PROPAGATED, COMMIT_WAIT = "CLIENT_PROPAGATED", "COMMIT_WAIT"
ExternalConsistency = Literal["CLIENT_PROPAGATED", "COMMIT_WAIT"]
# The modes as command lines spell them (`tessera kv`, `tessera test --external-consistency`).
EXTERNAL_CONSISTENCY = {"client-propagated": CLIENT_PROPAGATED, "commit-wait": COMMIT_WAIT}


class CreateTablet(msgspec.Struct, frozen=True):
    tablet_id: str
    table_name: str
    partition: Partition
    peers: list[Peer]  # the initial config: every peer a voter


class DeleteTablet(msgspec.Struct, frozen=True):
    """Tombstone a replica. With `cas_config_index` (Kudu's
    cas_config_opid_index_less_or_equal) the server refuses if the replica's committed config
    is newer: an eviction decided on an old config cannot wipe a member that was re-added."""

    tablet_id: str
    cas_config_index: int | None = None


class Write(msgspec.Struct, frozen=True):
    tablet_id: str
    op: Op
    session: int = 0
    seq: int = 0
    acked_below: int = 0
    propagated_timestamp: NonNegative = 0  # the client's highest observed hybrid timestamp
    external_consistency: ExternalConsistency = COMMIT_WAIT


class WriteBatch(msgspec.Struct, frozen=True):
    """`ts.write_batch`: many row ops of one session to one tablet, replicated as ONE entry
    (Kudu's WriteRequestPB). Op i is seq `seq + i` (ops.Batch); at most the tablet's
    `max_results_per_session` ops, else INVALID_ARGUMENT before anything is proposed."""

    tablet_id: str
    ops: list[RowOp]
    session: int
    seq: int
    acked_below: int = 0
    propagated_timestamp: NonNegative = 0
    external_consistency: ExternalConsistency = COMMIT_WAIT


class BatchResult(msgspec.Struct, frozen=True, omit_defaults=True):
    results: list[Result]  # one per op of the WriteBatch, in order
    # The request's first seq, echoed: result i answers seq + i. A client ties each reply to
    # its own request with it (and the harness records both: the wrong-reply check).
    seq: int = 0


class Read(msgspec.Struct, frozen=True):
    tablet_id: str
    op: Op


class OpResult(msgspec.Struct, frozen=True, omit_defaults=True):
    result: Result
    seq: int = 0  # a session write's seq, echoed (as BatchResult's); 0 for reads


class Consensus(msgspec.Struct, frozen=True):
    tablet_id: str
    messages: list[Message]
    peers: list[Peer] = []  # addresses the sender knows, so replies find their way back


class ChangeConfig(msgspec.Struct, frozen=True):
    """Config-change seed: add a replica (as a non-voter the leader promotes once caught up) or
    remove one, refused unless `cas_config_index` is the committed config's opid index."""

    tablet_id: str
    op: str  # "add" | "remove"
    peer: Peer
    cas_config_index: int


class ConfigState(msgspec.Struct, frozen=True):
    opid_index: int
    members: list[list]  # [uuid, "VOTER" | "NON_VOTER"]


class StartTabletCopy(msgspec.Struct, frozen=True):
    """Tablet-copy seed: the leader asks a peer that lacks the tablet, holds only its tombstone,
    or is behind the leader's retained log, to copy it from `source`.

    Seed 05's guards carry what the caller believes, so a stale or mistaken request cannot wipe
    a healthy replica: `current_state` is the state the caller expects the target's replica in
    ("MISSING", "TOMBSTONED" or "RUNNING"; "" checks nothing) and a different state is refused;
    `retained_from` is the oldest OpId the caller's log still holds (its compaction point): a
    RUNNING replica that holds it, or has a snapshot at or past it, can be caught up by
    AppendEntries and is never copied over. Without `retained_from` a RUNNING replica is never
    copied over. `peer_match` is the index the caller believes the target holds (logged only).
    """

    tablet_id: str
    source: Peer
    caller_term: int
    current_state: str = ""
    retained_from: OpId | None = None
    peer_match: int = 0


class TabletCopyResult(msgspec.Struct, frozen=True):
    """StartTabletCopy's answer. `installed` is the snapshot the copy starts from (its entries
    are applied everywhere); `last_logged` the last op in the WAL it copied, which the leader
    replicates on from if its own log holds that op, else from `installed`."""

    installed: OpId
    last_logged: OpId
    bytes: int = 0  # copied
    seconds: float = 0.0  # from beginning the session to the replica running


class TabletName(msgspec.Struct, frozen=True):
    tablet_id: str


class UnsafeChangeConfig(msgspec.Struct, frozen=True):
    """Kudu's UnsafeChangeConfig (recovery after a majority is lost, in its config-change design):
    the replica here appends a config of just `voters` as a new config entry."""

    tablet_id: str
    voters: list[str]


class LeaderStepDown(msgspec.Struct, frozen=True):
    """Kudu's LeaderStepDown: with `new_leader`, a graceful transfer (the leader brings it up to
    date, then tells it to campaign at once); without, the leader steps down abruptly and the
    others elect after a timeout."""

    tablet_id: str
    new_leader: str | None = None


class BeginCopySession(msgspec.Struct, frozen=True):
    """Kudu's BeginTabletCopySession: the source pins its newest snapshot and the WAL after it
    for the receiver (`requestor`), until EndCopySession or an idle timeout."""

    tablet_id: str
    requestor: str


class CopyFile(msgspec.Struct, frozen=True):
    kind: str  # "snapshot" or "wal": the directory it goes to
    name: str  # the file's name there (snapshot-<index>, wal-<seq>)
    size: int


class CopySession(msgspec.Struct, frozen=True):
    """Kudu's BeginCopySession answer: the files, and the metadata the receiver merges."""

    session_id: str
    table_name: str
    partition: Partition
    term: int
    committed_config: bytes  # encoded RaftConfig; its entry is in the copied WAL
    files: list[CopyFile]
    idle_timeout_s: float  # the source ends a session nobody fetched from for this long


class FetchCopyChunk(msgspec.Struct, frozen=True):
    session_id: str
    file: int  # index into CopySession.files
    offset: int
    max_length: int


class CopyChunk(msgspec.Struct, frozen=True):
    offset: int
    data: memoryview  # sent from bytes; decoded as a view of the received frame, not a copy
    crc32c: int  # of data: the receiver checks every chunk before writing it


class CopySessionId(msgspec.Struct, frozen=True):
    session_id: str


class Ack(msgspec.Struct, frozen=True):
    ok: bool = True
    reason: str = ""  # a refused Raft message: "missing", "tombstoned", "copying" or "failed"


class ConsensusReply(msgspec.Struct, frozen=True):
    """A consensus RPC's answer: Ack's fields, and the receiver's own Raft messages for the
    sender on the same tablet when they were ready before the reply left (Outbox.hold)."""

    ok: bool = True
    reason: str = ""  # as Ack's
    messages: list[Message] = []


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
    config: list[list] = []  # the active config (a pending change included)
    error: str | None = None
    committed_config: list[list] = []
    committed_config_index: int = -1
    # A leader's only: how long each peer has been silent to it, in seconds (since it last
    # answered, or since this leader began). The masters replace a replica for silence only if
    # its leader does not hear it either (Kudu's leader-side peer health report).
    peers_silent_s: dict[str, float] = {}


class TServerState(msgspec.Struct, frozen=True):
    """Master admin call (Kudu's `kudu tserver state enter_maintenance` / `exit_maintenance`):
    while a tablet server is in maintenance, the masters replace none of its replicas, failed
    or silent, as an operator working on the server (a disk swap, a reboot) asks."""

    ts_uuid: str
    maintenance: bool


class ReplicaChange(msgspec.Struct, frozen=True):
    """Master admin call (tablet-copy seed's AddReplica / RemoveReplica). `cas_config_index`:
    apply only if the tablet's committed config is still at this opid index, the one the
    caller decided from; None: whatever the leader has committed when the call arrives."""

    tablet_id: str
    op: str  # "add" | "remove"
    ts_uuid: str
    cas_config_index: int | None = None
    # An attempt after one that may have landed (its reply lost or late): a refusal because a
    # change is pending or the config already is as asked is answered, once nothing is pending,
    # with the committed config if the change is made.
    retry: bool = False


class ServerStatus(msgspec.Struct, frozen=True):
    uuid: str
    host: str
    port: int
    tablets: list[TabletReport]


class ChecksumScan(msgspec.Struct, frozen=True):
    """ts.checksum (Kudu's ksck --checksum_scan): every replica here, or only `tablet_id`.
    Every field has a default, so an Empty body asks for all tablets without row hashes."""

    tablet_id: str = ""
    with_keys: bool = False  # add each row's hash, so a caller can name the first differing key


class TabletChecksum(msgspec.Struct, frozen=True):
    tablet_id: str
    state: str  # RUNNING | FAILED | TOMBSTONED | COPYING, as in TabletReport
    role: str = ""
    term: int = 0
    commit: int = 0
    applied: int = 0
    checksum: int | None = None  # CRC32C of the rows at `applied`; None unless RUNNING
    rows: int = 0
    members: list[str] = []  # the committed config's uuids
    keys: list[tuple[str, int]] | None = None  # (key, CRC32C of its row), in key order
    error: str | None = None
    voters: list[str] = []  # the committed config's voters (empty: take every member as one)
    # the voters of the config in effect (a pending change's while one is pending; empty: not
    # said), the leader that appended that pending change if known (""), and the log's last op
    # as [term, index]: who could still be elected, and whether a failure came after a change
    active_voters: list[str] = []
    pending_by: str = ""
    last_op: list[int] = []


class ChecksumReport(msgspec.Struct, frozen=True):
    uuid: str
    tablets: list[TabletChecksum]


# -- master ---------------------------------------------------------------------------------

class TSHeartbeat(msgspec.Struct, frozen=True):
    server: ServerStatus
    http_port: int = 0


class TSHeartbeatResponse(msgspec.Struct, frozen=True):
    """`masters` is the catalog's committed config as the answering master knows it, leader
    or follower, with the config's opid index: a server adopts it only if that index is above
    the one it holds, so a lagging master's older config never replaces a newer one (-1: none
    sent)."""

    leader: bool  # only the leader master acts on reports; followers record liveness
    tservers: list[Peer] = []  # the leader's only
    masters: list[Peer] = []
    masters_config_index: int = -1
    term: int = 0  # the answering master's term, for the server's log


class AddMaster(msgspec.Struct, frozen=True):
    """Kudu's AddMaster: `peer` (started, catalog-less) joins the catalog's config."""

    peer: Peer


class RemoveMaster(msgspec.Struct, frozen=True):
    uuid: str


class CreateTable(msgspec.Struct, frozen=True):
    name: str
    num_tablets: int = 1
    replication_factor: int = 3
    # Chosen by the client once per create_table call and sent with every attempt: the master
    # answers a retry of a create that already landed with the table, not ALREADY_EXISTS.
    token: str = ""


class TableName(msgspec.Struct, frozen=True):
    name: str


class DropTable(msgspec.Struct, frozen=True):
    name: str
    # As CreateTable's: one per delete_table call, sent with every attempt, so the master
    # answers a retry of a drop that already landed with success, not NOT_FOUND.
    token: str = ""


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
    """`members` is the catalog's active config, every member's uuid, and `config_index` its
    opid index (0: the initial config; -1: no catalog yet); `masters` only those members whose
    address this master knows (one added since it started, or since it was copied, is learned
    from the others a reconcile round later). Membership is read from `members`: a member
    missing from `masters` is still counted on."""

    uuid: str
    role: str
    leader: str | None
    term: int
    masters: list[Peer]
    tservers: list[Peer]
    members: list[str]
    config_index: int
