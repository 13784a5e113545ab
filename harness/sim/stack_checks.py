"""The whole-stack simulator's invariant checks (harness.sim.stack), as TigerBeetle keeps each
invariant family apart from the code that drives the cluster: the simulator boots, crashes and
faults its servers; `Invariants` reads the live servers and replicas it is given and remembers
what it has seen (leaders by term, committed entries, votes, tombstones, configs) to judge
what comes next. A broken invariant raises StackViolation with where and what.

What it checks: no RPC handler failing on an error no guard handled (answered REMOTE_ERROR);
no replica FAILED on one of its own safety guards; one leader per term; lease safety; terms
and votes never going back; no vote granted to a log behind what the voter had logged, no
leader counting more than a peer acknowledged in its term, no follower refusing an index it
acknowledged to that leader in that term (it lost a synced entry, which the leader repairs
in silence), and no leader committing past what a majority holds durably (its own WAL's
synced prefix with its peers' answers: all seen on the messages replicas send); no message
naming a term, and no vote, sent before the sender's consensus metadata holds them as a power
loss would leave it (Raft's persist-before-answer, read from the simulated disk); a committed
config's entry in the replica's log, and no older committed config in its consensus metadata
than the one it counts as saved; one committed
entry per index, with hybrid time increasing along the log; one state per applied index; one
config per committed config index; no tombstone resurrected; damage a replica needs never run
on (a flipped newest WAL batch cut as torn, a cut or lost segment taken for a log that ended
there); each tablet's listed state the state of what it holds (no stopped replica listed
RUNNING, no tablet COPYING with no copy under way); no replica coming back (restarted or
copied) with a log ending behind its predecessor's; no file descriptor closed twice; the
catalog agreeing with the committed configs; every tablet server heartbeating the
committed masters; no server's background loop (heartbeats, reconciling, copies) ended
while it ran; no request left at the gate of a replica that no longer leads, stops or
fails (harness.sim.stack_owed); no replica or server failing on corrupt files where no fault touched them
(what crashes, kills, power losses and I/O errors leave must read back); and, on the history,
commit-wait across tablets.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from harness.sim.stack_owed import Owed
from harness.sim.stack_silence import Silences
from node.consensus import AppendResponse, Role, VoteRequest, VoteResponse, quorum
from node.master.catalog import CATALOG, Catalog

DATA_DIR = Path("/data")  # every server's, on its own SimDisk
# compared by identity: `role.name` is an enum descriptor's Python call, and the lease check
# reads every replica's role a hundred times a virtual second
LEADER = Role.LEADER
_VOTES = (VoteRequest, VoteResponse)  # the messages a pre-vote travels in


class StackViolation(Exception):
    """A Raft invariant failed on the live replicas; the message says which and where."""


# Faults that damage a host's files: a replica there may come back without entries it synced.
STORAGE_FAULTS = frozenset({"flip", "flip-newest", "torn", "damage", "damage-file", "forge",
                            "copy-shrink", "lose"})


class Invariants:
    def __init__(self, sim):
        self.sim = sim  # harness.sim.stack.StackSim: its servers, disks, hosts, loop and faults
        self._leaders: dict[tuple[str, int], str] = {}  # (tablet, term) -> leader uuid
        self._top_leader: dict[str, tuple[int, str]] = {}  # tablet -> newest (term, leader)
        self._stamps: dict[tuple[str, int], int] = {}  # (tablet, index) -> highest ts up to it
        self._committed: dict[tuple[str, int], int] = {}  # (tablet, index) -> term
        self._checked: dict[tuple[str, str], int] = {}  # (host, tablet) -> commit checked up to
        self._state_at: dict[tuple[str, int], tuple[int, str]] = {}  # (tablet, applied) -> crc
        self._terms: dict[tuple[str, str], int] = {}  # (host, tablet) -> highest term seen
        self._votes: dict[tuple[str, str, int], str] = {}  # (host, tablet, term) -> voted for
        # tombstones: (host, tablet) -> the disk's file serial mark when seen TOMBSTONED, and
        # the replica object last checked against it since
        self._tombs: dict[tuple[str, str], int] = {}
        self._revived: dict[tuple[str, str], object] = {}
        # committed configs: (tablet, config index) -> members, and each tablet's highest index
        self._configs: dict[tuple[str, int], frozenset] = {}
        self._top_config: dict[str, int] = {}
        self._config_indexes: dict[str, set[int]] = {}  # tablet -> its committed config indexes
        self.catalog_lag: list[str] = []
        # votes: (host, tablet) -> (term, index) of the last op the replica there has logged,
        # as last seen while it ran; (tablet, candidate, term, pre-vote) -> the (term, index)
        # its request said its log ends at; violations seen inside the engine's send path
        self._logged: dict[tuple[str, str], tuple[int, int]] = {}
        self._asked: dict[tuple[str, str, int, bool], tuple[int, int]] = {}
        # (host, tablet) -> (the replica object, its uuid, (term, index) it last had logged)
        self._positions: dict[tuple[str, str], tuple[object, str, tuple[int, int]]] = {}
        self._unsafe: list[str] = []
        # acknowledgements: (tablet, leader, term, peer) -> the highest index the peer's
        # successful AppendResponses to that leader in that term said it holds
        self._acked: dict[tuple[str, str, int, str], int] = {}
        # counted commits: (tablet, leader, term) -> the commit index checked last (at first
        # sight, the one the leader came to its term with: learned, not counted)
        self._counted: dict[tuple[str, str, int], int] = {}
        # (host, tablet) -> [the consensus metadata's path, the file a power loss would leave
        # there, its (term, voted for)]: decoded again only when that file changes
        self._durable: dict[tuple[str, str], list] = {}
        self._hosts: dict[str, str] = {}  # server uuid -> its host, as seen while it ran
        self.silences = Silences()  # leaders that stopped sending (harness.sim.stack_silence)
        self.owed = Owed()  # requests left at a gate (harness.sim.stack_owed)

    def crashed(self, host: str) -> None:
        """`host`'s process died: its restarted replicas re-learn their commit index."""
        for key in [k for k in self._checked if k[0] == host]:
            del self._checked[key]

    def forget(self, host: str) -> None:
        """A server removed for good (the spare master): a new one there later is another
        replica (another uuid, an empty disk), so what is remembered of this one goes."""
        for memo in (self._terms, self._votes, self._checked, self._tombs, self._revived, self._durable,
                     self._logged, self._positions):
            for key in [k for k in memo if k[0] == host]:
                del memo[key]

    def check(self, states: bool = False) -> None:
        """No replica FAILED on one of its own safety guards (a SafetyError: the engine caught
        itself about to break Raft, e.g. the consensus metadata refusing a second vote in a
        term), nor one whose background work (a snapshot, log GC) raised an error that no disk
        fault explains; one leader per term; a replica's term never goes back and its vote in a term never
        changes, across restarts, tombstones and copies; one committed entry per index; and
        with `states`, one state per applied index (a replica that applied something else than
        the committed log, e.g. an uncommitted suffix at bootstrap, holds different rows at the
        same index), one config per committed config index, no tombstone resurrected, and the
        catalog agreeing with the committed configs."""
        from node.tablet.checksum import table_checksum

        if self._unsafe:
            raise StackViolation(self._unsafe[0])
        self.check_leases()
        for host, server in self.sim.servers.items():
            if getattr(server, "uuid", None) is not None:
                self._hosts[server.uuid] = host
            if (ended := getattr(server, "loop_ended", None)) is not None:
                raise StackViolation(f"server loop ended: on {host}, {ended}, while the server "
                                     "ran (node.server.base.ServerBase._keep)")
            failure = getattr(getattr(server, "server", None), "handler_failure", None)
            if failure is not None:
                raise StackViolation(f"handler failed: an RPC handler on {host} raised an "
                                     f"error no guard handled (REMOTE_ERROR): {failure}")
            _check_entries(host, getattr(server, "tablets", None))
            disk = self.sim.disks.get(host)
            if disk is not None and disk.closed_twice:
                raise StackViolation(f"descriptor closed twice: {disk.closed_twice[0]} on "
                                     f"{host} (a real process may have given the number to "
                                     "another file by then)")
            for tablet, r in list(getattr(server, "replicas", {}).items()):
                self._logged[(host, tablet)] = logged = _logged(r)
                self._check_position(host, tablet, r, logged)
                if r.unexpected:
                    raise StackViolation(f"background failure: tablet {tablet} on {host} "
                                         f"(replica {r.uuid}) raised an error no guard "
                                         f"handled: {r.unexpected}")
                if r.failed and r.failed.startswith("SafetyError"):
                    raise StackViolation(f"safety guard: tablet {tablet} on {host} (replica "
                                         f"{r.uuid}) FAILED: {r.failed}")
                self._check_term_and_vote(host, tablet, r)
                _check_config_logged(host, tablet, r)
                self._check_config_kept(host, tablet, r)
                went_back = _config_went_back(host, tablet, r)
                if went_back and not self._storage_faulted(host):
                    raise StackViolation(went_back)
                if (owed := self.owed.left_waiting(host, tablet, r, self.sim.loop.time())):
                    raise StackViolation(owed)
                if r.role is LEADER:
                    silent = self.silences.silent(host, tablet, r, self.sim.loop.time())
                    if silent is not None:
                        raise StackViolation(silent)
                    holder = self._leaders.setdefault((tablet, r.term), r.uuid)
                    if holder != r.uuid:
                        raise StackViolation(f"election safety: tablet {tablet} term {r.term} has "
                                             f"leaders {holder} and {r.uuid}")
                done = self._checked.get((host, tablet), 0)
                for index, term, stamp in r.committed_entries(done):
                    seen = self._committed.setdefault((tablet, index), term)
                    if seen != term:
                        raise StackViolation(
                            f"state machine safety: tablet {tablet} index {index} committed with "
                            f"term {term} on {host}, term {seen} elsewhere")
                    self._check_stamp(tablet, index, term, stamp)
                    done = index
                self._checked[(host, tablet)] = max(done, r.commit_index)
                if states and not r.failed:
                    applied = r.state.last_applied_index
                    crc = table_checksum(r.state.data)  # no await: nothing changes it meanwhile
                    holder, seen = self._state_at.setdefault((tablet, applied), (host, crc))
                    if seen != crc:
                        raise StackViolation(
                            f"applied state: tablet {tablet} at applied index {applied} has "
                            f"checksum {crc} on {host}, {seen} on {holder}")
        if states:  # what the servers report costs as much: on the same rounds
            for host, cause in self.sim.start_failures.items():
                if _corruption(cause) and not self._storage_faulted(host):
                    raise StackViolation(f"corruption on an undamaged disk: the server on {host} "
                                         f"refused to start on {cause} though no fault touched "
                                         "its files")
            for host, server in self.sim.servers.items():
                if getattr(server, "me", None) is not None:  # started far enough to report
                    self._check_reports(host, server)
            self.check_catalog()

    def check_leases(self) -> None:
        """Lease safety: no leader serves reads from its lease while a newer term of its tablet
        has had a leader. The lease's whole promise is that every voter that acknowledged it
        withholds its vote until the lease is over, so no election can succeed before then; a
        newer leader elected meanwhile may commit writes that the old one's local reads do not
        see. Checked on the replicas' state, so a broken promise is caught when it is made
        (a tombstoned voter that granted a vote the moment it stopped), not only in the rare
        run where a client also reads at the old leader after a write through the new one.
        Virtual clocks do not drift, so the lease's drift margin is not needed for it to hold
        here. Cheap, so in lease mode it also runs between the other checks
        (`_invariant_loop`): a lease may have only a few milliseconds left when the new leader
        wins."""
        now, leases = self.sim.loop.time(), []
        for host, server in self.sim.servers.items():
            for tablet, r in list(getattr(server, "replicas", {}).items()):
                if r.role is not LEADER:
                    continue
                top = self._top_leader.get(tablet)
                if top is None or r.term > top[0]:
                    self._top_leader[tablet] = (r.term, r.uuid)
                if r.reads.serves_lease_reads(now):
                    leases.append((host, tablet, r))
        for host, tablet, r in leases:
            top = self._top_leader.get(tablet)
            if top is not None and top[0] > r.term:
                raise StackViolation(
                    f"lease safety: tablet {tablet}: {top[1]} has led term {top[0]} while "
                    f"{r.uuid} on {host} still serves lease reads as leader of term {r.term}")

    def observe_sent(self, host: str, tablet: str, to_uuid: str, messages: list) -> None:
        """Every Raft message a replica on `host` sends (ServerOptions.observe_outgoing): a
        candidate's vote requests are remembered, and each vote granted is checked against
        what the voter had logged: a replica never grants a (pre-)vote to a log behind its own,
        whether it runs or votes from a tombstone or a copy under way, where the log it votes
        from is metadata (the last OpId a tombstone kept) that may say less than it logged.
        Called inside the engine's send path, so a violation waits there for `check`."""
        server = self.sim.servers.get(host)
        r = _replica(server, tablet)
        if r is not None:
            self._logged[(host, tablet)] = logged = _logged(r)
            self._check_position(host, tablet, r, logged)
            if r.role is LEADER:
                self.silences.spoke(host, tablet, r.term, self.sim.loop.time())
                if r.core.role is LEADER and r.core.term == r.term:
                    # The replica learns its core's role only after a Ready's messages are
                    # sent: a leader deposed by an append that also moved its commit sends the
                    # answer as a follower, its commit and progress a follower's.
                    self._check_acks(host, tablet, r)
                    self._check_counted(host, tablet, r)
        disk = self.sim.disks.get(host)
        if disk is not None:
            self._check_promised(host, tablet, disk, messages)
        for m in messages:
            if type(m) is AppendResponse and m.success:
                key = (tablet, m.to_uuid, m.term, m.from_uuid)
                self._acked[key] = max(self._acked.get(key, 0), m.match_index)
            elif type(m) is AppendResponse and m.reject_index:
                self._check_refusal(host, tablet, m)
            elif type(m) is VoteRequest:
                self._asked[(tablet, m.from_uuid, m.term, m.pre_vote)] = (m.last_term,
                                                                          m.last_index)
            elif type(m) is VoteResponse and m.granted:
                asked = self._asked.get((tablet, m.to_uuid, m.term, m.pre_vote))
                logged = self._logged.get((host, tablet))
                if asked is not None and logged is not None and asked < logged:
                    self._unsafe.append(
                        f"vote safety: tablet {tablet} on {host} granted a "
                        f"{'pre-vote' if m.pre_vote else 'vote'} in term {m.term} to "
                        f"{m.to_uuid}, whose log ends at {asked}, behind the {logged} "
                        f"it had logged{'' if r is not None else ' (voting with no replica open)'}")

    def _check_promised(self, host: str, tablet: str, disk, messages: list) -> None:
        """Raft's rule that a server makes its term and vote durable before it sends anything
        that names them: a message of term T (pre-votes aside: they promise nothing) leaves a
        host whose consensus metadata, as a power loss now would leave it, is at T or later,
        and a vote granted in T leaves it naming that candidate in T. Otherwise a power loss
        makes the sender forget what it told: its term goes back, or it votes again in the
        term. A process started on a record only its page cache holds (a sync that failed,
        then a kill) breaks it before any power loss, so this is where that shows. The record
        is decoded once per file version (it is only ever replaced by an atomic rename)."""
        key = (host, tablet)
        memo = self._durable.get(key)
        if memo is None:
            memo = self._durable[key] = [str(DATA_DIR / "consensus-meta" / tablet), None, None]
        f = disk.durable_file(memo[0])
        if f is not memo[1] or f is None:
            memo[1], memo[2] = f, _hard_state(memo[0], None if f is None else bytes(f.durable))
        term, voted_for = memo[2] or (0, None)
        for m in messages:
            kind = type(m)
            if m.term < term or (kind in _VOTES and m.pre_vote):
                continue
            granted = kind is VoteResponse and m.granted
            if term == m.term and (not granted or voted_for == m.to_uuid):
                continue
            if self._storage_faulted(host):  # a fault damaged its files: that record may be gone
                return
            said = "granted a vote to " + m.to_uuid if granted else "sent " + kind.__name__
            self._unsafe.append(
                f"durability before answer: tablet {tablet} on {host} {said} in term {m.term} "
                f"while its consensus metadata, as a power loss would leave it, says term "
                f"{term}, voted for {voted_for}" + ("" if memo[2] else " (no readable record)"))
            return

    def _check_refusal(self, host: str, tablet: str, m: AppendResponse) -> None:
        """A replica never refuses an append at an index it acknowledged to the same leader in
        the same term: it had that entry synced, and neither a crash nor a restart nor a copy
        onto its tombstone may take a synced entry away. The leader repairs such a follower
        (it logs `SAFETY: follower ... lost acknowledged entries`, which a chaos run's log
        checker judges and this simulator's silenced logs never showed), so no history shows
        it: only a disk damaged on purpose, or an unsafe config change, may explain it."""
        acked = self._acked.get((tablet, m.to_uuid, m.term, m.from_uuid), 0)
        if m.reject_index > acked or self._unsafe or self._storage_faulted(host):
            return
        self._unsafe.append(
            f"acknowledged entries lost: tablet {tablet} on {host} ({m.from_uuid}) refused an "
            f"append at index {m.reject_index} from leader {m.to_uuid} in term {m.term}, after "
            f"acknowledging index {acked} to it in that term")

    def _storage_faulted(self, host: str) -> bool:
        """Whether a fault that may take synced entries away has hit `host` (damage to its
        files) or any host (an unsafe config change drops what only the lost replicas held)."""
        return host in self.sim.flipped or any(  # flipped: marked as the damage is done
            kind == "unsafe" or (kind in STORAGE_FAULTS and host in json.dumps(value))
            for _, kind, value in self.sim.events)

    def _check_position(self, host: str, tablet: str, r, logged: tuple[int, int]) -> None:
        """A replica never comes back with a log ending behind the one before it on the same
        server (by (term, index), as votes compare logs): a restart recovers what was synced,
        and a tablet copy onto a tombstone must bring at least what the tombstone says it
        logged, the last OpId it voted with meanwhile. A copy from a source whose WAL had not
        synced entries this replica had acknowledged (a leader writing behind) made it vote
        for logs without them, and with the leader's crash they were gone. Within one replica
        the log may end earlier (a new leader truncates an uncommitted suffix). A replica that
        FAILED keeps the position it had while it ran: it acknowledged what it had synced, and
        a copy over it, once it is deleted, must bring as much (the check once forgot a
        replica the moment it saw it FAILED, so a delete that came after a look went unjudged).
        A server with a new uuid (re-provisioned) starts over, as does one on a disk damaged on
        purpose, which the damage checks judge and name, unless it comes back a voter: damage
        that took what a voter logged must make it fail loudly (and be replaced), never let it
        vote with less."""
        key = (host, tablet)
        sim = self.sim
        if host in sim.must_fail or (host in sim.flipped and host not in sim.flip_outcomes
                                     and not r.core.committed_config.is_voter(r.uuid)):
            self._positions.pop(key, None)
            return
        if r.failed:
            return  # the position it reached while it ran stands
        seen = self._positions.get(key)
        self._positions[key] = (r, r.uuid, logged)
        if seen is None or seen[0] is r or seen[1] != r.uuid:
            return
        opened = _opened_at(r, logged)
        if opened >= seen[2]:
            return
        if not self._unsafe:
            self._unsafe.append(
                f"log regressed: tablet {tablet} on {host} came back (restarted or copied) with "
                f"a log ending at {opened}, behind the {seen[2]} the replica before it had "
                "logged")

    def _check_acks(self, host: str, tablet: str, r) -> None:
        """A leader counts toward commitment only what each peer acknowledged to it in its own
        term: no peer's match index above the highest its successful answers in this term
        said. Anything else (a finished tablet copy taken as the receiver's answer, while the
        receiver voted for another leader) commits through a replica that may follow someone
        else. Checked whenever the leader sends, so before the match it should not have is
        used, not only when a later leader happens to overwrite what it committed."""
        for peer, pr in list(r.core.progress.items()):
            acked = self._acked.get((tablet, r.uuid, r.term, peer), 0)
            if pr.match > acked and not self._unsafe:
                self._unsafe.append(
                    f"acknowledgement: tablet {tablet}: leader {r.uuid} on {host} (term "
                    f"{r.term}) counts {peer} as holding index {pr.match}, but {peer} "
                    f"acknowledged only {acked} to it in that term")

    def _check_counted(self, host: str, tablet: str, r) -> None:
        """A leader commits only what a majority of voters holds durably: its own log up to
        what its WAL has synced (`log.stable`, reported by the driver once the write is
        durable) and each peer up to what it acknowledged in this term. A leader whose own WAL
        write runs behind its Ready (docs/decisions/write-behind.md) may commit on its
        followers' answers alone, never on entries it has only handed to its WAL: a power loss
        would then take them from a majority. Judged each time the commit index has moved
        since the last send, so under the config the leader counted with: the active one, or the
        committed one if a config change was appended meanwhile (one change at a time)."""
        core, key = r.core, (tablet, r.uuid, r.term)
        seen = self._counted.setdefault(key, core.commit)
        if core.commit <= seen or self._unsafe:
            return
        self._counted[key] = core.commit

        def held(voter: str) -> int:
            if voter == r.uuid:
                return core.log.stable
            return self._acked.get((tablet, r.uuid, r.term, voter), 0)

        durable = max(quorum.committed_index(config.voters(), held)
                      for config in (core.active_config, core.committed_config))
        if core.commit > durable:
            self._unsafe.append(
                f"durable quorum: tablet {tablet}: leader {r.uuid} on {host} (term {r.term}) "
                f"committed index {core.commit}, but a majority holds only {durable} durably "
                f"(its own WAL synced to {core.log.stable}, its log handed to "
                f"{core.log.handed})")

    def _check_stamp(self, tablet: str, index: int, term: int, stamp: int | None) -> None:
        """Hybrid time follows the log: a committed command's timestamp exceeds every earlier
        committed one, across leadership changes (a new leader witnesses its predecessors'
        timestamps before it accepts writes, as in Kudu's Raft implementation notes),
        whatever the clocks say, so also while the drift fault steps a clock past the
        configured bound, where a new leader's own clock may be far behind.
        `_stamps[(tablet, i)]`: the highest timestamp committed at or
        below i, as far as seen (a compacted prefix may hide some: then less is checked)."""
        key = (tablet, index)
        if key in self._stamps:
            return
        before = self._stamps.get((tablet, index - 1), 0)
        if stamp is not None and stamp <= before:
            raise StackViolation(
                f"hybrid time: tablet {tablet} index {index} (term {term}) was committed with "
                f"timestamp {stamp}, not above {before}, the highest committed below it")
        self._stamps[key] = max(before, stamp or 0)

    def _check_term_and_vote(self, host: str, tablet: str, r) -> None:
        """A replica's term never goes back and its saved vote in a term never changes."""
        high = self._terms.setdefault((host, tablet), r.term)
        if r.term < high:
            raise StackViolation(f"term monotonicity: tablet {tablet} on {host} went from "
                                 f"term {high} back to {r.term}")
        self._terms[(host, tablet)] = r.term
        term, voted = r.durable_vote()
        if voted is not None:
            promised = self._votes.setdefault((host, tablet, term), voted)
            if promised != voted:
                raise StackViolation(f"vote safety: tablet {tablet} on {host} voted for "
                                     f"{promised} and {voted} in term {term}")
        elif (host, tablet, term) in self._votes:
            raise StackViolation(f"vote safety: tablet {tablet} on {host} forgot its vote "
                                 f"for {self._votes[(host, tablet, term)]} in term {term}")

    def _check_reports(self, host: str, server) -> None:
        """What the server reports of its tablets: tombstones, committed configs, and whether a
        flipped bit was detected."""
        reports = server.reports()
        states: dict[str, set[str]] = {}
        for rep in reports:
            states.setdefault(rep.tablet_id, set()).add(rep.state)
            if rep.state == "RUNNING" and rep.committed_config_index >= 0:
                self._saw_config(host, rep.tablet_id, rep.committed_config_index,
                                 frozenset(m[0] for m in rep.committed_config))
        if host in self.sim.must_fail:
            self._check_damage(host, states)
        corrupt = [r for r in reports if r.state == "FAILED" and _corruption(r.error)
                   and not self._copied_damage(host, r.tablet_id)]
        if corrupt and not self._storage_faulted(host):
            raise StackViolation(
                f"corruption on an undamaged disk: tablet {corrupt[0].tablet_id} on {host} "
                f"FAILED on {corrupt[0].error} though no fault touched its files (crashes, "
                f"power losses, kills, I/O errors and full disks leave files a correct engine "
                f"reads back: what it synced, a torn unsynced tail, nothing it acknowledged "
                f"missing)")
        if host in self.sim.flipped and host not in self.sim.flip_outcomes:
            failed = sorted(f"{r.tablet_id}: {r.error}" for r in reports if r.state == "FAILED")
            if failed:
                self.sim.flip_outcomes[host] = f"FAILED {'; '.join(failed)}"[:500]
        disk = self.sim.disks[host]
        for tablet, seen in states.items():
            key = (host, tablet)
            # A tombstone at rest (no copy under way): remember which files existed by then.
            # A new tombstone after the replica came back replaces the old one.
            if seen == {"TOMBSTONED"} and (key not in self._tombs or key in self._revived):
                self._tombs[key] = disk.serial_mark()
                self._revived.pop(key, None)
        for tablet, r in list(server.replicas.items()):
            key = (host, tablet)
            # a replica being stopped (a delete tombstoning it: the superblock may say so
            # before the entry does) is not running again
            if (key in self._tombs and not r.failed and not r.stopping
                    and self._revived.get(key) is not r):
                self._check_revived(host, tablet, self._tombs[key])
                self._revived[key] = r

    def _copied_damage(self, host: str, tablet: str) -> bool:
        """Whether the replica's files came by a tablet copy from a server whose disk a fault
        damaged: a copy sends the source's files as they are, so a file cut or flipped there
        before the copy's manifest was made goes out with its cut length (a finished WAL
        segment; a snapshot the source now refuses, node.tserver.copy_source), a flipped bit
        with the rest, and the receiver's open refuses it (copy.install.open_failed). The
        refused files are kept, under a superblock naming the source (`copied_from`). The
        nightly matrix met it: copy-shrink cut a leader's snapshot under one copy session, and
        a second session, to another replica, began after the cut."""
        from node.tablet.paths import TabletPaths
        from node.tablet.superblock import Superblock

        disk, paths = self.sim.disks[host], TabletPaths(DATA_DIR, tablet)
        try:
            source = Superblock.load(paths.superblock, disk).copied_from
        except Exception:  # none, or damaged itself: nothing says where the files came from
            return False
        return source in self._hosts and self._storage_faulted(self._hosts[source])

    def _check_revived(self, host: str, tablet: str, mark: int) -> None:
        """Tombstones are never resurrected: a replica that runs again where it was tombstoned
        came back through a tablet copy, which removes the tombstoned data, installs the
        source's files and says so in the superblock (`copied_from`, cleared by a tombstone).
        So none of its data files (WAL, snapshots) may be older than the tombstone (a restart
        that opened the old data as RUNNING, a delete or a copy that left it behind), and its
        superblock, rewritten since, must name a copy source (a replica restarted empty over
        its tombstone, as if created anew, names none)."""
        from node.tablet.paths import TabletPaths
        from node.tablet.superblock import Superblock

        disk, paths = self.sim.disks[host], TabletPaths(DATA_DIR, tablet)
        wal, data = disk.file_serials(paths.wal_dir), disk.file_serials(paths.snapshot_dir)
        old = [path for path, serial in wal + data if serial <= mark]
        if old:
            raise StackViolation(f"tombstone resurrected: tablet {tablet} on {host} runs again "
                                 f"with data from before its tombstone: {old[:3]}")
        sb = Superblock.load(paths.superblock, disk)
        if sb.copied_from is None:
            raise StackViolation(f"tombstone resurrected: tablet {tablet} on {host} runs again "
                                 f"without a tablet copy (its superblock names no copy source)")

    def _saw_config(self, host: str, tablet: str, index: int, members: frozenset) -> None:
        seen = self._configs.setdefault((tablet, index), members)
        if seen != members:
            raise StackViolation(f"config safety: tablet {tablet} committed config index {index} "
                                 f"has members {sorted(members)} on {host}, {sorted(seen)} "
                                 f"elsewhere")
        self._top_config[tablet] = max(index, self._top_config.get(tablet, -1))
        self._config_indexes.setdefault(tablet, set()).add(index)

    def _check_config_kept(self, host: str, tablet: str, r) -> None:
        """A running replica's committed config is no older than any config the tablet
        committed at or below its snapshot: a snapshot carries no config, and bootstrap rebuilds
        configs only from the log after it, so a snapshot saved before the consensus metadata
        held a config it covered restarted the replica in a config the tablet had left (after
        a crash between the two, or a metadata save that failed). Not on a disk damaged on
        purpose, nor after an operator's unsafe change, which the damage checks judge."""
        if r.failed or self._storage_faulted(host):
            return
        below = r.core.log.offset
        need = max((i for i in self._config_indexes.get(tablet, ()) if i <= below), default=0)
        have = r.core.committed_config.opid_index
        if have < need:
            raise StackViolation(f"config kept: tablet {tablet} on {host} (replica {r.uuid}) "
                                 f"runs with committed config {have} and a snapshot at {below}, "
                                 f"past config {need} the tablet committed")

    def check_catalog(self, final: bool = False) -> None:
        """The catalog agrees with the tablets' committed configs: every tablet record of every
        master's catalog (its applied state: committed records only) names the members of the
        committed config at its config_index (0: the creation config), as replicas reported
        it; it is never ahead of the tablet. The catalog follows configs asynchronously, so a
        record may lag, and an index no replica was seen at (a config replaced between two
        looks) is judged only by the other rules. With `final` (healed and settled), a lagging
        record is listed in `catalog_lag`."""
        lag = set()
        for host in self.sim.masters:
            server = self.sim.servers.get(host)
            r = getattr(server, "replicas", {}).get(CATALOG)
            if r is None or r.failed:
                continue
            for record in Catalog(r.state.data).tablets():
                tablet, index = record.id, record.config_index or 0
                members = frozenset(record.member_uuids)
                seen = self._configs.get((tablet, index))
                if seen is not None and seen != members:
                    raise StackViolation(
                        f"catalog agreement: master {host} has tablet {tablet} at config index "
                        f"{index} with {sorted(members)}, the tablet committed {sorted(seen)}")
                top = self._top_config.get(tablet)
                if final and top is not None and index > top:
                    raise StackViolation(
                        f"catalog agreement: master {host} has tablet {tablet} at config index "
                        f"{index}, ahead of any config the tablet committed (highest {top})")
                if final and top is not None and index < top:
                    lag.add(f"{tablet}: catalog {index} < {top} on {host}")
        if final:
            self.catalog_lag = sorted(lag)

    def _check_damage(self, host: str, states: dict[str, set[str]]) -> None:
        """Damage a replica needs (harness.sim.stack_damage: a bit flipped in a synced newest WAL
        batch, a file truncated, zeroed, lost or misplaced) fails it at the reboot, or the
        server refuses to start: a replica running again from those files took the damage
        for something else (a torn tail, a log that ended there) and runs on without what it
        had synced. Damage to a server's own files (tablet None) must keep it from starting:
        it reports, so it started."""
        tablet, what = self.sim.must_fail[host]
        seen = states.get(tablet, set())
        if "FAILED" in seen or host in self.sim.start_failures:
            del self.sim.must_fail[host]
        elif tablet is None:
            raise StackViolation(f"disk damage: {host} started after {what}")
        elif "RUNNING" in seen:
            raise StackViolation(f"disk damage: tablet {tablet} on {host} runs again after "
                                 f"{what}")

    def clock_checks(self, ops) -> list[dict]:
        """Commit-wait's promise across tablets (`check_timestamps(across_keys=True)`): a write
        invoked after another completed has a larger hybrid time, whichever tablets they hit.
        It holds only while every clock is within the max error, so a seed in which the drift
        fault stepped a clock past it is judged per key only (the workload's own check), and
        only for commit-wait writes: a client-propagated seed is judged per key and per client
        (the workload's check); a mixed seed across the commit-wait workers' writes alone
        (each worker's mode is its thread's, `mixed_thread_mode`), so a commit-wait session on
        a client-propagated client that did not wait is caught."""
        from harness.runner import SETUP_PROCESS
        from harness.systems.tessera.clients import MIXED, mixed_thread_mode
        from node.protocol import COMMIT_WAIT
        from reports.checkers.timestamps import check_timestamps

        if any(e[1] == "drift" for e in self.sim.events):
            return []
        mode = self.sim.cfg.mix.consistency
        if mode == "commit-wait":
            return [check_timestamps([o for o in ops if o.process != "nemesis"], across_keys=True)]
        if mode != MIXED:
            return []
        n = self.sim.cfg.mix.concurrency or self.sim.cfg.concurrency  # the run's workers
        return [check_timestamps([o for o in ops if isinstance(o.process, int)
                                  and o.process < SETUP_PROCESS
                                  and mixed_thread_mode(o.process % n) == COMMIT_WAIT],
                                 across_keys=True)]

    def check_master_lists(self) -> None:
        """Healed and settled: the catalog's committed config holds only masters the
        simulator runs (the masters faults drop a master only once it has left), and every
        live tablet server heartbeats those masters, as the masters last told them (the
        masters fault adds and removes one). Skipped while no master leads, an address is
        unknown to it, or a master never got far enough to know its uuid."""
        leaders = [s for h in self.sim.masters if (s := self.sim.servers.get(h)) is not None
                   and (r := getattr(s, "replicas", {}).get(CATALOG)) is not None
                   and r.role.name == "LEADER" and not r.failed]
        if not leaders:
            return
        master = leaders[0]
        r = master.replicas[CATALOG]
        running = {getattr(s, "uuid", None) for h in self.sim.masters
                   if (s := self.sim.servers.get(h)) is not None}
        if None in running:  # a master that refused to start (a damaged instance file) is down
            return           # with its files, not wiped, and which uuid it had is on its disk
        if gone := sorted(set(r.committed_members()) - running):
            raise StackViolation(
                f"masters config: the committed masters (index {r.committed_config_index}) "
                f"hold {gone}, which no master host runs: a master stopped and wiped while the "
                "config still counts on it")
        want = [master.book.get(u) for u in r.committed_members()]
        if None in want:
            return
        want_set = {tuple(p.addr) for p in want}
        for host in self.sim.tservers:
            hb = getattr(self.sim.servers.get(host), "heartbeater", None)
            if hb is not None and {tuple(a) for a in hb.masters} != want_set:
                raise StackViolation(
                    f"master list: tablet server {host} heartbeats {sorted(hb.masters)} (masters "
                    f"config index {hb.masters_config_index}); the committed masters are "
                    f"{sorted(want_set)} (index {r.committed_config_index})")


def _corruption(cause: str | None) -> bool:
    """Whether a FAILED replica's cause (`log_failure`'s "Type: message") is bytes on disk that
    are not what was written, as opposed to an I/O error, a full disk or a safety guard."""
    return bool(cause) and cause.split(":", 1)[0] in _corruption_types()


@functools.cache
def _corruption_types() -> frozenset[str]:
    """CorruptionError and its subclasses by name (all imported by the time a server runs)."""
    from node.errors import CorruptionError

    def names(cls: type) -> set[str]:
        return {cls.__name__}.union(*(names(c) for c in cls.__subclasses__()))

    return frozenset(names(CorruptionError))


class _Durable:
    """A SimDisk read as a power loss that kept nothing unsynced would leave it."""

    def __init__(self, data: bytes):
        self.data = data

    def read(self, path, offset: int = 0, length: int = -1) -> bytes:
        return self.data


def _hard_state(path: str, data: bytes | None) -> tuple[int, str | None] | None:
    """(term, voted for) of a consensus metadata file's bytes; None if there are none or they
    do not read (a record a failed write left torn is refused at start-up, loudly)."""
    from node.errors import CorruptionError
    from node.tablet.cmeta import ConsensusMetadata

    if data is None:
        return None
    try:
        cmeta = ConsensusMetadata.load(path, _Durable(data))  # type: ignore[arg-type]
    except CorruptionError:
        return None
    return cmeta.current_term, cmeta.voted_for


def _check_entries(host: str, tablets) -> None:
    """Each tablet's state in the tablet manager is the state of what it holds, whenever no
    transition holds its lock: a RUNNING entry's replica is not stopped, and a COPYING entry's
    copy is still under way. A transition cancelled halfway (its RPC handler cancelled at the
    caller's deadline or on a closed connection, or a copy's cleanup cancelled by a delete)
    leaves a stopped replica listed RUNNING, reported to the master and never replaced, or a
    tablet COPYING for ever that refuses every later copy and delete; the disk meanwhile says
    TOMBSTONED. Servers crash without a stop here, so a stopped replica is never a shutdown's."""
    if tablets is None:  # a master, or a tablet server not started far enough
        return
    for tablet, e in tablets.entries.items():
        if tablets.transition(tablet).locked():
            continue
        stored = e.stored.name
        if stored == "RUNNING" and e.replica is not None and e.replica.stopping:
            raise StackViolation(f"tablet state: {tablet} on {host} is listed RUNNING, but its "
                                 "replica is stopped (a transition ended halfway)")
        if stored == "COPYING" and (e.copy is None or e.copy.done()):
            raise StackViolation(f"tablet state: {tablet} on {host} is listed COPYING, but no "
                                 "copy is under way (a copy's cleanup ended halfway)")


def _config_went_back(host: str, tablet: str, r) -> str | None:
    """Why the committed config a replica's consensus metadata holds is older than the one the
    replica counts as saved (MetadataSaves.saved_config_index), which is what lets its
    snapshots pass the config's entry; None if it is not. A save of an older config that ran
    after a newer one's wrote over it (harness.sim.stack_config_race): a restart after such a
    snapshot ran the older membership. Caught here when the file goes back, before a snapshot
    and a restart show it (`Invariants._check_config_kept`); the caller excuses a disk damaged
    on purpose."""
    saves, cmeta = getattr(r, "saves", None), getattr(r, "cmeta", None)
    if saves is None or cmeta is None or r.failed:
        return None
    held = _config_index(cmeta.committed_config)
    if held >= saves.saved_config_index:
        return None
    return (f"config saved: tablet {tablet} on {host} (replica {r.uuid}) holds committed config "
            f"{held} in its consensus metadata, behind config {saves.saved_config_index} it "
            f"counts as saved")


@functools.lru_cache(maxsize=256)
def _config_index(blob: bytes) -> int:
    """The index of the committed config a consensus metadata file holds (its encoding)."""
    from node.consensus import decode_config

    return decode_config(blob).opid_index


def _replica(server, tablet: str):
    """`server.replicas.get(tablet)` (None for no server, or one not started far enough),
    without building the dict of all its replicas: this runs for every message sent."""
    tablets = getattr(server, "tablets", None)
    if tablets is None:  # not started far enough, or a test's stand-in
        return getattr(server, "replicas", {}).get(tablet)
    return tablets.replica(tablet)


def _check_config_logged(host: str, tablet: str, r) -> None:
    """A replica's committed config has its entry in the replica's log (or below its
    snapshot). A copy's source pins its WAL with the entry synced (node.replica.copy_pins): a
    receiver sent a committed config its log lacks would serve a config it cannot replay, and,
    a leader, replicate a log without it."""
    log = r.core.log
    index = r.core.committed_config.opid_index
    if index > max(log.last_index(), log.offset):
        raise StackViolation(f"config logged: tablet {tablet} on {host} (replica {r.uuid}) "
                             f"has committed config {index}, beyond its log's end "
                             f"{log.last_index()} and snapshot {log.offset}")


def _opened_at(r, logged: tuple[int, int]) -> tuple[int, int]:
    """(term, index) a replica's log ended at when it opened: the last entry it recovered from
    its WAL (after a restart, or a copy's), as the first look may come after a leader truncated
    an uncommitted suffix of it, which a replica may do within its own life; `logged` (its
    position now) for a replica that recovered no entry."""
    recovered = getattr(getattr(r, "wal", None), "recovered", None)
    return (recovered[-1].term, recovered[-1].index) if recovered else logged


def _logged(r) -> tuple[int, int]:
    """(term, index) of the last op `r` has handed to its WAL (the log's stable prefix): a
    vote may not go to a log behind it, not even after a crash, a tombstone or a copy."""
    log = r.core.log
    index = max(log.stable, log.offset)
    return log.term_at(index) or 0, index
