"""Kudu's TSTabletManager: the tablets of one server, each one entry with one state.

Tablet servers and masters both compose one (a master's only tablet is its catalog). Every
transition of a tablet's state (create, tombstone, copy in, a vote answered from a tombstone)
runs under that tablet's own lock, as Kudu keeps one transition in progress per tablet
(`transition_in_progress_`): a vote answered from a tombstone cannot race a copy installing
over the same tablet, and one tablet's copy install (a thread doing fsyncs and a WAL replay)
never holds up another tablet's vote or tombstone.
A replica whose files are corrupt is FAILED with the reason (naming the file) and refuses
requests; the server and its other tablets keep serving.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node.consensus import RaftConfig, VoteRequest
from node.disk import Disk
from node.errors import CorruptionError
from node.logfmt import TabletLog, log_failure
from node.probes import probe
from node.protocol import CopySession, StartTabletCopy
from node.replica.replica import Replica, ReplicaOptions, bootstrap_replica, config_text
from node.rpc import ErrorCode, RpcError
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, OpId, Superblock
from node.tserver.copy import (
    UNREADABLE_CMETA,
    LastOpUnknown,
    abandon_copy,
    complete_install,
    nothing_here,
    prepare_install,
    readable_superblock,
    recover_unfinished_copy,
    tombstone,
    tombstone_vote,
    uninterrupted,
)

log = logging.getLogger("node.tserver.server")


class TabletState(enum.Enum):
    RUNNING = "RUNNING"  # a replica serves (it may still fail at run time: see TabletEntry.state)
    FAILED = "FAILED"  # could not be opened; `error` says why
    COPYING = "COPYING"  # a tablet copy is being fetched and installed here
    TOMBSTONED = "TOMBSTONED"  # data and WAL gone; cmeta and the last OpId kept, so it votes


@dataclass
class TabletEntry:
    tablet_id: str
    table: str
    stored: TabletState
    replica: Replica | None = None
    error: str | None = None
    copy: asyncio.Task | None = None  # COPYING: the task fetching it (a delete cancels it)
    last: OpId | None = None  # FAILED as it was tombstoned: the last op it had logged

    @property
    def state(self) -> TabletState:
        """A running replica that failed (corrupt data found while serving) is FAILED too."""
        if self.stored == TabletState.RUNNING and self.replica is not None and self.replica.failed:
            return TabletState.FAILED
        return self.stored

    @property
    def reason(self) -> str | None:
        return self.replica.failed if self.replica is not None and self.replica.failed else self.error


class TabletManager:
    def __init__(self, uuid: str, data_dir: Path, disk: Disk, options: ReplicaOptions,
                 rng: random.Random, sender: Callable[[str], Callable[[str, list], None]]):
        """`sender(tablet_id)` gives the function a replica sends its Raft messages with."""
        self.uuid, self.data_dir, self.disk = uuid, Path(data_dir), disk
        self.options, self.rng, self._sender = options, rng, sender
        self.entries: dict[str, TabletEntry] = {}
        self._transitions: dict[str, asyncio.Lock] = {}  # tablet -> its transition lock
        # tablet -> loop time its replica last stopped serving (tombstoned, or found tombstoned
        # or copying at start-up): its votes are withheld for a vote lease from then
        self._quiet_since: dict[str, float] = {}
        # tablet -> the last op a FAILED replica that ran had logged, kept when it is forgotten
        # until a copy over its files records it (`_forget_failed`)
        self._forgotten_last: dict[str, OpId] = {}

    def transition(self, tablet_id: str) -> asyncio.Lock:
        """The lock every change of `tablet_id`'s state holds; other tablets' are their own."""
        return self._transitions.setdefault(tablet_id, asyncio.Lock())

    # -- lookups ------------------------------------------------------------------------------
    def paths(self, tablet_id: str) -> TabletPaths:
        return TabletPaths(self.data_dir, tablet_id, self.disk)

    def log(self, tablet_id: str) -> TabletLog:
        return TabletLog(log, tablet_id, self.uuid)

    def get(self, tablet_id: str) -> TabletEntry | None:
        return self.entries.get(tablet_id)

    def state(self, tablet_id: str) -> TabletState | None:
        e = self.entries.get(tablet_id)
        return e.state if e is not None else None

    @property
    def replicas(self) -> dict[str, Replica]:
        """Every replica that was started (it may have failed since), by tablet id."""
        return {tid: e.replica for tid, e in self.entries.items()
                if e.stored == TabletState.RUNNING and e.replica is not None}

    def replica(self, tablet_id: str) -> Replica | None:
        """`replicas.get(tablet_id)` without building the whole dict (the simulator's
        invariants look one up for every Raft message a server sends)."""
        e = self.entries.get(tablet_id)
        return e.replica if e is not None and e.stored == TabletState.RUNNING else None

    def serving(self, tablet_id: str) -> Replica:
        """The tablet's replica if it serves; else the RPC error a caller should get."""
        e = self.entries.get(tablet_id)
        if e is not None and e.state == TabletState.RUNNING:
            return e.replica
        if e is not None and e.state == TabletState.FAILED:
            probe("tserver.request.refused_failed")
            raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"tablet {tablet_id} failed: {e.reason}")
        raise RpcError(ErrorCode.TABLET_NOT_FOUND, f"tablet {tablet_id} is not on {self.uuid}")

    # -- lifecycle ----------------------------------------------------------------------------
    def open_all(self) -> None:
        meta_dir = self.data_dir / "tablet-meta"
        for name in self.disk.listdir(meta_dir) if self.disk.isdir(meta_dir) else []:
            if not name.startswith("."):
                self.open_existing(name)

    def open_existing(self, tablet_id: str) -> None:
        table = "?"
        try:
            sb = Superblock.open(self.paths(tablet_id).superblock, self.disk)
            table = sb.table_name
            if sb.data_state == DataState.COPYING:
                probe("tablet.open.unfinished_copy_tombstoned")
                self.log(tablet_id).warning("unfinished tablet copy: tombstoning it")
                recover_unfinished_copy(self.paths(tablet_id), sb)
                sb = Superblock.load(self.paths(tablet_id).superblock, self.disk)
            if sb.data_state == DataState.TOMBSTONED:
                probe("tablet.open.tombstone")
                self.entries[tablet_id] = TabletEntry(tablet_id, table, TabletState.TOMBSTONED)
                self._quiet(tablet_id)  # a restart withholds as a running replica's does
                return
            self._start_replica(tablet_id, table)
        except Exception as e:  # corrupt or unreadable: this tablet fails, the server goes on
            probe("tablet.failed.at_open")
            self.entries[tablet_id] = TabletEntry(
                tablet_id, table, TabletState.FAILED,
                error=log_failure(self.log(tablet_id), "cannot open the replica", e))

    def _start_replica(self, tablet_id: str, table: str) -> Replica:
        r = self._new_replica(tablet_id)
        r.open()
        return self._run_replica(r, table)

    def _new_replica(self, tablet_id: str) -> Replica:
        return Replica(self.uuid, self.paths(tablet_id), self._sender(tablet_id), self.options,
                       rng=random.Random(self.rng.getrandbits(64)))

    def _run_replica(self, r: Replica, table: str) -> Replica:
        r.start()
        self.entries[r.tablet_id] = TabletEntry(r.tablet_id, table, TabletState.RUNNING, r)
        return r

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas.values()), return_exceptions=True)

    async def create(self, tablet_id: str, table: str, partition, config: RaftConfig) -> bool:
        """A new replica with its initial config; False if it exists already (creations are
        retried), ALREADY_EXISTS over a tombstone (only a copy brings one back)."""
        async with self.transition(tablet_id):
            state = self.state(tablet_id)
            if state in (TabletState.RUNNING, TabletState.FAILED):
                return False
            if state is not None:
                probe("tablet.create.refused_tombstone")
                raise RpcError(ErrorCode.ALREADY_EXISTS,
                               f"tablet {tablet_id} is {state.value.lower()} here")
            paths = self.paths(tablet_id)
            if paths.disk.exists(paths.superblock):
                probe("tablet.create.refused_failed_files")
                # Not open, yet its files are here: a FAILED replica that was deleted (its files
                # are left for an operator). A new replica over them would run the old WAL
                # under a fresh superblock, a resurrection the simulator once caught.
                raise RpcError(ErrorCode.ALREADY_EXISTS,
                               f"tablet {tablet_id}: files of a replica that is not open are "
                               f"here (a failed replica's, left for an operator)")

            def create():
                # cmeta first: the superblock's presence is what makes the tablet exist.
                if not paths.disk.exists(paths.consensus_meta):
                    bootstrap_replica(paths, config)
                Superblock(tablet_id, table, partition, DataState.READY).save(
                    paths.superblock, paths.disk)

            async def create_and_start() -> None:
                await asyncio.to_thread(create)
                self._start_replica(tablet_id, table)

            # once its files are being written the replica is started whatever happens to the
            # caller: cancelled between the two, files with no replica refused every retry
            await uninterrupted(create_and_start())
            self.log(tablet_id).info("created replica of table %s with config %s", table,
                                     config_text(config))
            return True

    async def delete(self, tablet_id: str, cas_config_index: int | None = None) -> bool:
        """Tombstone: the data and WAL go, the consensus metadata stays so the replica can never
        vote twice in a term; the last logged OpId is kept in the superblock. True if the
        tablet is a tombstone now. With `cas_config_index`, a running replica whose committed
        config is newer than that index is refused (ILLEGAL_STATE) and left as it is. A copy
        under way is aborted by a plain delete: whatever it wrote goes, as a failed copy's does.
        With `cas_config_index` it is refused instead (Kudu refuses a delete while the tablet is
        in transition): the copy is installing a committed config this replica does not know
        yet, so a stale eviction cannot be told from a current one, and aborting cost a
        re-added member its copy. The caller retries once the copy has ended either way. A
        FAILED replica is never tombstoned: it is forgotten and its files stay
        (`_forget_failed`)."""
        e = self.entries.get(tablet_id)
        if e is not None and e.stored == TabletState.COPYING and cas_config_index is not None:
            probe("tablet.delete.cas_refused_while_copying")
            raise RpcError(ErrorCode.ILLEGAL_STATE,
                           f"tablet {tablet_id}: a copy is installing its config; a delete with "
                           f"cas_config_index {cas_config_index} waits until the copy has ended")
        if e is not None and e.stored == TabletState.COPYING and e.copy is not None:
            probe("tablet.delete.copy_aborted")
            self.log(tablet_id).info("delete: aborting the tablet copy under way")
            e.copy.cancel()
            await asyncio.gather(e.copy, return_exceptions=True)  # it cleans up as it ends
        async with self.transition(tablet_id):
            e = self.entries.get(tablet_id)
            if e is not None and e.state == TabletState.FAILED:
                await self._forget_failed(e)
                return False
            if e is None or e.stored != TabletState.RUNNING:
                return e is not None and e.stored == TabletState.TOMBSTONED
            committed = e.replica.committed_config_index
            if cas_config_index is not None and committed > cas_config_index:
                probe("tablet.delete.cas_refused")
                self.log(tablet_id).warning(
                    "delete refused: committed config index %d is newer than the caller's %d",
                    committed, cas_config_index)
                raise RpcError(ErrorCode.ILLEGAL_STATE,
                               f"tablet {tablet_id}: delete refused, committed config index "
                               f"{committed} > {cas_config_index} (the replica was re-added)")
            await self._tombstone(e)
            return True

    async def _forget_failed(self, e: TabletEntry) -> None:
        """Drop a FAILED replica from memory and leave its files, as they are, for an operator:
        they are the evidence of why it failed, whether it failed at start-up (damaged files)
        or while it ran (a failed fsync, a safety check), and a tombstone would wipe them. It
        votes no more: a forgotten replica has no state to vote from, and a copy onto it later
        waits a vote lease from its start (`begin_copy`). One that ran knew its last logged op
        in memory, at least what it acknowledged: that is kept for the copy that replaces it
        (`prepare_copy`), which must not install a log ending before it. Kept in memory: its
        files, maybe damaged, prove nothing, and rewriting them would spoil the evidence (a
        restart opens them again instead)."""
        probe("tablet.failed.forgotten")
        known = OpId(*e.replica.last_logged()) if e.replica is not None else e.last
        if known is not None:
            probe("tablet.failed.last_op_remembered")
            self._forgotten_last[e.tablet_id] = known
        if e.replica is not None:
            try:  # to its end: cancelled halfway, a stopped replica stayed listed FAILED
                await uninterrupted(e.replica.stop())
            except Exception as err:  # a disk failing again as its WAL closes: forget it anyway
                probe("tablet.failed.stop_failed")
                self.log(e.tablet_id).warning("stopping the FAILED replica failed too: %s", err)
        del self.entries[e.tablet_id]
        self.log(e.tablet_id).warning("deleted while FAILED (%s): its files are left for an "
                                      "operator", e.reason)

    async def _tombstone(self, e: TabletEntry) -> None:
        """Stop a running replica and tombstone it. Call under its transition lock. Runs to its
        end once begun, whatever happens to the caller (`uninterrupted`): a DeleteTablet handler
        cancelled at its caller's deadline or on a closed connection left the replica stopped
        and listed RUNNING (reported so to the master, never replaced) over a TOMBSTONED
        superblock, and the next delete then failed it."""
        await uninterrupted(self._stop_and_tombstone(e))

    async def _stop_and_tombstone(self, e: TabletEntry) -> None:
        r = e.replica
        last = OpId(*r.last_logged())
        try:
            try:
                await r.stop()  # closing its WAL writes the newest segment's footer
            finally:
                self._quiet(e.tablet_id)  # it stopped serving, whether or not it closed cleanly
            await asyncio.to_thread(tombstone, self.paths(e.tablet_id), last)
        except Exception as err:  # a full or failing disk, a superblock lost while the
            # replica ran: stopped and not a tombstone, so FAILED, never a stopped replica
            # still listed RUNNING; the caller is told so, not handed the raw error
            probe("tablet.tombstone.write_failed")
            cause = log_failure(self.log(e.tablet_id), "cannot write the tombstone", err)
            self.entries[e.tablet_id] = TabletEntry(e.tablet_id, e.table, TabletState.FAILED,
                                                    error=cause, last=last)
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {e.tablet_id}: cannot write the "
                           f"tombstone ({cause}); the replica is FAILED here") from err
        self.entries[e.tablet_id] = TabletEntry(e.tablet_id, e.table, TabletState.TOMBSTONED)
        probe("tablet.tombstoned")
        self.log(e.tablet_id).info("tombstoned; last logged op (%d, %d)", last.term, last.index)

    # -- votes from a tombstone (Kudu's tablet-copy design) -----------------------------------
    def _quiet(self, tablet_id: str) -> None:
        self._quiet_since[tablet_id] = asyncio.get_running_loop().time()

    def _vote_lease_s(self) -> float:
        """A running replica withholds votes for `vote_lease_ticks` ticks after it last heard
        from a leader; a replica that stopped (tombstoned) heard from none since it stopped, so
        the same window, in time and one tick longer (a tick's phase), from the stop covers
        every lease it acknowledged."""
        cfg = self.options.core_config(self.uuid)
        return (cfg.vote_lease_ticks + 1) * self.options.tick_ms / 1000

    def _within_vote_lease(self, tablet_id: str) -> bool:
        since = self._quiet_since.get(tablet_id)
        return since is not None and (
            asyncio.get_running_loop().time() - since < self._vote_lease_s())

    async def vote_as_tombstone(self, tablet_id: str, messages: list) -> list:
        """Seed 05: a TOMBSTONED or COPYING replica still votes, from its consensus metadata and
        the tombstone's last OpId, so a voter being copied cannot leave its tablet leaderless.
        Everything else (AppendEntries above all: a copy is what brings it back) is refused;
        those messages are returned.

        Within a vote lease of the replica's stop (`_vote_lease_s`) it withholds (pre-)votes
        as a running follower does (RaftCore.step): it may have acknowledged a leader's lease a
        moment before it was tombstoned, and a vote now would elect a new leader while the old
        one still serves lease reads. A leadership transfer's vote is not
        withheld, as in the core."""
        votes = [m for m in messages if isinstance(m, VoteRequest) and m.to_uuid == self.uuid]
        others = [m for m in messages if not isinstance(m, VoteRequest)]
        if votes and self._within_vote_lease(tablet_id):
            probe("tombstone.vote.withheld_in_lease")
            for m in [m for m in votes if not m.transfer]:
                self.log(tablet_id).info(
                    "tombstoned replica withheld %s from %s for term %d: stopped within the "
                    "vote lease", "pre-vote" if m.pre_vote else "vote", m.from_uuid, m.term)
            votes = [m for m in votes if m.transfer]
        if not votes:
            return others
        paths = self.paths(tablet_id)
        async with self.transition(tablet_id):  # not while a copy installs (it merges the metadata)
            if self.state(tablet_id) == TabletState.RUNNING:  # the copy finished meanwhile
                probe("tombstone.vote.copy_finished_meanwhile")
                self.entries[tablet_id].replica.step(votes)
                return others
            if not (paths.disk.exists(paths.consensus_meta) and paths.disk.exists(paths.superblock)):
                probe("tombstone.vote.no_metadata")
                return messages  # a copy onto a new replica: no metadata to vote with yet
            answers = await asyncio.to_thread(tombstone_vote, paths, self.uuid, votes)
        tlog, send = self.log(tablet_id), self._sender(tablet_id)
        for m, (resp, why) in zip(votes, answers, strict=True):
            loud = tlog.warning if why.startswith(UNREADABLE_CMETA) else tlog.info
            loud("tombstoned replica %s %s to %s for term %d, its last op (%d, %d): %s",
                 "granted" if resp is not None and resp.granted else "denied",
                 "pre-vote" if m.pre_vote else "vote", m.from_uuid, m.term, m.last_term,
                 m.last_index, why)
            if resp is not None:
                send(m.from_uuid, [resp])
        return others

    # -- tablet copy, the receiving side (Kudu's tablet-copy design) --------------------------
    async def begin_copy(self, req: StartTabletCopy) -> TabletState | None:
        """Check StartTabletCopy's guards and mark the tablet COPYING; returns the state it was
        in (None: no replica). Refused for a caller in an older term or one that expects the
        replica in another state (ILLEGAL_STATE), and for a running replica the caller's
        retained log can still catch up (REPLICA_NOT_BEHIND): only a replica that is really
        behind is tombstoned first."""
        tid, paths = req.tablet_id, self.paths(req.tablet_id)
        async with self.transition(tid):
            e = self.entries.get(tid)
            if e is not None and e.stored == TabletState.COPYING:
                probe("copy.refused.in_progress")
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid}: a copy is in progress")
            if e is not None and e.stored == TabletState.FAILED:
                probe("copy.refused.failed_replica")
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid} failed here: {e.error}")
            before = e.stored if e is not None else None
            state = before.value if before is not None else "MISSING"
            if req.current_state and req.current_state != state:
                probe("copy.refused.state_mismatch")
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid} is {state} here, not "
                               f"{req.current_state} as the caller expects")
            cmeta, lost = await asyncio.to_thread(_votes_held, paths)
            if lost is not None:  # merging into fresh metadata could vote twice in a term
                probe("copy.refused.votes_lost")
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid}: {lost}, so the votes "
                               "it held are lost; an operator must remove its files first "
                               "(tessera local-replica delete)")
            if cmeta is not None and req.caller_term < cmeta.current_term:
                probe("copy.refused.stale_term")
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"caller's term {req.caller_term} is "
                               f"older than ours, {cmeta.current_term}")
            if before == TabletState.RUNNING:
                up_to_date = _not_behind(e.replica, req)
                if up_to_date is not None:
                    probe("copy.refused.not_behind")
                    self.log(tid).info("refused tablet copy from %s (caller term %d): %s",
                                       req.source.uuid, req.caller_term, up_to_date)
                    raise RpcError(ErrorCode.REPLICA_NOT_BEHIND, f"tablet {tid}: {up_to_date}")
                probe("copy.running_replica_tombstoned")
                await self._tombstone(e)
                before = TabletState.TOMBSTONED
            table = e.table if e is not None else "?"
            if before is None:
                # no replica open here: a deleted FAILED one may have acknowledged a lease just
                # before it failed, so votes wait a vote lease from now, as after any stop
                self._quiet(tid)
            self.entries[tid] = TabletEntry(tid, table, TabletState.COPYING,
                                            copy=asyncio.current_task())
        probe("copy.started")
        self.log(tid).info("tablet copy from %s starting (caller term %d, replica %s, the "
                           "caller believes it holds index %d)", req.source.uuid,
                           req.caller_term, state, req.peer_match)
        return before

    async def prepare_copy(self, tablet_id: str, session: CopySession) -> None:
        """Make room for a copy's files (node.tserver.copy.prepare_install): from here on a
        failure leaves a tombstone, with the last op a forgotten FAILED replica knew. A voter
        whose last op nothing says is refused and becomes FAILED, its files untouched: the
        masters replace a FAILED replica (a tablet the server does not list is never
        replaced, and the leader would copy to it forever)."""
        async with self.transition(tablet_id):
            try:
                await uninterrupted(asyncio.to_thread(
                    prepare_install, self.paths(tablet_id), session, self.options.faults,
                    self._forgotten_last.get(tablet_id), self.uuid))
            except LastOpUnknown as e:
                self.entries[tablet_id] = TabletEntry(
                    tablet_id, session.table_name, TabletState.FAILED,
                    error=log_failure(self.log(tablet_id), "tablet copy refused", e))
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"{e}; the replica is FAILED here, "
                               "its files kept, for the masters to replace") from e
            self._forgotten_last.pop(tablet_id, None)  # the COPYING superblock says it now

    async def finish_copy(self, tablet_id: str, session: CopySession, source: str) -> Replica:
        """All files are in: mark the replica READY and start it. Its bootstrap (the snapshot,
        then the WAL) runs in a thread: a big tablet must not stall the other tablets' Raft.
        Once READY is on its way to disk the replica is started whatever happens to the caller
        (`uninterrupted`): a delete that cancels the copy then finds it RUNNING and tombstones
        it with its last OpId, where an abandoned install left memory saying TOMBSTONED over a
        READY superblock."""
        return await uninterrupted(self._install(tablet_id, session, source))

    async def _install(self, tablet_id: str, session: CopySession, source: str) -> Replica:
        """Open the copied files and check them against the tombstone before they are READY:
        the tombstone's last OpId is what this replica voted with, and a copied log ending
        behind it would make it vote for logs without entries it acknowledged (a source that
        writes behind copies only what its WAL has synced). Such a copy is refused; the
        tablet stays a tombstone with its last OpId, and the leader copies again later."""
        paths = self.paths(tablet_id)
        async with self.transition(tablet_id):
            copying = await asyncio.to_thread(Superblock.load, paths.superblock, paths.disk)
            r = self._new_replica(tablet_id)
            try:
                await asyncio.to_thread(r.open)
            except Exception as e:  # the copied files do not open: never serve them
                probe("copy.install.open_failed")
                if hasattr(r, "wal"):
                    r.wal.close()
                # kept for an operator, as the replica's own files are when it fails, and
                # with the tombstone's last OpId for the copy that replaces them
                await asyncio.to_thread(complete_install, paths, session, source, False)
                self.entries[tablet_id] = TabletEntry(
                    tablet_id, session.table_name, TabletState.FAILED,
                    error=log_failure(self.log(tablet_id), "cannot open the copied replica", e))
                # answered, not raised as the handler's own failure: a source serving a damaged
                # file is the source's fault, and the leader learns why its copy failed
                raise RpcError(ErrorCode.ILLEGAL_STATE,
                               f"tablet {tablet_id}: the copy from {source} does not open "
                               f"({type(e).__name__}: {e}); the replica is FAILED here, its "
                               "files kept") from e
            behind = copying.tombstone_last_opid
            if behind is not None and r.last_logged() < (behind.term, behind.index):
                probe("copy.refused.behind_tombstone")
                r.wal.close()
                raise RpcError(ErrorCode.ILLEGAL_STATE,
                               f"tablet {tablet_id}: the copy from {source} ends at "
                               f"{r.last_logged()}, behind the last op this replica logged, "
                               f"({behind.term}, {behind.index}): the source has not synced "
                               "entries this replica acknowledged; it stays a tombstone")
            try:
                await asyncio.to_thread(complete_install, paths, session, source)
            except BaseException:  # a full disk: the copy is abandoned to a tombstone
                r.wal.close()
                raise
            return self._run_replica(r, session.table_name)

    async def abandon_copy(self, tablet_id: str, before: TabletState | None) -> None:
        """A copy that did not install: a tombstone if it had written anything (as start-up
        would make of it), else the tablet is back in the state it was in. Runs to its end
        whatever happens to the copy meanwhile (`uninterrupted`): a delete that came while it
        cleaned up cancelled it halfway, the disk said TOMBSTONED and the tablet stayed COPYING,
        refusing every later copy and delete until a restart."""
        await uninterrupted(self._abandon_copy(tablet_id, before))

    async def _abandon_copy(self, tablet_id: str, before: TabletState | None) -> None:
        e = self.entries.get(tablet_id)
        if e is None or e.stored != TabletState.COPYING:
            return  # installed (or failed to open)
        async with self.transition(tablet_id):
            try:
                table = await asyncio.to_thread(abandon_copy, self.paths(tablet_id))
            except Exception as err:  # a full or failing disk: FAILED, never COPYING with no
                # copy under way (it refused every later copy and delete); start-up judges
                # whatever the cleanup left, as after a crash
                probe("copy.abandon.failed")
                self.entries[tablet_id] = TabletEntry(
                    tablet_id, e.table, TabletState.FAILED,
                    error=log_failure(self.log(tablet_id), "cannot clean up the failed copy", err))
                raise
        if table is not None:
            probe("copy.abandoned.tombstoned")
            self.entries[tablet_id] = TabletEntry(tablet_id, table, TabletState.TOMBSTONED)
        elif before is None:
            del self.entries[tablet_id]
        else:
            probe("copy.abandoned.state_restored")
            self.entries[tablet_id] = TabletEntry(tablet_id, e.table, before)


def _votes_held(paths: TabletPaths) -> tuple[ConsensusMetadata | None, str | None]:
    """Blocking: the tablet's consensus metadata here (None: there is none), or why the votes
    it held are lost: it does not read, or it is gone while a superblock says the replica had
    logged (or does not read either), or while its WAL or a snapshot remains. A brand-new
    replica has none and a superblock of last OpId (0, 0) at most (a first copy that died
    before its metadata: it never voted); cmeta is written before the superblock at creation,
    and before any log, so nothing else leaves one without the other."""
    if paths.disk.exists(paths.consensus_meta):
        try:
            return ConsensusMetadata.load(paths.consensus_meta, paths.disk), None
        except CorruptionError as err:
            return None, f"the consensus metadata here does not read ({err})"
    if not paths.disk.exists(paths.superblock):
        if nothing_here(paths):
            return None, None
        probe("copy.refused.log_without_metadata")
        return None, "the consensus metadata here is gone while the replica's log remains"
    sb = readable_superblock(paths)
    if sb is None or sb.tombstone_last_opid != OpId(0, 0):
        return None, "the consensus metadata here is gone while the replica's superblock remains"
    return None, None


def _not_behind(r: Replica, req: StartTabletCopy) -> str | None:
    """Why a running replica must not be copied over, or None if it is really behind the
    caller's retained log (as in Kudu, only a replica AppendEntries cannot help is replaced)."""
    first = req.retained_from
    if first is None:
        return "the replica is running and the caller did not say which log it retains"
    if r.failed:
        probe("copy.over_failed_running_replica")
        return None  # a replica that stopped serving cannot be caught up either
    (start_term, start), (last_term, last) = r.log_bounds()
    mine = f"its log holds ({start_term}, {start})..({last_term}, {last})"
    if start >= first.index:
        return f"not behind: {mine}, its snapshot at or past the caller's first retained " \
               f"op ({first.term}, {first.index})"
    if r.holds(first.index, first.term):
        return f"not behind: {mine}, including the caller's first retained op " \
               f"({first.term}, {first.index}); AppendEntries can catch it up"
    return None
