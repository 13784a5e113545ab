"""Code probes: named marks on the engine's rare branches, so a run can say which of them it
reached and, as important, which it never did (FoundationDB's CODE_PROBE, TigerBeetle's
coverage marks). Two reviews in a row proved bugs on paths no run had walked; a probe no run
hits is itself a finding.

A site calls `probe("name")` on the branch it marks; every name is declared once, with a
one-line description, in CATALOG (tests/test_probes.py fails on a name declared twice, placed
twice, placed but not declared, or declared and never placed; `tessera probes` lists them).

Off, a probe is one global load and one compare: `_hits` is None. A process that wants them
calls `enable()`: the simulators for each seed (then `hits()`), a daemon given
`--probes-file` (which then appends each probe's name to that file the first time it fires, so
a server killed with SIGKILL has already said where it has been); `counting()` counts in a
block: a chaos run's client (the harness's own process), a test that asserts its path was
taken (`expect`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import IO

# name -> what it marks, one line. Names are dotted: the area, then the branch. One literal, so
# tests/test_probes.py can read it (a key written twice would silently keep the second).
CATALOG: dict[str, str] = {
    # --- raft: the consensus core (node/consensus) ---
    "raft.prevote.started":
        "a replica starts a pre-vote for the next term (its election timer fired, or asked to)",
    "raft.prevote.won":
        "a pre-vote won a majority: the replica now campaigns for real in a new term",
    "raft.prevote.lost":
        "a pre-vote was refused by a majority: the replica stays a follower in its term",
    "raft.election.started":
        "a real election started: the term is incremented and the replica votes for itself",
    "raft.election.won": "an election won a majority of votes: the candidate becomes leader",
    "raft.election.lost":
        "an election was refused by a majority: the candidate steps back to follower",
    "raft.election.timed_out":
        "a (pre-)candidate's election timed out undecided; it campaigns again, backed off",
    "raft.vote.granted":
        "a real vote was granted (and is persisted with the term before it is sent)",
    "raft.vote.refused_log_behind":
        "a (pre-)vote was refused: the candidate's last op is behind ours",
    "raft.vote.refused_voted_or_following":
        "a (pre-)vote was refused: we voted for another, or follow a live leader",
    "raft.vote.refused_stale_term": "a (pre-)vote request of an older term than ours was refused",
    "raft.vote.withheld_in_lease":
        "a (pre-)vote was withheld: a leader was heard (or we restarted) within the vote lease",
    "raft.step.misaddressed":
        "a Raft message addressed to another replica arrived here and was dropped",
    "raft.step.stale_answer_dropped_in_lease":
        "a follower within its vote lease dropped a late higher-term answer: it keeps withholding",
    "raft.stale_leader.told_newer_term":
        "an append or heartbeat from a deposed leader's older term: it is told our term",
    "raft.leader.stepped_down_higher_term":
        "a leader saw a message of a higher term and stepped down to follower",
    "raft.term.adopted_from_message":
        "a non-leader adopted a higher term from a message (a new leader or a lost election)",
    "raft.leader.stepped_down_lost_quorum":
        "check-quorum: a leader heard from no majority for an election timeout and stepped down",
    "raft.leader.step_down_requested":
        "a leader gave up leadership on request, with no successor named",
    "raft.transfer.started":
        "a leadership transfer started: proposals are refused until the target takes over",
    "raft.transfer.timed_out":
        "a leadership transfer was abandoned: the target did not take over in an election timeout",
    "raft.transfer.timeout_now_campaign":
        "TimeoutNow arrived: this voter campaigns at once, past vote withholding",
    "raft.propose.refused_not_leader":
        "a proposal (write, config change, read index) reached a replica that does not lead",
    "raft.propose.refused_transferring":
        "a proposal was refused: the leader is transferring leadership",
    "raft.propose.too_large":
        "a proposal no AppendEntries could carry was refused before it was appended (TOO_LARGE)",
    "raft.config_change.cas_mismatch":
        "a config change was refused: its cas_config_index is not the committed config's",
    "raft.config_change.refused_pending":
        "a config change was refused: another change is not committed yet",
    "raft.config_change.refused_no_commit_in_term":
        "a config change was refused: the leader has committed no entry of its term",
    "raft.config_change.refused_unsafe_removal":
        "a removal was refused (SafeToEvict): the remaining voters could not commit",
    "raft.config_change.leader_removes_itself":
        "the leader was asked to remove itself: it hands leadership over (SteppingDown)",
    "raft.unsafe_change.refused_leader":
        "an unsafe (operator's) config change was refused: this replica leads",
    "raft.unsafe_change.appended":
        "an unsafe config change of the surviving voters was appended (UnsafeChangeConfig)",
    "raft.learner.promoted": "the leader proposes promoting a caught-up NON_VOTER to VOTER",
    "raft.config.committed": "a config change's entry committed: it becomes the committed config",
    "raft.config.rolled_back": "a pending config change was rolled back with its truncated entry",
    "raft.commit.prior_term_entries":
        "a leader's commit passed entries of earlier terms, carried by one of its own term (5.4.2)",
    "raft.commit.before_own_write":
        "a leader committed entries its own background write had not made durable yet: its "
        "followers alone were a majority",
    "raft.persisted.stale_report":
        "a background write's durability report came after a newer one, or after a new leader "
        "replaced the entry it names: ignored",
    "raft.follower.append_below_commit":
        "a follower got an append before its commit index (stale or duplicate): acked at commit",
    "raft.follower.append_rejected_mismatch":
        "a follower refused an append whose previous op it does not hold; it sends a hint",
    "raft.follower.truncated_conflict":
        "a follower truncated a conflicting uncommitted suffix to take the leader's entries",
    "raft.safety.conflict_below_commit":
        "SafetyError: a leader's entry conflicts with one at or below our commit index",
    "raft.leader.follower_lost_acknowledged":
        "a follower refused an append at an index it had acknowledged: it lost entries",
    "raft.leader.stale_reject_below_match":
        "a refusal at or below a peer's match answered an append sent before its ack: ignored",
    "raft.leader.peer_needs_copy":
        "a peer's next entry is compacted away: only a tablet copy can catch it up",
    "raft.leader.removed_member_told":
        "a removed member answered that it committed its removal: the leader stops telling it",
    "raft.leader.removed_member_silent":
        "a removed member answered nothing for an election timeout: the leader stops telling it",
    "raft.leader.removed_member_campaigned":
        "a member of neither config asked the leader for a vote: told of its removal from then on",
    "raft.leader.commit_told_at_tick":
        "a commit index no append carried yet went to an idle peer at the next tick",
    "raft.leader.progress_reset_by_copy":
        "a tablet copy installed on a peer: the leader restarts its progress from the copy",
    "raft.copy_installed.ignored":
        "a finished copy's progress reset was ignored: the term changed or the peer is not tracked",
    "raft.read_index.waits_for_term_commit":
        "a ReadIndex request waits: the new leader has not committed an entry of its term",
    "raft.read_index.round_sent":
        "a heartbeat round was sent to confirm leadership for pending reads (ReadIndex)",
    "raft.read_index.confirmed_by_config_change":
        "a removal made the acknowledgements pending reads already had a quorum: released then",
    # --- read: linearizable reads and the leader lease (node/replica/read_only.py) ---
    "read.lease.granted":
        "a leader lease was granted for a new term from a round a quorum acknowledged",
    "read.lease.not_granted":
        "a confirmed round granted no lease: it was of an earlier term, or a transfer started",
    "read.refused_not_leader":
        "a ReadIndex group was refused: the replica was not the leader when it was handed over",
    "read.failed_leadership_lost": "reads waiting on a ReadIndex round failed: leadership was lost",
    # --- replica: the driver (node/replica/replica.py) ---
    "replica.bootstrap.wal_base_past_snapshot":
        "bootstrap refused a WAL whose oldest segment began past the snapshot: segments lost",
    "replica.bootstrap.uncommitted_entries_pending":
        "bootstrap found WAL entries past the snapshot, not known committed: pending",
    "replica.commit_wait.waited":
        "a write's answer waited out commit-wait: the clock minus its max error was not past it",
    "replica.write.client_propagated":
        "a CLIENT_PROPAGATED write was answered once applied, with no commit-wait",
    "replica.write.group_modes_mixed":
        "a Group entry held writes of both modes: the CLIENT_PROPAGATED ones answered first",
    "tserver.write.propagated_too_far_ahead":
        "a write was refused: the timestamp its client propagated is an hour ahead of our clock",
    "replica.clock.propagated_ahead":
        "a write's propagated timestamp was ahead of every one the leader's clock had issued",
    "replica.cmeta.older_config_not_saved":
        "a committed config saved behind ran after a newer one's save: not written over it",
    "replica.snapshot.skipped_failed":
        "a snapshot due before the replica FAILED was not saved: its files stay as they were",
    "replica.snapshot.waits_for_config_save":
        "a snapshot waited: a committed config it would cover is not in the consensus metadata "
        "yet",
    "replica.snapshot.due_to_bytes":
        "a snapshot was taken because the entries applied since the last passed its MiB bound",
    "replica.log.retention_bounded_by_bytes":
        "a snapshot kept fewer entries than log_retain_entries: their payloads passed its MiB bound",
    "replica.wal.write_held":
        "a Ready's write found the WAL's queue full: held in order, the driver went on",
    "replica.wal.held_write_failed":
        "the WAL failed under writes held for its queue: each failed, and the driver parked on",
    "replica.proposal.parked":
        "a replica parked the writes it was handed while its own waited for the WAL's queue",
    "replica.inbox.refused_unrun":
        "a replica stopped or failed: a request it never ran was refused, not left to time out",
    "replica.leader_gate.waiter_refused":
        "a request waiting for a new leader's own entry was refused when it stopped leading",
    "replica.failed.while_running":
        "a running replica failed (an fsync, a safety check): it is FAILED and stops serving",
    # --- wal: the write-ahead log (node/wal) ---
    "wal.recover.torn_tail_cut":
        "bootstrap cut a torn tail (non-zero bytes) off the newest unfinished segment",
    "wal.recover.unfinished_segment_closed":
        "bootstrap gave the newest unfinished segment a footer where its good data ends",
    "wal.recover.empty_unfinished_segment_removed":
        "bootstrap removed a newest unfinished segment that held no batch",
    "wal.recover.unfinished_undamaged":
        "the newest segment has no footer but no damage either (a crash between writes)",
    "wal.recover.tmp_segment_found":
        "bootstrap found a temporary segment file of a roll a crash interrupted",
    "wal.recover.footer_segment_damaged_refused":
        "refused: a finished segment (with a footer) has a damaged batch",
    "wal.recover.footer_mismatch_refused":
        "refused: a segment's footer disagrees with the batches it holds",
    "wal.recover.cut_short_refused":
        "refused: a footerless segment shorter than its preallocation was cut short, not torn",
    "wal.recover.unfinished_not_newest_refused":
        "refused: a segment without a footer that is not the newest",
    "wal.recover.crcs_match_refused":
        "refused: a batch whose CRCs match is unreadable (written so, not torn)",
    "wal.recover.intact_batch_after_damage_refused":
        "refused: an intact batch follows the damage, so it is not a torn tail",
    "wal.recover.written_whole_refused":
        "refused: the damaged newest batch was written whole (stamps or flipped header)",
    "wal.recover.sequence_gap_refused": "refused: the segment sequence numbers have a gap",
    "wal.recover.wrong_tablet_refused": "refused: a segment header names another tablet",
    "wal.header.corrupt_refused":
        "refused: a segment header is unreadable (magic, version, length or CRC)",
    "wal.scan.footer_damaged": "a segment's footer magic is there but its CRC fails",
    "wal.scan.flipped_header":
        "a batch header failing its CRC is one or two bits from a valid one: flipped, not torn",
    "wal.scan.crc_mismatch_written_whole":
        "a batch's data CRC fails though every sector stamp reads written: corruption",
    "wal.scan.crc_mismatch_unwritten_sector":
        "a batch's data CRC fails and a sector reads unwritten: a torn write",
    "wal.scan.undecodable_batch": "a batch whose CRCs match does not decode",
    "wal.replay.truncation_applied":
        "replay applied a TRUNCATE record: a divergent tail replaced by a later leader's",
    "wal.replay.bad_truncation_refused": "refused: a truncation record points past the last index",
    "wal.replay.index_gap_refused": "refused: entry indexes skip in the log",
    "wal.truncate_suffix.reserved":
        "the log reserved a suffix truncation (a conflicting uncommitted tail replaced)",
    "wal.queue.backpressure_waited":
        "an append waited for the WAL queue to drain below its byte bound",
    "wal.append.refused_failed":
        "an append was refused: an earlier write or sync failed, the log is failed",
    "wal.write.failed":
        "a group write or sync failed: the log is failed for good (a failed fsync is not retried)",
    "wal.write.short_write_completed":
        "a vectored write came back short and was completed with a plain write",
    "wal.segment.preallocate_started":
        "the active segment passed its size: the next one is preallocated",
    "wal.segment.preallocate_failed":
        "creating the next segment failed: the next group's write fails the log",
    "wal.segment.rolled": "the log rolled: the old segment got its footer and the new one its name",
    "wal.gc.segments_deleted": "log GC deleted closed segments below every anchor",
    "wal.gc.segment_already_gone":
        "log GC found a segment it would delete gone from disk already: taken as deleted",
    "wal.close.failed_segment_left":
        "a failed log was closed without a footer: bootstrap judges the segment",
    "wal.copy.preallocation_restored":
        "a segment received by tablet copy was given back its preallocated length",
    # --- durable: checksummed files (node/durable.py) ---
    "durable.corrupt.truncated_header":
        "a durable file is shorter than its envelope header: CorruptionError",
    "durable.corrupt.bad_magic": "a durable file's magic is wrong: CorruptionError",
    "durable.corrupt.header_checksum": "a durable file's header checksum fails: CorruptionError",
    "durable.corrupt.truncated_payload":
        "a durable file is shorter than its envelope says: CorruptionError",
    "durable.corrupt.payload_checksum": "a durable file's payload checksum fails: CorruptionError",
    "durable.corrupt.wrong_shape":
        "a verified payload does not decode as the expected type: CorruptionError",
    "durable.write.failed_temp_removed":
        "an atomic write failed part-way: its temporary file was removed",
    # --- cmeta and superblock (node/tablet/cmeta.py, superblock.py) ---
    "cmeta.load.wrong_tablet": "consensus metadata holds another tablet's record: CorruptionError",
    "cmeta.refused.term_regression": "SafetyError: a save would take the durable term backwards",
    "cmeta.refused.second_vote":
        "SafetyError: a save would change the vote already cast in the term",
    "cmeta.create.refused_exists":
        "creating consensus metadata over an existing file was refused (amnesia)",
    "superblock.load.wrong_tablet": "a superblock holds another tablet's record: CorruptionError",
    "superblock.transition.refused":
        "a data-state transition outside the tablet-copy seed's was refused",
    "superblock.tombstone.refused_no_last_op":
        "tombstoning a READY replica without its last logged OpId was refused",
    # --- tablet: snapshots, the state machine, the tablet manager ---
    "tablet.snapshot.saved": "a snapshot of the state machine was written durably",
    "tablet.snapshot.older_deleted":
        "an older snapshot, not pinned by a copy, was deleted after a newer one",
    "tablet.snapshot.loaded": "bootstrap found a snapshot and loads the state from it",
    "tablet.snapshot.wrong_contents_refused":
        "the newest snapshot holds another tablet or index: CorruptionError",
    "tablet.session.no_session":
        "a session op found no such session (NO_SESSION): evicted or never opened",
    "tablet.session.not_owner":
        "a session op came from another identity than the session's owner (NOT_OWNER)",
    "tablet.session.stale_seq": "a retried seq whose result is forgotten got STALE_SEQ",
    "tablet.session.evicted_lru":
        "opening a session evicted the least recently used one (max_sessions)",
    "tablet.session.evicted_own_oldest":
        "an owner past its session bound lost its own least recently used session",
    "tablet.session.results_over_bound_forgotten":
        "a session kept more results than its bound: the oldest were forgotten",
    "tablet.dedup.retry_answered":
        "a retried seq was answered with its first result, not applied again",
    "tablet.batch.row_by_row":
        "a batch that is a retry (or out of order) was applied row by row, with dedup",
    "tablet.group.member_by_member":
        "a group of single writes left the one-pass path: applied member by member",
    "tablet.open.unfinished_copy_tombstoned":
        "start-up found a COPYING superblock: the unfinished copy is tombstoned",
    "tools.delete.unfinished_copy_tombstoned":
        "the offline delete tool found a replica stopped mid-copy: tombstoned as start-up does",
    "tools.master_add.already_member":
        "master add found its new master a member already: a lost answer's add, asked again, was done",
    "tools.master_remove.already_gone":
        "master remove found the member gone when asked: a lost answer's removal was done",
    "tablet.open.tombstone":
        "start-up found a tombstoned replica: it votes from its metadata and last OpId",
    "tablet.failed.at_open":
        "a replica could not be opened (corrupt or unreadable files): marked FAILED",
    "tablet.failed.forgotten":
        "a FAILED replica was deleted: forgotten, its files left for an operator",
    "tablet.failed.last_op_remembered":
        "a FAILED replica that ran was forgotten: its last logged OpId is kept for the next copy",
    "tablet.failed.stop_failed":
        "a FAILED replica being forgotten failed again as it stopped (its WAL close): forgotten anyway",
    "tablet.create.refused_tombstone":
        "creating a replica over a tombstone (or a copy) was refused: ALREADY_EXISTS",
    "tablet.create.refused_failed_files":
        "creating a replica was refused: a forgotten FAILED replica's files are there",
    "tablet.delete.copy_aborted": "a delete aborted a tablet copy under way",
    "tablet.delete.cas_refused_while_copying":
        "a delete with cas_config_index was refused: a copy is installing the replica's config",
    "tablet.delete.cas_refused":
        "a delete was refused: the replica's committed config is newer than its cas_config_index",
    "tablet.tombstoned": "a running replica was stopped and tombstoned with its last logged OpId",
    "tablet.tombstone.write_failed":
        "a replica being tombstoned could not close its files or write the tombstone (a full "
        "or failing disk): it is FAILED",
    # --- tombstone: votes answered from a tombstone (Kudu's tablet-copy design) ---
    "tombstone.vote.withheld_in_lease":
        "a tombstoned replica withheld votes: it stopped within a vote lease",
    "tombstone.vote.copy_finished_meanwhile":
        "votes for a tombstone went to the replica a copy just installed",
    "tombstone.vote.no_metadata":
        "a copy onto a new replica has no metadata yet: its votes go unanswered",
    "tombstone.vote.refused_unknown_last_op":
        "a tombstone whose last OpId is unknown refused every vote",
    "tombstone.vote.refused_corrupt_metadata":
        "a tombstone whose consensus metadata does not read sent no answer to a vote request",
    "tombstone.vote.refused_stale_term": "a tombstone refused a vote request of an older term",
    "tombstone.vote.granted":
        "a tombstoned or copying replica granted a real vote (persisted before it is sent)",
    # --- copy: tablet copy, both ends (node/tserver/copy*, node/replica/copy_pins.py) ---
    "copy.trigger.peer_refused_raft":
        "a peer answered Raft with no replica or a tombstone: the leader will copy to it",
    "copy.trigger.sent": "the leader sent StartTabletCopy to a peer",
    "copy.trigger.failed": "a StartTabletCopy the leader sent failed or was refused",
    "copy.refused.in_progress": "StartTabletCopy refused: a copy of the tablet is in progress here",
    "copy.refused.failed_replica": "StartTabletCopy refused: the replica here is FAILED",
    "copy.refused.state_mismatch":
        "StartTabletCopy refused: the replica is not in the state the caller expects",
    "copy.refused.stale_term": "StartTabletCopy refused: the caller's term is older than ours",
    "copy.refused.votes_lost":
        "StartTabletCopy refused: the consensus metadata here does not read, or is gone while "
        "the replica's superblock remains (its votes are lost)",
    "copy.refused.log_without_metadata":
        "StartTabletCopy refused: consensus metadata and superblock gone, a WAL or snapshot left",
    "copy.refused.not_behind":
        "StartTabletCopy refused: the running replica can still be caught up (REPLICA_NOT_BEHIND)",
    "copy.over_failed_running_replica":
        "a copy may replace a running replica that failed: it cannot be caught up",
    "copy.running_replica_tombstoned": "a running replica really behind was tombstoned for a copy",
    "copy.started": "a tablet copy passed its guards: the replica is COPYING",
    "copy.prepare.over_existing_files":
        "a copy starts over existing files (a tombstone, or a forgotten replica's)",
    "copy.prepare.new_replica": "a copy starts onto a tablet that never had files here",
    "copy.prepare.superblock_lost":
        "a copy starts where the superblock is gone but metadata or log remain",
    "copy.prepare.lost_superblocks_log_read":
        "a copy over a lost superblock starts from the last OpId the replica's own log holds",
    "copy.prepare.lost_superblocks_log_unreadable":
        "a copy over a lost superblock whose log does not read: last OpId unknown (no votes)",
    "copy.prepare.forgotten_replicas_last_op":
        "a copy over a forgotten FAILED replica starts from the last OpId it knew while running",
    "copy.prepare.over_unreadable_superblock":
        "a copy starts over a forgotten replica's files whose superblock does not read",
    "copy.merge.cmeta_created": "a copy created consensus metadata where there was none",
    "copy.fetch.bad_chunk": "a fetched chunk had the wrong offset, length or CRC: asked again",
    "copy.fetch.retrying": "a chunk fetch failed in transit: asked again from the same offset",
    "copy.fetch.stalled_gave_up": "a copy gave up: nothing arrived for the stall limit",
    "copy.fetch.resumed": "a chunk fetch succeeded after failed attempts: the copy resumed",
    "copy.install.completed":
        "all copied files are in: the superblock says READY, naming the source",
    "copy.install.open_failed": "the copied files did not open: the replica is FAILED",
    "copy.install.failed_open_keeps_last_op":
        "copied files that did not open are kept READY with the last OpId the copy started from",
    "copy.refused.last_op_unknown_voter":
        "a copy onto a voter whose last op nothing says (superblock lost or damaged over a log "
        "that does not read): refused, the replica FAILED for the masters to replace",
    "copy.refused.behind_tombstone":
        "the copied log ended behind the tombstone's last OpId: refused, it stays a tombstone",
    "copy.failed": "a tablet copy failed part-way (or was cancelled): it is abandoned",
    "copy.abandoned.tombstoned": "an abandoned copy had written files: the tablet is a tombstone",
    "copy.abandon.failed":
        "an abandoned copy's cleanup failed (a full or failing disk): the tablet is FAILED",
    "copy.abandoned.state_restored":
        "an abandoned copy had written nothing: the tablet is back in its prior state",
    "copy.aborted_by_delete":
        "a copy was aborted by a delete that raced it; the caller hears ILLEGAL_STATE",
    "copy.finished": "a tablet copy finished and the replica runs on the copied files",
    "copy.source.session_begun": "a copy source session began: snapshot and WAL pinned",
    "copy.source.session_superseded":
        "a receiver began a new session: its old one on the tablet was ended",
    "copy.source.pin_refused":
        "a copy source refused a session: the replica could not pin its files",
    "copy.source.session_expired": "a copy source session idle past its timeout was ended",
    "copy.source.no_session":
        "a fetch named no live copy session (ended, expired, or the source restarted)",
    "copy.source.short_read": "a pinned copy file read short: damage, refused",
    "copy.source.snapshot_damaged": "a snapshot a copy would send is cut or its header damaged: refused",
    "copy.source.superblock_unreadable":
        "the copy source's superblock is gone or damaged on disk: the session refused",
    "copy.source.replica_gone":
        "a copy fetch found the session's replica deleted or copied over: the session ended",
    "copy.source.pinned_file_missing":
        "a pinned copy file of a replica still running was missing: damage, refused",
    "copy.pins.refused_failed": "pinning for a copy was refused: the source replica is FAILED",
    "copy.pins.waited_for_config_entry":
        "pinning waited for the committed config's entry to be synced in the WAL",
    "copy.pins.config_entry_not_synced":
        "pinning gave up: the committed config's entry never reached the synced WAL",
    "copy.pins.wal_starts_after_snapshot":
        "pinning refused: the WAL starts after the snapshot (a gap)",
    "copy.pins.wal_segment_missing":
        "pinning refused: a segment of the log the copy would send is gone from disk",
    # --- tserver: the tablet server's services ---
    "tserver.request.refused_failed":
        "a request for a FAILED replica was refused (TABLET_NOT_RUNNING)",
    "tserver.consensus.refused_failed": "Raft messages to a FAILED replica were refused",
    "tserver.consensus.refused_not_running":
        "Raft messages to a missing, tombstoned or copying replica were refused",
    "tserver.reply.too_large": "a write was answered TOO_LARGE: refused before it was proposed",
    "tserver.reply.maybe_applied":
        "a write was answered REMOTE_ERROR: it may have applied (the replica stopped or failed)",
    "tserver.reply.not_leader_hint":
        "a request was answered NOT_LEADER with the leader's uuid as a hint",
    "tserver.reply.not_leader_no_hint": "a request was answered NOT_LEADER with no leader known",
    "tserver.write.not_ready_awaited":
        "a write reached a replica not ready for writes: it takes the awaited path",
    "tserver.write_batch.refused_invalid":
        "a write batch was refused unproposed (empty, or over the session's bound)",
    "tserver.change_config.leader_removed":
        "a config change removed the leader: NOT_LEADER, leadership handed over",
    "tserver.masters.adopted":
        "a tablet server adopted a newer committed master list from a heartbeat",
    "tserver.masters.adopted_without_leader":
        "a tablet server adopted a master list from followers: no master it heartbeats leads",
    "tserver.heartbeat.beat_failed":
        "a heartbeat failed with an unexpected error (saving the peer book): the next one retries",
    # --- master: the catalog and its reconciler ---
    "master.bootstrap.join_existing":
        "a new master found its peers already have a catalog: it waits to be added",
    "master.bootstrap.member_awaits_copy":
        "a master with no catalog is listed in a config past the initial one: it awaits a copy",
    "master.bootstrap.catalog_arrived_by_copy":
        "an initial master, waiting for the others, was copied the catalog by one running it",
    "master.learn_addresses":
        "a master asks the others for the address of a catalog member it does not know",
    "master.info.member_address_unknown":
        "master.info lists a member by uuid only: this master has not learned its address yet",
    "master.heartbeat.masters_not_learned":
        "a master does not know every member's address yet: no master list sent",
    "master.removed.refused":
        "a master removed from the catalog's config refused a request (NOT_LEADER)",
    "master.membership.add": "the leader master adds a master to the catalog's config (AddMaster)",
    "master.membership.answer_not_confirmed":
        "a leader master could not confirm its leadership before answering a membership fact",
    "master.membership.remove":
        "the leader master removes a master from the catalog's config (RemoveMaster)",
    "master.membership.leader_hands_over":
        "removing the leader master: leadership is handed over first",
    "master.catalog.session_opened_in_new_term":
        "a leader master opened its catalog session in a new term",
    "master.create_table.retry_answered":
        "a CreateTable retry found the table its own first attempt made: answered with it",
    "master.change_replica.retry_waited_pending":
        "a retried replica change met a pending change or no leader: waited for a settled one",
    "master.change_replica.retry_already_made":
        "a retried replica change found the config already as asked: answered with it",
    "master.create_table.retry_found_dropped":
        "a CreateTable retry found its own first attempt's table dropped since: refused",
    "master.delete_table.retry_answered":
        "a DeleteTable retry found the table its own first attempt dropped: answered ok",
    "master.catalog.write_refused":
        "a catalog transaction was refused by the catalog's state machine",
    "master.catalog.unknown_tablet_kept":
        "a reported tablet has no catalog record (this master may lag): not deleted",
    "master.catalog.follows_config_change":
        "the catalog follows committed config changes its tablets' leaders report",
    "master.catalog.follow_waits_for_address":
        "a committed config names a server whose address is unknown: the catalog waits",
    "master.reconcile.delete_deleted_tablet":
        "the reconciler deletes a replica of a tablet whose record was deleted",
    "master.reconcile.delete_evicted_replica":
        "the reconciler deletes a replica the committed config left out (CAS guarded)",
    "master.reconcile.round_failed":
        "a reconcile round failed with an unexpected error (saving the peer book): the next retries",
    "master.reconcile.creation_left_to_leader":
        "a creation-config member lacks the tablet, which has had a leader: the leader copies it",
    "master.leader.lower_term_taken":
        "a lower-term leader report replaces a known leader that is not live or no longer leads",
    "master.ts.hearing_resumed":
        "a master hears a tablet server again after hearing none for three heartbeat periods",
    "master.rereplication.own_deafness_not_counted":
        "a member silent only while the master heard no server (cut off itself) is not replaced",
    "master.reconcile.recreate_replicas":
        "the reconciler re-creates replicas of a creation config never reported",
    "master.rereplication.silent_but_leader_hears":
        "re-replication left a member whose server is silent to this master alone: its tablet's "
        "leader hears it (a master cut off from some servers)",
    "master.rereplication.leader_report_stale":
        "re-replication skipped a tablet whose leader's server is silent past the limit: its "
        "report is as old, and no change goes through that leader",
    "master.rereplication.replace_silent":
        "a member's tablet server was silent past the limit: it is to be replaced",
    "master.rereplication.replace_unreachable_from_leader":
        "a member its tablet's leader has not heard past the limit, on a server this master "
        "hears whose replica reports RUNNING (a cut between tablet servers): it is to be replaced",
    "master.rereplication.unreachable_from_leader_not_running":
        "a member its tablet's leader has not heard past the limit is left to the leader: its "
        "server reports the replica COPYING, TOMBSTONED or not at all",
    "master.rereplication.replace_failed":
        "a member's replica reports FAILED: it is to be replaced at once",
    "master.rereplication.waits_for_promotion":
        "re-replication waits: a replacement NON_VOTER is still catching up",
    "master.rereplication.add_chosen": "re-replication adds a replacement on a spare live server",
    "master.rereplication.remove_chosen":
        "re-replication removes the failed member (enough healthy voters)",
    "master.rereplication.excess_voter_removed":
        "a healthy voter beyond the replication factor is removed (the replaced member came back)",
    "master.rereplication.maintenance_deferred":
        "re-replication left a failed or silent member alone: its tablet server is in maintenance",
    "master.rereplication.no_spare": "re-replication found no spare live server for a replacement",
    "master.rereplication.change_failed":
        "a re-replication change was refused or failed (a CAS guard, say)",
    "master.change_replica.leadership_moved":
        "a replica change found the tablet's leadership moved since the heartbeat",
    # --- client (node/client) ---
    "client.master.hint_unknown_learning":
        "a master said NOT_LEADER with no known leader: the client learns the masters",
    "client.change_replica.already_made":
        "a replica change failed only because the config already was as asked (a late answer)",
    "client.master.hint_followed":
        "a master said NOT_LEADER naming a known leader: the client follows the hint",
    "client.session.open_failed":
        "opening a client session had an unknown outcome: the op fails unsent",
    "client.retry.no_reply": "a replica did not answer (network, deadline): marked silent",
    "client.retry.not_leader_hint_followed":
        "NOT_LEADER with a hint to a known replica: the client goes there next",
    "client.retry.not_leader_unknown_leader":
        "NOT_LEADER naming a leader not in our locations: they are refreshed",
    "client.retry.tablet_moved":
        "a replica said the tablet is not there (or wrong server): locations refreshed",
    "client.retry.refused":
        "a replica refused the request (invalid, not authorized): no replica will differ",
    "client.retry.too_large":
        "a request was refused as too large: the op fails, or is unknown after an uncertain try",
    "client.retry.deadline_unknown":
        "an op's deadline passed after an attempt that may have applied: OpUnknown",
    "client.retry.deadline_failed":
        "an op's deadline passed with no attempt that may have applied: OpFailed",
    "client.retry.first_try_ended_at_deadline":
        "an op's first try, to the believed leader, failed at its deadline: no retry, and a "
        "try that may have applied makes the op unknown",
    "client.batch.coalesced_sent":
        "several writes issued in one loop turn went out as one ts.write_batch",
    "client.batch.split_after_too_large":
        "a coalesced batch was refused TOO_LARGE: each write is sent alone",
    "client.uncork.result_count_mismatch":
        "a coalesced batch came back with the wrong number of outcomes: all unknown",
    "client.answered.result_count_mismatch":
        "a batch answer held the wrong number of results: every op OpUnknown",
    "client.write.session_lost": "a write found its client session lost (NO_SESSION or STALE_SEQ)",
    "client.write.session_lost_unknown":
        "a write's session was lost after an uncertain attempt: OpUnknown",
    "client.write.session_reopened":
        "a write's session was lost before any attempt applied: a new one is opened",
    "client.write_batch.lost_session_unknown":
        "a write batch answered with lost-session rows: those ops are OpUnknown",
    "client.write_batch.session_reopened":
        "a write batch's session was gone before it applied: a new one is opened",
    "client.wrong_reply": "a reply did not answer the op's own request: WrongReply raised",
    "client.manual_flush.op_exceeds_buffer":
        "MANUAL_FLUSH: an op alone exceeds the buffer space: it fails unsent",
    "client.manual_flush.buffer_full_reflush":
        "MANUAL_FLUSH: apply hit BufferFull: flush, then apply again",
    "client.manual_flush.caller_cancelled":
        "MANUAL_FLUSH: a cancelled caller's op is dropped from its batch before send",
    "client.op.value_copied":
        "a write with a mutable value was copied as the Table handle took it: the caller may reuse its own",
    "client.session.buffer_full_ops":
        "MANUAL_FLUSH: apply refused, the tablet's buffer holds a full batch (BufferFull)",
    "client.session.buffer_full_bytes":
        "MANUAL_FLUSH: apply refused, the buffer space is used up (BufferFull)",
    "client.session.apply_closed_while_locating":
        "an apply looking up its tablet when the session closed was refused, not left unsent",
    "client.session.apply_waits_for_buffer":
        "AUTO_FLUSH_BACKGROUND: apply waits, every buffer of the tablet is in flight",
    "client.session.flush_count":
        "AUTO_FLUSH_BACKGROUND: a tablet's buffer was cut at its op count",
    "client.session.flush_bytes":
        "AUTO_FLUSH_BACKGROUND: the buffered bytes reached the watermark: all cut",
    "client.session.flush_interval":
        "AUTO_FLUSH_BACKGROUND: a buffer was cut by the flush interval",
    "client.session.cancelled_ops_dropped":
        "a batch dropped ops whose callers gave up before it was sent",
    "client.session.batch_unexpected_error":
        "a batch failed with an unexpected error: its ops are OpUnknown",
    # --- rpc: the RPC layer and the Raft outbox ---
    "rpc.client.too_large_refused": "a request over the frame limit was refused unsent (TOO_LARGE)",
    "rpc.client.too_large_refused_nowait":
        "a Raft request over the frame limit was refused unsent (TOO_LARGE)",
    "rpc.client.waited_for_room":
        "a call waited for room: the connection had max_inflight calls out",
    "rpc.client.peer_hung_up_with_reason":
        "a server's last word before it hung up (a frame over its limit, say)",
    "rpc.server.wrong_uuid": "a request for another server uuid was refused (WRONG_SERVER_UUID)",
    "rpc.server.handler_deadline_exceeded":
        "a handler outran the call's deadline: DEADLINE_EXCEEDED answered",
    "rpc.server.direct_deadline_exceeded":
        "a direct handler did not answer within the call's deadline",
    "rpc.server.frame_too_large":
        "a frame over the server's limit: answered once, then the connection is closed",
    "rpc.server.refused_not_authorized":
        "a call was refused: the caller may not call the method (NOT_AUTHORIZED)",
    "rpc.drain.waited":
        "a connection's socket took no more bytes: its writer waited for room (back-pressure)",
    "rpc.server.backpressure_paused":
        "a connection with max_inflight requests out stops being read",
    "rpc.outbox.batch_split":
        "queued Raft messages over the frame budget were split into several RPCs",
    "rpc.outbox.unknown_peer_dropped": "Raft messages to a peer with no known address were dropped",
    "rpc.outbox.too_large_unsent": "a Raft message alone over the frame limit was not sent",
    "rpc.client.late_reply_taken":
        "a reply that came after its call's deadline was still taken (a Raft answer in it)",
    "rpc.client.reply_in_its_deadline_turn_taken":
        "a reply read in the loop turn its call's deadline fired was still taken as a late one",
    "rpc.client.late_reply_forgotten":
        "a connection kept too many expired calls' replies waiting; the oldest was forgotten",
    "rpc.outbox.late_reply_delivered":
        "Raft messages in the reply of a consensus RPC we had given up on reached our replica",
    "rpc.outbox.held_reply_replaced":
        "a consensus RPC came while we still held the reply of the one before it (its deadline)",
    "rpc.outbox.held_reply_dead_sent_as_rpc":
        "a held consensus reply's connection had closed: the answer left as an RPC instead",
    "rpc.outbox.held_reply_released_empty":
        "a held consensus reply went out with no answer in it after HOLD_S",
    "tserver.consensus.reply_for_a_replica_not_running":
        "messages a consensus reply carried took the awaited way: the replica does not run",
}

# name -> what it means: a branch no correct run takes, a client or engine bug the moment it
# is taken, whose only symptom is otherwise a caller waiting out its deadline (FoundationDB's
# SevError trace event, which fails a simulation). Raised with `alarm`, counted with the probes
# but never part of their coverage; the whole-stack simulator fails a seed that raised one.
ALARMS: dict[str, str] = {
    "client.session.batch_cancelled_in_flight":
        "a session's batch was cancelled in flight: its ops get no outcome, though the tablet "
        "may have applied them (a caller's cancellation reached it)",
    "client.session.op_buffered_after_close":
        "an op was buffered in a session already closed, whose close had returned saying "
        "every op was flushed: a program that ends after the close loses it, and in "
        "MANUAL_FLUSH nothing sends it unless someone flushes the closed session",
}

_hits: Counter | None = None  # None: off
_sink: IO[str] | None = None  # a daemon's --probes-file: each name on its first hit


def probe(name: str) -> None:
    """Mark that the branch `name` was taken (nothing, when probes are off)."""
    hits = _hits
    if hits is None:
        return
    if _sink is not None and name not in hits:
        _first(name)
    hits[name] += 1


def alarm(name: str) -> None:
    """Mark that the branch `name` of ALARMS was taken: a bug (nothing, when probes are off)."""
    probe(name)


def _first(name: str) -> None:
    try:
        _sink.write(name + "\n")
        _sink.flush()
    except (OSError, ValueError):  # a full disk or a closed file loses the mark, not the server
        pass


def enable(sink: IO[str] | None = None) -> None:
    """Count hits from now on, from zero; with `sink`, write each probe's name to it on its
    first hit."""
    global _hits, _sink
    _hits, _sink = Counter(), sink


def disable() -> None:
    global _hits, _sink
    _hits, _sink = None, None


def hits() -> dict[str, int]:
    """Probe name -> times hit since `enable` ({} when off); alarms apart (`alarms`)."""
    return {k: n for k, n in _hits.items() if k not in ALARMS} if _hits is not None else {}


def alarms() -> dict[str, int]:
    """Alarm name -> times raised since `enable` ({} when off, or none raised)."""
    return {k: n for k, n in _hits.items() if k in ALARMS} if _hits is not None else {}


@contextlib.contextmanager
def counting() -> Iterator[Counter]:
    """Counts from zero inside the block, whatever counted before, and restores the state it
    found: a chaos run's client in the harness's process, a test's coverage mark."""
    global _hits, _sink
    saved = (_hits, _sink)
    _hits, _sink = Counter(), None
    try:
        yield _hits
    finally:
        _hits, _sink = saved


@contextlib.contextmanager
def expect(*names: str) -> Iterator[Counter]:
    """A test's coverage mark: the block must hit each of `names`, or AssertionError names the
    ones it missed."""
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise KeyError(f"no such probe: {', '.join(unknown)}")
    with counting() as counted:
        yield counted
        missed = [n for n in names if not counted[n]]
        assert not missed, f"the path was not taken: probe {', '.join(missed)} never fired"


def summarize(runs: list[dict[str, int]]) -> dict:
    """Hits of many runs (each a `hits()`): {"declared", "hit", "percent", "never": names no
    run hit, "runs": name -> runs that hit it}. What every report of probes prints."""
    runs_hitting = {name: sum(1 for r in runs if r.get(name)) for name in CATALOG}
    hit = sorted(n for n, k in runs_hitting.items() if k)
    return {"declared": len(CATALOG), "hit": len(hit),
            "percent": round(100 * len(hit) / len(CATALOG), 1) if CATALOG else 0.0,
            "never": sorted(n for n, k in runs_hitting.items() if not k),
            "runs": {n: runs_hitting[n] for n in hit}}


def line(summary: dict, width: int = 8) -> str:
    """One line of a summary: 'probes: 71 of 85 hit (83.5 %); never: a, b, ... (+N)'."""
    never = summary["never"]
    shown = ", ".join(never[:width]) + (f", ... (+{len(never) - width})" if len(never) > width
                                        else "")
    return (f"probes: {summary['hit']} of {summary['declared']} hit ({summary['percent']:g} %)"
            + (f"; never: {shown}" if never else ""))
