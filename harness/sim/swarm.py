"""Swarm testing for the whole-stack simulator: each seed draws its own fault mix.

A fixed mix spreads a seed's faults thinly over every kind, so an interleaving that needs two
particular faults close together (a link cut between a leader and one follower while another
follower is tombstoned and copied) is rare in every seed. TigerBeetle's VOPR and Groce et al.'s
swarm testing draw instead, per seed, which faults are on at all, how often each fires, how often
faults come, and here also the read mode and how the workers write: most seeds then hammer a
few kinds, and across seeds every combination gets its turn (Groce et al. found most bugs with a
few features on per run). The mix is a pure function of the seed (its own random stream, not the
run's), so a seed replays with the same mix, and the mix is printed before the run.

`CLASSIC` is the mix every seed used before (and still does with `--mix classic`): the
recorded seeds of the tests and the mutant table were found with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from harness.systems.tessera.clients import MIXED
from workloads.base import WRITE_MODES

# The whole-stack simulator's workloads (harness.sim.stack.StackSim._workload).
WORKLOADS = ("register", "list-append")

# Every fault kind the simulator's nemesis knows (harness.sim.stack_faults.FaultChooser.choose).
KINDS = ("crash", "power", "restart", "partition", "isolate", "heal", "reset", "skew",
         "membership", "flip", "disk", "transfer", "cut", "tombstone", "copy-race", "lease-race", "masters",
         "drift", "flip-newest", "fail-copy", "torn", "delay", "damage", "reprovision", "full",
         "damage-file", "copy-cut", "master-swap", "unsafe", "ddl", "maintenance", "forge",
         "garble", "copy-shrink", "recopy", "copy-behind", "kill", "copy-delete", "lose",
         "ddl-retry", "change-retry", "tombstone-rot", "lose-snapshot", "dying-disk",
         "overtake", "swap-book", "superblock-behind", "config-race", "failed-behind",
         "master-cut", "server-cut")
# Kinds a seed draws only in a bundle (BUNDLES), never on their own: a kind added to the
# optional ones or to LATE would change many recorded seeds' mixes. recopy: an operator's
# `kudu remote_replica copy` over a running replica, or from a FAILED one
# (harness.sim.stack_recopy). copy-delete: a replica deleted while a copy onto it is under way
# (harness.sim.stack_copy_delete). lose: a file of a running tablet server loses its name
# (harness.sim.stack_lose). tombstone-rot: a tombstone still a voter whose consensus metadata a
# flipped bit made unreadable, while its tablet elects (harness.sim.stack_tombstone_rot).
# lose-snapshot: a leader's newest snapshot lost under it, then a copy from it
# (harness.sim.stack_lose). dying-disk: a leader's disk slow, then failing its syncs too, while
# writes wait for room in its WAL's queue (harness.sim.stack_dying_disk). overtake: an answer
# overtaking a request sent before it on another connection, around a lease
# (harness.sim.stack_overtake). swap-book: a master migration while a follower master's peer
# book cannot be saved (harness.sim.stack_masters). superblock-behind: copy-behind with the
# follower's superblock lost at rest in place of its tombstone (harness.sim.stack_copy_behind).
# config-race: a follower's committed config saved behind its Ready while the next Ready's
# awaited save (a new term) holds a newer one (harness.sim.stack_config_race). failed-behind:
# copy-behind with the follower FAILED on a moment's failing syncs and deleted in place of its
# tombstone (harness.sim.stack_copy_behind). master-cut: every master cut off from one or two
# tablet servers that still reach the rest (harness.sim.stack_master_cut). server-cut: one tablet
# server cut off from the other tablet servers, the masters still hearing it
# (harness.sim.stack_server_cut).
BUNDLED = ("recopy", "copy-delete", "lose", "tombstone-rot", "lose-snapshot", "dying-disk",
           "overtake", "swap-book", "superblock-behind", "config-race", "failed-behind",
           "master-cut", "server-cut")
# Always on in a swarm mix: a crashed server comes back and a partition heals, or a seed that
# drew crashes and no restarts only ever runs degraded.
ALWAYS = ("restart", "heal")
# Kinds drawn on their own, each from its own stream (`_own_draw`), on with a weight from its
# list (None: off): adding one changes no other draw of a seed. torn: a power
# loss aimed inside a WAL group's sync (harness.sim.stack_damage.torn_tail); delay: every link of
# one host slowed for a few seconds (tc's delay on its interface), which widens each window
# between a message and its answer: a read at a new leader before its term commits, a lease
# confirmed after the term moved on, two config changes racing; damage: a file of a server
# truncated, zeroed, lost, misplaced or flipped at a power loss (stack_damage.damage);
# reprovision: a tablet server's host re-provisioned, its disk replaced by an empty one, so it
# starts again at the same address with a new uuid and no replicas, once a seed
# (harness.sim.stack_reprovision); full: a tablet server's disk filled up to a few KiB past what
# it holds, its preallocated space counted (SimFaults.fill), so its next WAL segment cannot be
# preallocated, or a write past the end comes back short (small segments, as damage seeds);
# damage-file: the damage fault aimed at kinds of file its draw rarely reaches (one file kind of
# many, on at most MAX_FLIPS servers a seed): a replica's consensus metadata holding another
# tablet's record, or a bit flipped in a finished WAL segment's footer past its magic
# (stack_damage.AIMED_MODES; recorded as damage); copy-cut: a follower tombstoned and, while its
# leader copies the tablet back to it, its link to the copy's source reset and cut, or its
# process crashed (harness.sim.stack_copy_cut: no other fault lands inside a copy, so a resumed,
# stalled or orphaned one was never seen); master-swap: a master added and the LEADER master
# removed (it hands over), the removed one stopped only a while later, a stale client asking it
# meanwhile (harness.sim.stack_masters); unsafe: two of a tablet's three voters lose power and the
# operator forces the survivor's config (unsafe_change_config) where that loses nothing
# (harness.sim.stack_unsafe); ddl: a table created and dropped beside the workload, sometimes at a
# new leader master while the old one, cut off from its peers, has not noticed
# (harness.sim.stack_ddl); maintenance: a tablet server put in maintenance mode (the masters replace
# none of its replicas) while its disk fails every fsync, so its replicas fail and stay members
# until their leaders, compacting past them, ask to copy over them (harness.sim.stack_maintenance);
# forge: the damage fault with bytes whose checksums match but whose
# content is wrong (a batch checksummed over corrupted memory, a misdirected footer, truncation
# record or snapshot: harness.sim.stack_forge.FORGED_MODES, recorded as damage); garble: a tablet
# copy's chunk replies garbled past TCP's checksum (two 16-bit words swapped,
# harness.sim.stack_forge.garble); copy-shrink: a file a tablet copy's source has pinned cut short
# under the running source, which then reboots (harness.sim.stack_forge.copy_shrink);
# copy-behind: a follower tombstoned while its leader writes behind on a slow disk, copied back
# from the leader's synced WAL, and the leader crashing before its sync ends
# (harness.sim.stack_faults: no other draw puts a tombstone inside a leader's unsynced group);
# kill: a process killed with its machine up, its page cache kept (SimDisk.kill): writes it
# never synced, and pages a failed fsync marked clean, read back as written when it restarts,
# until a power loss takes them (every other crash loses power too); ddl-retry: a drop whose reply
# is lost, its name re-created by another call, then the drop retried with its token, or a
# create's reply lost, its table dropped by another call, then the create retried
# (harness.sim.stack_ddl, recorded as ddl); change-retry: a follower removed and added back through
# the leader master, each reply lost once and the change retried as the client retries it
# (harness.sim.stack_change_retry).
LATE = {"torn": (None, None, 2, 4), "delay": (None, None, 2, 4), "damage": (None, None, 2, 4),
        "reprovision": (None, None, 1, 2), "full": (None, None, 2, 4),
        "damage-file": (None, None, 2, 4), "copy-cut": (None, None, 2, 4),
        "master-swap": (None, None, None, 2), "unsafe": (None, None, None, 2),
        "ddl": (None, None, None, 2), "maintenance": (None, None, None, 2),
        "forge": (None, None, 2, 4), "garble": (None, None, 2, 4),
        "copy-shrink": (None, None, 2, 4), "copy-behind": (None, None, None, 2),
        "kill": (None, None, None, None, 2), "ddl-retry": (None, None, None, 2),
        "change-retry": (None, None, None, 2)}
WEIGHTS = (1, 2, 4, 8)  # a kind that is on fires with one of these relative weights
FAULT_EVERY = ((0.2, 0.8), (0.5, 2.0), (1.0, 4.0))  # (lo, hi) seconds between two faults
LOADS = ((5, 50.0), (10, 100.0), (20, 200.0))  # (clients, ops/s over all of them)
READ_SHARES = (None, None, 0.9, 0.99)  # the register workload's reads: its own half, or most
CLOCK_ERRORS = (None, None, None, 20_000)  # the clocks' bound, µs: the default 1 ms, or 20 ms
# How the workers' writes reach the client (Workload.writes): in half the seeds a handle each,
# paced (one ts.write per write); else one node's workers sharing client sessions back to back,
# so the writes one turn issues leave as one ts.write_batch (the client's coalescing, which no
# paced run reaches), or sharing one batching session, AUTO_FLUSH_BACKGROUND or MANUAL_FLUSH, at
# the mix's pace. One draw, where the client (own or coalesce) was drawn before, so every earlier
# draw of a seed is what it was; the draws after it (`values`) may differ from before, since
# choosing among six takes another number of random bits than choosing among four.
WRITES = ("own", "own", "own", "shared", "session-background", "session-manual")
SESSION_MODES = tuple(w for w in dict.fromkeys(WRITES) if w.startswith("session-"))  # batched
# The register workload's values (workloads.values): small ints in a quarter of the seeds; in
# half, `zeros` (half the values NUL-padded to a sector or more); in a quarter `wide` (up to the
# frame limit, half NUL-padded). Long zero runs in WAL batches are what a reader taking zeros for
# unwritten space must meet. Drawn after the writes, for the same reason.
VALUES = ("small", "zeros", "zeros", "wide")
# A quarter of the seeds that drew `own` write through a session each in AUTO_FLUSH_SYNC
# instead, Kudu's default flush mode (the session's own consistency mode, its row futures):
# drawn in a stream of its own, so no other draw of a seed moves.
SYNC_SESSIONS = (False, False, False, True)
# Applied entries between two snapshots of a replica (None: the engine's 20,000, which no seed
# of a virtual minute reaches). In half the seeds a few hundred, so snapshots are saved, the log
# behind them collected and a follower that lags past it copied: paths the code probes showed no
# seed reached (snapshot.saved, wal.gc.segments_deleted, raft.leader.peer_needs_copy). Drawn
# last, so every earlier draw of a seed is what it was.
SNAPSHOTS = (None, None, 200, 1000)
# Every disk's fsync latency, ms (None: instantaneous; else uniform from a tenth of it to it). A
# WAL group is durable only at the end of its sync, so a power loss inside one leaves it torn
# at a sector (harness.sim.disk.SimDisk.crash): the torn tail bootstrap must cut, which no seed of
# instantaneous syncs can reach (probe wal.recover.torn_tail_cut). Its own draw (`_own_draw`).
FSYNC_MS = (None, None, 1, 10)
# The sessions a tablet keeps (None: the engine's 1,024). With a handful, a tablet evicts the
# least recently used session while its client still writes in it: the client's lost-session
# paths (NO_SESSION, reopen, or unknown after an uncertain attempt), which no seed reached.
# Its own draw.
SESSIONS = (None, None, 3, 8)
# The session modes' ops per tablet batch (None: the workload's 16). A node's few workers never
# fill 16, so no buffer was ever cut at its op count or found full; with 2 or 4 they are.
# Its own draw; used by the session write modes only.
BATCHES = (None, None, 2, 4)
# Writes through a shared session before it is closed and replaced (None: kept for the run;
# Workload.session_ops), as a program that opens a session per unit of work does: the other
# workers sharing it may be in the middle of an apply then, which the session must refuse,
# never buffer unsent (node.probes.ALARMS). Its own draw; the session write modes only.
RENEWS = (None, None, 20, 100)
# Writes per unit of work of a program that opens a client and a session for each unit and
# closes both after it (None: no such program; Workload.fresh_clients). The unit's new client
# knows no tablet's location, so the first applies on its session wait for a lookup, and the
# next unit's renewal may close the session under them: the session must refuse them
# (client.session.apply_closed_while_locating), which a shared client never reached, its
# locations once known staying known. A count here replaces RENEWS's. Its own draw; the
# session write modes only.
FRESH_CLIENTS = (None, None, None, 1, 4)
# Requests a server reads from one connection before it stops reading it (None: the server's
# 256; the client allows twice as many calls in flight on one). A seed's few dozen workers never
# had 256 out, so no server ever applied back-pressure and no call waited for room. Its own draw.
INFLIGHT = (None, None, None, 4)
# The servers' RPC frame limit in MiB (None: the simulator's 8 MiB). Operators lower Kudu's
# --rpc_max_message_size (here --rpc-max-message-size, 1 MiB at least), on every server alike
# as it must be; the application's client keeps its own limit (harness.sim.stack_frame). With
# wide values a write past the servers' frame is answered once and its connection closed, one
# just under it refused before it is proposed. Its own draw.
FRAME_MB = (None, None, 1, 2)
# Whether the workers of a shared or session write mode run back to back (unpaced), as an
# application's loader threads do, rather than at the mix's pace. Paced workers each wake on a
# timer of their own, so a MANUAL_FLUSH session never held two callers' ops at one apply: its
# buffer was never found full at its op count (client.session.buffer_full_ops, then
# client.manual_flush.buffer_full_reflush), and shared writers of wide values (paced, so that
# frame-sized values do not fill the simulated disks, which are memory) never coalesced a batch
# over the servers' frame (client.batch.split_after_too_large). Drawn for the session modes and
# for shared writes of wide values (shared writes of other values run unpaced already), with
# wide values only under a lowered frame (`frame=N`), which bounds them. Its own draw.
UNPACED = (False, True)
# The results a tablet keeps per session (None: the engine's 128; Limits.max_results_per_session,
# a bound an operator sets on the servers, replicated with the state so every replica forgets
# alike). With a handful, writers sharing a session (shared) keep more results outstanding
# behind a stalled attempt than the tablet keeps: the oldest are forgotten
# (tablet.session.results_over_bound_forgotten) and that attempt's retry is told STALE_SEQ
# (tablet.session.stale_seq), an outcome unknown to the client. A session mode's batch, or a
# coalesced one, larger than the bound is refused by the leader before it is proposed
# (INVALID_ARGUMENT), a definite failure (client.retry.refused). Its own draw.
RESULTS = (None, None, None, 3, 8)
# The client's external consistency mode (Kudu's two): commit-wait seeds keep their timestamps
# in real-time order across tablets (judged so while the clocks stay within the bound);
# client-propagated seeds answer writes without waiting, and only each client's own order is
# promised (judged in every seed). Its own draw.
CONSISTENCY = ("commit-wait", "client-propagated")
# In a quarter of the seeds the workers mix the two (harness.systems.tessera.clients.MIXED),
# as different users' clients may: a leader then commits writes of both modes in one group,
# each answered in its own (probe replica.write.group_modes_mixed). Its own draw, on top of
# CONSISTENCY's; such a seed is judged per key and per client.
MIXED_MODES = (False, False, False, True)
# Missed heartbeats before an election on every other server (Mix.missed), drawn for lease-read
# seeds only: a voter's window shorter than the leader's matters where the leader serves reads
# from its lease. None: every server runs the default.
MISSED = (None, None, None, 2)
# The client's timeout per op (Mix.client_timeout_ms), drawn in a stream of its own: None is 5 s.
TIMEOUTS_MS = (None, None, None, 1000, 500)
# The caller's own deadline per op (Mix.caller_timeout_ms; None: 5 s, the client's default), as
# Jepsen's clients wrap every op in a timeout and an application's request handler gives up
# on a slow write: shorter than the client's timeout, the caller stops waiting while the
# client still works on the op, which is cancelled mid-call or in a batch's buffer (a buffered
# op whose caller gave up is dropped unsent: client.session.cancelled_ops_dropped) and recorded
# unknown. Before this draw, no seed's caller gave up before its client. Its own draw.
CALLERS_MS = (None, None, None, None, 1000, 2500)
# The WAL's group commit queue in KiB (Mix.wal_queue_kb; None: the engine's 8 MiB), the bound
# an operator sets with --group-commit-queue-size-bytes: past it a write waits for the queue's
# groups to be written and synced (wal.queue.backpressure_waited). Wide values on slow syncs
# never filled 8 MiB; a frame-sized value fills 64 KiB alone. Its own draw.
WAL_QUEUES_KB = (None, None, None, 64)
# Whether the workers hand their values over in buffers (bytearrays) they overwrite as soon as
# the client has taken the op (Mix.buffers; harness.systems.tessera.clients.TableClient), as
# an application serializing rows into one buffer does: a client that sent the buffer as it
# was later writes bytes no worker wrote, which the checker sees. Before this draw no worker
# handed the client a mutable value (probe client.op.value_copied). For the string values
# only (BUFFERED_VALUES); its own draw.
BUFFERS = (False, False, True)
BUFFERED_VALUES = ("zeros", "wide")
# Whether the workers share one client that goes to the leader it knows (Mix.smart; `tessera
# test --client smart`), as an application's callers share its client, instead of each worker
# bound to a tablet server first as Jepsen binds clients to nodes: the client's own routing
# (locations, leader hints, a follower's redirect) and, with list-append's key sets, whose
# workers are bound to different servers, the only way their writes to one tablet share a
# client. Before this draw no seed ran it. Its own draw.
SMART = (False, False, False, True)
# Bursts (Mix.bursts; `tessera test --pacing bursts`, harness.runner.Pacer) are a spec option
# only, not drawn: of 8 swarm seeds that drew them in a third of the paced seeds, a register
# seed's linearizability check came out unknown (a key of 116 ops, several writers starting at
# one instant, still unsettled after 300 s of search), and the simulator already groups its
# callers' writes without them (shared writes and `unpaced` run the workers back to back).
# Mixes that reach a path only with several knobs at once, each a recorded spec (the tests in
# tests/test_sim_swarm_reach.py, tests/test_sim_forge.py and tests/test_sim_swarm.py fire its
# probes on a recorded seed). Independent draws combined none of them in 200 seeds
# (docs/decisions/probe-findings.md); one more draw of its own (`_own_draw`, "bundle") makes
# about one seed in five run one of them whole, its faults and knobs, with the seed's own
# schedule: writers sharing a MANUAL_FLUSH session of 2-op batches back to back find its buffer
# full (client.session.buffer_full_ops, client.manual_flush.buffer_full_reflush); shared writers
# of wide values under a 1 MiB frame coalesce a batch past it
# (client.batch.split_after_too_large); 4-op session batches over a 3-result bound are refused
# before they are proposed (tserver.write_batch.refused_invalid, client.retry.refused); a server
# in maintenance on a failing disk while its leaders compact (copy.over_failed_running_replica,
# tablet.tombstone.write_failed); forged files among frequent snapshots
# (tablet.snapshot.wrong_contents_refused); an operator's copies over running replicas and from
# damaged ones (copy.refused.not_behind); transfers under a read-mostly load on slow syncs
# (read.refused_not_leader). Drawn after every other draw: a seed without a bundle keeps its mix.
BUNDLES = {
    "manual-fill": "restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;"
                   "writes=session-manual;batch=2;unpaced;workload=register",
    "frame-split": "restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;writes=shared;"
                   "values=wide;frame=1;unpaced;workload=register",
    "batch-refused": "partition:2,crash:1,restart:1,heal:1;every=0.5-2;reads=linearizable;"
                     "load=20x200;writes=session-background;batch=4;results=3;unpaced;"
                     "workload=register",
    "maintenance-compact": "maintenance:4,restart:1,heal:1;every=0.5-2;reads=linearizable;"
                           "load=20x200;read-share=0;writes=shared;snapshot=200",
    "forge-snapshot": "forge:4,restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;"
                      "snapshot=200;workload=register",
    "operator-copy": "recopy:4,damage:2,restart:1,heal:1;every=1-4;reads=linearizable;"
                     "load=20x200",
    "transfer-read": "transfer:8,membership:2,restart:1,heal:1;every=0.2-0.8;"
                     "reads=linearizable;load=20x200;read-share=0.99;fsync=10",
}
# Bundles added after seeds were recorded against BUNDLE_DRAW, whose longer tuple would move
# most seeds' bundles: drawn from a stream of their own (`bundle_of`), only for the seeds that
# drew none there, so a recorded seed with a bundle keeps it. catalog-churn: leadership of the
# catalog and of the tablets handed over at a fast pace beside master changes, DDL, crashes and
# partitions; 150 seeds of it found a copy source reading the files of a dropped table and
# tablet servers left on an old master list, which no swarm seed had (a swarm seed draws a few
# kinds, and these four together about never). failing-elections: transfers and kills beside
# a failing disk, elections whose votes are saved while the directory's sync fails, then read
# back by a process restarted with its machine up (the persist-before-answer check's mix).
LATE_BUNDLES = {
    "catalog-churn": "transfer:10,crash:3,restart:4,partition:3,isolate:2,masters:2,ddl:3,"
                     "power:2,skew:2,heal:1;every=0.1-0.4;reads=linearizable",
    "failing-elections": "disk:8,transfer:8,kill:8,restart:6,heal:1;every=0.1-0.4;"
                         "reads=linearizable;load=2x10",
}
# Bundles added after LATE_BUNDLES, drawn from a third stream for the seeds that drew none
# in the other two (the same reason). shared-results: writers sharing sessions at full speed
# under partitions, each tablet keeping 8 results a session: an attempt stalled behind more
# writes than that is told STALE_SEQ when it retries (tablet.session.stale_seq), which the
# ensemble of 200 swarm seeds never reached (the knobs drawn apart about never meet).
LATER_BUNDLES = {
    "shared-results": "partition:2,isolate:2,crash:1,restart:1,heal:1;every=0.5-2;"
                      "reads=linearizable;load=20x200;writes=shared;results=8;workload=register",
}
# A fourth stream, the same way. copy-delete: a copy's target deleted while the copy runs, by
# a plain delete, by the masters' eviction with its config index, or offline by the operator's
# tool after a crash (harness.sim.stack_copy_delete), which no seed did. transfer-lease:
# leadership handed over at a fast pace under lease reads: a round a quorum acknowledged after
# a transfer began grants no lease (read.lease.not_granted), which the ensemble reached only by
# chance.
LATEST_BUNDLES = {
    "copy-delete": "copy-delete:4,restart:2,heal:1;every=1-4;reads=linearizable;load=10x100",
    "transfer-lease": "transfer:8,membership:2,restart:1,heal:1;every=0.2-0.8;reads=lease;"
                      "load=20x200;read-share=0.99;fsync=10",
}
# A fifth stream, the same way. lost-files: files of running tablet servers lose their names
# (harness.sim.stack_lose) beside copies, membership changes, snapshots and their log GC,
# DDL and reboots: the paths that read or delete a file while the server runs. Before it, every
# file a seed took was taken at a power loss, so only bootstrap ever met a missing file.
FIFTH_BUNDLES = {
    "lost-files": "lose:4,tombstone:2,membership:2,ddl:1,crash:1,restart:2,heal:1;"
                  "every=0.5-2;reads=linearizable;load=10x100;snapshot=200",
}
# A sixth stream, the same way. quiet-copy-behind: the copy-behind fault on a lightly loaded
# cluster. A leader copies a tablet from its WAL's synced end while a write of its own runs
# behind, and the copy must be refused for ending behind the tombstone it replaces
# (copy.refused.behind_tombstone). When a leader awaited its second write behind, sending
# nothing until its slow syncs ended, only a light load reached that; now busy leaders reach
# it too, and the bundle keeps the light-load case (harness.sim.stack_copy_behind).
# tombstone-rot: tombstones whose metadata does not read asked for votes, beside transfers.
SIXTH_BUNDLES = {
    "quiet-copy-behind": "copy-behind:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                         "load=2x10",
    "tombstone-rot": "tombstone-rot:4,transfer:2,restart:2,heal:1;every=1-4;"
                     "reads=linearizable;load=10x100",
}
# A seventh stream, the same way. lose-snapshot: leaders' newest snapshots lost under them and
# copies from them at once, at a load that rolls and collects their logs' segments between
# snapshots (harness.sim.stack_lose).
SEVENTH_BUNDLES = {
    "lose-snapshot": "lose-snapshot:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                     "load=20x200;snapshot=200",
}
# An eighth stream, the same way. full-queue-behind: copy-behind's 3-6 s syncs on a leader whose
# WAL queue (4 KiB) the load fills within one sync. Its writes wait for room in the queue
# (replica.wal.write_held) and it parks the writes it is handed meanwhile
# (replica.proposal.parked), heartbeating on. When the driver awaited the room, such a leader
# sent nothing through its syncs (harness.sim.stack_silence); no other draw filled a queue for
# longer than an election timeout.
EIGHTH_BUNDLES = {
    "full-queue-behind": "copy-behind:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                         "load=10x100;wal-queue=4",
}
# A ninth stream, the same way. dying-queue: a leader's disk slow and then failing its syncs
# while its writes wait for room in a small WAL queue (harness.sim.stack_dying_disk). It fails
# with writes held and parked, none of them proposed: each is refused for certain at once
# (replica.inbox.refused_unrun), and the checkers hold that to the truth. Before, their callers
# waited out their deadlines; no other draw failed a replica with writes waiting.
NINTH_BUNDLES = {
    "dying-queue": "dying-disk:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                   "load=10x100;wal-queue=4",
}
# A tenth stream, the same way. late-answer: a leader serving lease reads cut from its two
# followers, one of which (R) campaigns while the other (F) pre-votes and goes back to the
# leader; R's refusal of F's pre-vote overtakes R's own vote request on another connection
# (harness.sim.stack_overtake), under a read-mostly load whose writes seldom move F's log past
# R's. On the code before the fix of the review's late-answer bug
# (docs/decisions/late-answers-in-a-lease.md) 7 of 60 seeds of it failed the lease check; the
# swarm mix that reached the late answer without it passed 80.
TENTH_BUNDLES = {
    "late-answer": "overtake:4,restart:1,heal:1;every=0.5-2;reads=lease;load=20x200;"
                   "read-share=0.99;workload=register",
}
# An eleventh stream: a master migration while a follower master cannot save its peer book, so
# the save in its reconcile loop fails (master.reconcile.round_failed; docs/decisions/
# re-replication.md). The loop that once ended on it fails a seed now (ServerBase._keep).
ELEVENTH_BUNDLES = {
    "swap-book": "swap-book:4,restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;"
                 "workload=register",
}
# A twelfth stream: copy-behind with the follower's superblock lost at rest in place of its
# tombstone (harness.sim.stack_copy_behind). Its own log is all that says what it acknowledged;
# before the copy read it (copy.prepare.lost_superblocks_log_read), a copy from the leader's
# synced end installed behind it: 17 of the first 40 seeds of this spec failed on a log that
# regressed. A third of its faults take R's consensus metadata too
# (copy.refused.log_without_metadata), a third flip a bit of R's WAL so its log does not read:
# a copy onto R while it is a voter is refused then, R FAILED for the masters to replace
# (copy.refused.last_op_unknown_voter).
TWELFTH_BUNDLES = {
    "superblock-behind": "superblock-behind:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                         "load=10x100;workload=register",
}
# A thirteenth stream: a follower's committed config saved behind its Ready while the next
# Ready, a leadership transfer's new term with a newer committed config, saves both awaited
# (harness.sim.stack_config_race). No mix of the existing kinds fired
# replica.cmeta.older_config_not_saved; before the fix (node.replica.metadata_saves) the older
# config went over the newer on disk (`config saved`, harness.sim.stack_checks), and once the
# follower restarted past a snapshot it ran the older config (`config kept`): 18 of this spec's
# first 20 seeds failed, the 18 that fire the probe now.
# Snapshots every 200 entries, so the fault's own writes take one past the newer config's entry.
THIRTEENTH_BUNDLES = {
    "config-race": "config-race:4,restart:1,heal:1;every=1-4;reads=linearizable;load=10x100;"
                   "workload=register;snapshot=200",
}
# A fourteenth stream: copy-behind with the follower's replica FAILED while it ran and deleted
# (forgotten, its files left) in place of its tombstone (harness.sim.stack_copy_behind). Only
# what it knew in memory says what it acknowledged (copy.prepare.forgotten_replicas_last_op):
# before that was kept, a copy from the leader's synced end installed behind it (34 of this
# spec's first 40 seeds failed on a log that regressed). Twelve draws of none beside it, not
# twenty: a stream is asked only by the seeds no earlier one gave a bundle, and with twenty
# none of the first 200 seeds drew it.
FOURTEENTH_BUNDLES = {
    "failed-behind": "failed-behind:4,restart:1,heal:1;every=1-4;reads=linearizable;"
                     "load=10x100;workload=register",
}
# A fifteenth stream: every master cut off from one or two tablet servers, which still reach
# each other (harness.sim.stack_master_cut). The masters judged a member silent by their own
# view alone and moved each tablet off the cut servers, a copy each, while the tablets' leaders
# heard every member; its check fails a run of these cuts alone in which any tablet changed
# members. Twenty draws of none, not twelve: fewer seeds give up their own mixes, which tests
# pin.
FIFTEENTH_BUNDLES = {
    "master-cut": "master-cut:4,restart:1,heal:1;every=2-6;reads=linearizable;load=10x100;"
                  "workload=register",
}
# A sixteenth stream: one tablet server cut off from the other tablet servers while the masters
# hear it (harness.sim.stack_server_cut). Its members' leaders elsewhere cannot reach them, and
# no member was replaced while the masters heard its server: each such tablet ran on two voters
# for the whole cut. Its check fails a run of these cuts alone in which a tablet with a member
# on a server cut for JUDGE_AFTER_S had no replacement under way.
SIXTEENTH_BUNDLES = {
    "server-cut": "server-cut:4,restart:1,heal:1;every=2-6;reads=linearizable;load=10x100;"
                  "workload=register",
}
# Each stream's name, its bundles and how many draws of none stand beside them, in the order a
# seed takes them (`bundle_of`): a stream gives one of its bundles to about len(bundles) in
# len(bundles) + nones of the seeds it is asked for.
_STREAMS = (("bundle", BUNDLES, 24), ("late-bundle", LATE_BUNDLES, 30),
            ("later-bundle", LATER_BUNDLES, 20), ("latest-bundle", LATEST_BUNDLES, 20),
            ("fifth-bundle", FIFTH_BUNDLES, 20), ("sixth-bundle", SIXTH_BUNDLES, 20),
            ("seventh-bundle", SEVENTH_BUNDLES, 20), ("eighth-bundle", EIGHTH_BUNDLES, 20),
            ("ninth-bundle", NINTH_BUNDLES, 20), ("tenth-bundle", TENTH_BUNDLES, 20),
            ("eleventh-bundle", ELEVENTH_BUNDLES, 20), ("twelfth-bundle", TWELFTH_BUNDLES, 20),
            ("thirteenth-bundle", THIRTEENTH_BUNDLES, 20),
            ("fourteenth-bundle", FOURTEENTH_BUNDLES, 12),
            ("fifteenth-bundle", FIFTEENTH_BUNDLES, 20),
            ("sixteenth-bundle", SIXTEENTH_BUNDLES, 20))
BUNDLE_STREAMS = tuple((name, (None,) * nones + tuple(bundles))
                       for name, bundles, nones in _STREAMS)
BUNDLE_DRAW, LATE_BUNDLE_DRAW = BUNDLE_STREAMS[0][1], BUNDLE_STREAMS[1][1]
ALL_BUNDLES = {name: spec for _, bundles, _ in _STREAMS for name, spec in bundles.items()}
# The probes each bundle is drawn to reach (the notes above say how), so that a run can say
# whether its bundles did (`bundle_reach`): the frame-split bundle ran on list-append seeds,
# where it writes no values of a size and never split a batch, and nothing said so. Its first
# report found four more idle there (batch-refused, forge-snapshot, manual-fill and
# shared-results reached their aims on register seeds only), and those name the register too.
# Alternatives are listed side by side (lost-files meets a lost file on whichever path reads it
# first); a bundle's seeds reaching none of its aims is what a run reports.
BUNDLE_AIMS = {
    "manual-fill": ("client.session.buffer_full_ops", "client.manual_flush.buffer_full_reflush"),
    "frame-split": ("client.batch.split_after_too_large",),
    "batch-refused": ("tserver.write_batch.refused_invalid", "client.retry.refused"),
    "maintenance-compact": ("copy.over_failed_running_replica", "tablet.tombstone.write_failed"),
    "forge-snapshot": ("tablet.snapshot.wrong_contents_refused",),
    "operator-copy": ("copy.refused.not_behind",),
    "transfer-read": ("read.refused_not_leader",),
    "catalog-churn": ("copy.source.replica_gone", "master.info.member_address_unknown"),
    "failing-elections": ("replica.failed.while_running",),
    "shared-results": ("tablet.session.stale_seq",),
    "copy-delete": ("copy.aborted_by_delete", "tablet.delete.cas_refused_while_copying"),
    "transfer-lease": ("read.lease.not_granted",),
    "lost-files": ("wal.gc.segment_already_gone", "wal.recover.sequence_gap_refused",
                   "tablet.tombstone.write_failed", "copy.source.superblock_unreadable"),
    "quiet-copy-behind": ("copy.refused.behind_tombstone",),
    "tombstone-rot": ("tombstone.vote.refused_corrupt_metadata",),
    "lose-snapshot": ("copy.pins.wal_starts_after_snapshot",),
    "full-queue-behind": ("replica.wal.write_held",),
    "dying-queue": ("replica.inbox.refused_unrun",),
    "late-answer": ("raft.step.stale_answer_dropped_in_lease",),
    "swap-book": ("master.reconcile.round_failed",),
    "superblock-behind": ("copy.prepare.lost_superblocks_log_read", "copy.refused.behind_tombstone",
                          "copy.refused.last_op_unknown_voter"),
    "config-race": ("replica.cmeta.older_config_not_saved",),
    "failed-behind": ("copy.prepare.forgotten_replicas_last_op",),
    "master-cut": ("master.rereplication.silent_but_leader_hears",),
    "server-cut": ("master.rereplication.replace_unreachable_from_leader",),
}


# How many optional kinds a seed turns on, drawn from this list: mostly a few, so a seed hammers
# one or two kinds (a copy racing an election needs copies and cuts close together, which a mix
# of twelve kinds makes rare), sometimes all of them.
FEATURES = (1, 1, 2, 2, 2, 3, 3, 4, 6, 9, len(KINDS) - len(ALWAYS) - len(LATE) - len(BUNDLED))


@dataclass(frozen=True)
class Mix:
    """Which faults fire and how often (relative weights), the pause between two faults, and
    the replicas' read mode."""

    weights: tuple[tuple[str, int], ...]
    fault_every_s: tuple[float, float]
    read_mode: str = "linearizable"
    name: str = "swarm"
    # the workload's clients and their op rate (ops/s over all), None: the run's own; more
    # clients keep proposals coming to a leader whose other clients all wait on it
    concurrency: int | None = None
    rate: float | None = None
    # the register workload's share of reads (None: its own, a half). A lease bug needs reads
    # at a leader whose followers' logs do not move: a read-mostly load
    read_share: float | None = None
    # the clocks' configured max error in µs (None: the simulator's 1 ms). A wider bound lets
    # skew within it reorder writes across tablets that commit-wait must keep in order
    clock_error_us: int | None = None
    # how the workers' writes reach the client (Workload.writes; WRITES); with shared the
    # workers run unpaced
    writes: str = "own"
    # the register workload's value sizes (None: the run's own; VALUES)
    values: str | None = None
    # applied entries between snapshots (None: the engine's default; SNAPSHOTS); the log keeps
    # as many behind each for lagging followers
    snapshot_every: int | None = None
    # every disk's fsync latency in ms (None: instantaneous; FSYNC_MS)
    fsync_ms: int | None = None
    # the sessions a tablet keeps (None: the engine's; SESSIONS)
    max_sessions: int | None = None
    # ops per batch of the session write modes (None: the workload's; BATCHES)
    batch: int | None = None
    # writes through a shared session before it is closed and replaced (None: never; RENEWS)
    renew: int | None = None
    # requests in flight per connection a server reads (None: the server's; INFLIGHT)
    inflight: int | None = None
    # the servers' RPC frame limit in MiB (None: the simulator's; FRAME_MB)
    frame_mb: int | None = None
    # the shared or session modes' workers back to back, not paced (UNPACED)
    unpaced: bool = False
    # the results a tablet keeps per session (None: the engine's; RESULTS)
    max_results: int | None = None
    # the client's external consistency mode (node.protocol.EXTERNAL_CONSISTENCY; CONSISTENCY):
    # commit-wait, whose timestamps the seed judges across tablets, or client-propagated,
    # judged per client; or mixed (MIXED_MODES), the workers alternating between the two
    consistency: str = "commit-wait"
    # missed heartbeats before an election on every other server (None: all run the default
    # 3), a cluster whose servers were started with different timing flags, as operators
    # restarting servers one at a time with changed flags leave it: each voter withholds votes
    # for its own vote lease, and a leader lease taken from the leader's flags alone outlived
    # a voter configured shorter. Drawn for lease-read seeds (MISSED), in a stream of its own
    missed: int | None = None
    # the client's timeout per op in ms (None: 5 s), as users pass `--timeout` to a client: a
    # deadline shorter than one attempt's patience puts a call's first try at the deadline, where
    # an answer lost to it must count as maybe applied (TIMEOUTS_MS)
    client_timeout_ms: int | None = None
    # the caller's deadline per op in ms (None: 5 s), the harness's wait on each op (CALLERS_MS)
    caller_timeout_ms: int | None = None
    # every server's WAL group commit queue in KiB (None: the engine's; WAL_QUEUES_KB)
    wal_queue_kb: int | None = None
    # the workers hand their string values over in buffers they reuse at once (BUFFERS)
    buffers: bool = False
    # the workers share a client that goes to the leader, not bound to servers (SMART)
    smart: bool = False
    # paced op starts in bursts (a spec option, not drawn: the note after SMART says why)
    bursts: bool = False
    # each renewed session on a client of its own, made at the renewal (FRESH_CLIENTS)
    fresh_clients: bool = False
    # the workload the mix's aim needs (None: the seed's parity picks; `workload_for`): a
    # bundle of wide values aims at the register's values, which list-append never writes,
    # and the session bundles reached their aims on register seeds only (`bundle_reach`)
    workload: str | None = None

    def kinds(self) -> list[str]:
        return [k for k, _ in self.weights]

    def describe(self) -> str:
        """One line, printed before the seed runs: what the seed hammers, as a `--mix` spec
        that runs it again (`parse_mix`)."""
        return f"{self.name}: {self.spec()}"

    def spec(self) -> str:
        """`kind:weight,...;every=LO-HI;reads=MODE[;load=CLIENTSxRATE][;read-share=F]
        [;clock=US][;writes=MODE][;values=wide][;snapshot=N][;fsync=MS][;sessions=N]
        [;batch=N][;renew=N][;inflight=N][;frame=MIB][;results=N][;missed=N][;timeout=MS][;caller=MS]
        [;wal-queue=KIB][;consistency=MODE][;unpaced][;buffers][;smart][;bursts]
        [;fresh-clients][;workload=NAME]`; writes only when not own, consistency only when not commit-wait."""
        lo, hi = self.fault_every_s
        parts = [",".join(f"{k}:{w}" for k, w in self.weights), f"every={lo:g}-{hi:g}",
                 f"reads={self.read_mode}"]
        if self.concurrency is not None:
            parts.append(f"load={self.concurrency}x{self.rate:g}")
        if self.read_share is not None:
            parts.append(f"read-share={self.read_share:g}")
        if self.clock_error_us is not None:
            parts.append(f"clock={self.clock_error_us}")
        if self.writes != "own":
            parts.append(f"writes={self.writes}")
        if self.values is not None:
            parts.append(f"values={self.values}")
        counts = {"snapshot": self.snapshot_every, "fsync": self.fsync_ms,
                  "sessions": self.max_sessions, "batch": self.batch, "renew": self.renew,
                  "inflight": self.inflight,
                  "frame": self.frame_mb, "results": self.max_results, "missed": self.missed,
                  "timeout": self.client_timeout_ms, "caller": self.caller_timeout_ms,
                  "wal-queue": self.wal_queue_kb}
        parts += [f"{key}={n}" for key, n in counts.items() if n is not None]
        if self.consistency != "commit-wait":
            parts.append(f"consistency={self.consistency}")
        if self.unpaced:
            parts.append("unpaced")
        parts += [flag for flag in ("buffers", "smart", "bursts") if getattr(self, flag)]
        if self.fresh_clients:
            parts.append("fresh-clients")
        if self.workload is not None:
            parts.append(f"workload={self.workload}")
        return ";".join(parts)

    def as_json(self) -> dict:
        return {"name": self.name, "weights": dict(self.weights),
                "fault_every_s": list(self.fault_every_s), "read_mode": self.read_mode,
                "concurrency": self.concurrency, "rate": self.rate, "read_share": self.read_share,
                "clock_error_us": self.clock_error_us, "writes": self.writes,
                "values": self.values, "snapshot_every": self.snapshot_every,
                "fsync_ms": self.fsync_ms, "max_sessions": self.max_sessions,
                "batch": self.batch, "renew": self.renew,
                "fresh_clients": self.fresh_clients, "inflight": self.inflight,
                "frame_mb": self.frame_mb,
                "unpaced": self.unpaced, "max_results": self.max_results,
                "consistency": self.consistency, "missed": self.missed,
                "client_timeout_ms": self.client_timeout_ms,
                "caller_timeout_ms": self.caller_timeout_ms, "wal_queue_kb": self.wal_queue_kb,
                "buffers": self.buffers, "smart": self.smart, "bursts": self.bursts,
                "workload": self.workload}


# The fixed mix (its list of kinds, with crash, restart and membership twice, is the one the
# nemesis drew from uniformly before swarm mixes existed).
CLASSIC = Mix((("crash", 2), ("power", 1), ("restart", 2), ("partition", 1), ("isolate", 1),
               ("heal", 1), ("reset", 1), ("skew", 1), ("membership", 2), ("flip", 1),
               ("disk", 1), ("transfer", 1)), (1.0, 4.0), "linearizable", "classic")


def swarm_mix(seed: int, bundled: bool = True) -> Mix:
    """Seed `seed`'s own mix. Its stream is `swarm/<seed>`, apart from the run's, so choosing
    the mix never shifts the run's other random choices. `bundled` False: its own draws even
    where a bundle stream gives it a bundle (a test pinning what it ran before that stream)."""
    rng = random.Random(f"swarm/{seed}")
    optional = [k for k in KINDS if k not in ALWAYS and k not in LATE and k not in BUNDLED]
    on = rng.sample(optional, rng.choice(FEATURES))
    weights = tuple((k, rng.choice(WEIGHTS)) for k in KINDS if k in on or k in ALWAYS)
    every = rng.choice(FAULT_EVERY)
    read_mode = "lease" if rng.random() < 0.5 else "linearizable"
    concurrency, rate = rng.choice(LOADS)
    read_share = rng.choice(READ_SHARES)
    clock_error_us = rng.choice(CLOCK_ERRORS)
    writes = rng.choice(WRITES)
    if writes == "own" and _own_draw(seed, "sync-sessions", SYNC_SESSIONS):
        writes = "session-sync"
    values = rng.choice(VALUES)
    snapshot_every = rng.choice(SNAPSHOTS)
    fsync_ms = _own_draw(seed, "fsync", FSYNC_MS)
    weights += tuple((k, w) for k, ws in LATE.items() if (w := _own_draw(seed, k, ws)) is not None)
    max_sessions = _own_draw(seed, "sessions", SESSIONS)
    batch = _own_draw(seed, "batch", BATCHES)
    renew = _own_draw(seed, "renew", RENEWS)
    unit = _own_draw(seed, "fresh-clients", FRESH_CLIENTS) if writes in SESSION_MODES else None
    renew = renew if unit is None else unit
    inflight = _own_draw(seed, "inflight", INFLIGHT)
    frame_mb = _own_draw(seed, "frame", FRAME_MB)
    unpaced = _own_draw(seed, "unpaced", UNPACED) and _unpaceable(writes, values, frame_mb)
    max_results = _own_draw(seed, "results", RESULTS)
    consistency = _own_draw(seed, "consistency", CONSISTENCY)
    if _own_draw(seed, "mixed-modes", MIXED_MODES):
        consistency = MIXED
    missed = _own_draw(seed, "missed", MISSED) if read_mode == "lease" else None
    client_timeout_ms = _own_draw(seed, "timeout", TIMEOUTS_MS)
    caller_timeout_ms = _own_draw(seed, "caller", CALLERS_MS)
    wal_queue_kb = _own_draw(seed, "wal-queue", WAL_QUEUES_KB)
    buffers = _own_draw(seed, "buffers", BUFFERS) and values in BUFFERED_VALUES
    smart = _own_draw(seed, "smart", SMART)
    mix = Mix(weights, every, read_mode, concurrency=concurrency, rate=rate,
              read_share=read_share, clock_error_us=clock_error_us, writes=writes,
              values=None if values == "small" else values, snapshot_every=snapshot_every,
              fsync_ms=fsync_ms, max_sessions=max_sessions,
              batch=batch if writes in SESSION_MODES else None,
              renew=renew if writes in SESSION_MODES else None, inflight=inflight,
              frame_mb=frame_mb, unpaced=unpaced, max_results=max_results,
              consistency=consistency, missed=missed, client_timeout_ms=client_timeout_ms,
              caller_timeout_ms=caller_timeout_ms, wal_queue_kb=wal_queue_kb, buffers=buffers,
              smart=smart, fresh_clients=unit is not None)
    bundle = bundle_of(seed) if bundled else None
    return mix if bundle is None else replace(
        parse_mix(ALL_BUNDLES[bundle]),
        name="swarm")


def bundle_of(seed: int) -> str | None:
    """The bundle seed `seed` runs whole, if any: the first of BUNDLE_STREAMS to draw one
    (BUNDLES, then LATE_BUNDLES, LATER_BUNDLES and the later streams in order)."""
    for name, draw in BUNDLE_STREAMS:
        if (bundle := _own_draw(seed, name, draw)) is not None:
            return bundle
    return None


def _unpaceable(writes: str, values: str | None, frame_mb: int | None) -> bool:
    """Whether `unpaced` changes how these workers write (UNPACED): session modes, and shared
    writes of wide values; wide values only under a lowered frame."""
    wide = values == "wide"
    return (writes in SESSION_MODES or (writes == "shared" and wide)) and (
        not wide or frame_mb is not None)


def runs_unpaced(writes: str, values: str | None, unpaced: bool) -> bool:
    """Whether a seed's workers run back to back (harness.sim.stack): `unpaced`, or shared
    writes of values that are not wide. Shared handles want workers back to back: writes share
    a turn when one read of the connection wakes several workers, which paced workers' own
    timers rarely do. Not with wide values: unpaced frame-sized writes put GiBs a virtual
    minute on the simulated disks, which are memory (one such seed took a worker to 18 GiB),
    unless a mix's `unpaced` asks for it under a lowered frame (UNPACED)."""
    return unpaced or (writes == "shared" and values != "wide")


def _own_draw(seed: int, name: str, choices: tuple):
    """A draw from its own stream (`swarm/<seed>/<name>`): a draw added later changes none of
    a seed's other draws, as one more draw from the mix's stream would change all after it."""
    return random.Random(f"swarm/{seed}/{name}").choice(choices)


# A spec's whole-number fields, each >= 1, in the order of Mix's fields: what each counts
_COUNTS = {"snapshot": "applied entries between snapshots", "fsync": "every disk's fsync latency in ms",
           "sessions": "the sessions a tablet keeps", "batch": "ops per batch of a session write mode",
           "renew": "writes through a shared session before it is closed and replaced",
           "inflight": "requests in flight per connection",
           "frame": "the servers' RPC frame limit in MiB",
           "results": "the results a tablet keeps per session",
           "missed": "missed heartbeats before an election on every other server",
           "timeout": "the client's timeout per op in ms",
           "caller": "the caller's deadline per op in ms",
           "wal-queue": "the WAL's group commit queue in KiB"}


def parse_mix(spec: str) -> Mix:
    """A mix from its spec (`Mix.spec`); ValueError saying what is wrong."""
    fields = spec.split(";")
    weights = []
    for item in filter(None, fields[0].split(",")):
        kind, _, w = item.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
        if not w.isdigit() or int(w) < 1:
            raise ValueError(f"fault {kind}: weight {w!r} is not a positive integer")
        weights.append((kind, int(w)))
    if not weights:
        raise ValueError("a mix names at least one fault kind, as kind:weight")
    opts = {}
    for field_ in fields[1:]:
        key, _, value = field_.partition("=")
        opts[key.strip()] = value.strip()
    if "client" in opts:  # what `smart` and `writes` say now
        raise ValueError(f"client={opts['client']}: a mix names how the workers write as "
                         "writes=MODE now (client=coalesce is writes=shared)")
    unknown = set(opts) - {"every", "reads", "load", "read-share", "clock", "writes", "values",
                           "unpaced", "buffers", "smart", "bursts", "fresh-clients",
                           "consistency", "workload", *_COUNTS}
    if unknown:
        raise ValueError(f"unknown mix field(s) {sorted(unknown)} (every, reads, load, read-share, "
                         f"clock, writes, values, {', '.join(_COUNTS)}, unpaced, buffers, "
                         "smart, bursts, fresh-clients, consistency, workload)")
    workload = opts.get("workload")
    if workload not in (None, *WORKLOADS):
        raise ValueError(f"workload={workload!r}: {' or '.join(WORKLOADS)}")
    consistency = opts.get("consistency", "commit-wait")
    if consistency not in (*CONSISTENCY, MIXED):
        raise ValueError(f"consistency={consistency!r}: {', '.join(CONSISTENCY)} or {MIXED}")
    counts = {}
    for key, what in _COUNTS.items():
        n = opts.get(key)
        if n is not None and (not n.isdigit() or int(n) < 1):
            raise ValueError(f"{key}={n!r}: {what}, >= 1")
        counts[key] = int(n) if n is not None else None
    batch = counts["batch"]
    values = opts.get("values")
    if values not in (None, *VALUES):
        raise ValueError(f"values={values!r}: {' or '.join(sorted(set(VALUES)))}")
    writes = opts.get("writes", "own")
    if writes not in WRITE_MODES:
        raise ValueError(f"writes={writes!r}: one of {', '.join(WRITE_MODES)}")
    if batch is not None and writes not in SESSION_MODES:
        raise ValueError(f"batch={batch} sizes a session write mode's batches: it needs "
                         f"writes={' or writes='.join(SESSION_MODES)}")
    if counts["renew"] is not None and writes not in SESSION_MODES:
        raise ValueError(f"renew={counts['renew']} renews a shared session: it needs "
                         f"writes={' or writes='.join(SESSION_MODES)}")
    unpaced = "unpaced" in opts
    if unpaced and (opts["unpaced"] or not _unpaceable(writes, values, counts["frame"])):
        raise ValueError("unpaced (no value) runs the workers of a session write mode, or shared "
                         "writers of wide values, back to back; wide values only with frame=N")
    buffers = "buffers" in opts
    if buffers and (opts["buffers"] or values not in BUFFERED_VALUES):
        raise ValueError("buffers (no value) hands string values over in reused buffers: it "
                         f"needs values={' or values='.join(BUFFERED_VALUES)}")
    fresh = "fresh-clients" in opts
    if fresh and (opts["fresh-clients"] or counts["renew"] is None):
        raise ValueError("fresh-clients (no value) opens each renewed session on a client of "
                         "its own: it needs renew=N")
    flags = {flag: flag in opts for flag in ("smart", "bursts")}
    if any(opts.get(flag) for flag in flags):
        raise ValueError("smart and bursts take no value")
    if flags["bursts"] and runs_unpaced(writes, values, unpaced):
        raise ValueError("bursts spread paced op starts: not with unpaced, nor with writes=shared "
                         "(whose workers run back to back) unless values=wide")
    try:
        lo, hi = (float(x) for x in opts.get("every", "1-4").split("-"))
        concurrency, rate = ((int(opts["load"].split("x")[0]), float(opts["load"].split("x")[1]))
                             if "load" in opts else (None, None))
        read_share = float(opts["read-share"]) if "read-share" in opts else None
        clock_error_us = int(opts["clock"]) if "clock" in opts else None
    except (ValueError, IndexError):
        raise ValueError(f"cannot read every={opts.get('every')!r} (LO-HI seconds), "
                         f"load={opts.get('load')!r} (CLIENTSxOPS_PER_S), "
                         f"read-share={opts.get('read-share')!r} (0 to 1) or "
                         f"clock={opts.get('clock')!r} (µs)") from None
    if clock_error_us is not None and clock_error_us < 1:
        raise ValueError(f"clock={clock_error_us}: a positive number of µs")
    if read_share is not None and not 0 <= read_share <= 1:
        raise ValueError(f"read-share={read_share:g}: a fraction from 0 to 1")
    if not 0 < lo <= hi or (concurrency is not None and (concurrency < 1 or rate <= 0)):
        raise ValueError("every needs 0 < LO <= HI; load needs at least 1 client and a rate > 0")
    reads = opts.get("reads", "linearizable")
    if reads not in ("linearizable", "lease"):
        raise ValueError(f"reads={reads!r}: linearizable or lease")
    return Mix(tuple(weights), (lo, hi), reads, "spec", concurrency, rate, read_share,
               clock_error_us, writes, None if values == "small" else values,
               *list(counts.values())[:7], unpaced, counts["results"], consistency,
               counts["missed"], counts["timeout"], counts["caller"],
               wal_queue_kb=counts["wal-queue"], buffers=buffers, workload=workload,
               fresh_clients=fresh, **flags)


def aims_hit(bundle: str, probes: dict[str, int]) -> list[str]:
    """The aims of `bundle` (BUNDLE_AIMS) that fired in a seed with these probe counts: the
    bundle reached what it is drawn for when any did."""
    return [aim for aim in BUNDLE_AIMS[bundle] if probes.get(aim, 0) > 0]


def bundle_reach(runs: list[tuple[int, str, dict[str, int]]]) -> dict[str, dict]:
    """For each bundle drawn by these swarm seeds ((seed, workload, probes fired) each): its
    seeds; per workload, its seeds and how many of them reached any aim (BUNDLE_AIMS), which
    shows a bundle idle under one workload; per aim, how many seeds reached it; `missed` when
    none of its seeds reached any of its aims."""
    reach: dict[str, dict] = {}
    for seed, workload, probes in sorted(runs):
        bundle = bundle_of(seed)
        if bundle is None:
            continue
        row = reach.setdefault(bundle, {"seeds": 0, "workloads": {},
                                        "aims": dict.fromkeys(BUNDLE_AIMS[bundle], 0)})
        row["seeds"] += 1
        hit = aims_hit(bundle, probes)
        for aim in hit:
            row["aims"][aim] += 1
        by = row["workloads"].setdefault(workload, {"seeds": 0, "reached": 0})
        by["seeds"] += 1
        by["reached"] += bool(hit)
    for row in reach.values():
        row["missed"] = not any(row["aims"].values())
    return dict(sorted(reach.items()))


def workload_for(seed: int, mix: Mix, asked: str = "both") -> str:
    """The workload seed `seed` runs: the one the run asked for; with `both`, the one its mix
    names (`workload=`), else register on even seeds and list-append on odd ones. A bundle of
    wide values on a list-append seed never wrote a value of a size (list-append appends
    integers), so it ran its load for nothing and never reached what it aims at."""
    if asked != "both":
        return asked
    return mix.workload or WORKLOADS[seed % 2]


def mix_for(name: str, seed: int) -> Mix:
    """`--mix swarm` (each seed its own), `--mix classic` (the fixed mix), or a spec (the same
    mix for every seed: what a swarm seed printed, to run it on other seeds)."""
    if name == "classic":
        return CLASSIC
    if name == "swarm":
        return swarm_mix(seed)
    return parse_mix(name)
