"""The whole-stack simulator's fault choices (harness.sim.stack): which fault comes next and at
what, drawn from the run's random stream by the mix's weights (harness.sim.swarm), among the
faults that apply to the cluster as it is now. The simulator applies what is chosen and
records it, so a seed replays its faults; this module only chooses.
"""

from __future__ import annotations

import random

from harness.sim import (
    stack_change_retry,
    stack_config_race,
    stack_copy_cut,
    stack_copy_delete,
    stack_lose,
    stack_maintenance,
    stack_master_cut,
    stack_overtake,
    stack_recopy,
    stack_server_cut,
)
from harness.sim.stack_ddl import choose_ddl
from harness.sim.stack_masters import BOOK_FAIL_S, SWAP_LINGER_S
from harness.sim.stack_tombstone_rot import AFTER_S as TOMBSTONE_ROT_AFTER_S
from harness.sim.stack_unsafe import choose_unsafe

DRIFT_MAX_S = 0.5  # the drift fault's largest clock step, past the bound (a bad NTP server)
# bit flips and damage (harness.sim.stack_damage) per seed, each on another server, at most one of
# them a master: damage on a majority of a tablet's replicas loses data in any replicated system
MAX_FLIPS = 2
# Disk faults: ENOSPC leaves this much room above what the files hold; a failing fsync fails
# with this chance; a slow fsync's upper bound (virtual seconds; the lower one is a tenth of it)
ENOSPC_SLACK_BYTES = 16 * 1024
# full: the room left above what a tablet server's files hold, preallocated space included:
# less than a small segment (stack_damage.DAMAGE_SEGMENT_MB), so the next one cannot be made
FULL_ROOM_BYTES = 8 * 1024
EIO_RATE = (0.05, 1.0)
SLOW_FSYNC_S = (0.02, 0.5)
# copy-race's slow disk on the copy's receiver: its fsyncs' upper bound, so that a copy, a few
# fsyncs, lasts about as long as an election
COPY_RACE_SLOW_FSYNC_S = (0.02, 0.6)
# lease-race's: a few ms, so the copy back (a few dozen fsyncs) keeps R a tombstone for a
# while, and the vote it saves before answering still comes within the lease
LEASE_RACE_SLOW_FSYNC_S = (0.002, 0.03)
# delay: the extra one-way delay on every link of one host, and for how long
DELAY_S = (0.02, 0.3)
DELAY_FOR_S = (1.0, 8.0)
# torn's slow disk: fsyncs long enough that a power loss lands inside one
TORN_SLOW_FSYNC_S = (0.005, 0.05)
CUT_S = (1.0, 8.0)  # how long a cut link stays cut
# copy-behind (harness.sim.stack_copy_behind): L's fsyncs (from half of it to it, s), long
# enough that L's group in flight when R is tombstoned is still unsynced while L copies to R
# and, often, when L crashes `after` s later. `after` leaves L time to hear R's refusal (its
# next heartbeat) and start the copy (a trigger round each second), which at 0.2-1 s it seldom
# had before its crash. F's cut from L and R.
COPY_BEHIND_SLOW_FSYNC_S = (3.0, 6.0)
COPY_BEHIND_AFTER_S = (1.5, 3.0)
COPY_BEHIND_CUT_S = (8.0, 15.0)
# dying-disk (harness.sim.stack_dying_disk): L's fsyncs (from half of it to it, s), long enough
# that a small WAL queue fills within one; the share of its syncs that then fail; and how long
# the disk dies before it is replaced
DYING_SLOW_FSYNC_S = (1.0, 3.0)
DYING_EIO_RATE = (0.3, 1.0)
DYING_AFTER_S = (2.0, 5.0)
LINK_DELAY_S = (0.05, 0.5)  # copy-race's extra delay on the link between the leader and R
TOMBSTONE_AFTER_S = (0.0, 2.0)  # copy-race: from the cut to R's tombstone
FAIL_COPY_LAG_S = (0.3, 2.0)  # fail-copy: from the cut to R's power loss (F falls behind)
FAIL_COPY_CRASH_AFTER_S = (0.1, 2.0)  # fail-copy: from R's delete to L's crash
DISK_CLEAR_P = 0.35  # while a disk fault is on, the chance the next fault clears one instead


class FaultChooser:
    def __init__(self, sim):
        self.sim = sim  # harness.sim.stack.StackSim: its hosts, servers, and the faults now on

    def choose(self, rng: random.Random) -> tuple[str | None, object]:
        """A random fault and its target; (None, None) when none applies now."""
        hosts = self.sim.masters + self.sim.tservers
        if self.sim.disk_faults and rng.random() < DISK_CLEAR_P:
            return "disk-clear", [rng.choice(sorted(self.sim.disk_faults))]
        kind = self.draw_kind(rng)
        impaired = self._impaired()
        if kind == "kill":
            # a server whose failed syncs left pages in its cache whenever there is one, else
            # half the time one on a failing disk (an operator restarting a server whose
            # replicas failed on EIO), so a restart reads back what those syncs dropped
            failing = [h for h, m in sorted(self.sim.disk_faults.items())
                       if m == "eio" and h not in self.sim.down]
            ahead = self._ahead_of_disk(failing)
            if ahead or (failing and rng.random() < 0.5):
                return kind, rng.choice(ahead or failing)
        if kind in ("crash", "kill"):
            # at most one master and two tablet servers impaired at a time: the final phase
            # must work
            up = [h for h in hosts if h not in impaired and (
                not impaired & set(self.sim.masters) if h in self.sim.masters
                else len(impaired & set(self.sim.tservers)) < 2)]
            ahead = self._ahead_of_disk(up, reread=True) if kind == "crash" else []
            if ahead and rng.random() < 0.5:
                return kind, rng.choice(ahead)
            return (kind, rng.choice(up)) if up else (None, None)
        if kind == "power":  # a rack loses power: tablet servers crash together
            rack = rng.sample(self.sim.tservers, rng.randrange(2, len(self.sim.tservers) + 1))
            ahead = self._ahead_of_disk([h for h in self.sim.tservers if h not in rack], reread=True)
            if ahead and rng.random() < 0.5:
                rack.append(rng.choice(ahead))
            return kind, sorted(rack)
        if kind == "restart":
            if not self.sim.down:
                return None, None
            host = rng.choice(sorted(self.sim.down))
            if (self.sim.disk_faults.get(host) == "eio" and self.sim.disks[host].reads_dropped
                    and rng.random() < 0.5):
                # killed on a failing disk: half the time the disk is mended before the server
                # starts again, so it starts on the pages the failed syncs left in its cache
                return "disk-clear", [host]
            return kind, host
        if kind == "partition":
            shuffled = rng.sample(hosts, len(hosts))
            cut = rng.randrange(1, len(hosts))
            return kind, [sorted(shuffled[:cut]), sorted(shuffled[cut:])]
        if kind == "isolate":
            return kind, rng.choice(hosts)
        if kind == "skew":
            bound = self.sim.clock_error_us / 2e6
            return kind, [rng.choice(hosts), rng.uniform(-bound, bound)]
        if kind == "drift":  # past the bound: commit-wait's promise is off, Raft's must hold
            offset = rng.uniform(self.sim.clock_error_us / 1e6, DRIFT_MAX_S)
            return kind, [rng.choice(hosts), round(rng.choice((-1, 1)) * offset, 6)]
        if kind == "flip":  # once per server: a corrupt instance file keeps it down
            fresh = [h for h in hosts if h not in self.sim.flipped and h != self.sim.spare and (
                h in self.sim.tservers or not impaired & set(self.sim.masters))]
            return (kind, [rng.choice(fresh)]) if self._damaged() < MAX_FLIPS else (None, None)
        if kind == "flip-newest":  # a tablet server's: its tablets' WALs
            fresh = [h for h in self.sim.tservers if h not in self.sim.flipped | self.sim.reprovisioned]
            if self._damaged() >= MAX_FLIPS or not fresh:
                return None, None
            return kind, [rng.choice(fresh), rng.getrandbits(32)]
        if kind == "damage":
            return self._choose_damage(rng, impaired)
        if kind == "damage-file":
            from harness.sim.stack_damage import AIMED_MODES

            return self._choose_damage(rng, impaired, tuple(AIMED_MODES))
        if kind == "forge":
            from harness.sim.stack_forge import FORGED_MODES

            return self._choose_damage(rng, impaired, tuple(FORGED_MODES))
        if kind == "garble":
            from harness.sim.stack_forge import choose

            return choose(self, rng)
        if kind == "copy-shrink":  # damage to the copy's source: within MAX_FLIPS
            from harness.sim.stack_forge import choose_shrink

            return choose_shrink(self, rng) if self._damaged() < MAX_FLIPS else (None, None)
        if kind == "reprovision":
            return self._choose_reprovision(rng, impaired)
        if kind == "master-swap":
            return kind, [round(rng.uniform(*SWAP_LINGER_S), 3)]
        if kind == "swap-book":
            return kind, [round(rng.uniform(*SWAP_LINGER_S), 3),
                          round(rng.uniform(*BOOK_FAIL_S), 3)]
        if kind == "unsafe":
            return choose_unsafe(self.sim, rng, impaired)
        if kind == "ddl":
            return choose_ddl(rng)
        if kind == "change-retry":
            return stack_change_retry.choose(rng)
        if kind == "ddl-retry":
            return choose_ddl(rng, rng.choice(("retry", "retry-create")))
        if kind == "full":  # a tablet server up, while no other disk fails
            up = [h for h in self.sim.tservers if h not in impaired and h not in self.sim.disk_faults]
            if not up or any(m != "slow" for m in self.sim.disk_faults.values()):
                return None, None
            return kind, [rng.choice(up), "full", rng.randrange(FULL_ROOM_BYTES)]
        if kind == "torn":  # a tablet server up and serving
            up = [h for h in self.sim.tservers if h not in impaired]
            return (kind, [rng.choice(up), round(rng.uniform(*TORN_SLOW_FSYNC_S), 6)]
                    ) if up else (None, None)
        if kind == "delay":
            return kind, [rng.choice(hosts), round(rng.uniform(*DELAY_S), 3),
                          round(rng.uniform(*DELAY_FOR_S), 3)]
        if kind == "overtake":
            return stack_overtake.choose(self, rng)
        if kind == "config-race":
            return stack_config_race.choose(self, rng)
        if kind == "master-cut":
            return stack_master_cut.choose(self, rng)
        if kind == "server-cut":
            return stack_server_cut.choose(self, rng)
        if kind == "disk":
            return self._choose_disk(rng, impaired)
        if kind == "transfer":
            return self._choose_transfer(rng)
        if kind == "copy-cut":
            return stack_copy_cut.choose(self, rng)
        if kind == "copy-delete":
            return stack_copy_delete.choose(self, rng)
        if kind == "maintenance":
            return stack_maintenance.choose(self, rng)
        if kind == "recopy":
            return stack_recopy.choose(self, rng)
        if kind == "lose":  # damage to a running server's files: within MAX_FLIPS
            return stack_lose.choose(self, rng) if self._damaged() < MAX_FLIPS else (None, None)
        if kind == "lose-snapshot":
            return (stack_lose.choose_snapshot(self, rng) if self._damaged() < MAX_FLIPS
                    else (None, None))
        if kind == "dying-disk":  # a test tablet's leader whose disk has no fault yet
            leaders = [(t, h) for t, (h, _) in self._test_tablets().items()
                       if h not in self.sim.disk_faults]
            if not leaders:
                return None, None
            tablet, host = rng.choice(leaders)
            return kind, [tablet, host, round(rng.uniform(*DYING_SLOW_FSYNC_S), 6),
                          round(rng.uniform(*DYING_EIO_RATE), 3),
                          round(rng.uniform(*DYING_AFTER_S), 3)]
        if kind in ("cut", "tombstone", "copy-race", "lease-race", "fail-copy", "copy-behind",
                    "superblock-behind", "failed-behind", "tombstone-rot"):
            return self._choose_copy_fault(kind, rng)
        return kind, None  # heal, reset; membership and masters pick their target when they run

    def draw_kind(self, rng: random.Random) -> str:
        """The next fault's kind, by the mix's weights. The classic mix draws uniformly from
        its kinds repeated by weight, as the nemesis always did, so its recorded seeds replay."""
        mix = self.sim.cfg.mix
        if mix.name == "classic":
            return rng.choice([k for k, w in mix.weights for _ in range(w)])
        kinds, weights = zip(*mix.weights, strict=True)
        return rng.choices(kinds, weights)[0]

    def _ahead_of_disk(self, hosts: list[str], reread: bool = False) -> list[str]:
        """Those of `hosts` up on a page cache that shows writes a failed sync dropped; with
        `reread`, only a process started on such a cache (a kill on a failing disk, then a
        restart). A kill goes to the first kind whenever there is one (an operator restarting
        a server whose replicas failed on EIO); a crash or power loss to the second half the
        time, as only a power loss tells whether the restarted process trusted those pages.
        The draw is made only when there is one, so other schedules replay as before."""
        return [h for h in hosts if h not in self.sim.down and self.sim.disks[h].ahead_of_disk()
                and (self.sim.disks[h].reads_dropped or not reread)]

    def _impaired(self) -> set[str]:
        """Hosts that cannot serve now: down, with a failing disk, or a master whose disk had a
        bit flipped (it may never start again)."""
        return (self.sim.down | {h for h, m in self.sim.disk_faults.items() if m != "slow"}
                | (self.sim.flipped & set(self.sim.masters)))

    def _test_tablets(self) -> dict[str, tuple[str, object]]:
        """Each test-table tablet with a live leader (as the simulator sees the servers): tablet
        -> (leader's host, its replica)."""
        out = {}
        for host in sorted(set(self.sim.servers) & set(self.sim.tservers)):
            for tablet, r in sorted(getattr(self.sim.servers[host], "replicas", {}).items()):
                if r.role.name == "LEADER" and not r.failed:
                    out[tablet] = (host, r)
        return out

    def pick_leader(self, rng: random.Random, leasing: bool = False):
        """A test tablet with a live leader, drawn from `rng`; with `leasing`, one whose leader
        serves lease reads now if any does. (tablet, leader's host, its replica), or None."""
        leaders = self._test_tablets()
        if leasing:
            now = self.sim.loop.time()
            leaders = {t: lr for t, lr in leaders.items()
                       if lr[1].reads.serves_lease_reads(now)} or leaders
        if not leaders:
            return None
        tablet = rng.choice(sorted(leaders))
        return (tablet, *leaders[tablet])

    def other_voters(self, replica) -> list[str]:
        """The hosts of `replica`'s fellow voters in its config, sorted."""
        by_uuid = {getattr(self.sim.servers.get(h), "uuid", None): h for h in self.sim.tservers}
        return sorted(by_uuid[u] for u, kind in replica.status()["config"]
                      if kind == "VOTER" and u != replica.uuid and u in by_uuid)

    def _choose_copy_fault(self, kind: str, rng: random.Random) -> tuple[str | None, object]:
        """Faults aimed at tablet copy, on one test tablet with leader L and voters F, R:
        - cut: the link L-F is cut (both ways), F still reaches everyone else: F campaigns while
          L keeps its quorum and lease through R;
        - tombstone: R's replica is tombstoned (ts.delete_tablet, as a failed disk or an operator
          leaves it) while still a voter, so L copies the tablet to it again, and until the copy
          installs R votes from its tombstone;
        - copy-race: both, R's tombstone `after` s past the cut (F's election timer is running by
          then, while R still keeps L's quorum, so L stays in power well into F's campaign),
          the link L-R slowed by `delay` s each way (so the append L
          sends R the moment the copy lands is answered that much later: a leader that counts
          the copy as an acknowledgement commits in that window), and R's disk made slow (fsyncs of up to `slow` s: the copy
          fsyncs each file, so it takes seconds, as a real tablet's does, where the simulator's
          small tablets copy in no virtual time at all), so F's election races the copy L sends
          R, and the copy's completion races L's deposition.
        - lease-race: on a tablet whose leader serves lease reads now (any, if none does), the
          cut, then R's tombstone `after` s later, quickly, and only then R's disk made a little
          slow (so the copy back takes a while, and a vote, saved first, is still quick): R acknowledged L's lease until the moment it stopped, and
          F's campaign, due an election timeout after the cut, comes while R is a tombstone and
          L's lease still runs. A tombstone that votes at once elects F under L's lease;
          copy-race's slow disk makes the tombstone itself slow, past the lease.
        - fail-copy: the cut (F lags while L and R commit), then R loses power and a bit
          flips in a batch of R's WAL for the tablet, so R comes back FAILED; R's replica is
          deleted while still a voter (as an operator, the master or a failed disk leaves it),
          R's disk made slow, and L, copying the tablet back to R, crashes `after` s later:
          F campaigns and needs R's vote. A FAILED replica's files prove no last OpId, so R
          must not vote while the copy is under way (it voted as if its log
          were empty, and F led without entries L and R had committed).
        - copy-behind: L's disk made slow; once L writes behind, R is tombstoned past L's
          synced end and copied back from it; `after` s later L crashes and restarts, and F
          is cut from L and R for `cut_s` (harness.sim.stack_copy_behind). A copy that
          installed behind R's tombstone leaves the entries R acknowledged on F alone, and L
          and R elect a leader without them.
        - superblock-behind: copy-behind with R's superblock lost across a power loss in place
          of its tombstone: R's log, left on its disk, is all that says what R acknowledged.
          Its delay slot says what else R lost: None, "cmeta" (its consensus metadata) or
          "wal" (a bit of its newest WAL segment flipped: its log does not read).
        - failed-behind: copy-behind with R's replica FAILED on a moment's failing syncs and
          deleted in place of its tombstone: only what R knew in memory when it was forgotten
          says what it acknowledged.
        - tombstone-rot: R tombstoned in place, then a bit of its consensus metadata flipped
          across a power loss; `after` s later L crashes, so F campaigns, asking R too
          (harness.sim.stack_tombstone_rot).
        A cut heals by itself after `cut_s` (or at the next heal), as Jepsen's partitions stop:
        cuts that only ever pile up leave no quorum anywhere, and a seed that is unavailable
        throughout finds nothing.
        Value: [tablet, L, F, R, slow, cut_s, delay, after] (hosts; cut leaves R out, tombstone
        L and F; slow, delay and after are None but for copy-race, cut_s None for tombstone;
        delay None for lease-race; only after for tombstone-rot)."""
        picked = self.pick_leader(rng, leasing=kind == "lease-race")
        if picked is None:
            return None, None
        tablet, host, r = picked
        voters = self.other_voters(r)
        if len(voters) < 2:
            return None, None
        f, rr = rng.sample(voters, 2)
        cut_s = round(rng.uniform(*CUT_S), 3)
        if kind == "cut":
            return kind, [tablet, host, f, None, None, cut_s, None, None]
        if kind == "tombstone":
            return kind, [tablet, None, None, rr, None, None, None, None]
        if kind == "lease-race":
            return kind, [tablet, host, f, rr, round(rng.uniform(*LEASE_RACE_SLOW_FSYNC_S), 6),
                          cut_s, None, round(rng.uniform(*TOMBSTONE_AFTER_S), 3)]
        if kind in ("copy-behind", "superblock-behind", "failed-behind"):
            lost = rng.choice((None, "cmeta", "wal")) if kind == "superblock-behind" else None
            if lost and (rr in self.sim.flipped or self._damaged() >= MAX_FLIPS):
                lost = None  # R's metadata lost is damage: within MAX_FLIPS, as the flips
            return kind, [tablet, host, f, rr, round(rng.uniform(*COPY_BEHIND_SLOW_FSYNC_S), 6),
                          round(rng.uniform(*COPY_BEHIND_CUT_S), 3), lost,
                          round(rng.uniform(*COPY_BEHIND_AFTER_S), 3)]
        if kind in ("fail-copy", "tombstone-rot") and (
                rr in self.sim.flipped or self._damaged() >= MAX_FLIPS):
            return None, None
        if kind == "tombstone-rot":
            return kind, [tablet, host, f, rr, None, None, None,
                          round(rng.uniform(*TOMBSTONE_ROT_AFTER_S), 3)]
        if kind == "fail-copy":
            return kind, [tablet, host, f, rr, round(rng.uniform(*COPY_RACE_SLOW_FSYNC_S), 6),
                          cut_s, round(rng.uniform(*FAIL_COPY_LAG_S), 3),
                          round(rng.uniform(*FAIL_COPY_CRASH_AFTER_S), 3)]
        slow = round(rng.uniform(*COPY_RACE_SLOW_FSYNC_S), 6)
        return kind, [tablet, host, f, rr, slow, cut_s, round(rng.uniform(*LINK_DELAY_S), 3),
                      round(rng.uniform(*TOMBSTONE_AFTER_S), 3)]

    def _choose_disk(self, rng: random.Random, impaired: set[str]) -> tuple[str | None, object]:
        """ENOSPC or failing fsyncs on one server at a time (a master only while the other two
        are well), or slow fsync on any server without a disk fault."""
        mode = rng.choice(["enospc", "eio", "slow"])
        if mode == "slow":
            free = [h for h in self.sim.masters + self.sim.tservers
                    if h not in self.sim.disk_faults and h != self.sim.spare]
            if not free:
                return None, None
            hi = round(rng.uniform(*SLOW_FSYNC_S), 6)
            return "disk", [rng.choice(free), "slow", round(hi / 10, 6), hi]
        if any(m != "slow" for m in self.sim.disk_faults.values()):
            return None, None
        well = [h for h in self.sim.masters + self.sim.tservers if h not in impaired and h != self.sim.spare
                and h not in self.sim.disk_faults
                and (h in self.sim.tservers or not impaired & set(self.sim.masters))]
        if not well:
            return None, None
        host = rng.choice(well)
        if mode == "enospc":
            return "disk", [host, mode, rng.randrange(ENOSPC_SLACK_BYTES)]
        return "disk", [host, mode, round(rng.uniform(*EIO_RATE), 3)]

    def _choose_damage(self, rng: random.Random, impaired: set[str],
                       modes: tuple[str, ...] | None = None) -> tuple[str | None, object]:
        """A damage mode (harness.sim.stack_damage.DAMAGE_MODES, or one of `modes`) on a server not
        damaged yet, within MAX_FLIPS as a flip (a master only while the others are well);
        mid-roll damages nothing, on a tablet server up and serving. Value: [host, mode, random
        bits]."""
        from harness.sim.stack_damage import DAMAGE_MODES

        mode = rng.choice(modes or DAMAGE_MODES)
        if mode == "mid-roll":
            up = [h for h in self.sim.tservers if h not in impaired]
            return ("damage", [rng.choice(up), mode]) if up else (None, None)
        fresh = [h for h in self.sim.masters + self.sim.tservers
                 if h not in self.sim.flipped | self.sim.reprovisioned and h != self.sim.spare
                 and (h in self.sim.tservers or not impaired & set(self.sim.masters))]
        if self._damaged() >= MAX_FLIPS or not fresh:
            return None, None
        return "damage", [rng.choice(fresh), mode, rng.getrandbits(32)]

    def _choose_reprovision(self, rng: random.Random, impaired: set[str]) -> tuple[str | None, object]:
        """A tablet server up whose disk is replaced by an empty one
        (harness.sim.stack_reprovision), once a seed, within MAX_FLIPS with flips and damage, on a
        server no flip or damage touched, and only while each of its tablets keeps a majority
        of its voters on servers that are well without it, as an operator replaces a server
        (ksck first): one voter of two wiped leaves a tablet that no Raft can bring back.
        Value: [host]."""
        if self.sim.reprovisioned or self._damaged() >= MAX_FLIPS:
            return None, None
        fresh = [h for h in self.sim.tservers if h not in self.sim.flipped | impaired
                 and self._replaceable(h, impaired)]
        return ("reprovision", [rng.choice(fresh)]) if fresh else (None, None)

    def _replaceable(self, host: str, impaired: set[str]) -> bool:
        """Every config a live replica holds (active and committed) that names `host`'s server
        as a voter keeps a majority of voters on other servers not impaired."""
        uuid = getattr(self.sim.servers.get(host), "uuid", None)
        if uuid is None:
            return False
        well = {getattr(s, "uuid", None) for h, s in self.sim.servers.items()
                if h != host and h not in impaired}
        for server in list(self.sim.servers.values()):
            for r in list(getattr(server, "replicas", {}).values()):
                if r.failed:
                    continue
                status = r.status()
                for config in (status["config"], status["committed_config"]):
                    voters = [m[0] for m in config if m[1] == "VOTER"]
                    if uuid in voters and sum(v in well for v in voters) <= len(voters) // 2:
                        return False
        return True

    def _damaged(self) -> int:
        """Servers whose disks lost or damaged data: flipped, damaged, or re-provisioned."""
        return len(self.sim.flipped | self.sim.reprovisioned)

    def _choose_transfer(self, rng: random.Random) -> tuple[str | None, object]:
        """A leader (of a tablet, or of the catalog on a master) as the simulator sees it, told
        to hand over to a random other voter, or to step down abruptly."""
        leaders = [(host, tablet, r) for host in sorted(self.sim.servers)
                   for tablet, r in sorted(getattr(self.sim.servers[host], "replicas", {}).items())
                   if r.role.name == "LEADER" and not r.failed]
        if not leaders:
            return None, None
        host, tablet, r = leaders[rng.randrange(len(leaders))]
        voters = [m[0] for m in r.status()["config"] if m[1] == "VOTER" and m[0] != r.uuid]
        new = rng.choice(voters) if voters and rng.random() < 0.7 else None
        return "transfer", [host, tablet, new]
