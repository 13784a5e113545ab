"""A failing disk, the operator's restart, and a power loss later: the fault that tells whether a
process restarted after failed syncs trusted what its page cache still showed.

After an fsync fails with EIO, Linux marks the pages it could not write clean and keeps them:
they read back as if they were on disk, no later sync writes them, and a power loss takes them.
A daemon that fails its replicas on EIO and is restarted by an operator (the machine stays up)
reads those pages on its way back; if it acknowledges anything on the strength of them (a WAL
tail it took for durable, a vote it read back), the next power loss loses an acknowledged
write or makes its files unreadable. The three steps, on a tablet leader's host:

- start: the data daemon's data dir (a lazyfs mount) fails every sync (`eio`) until one sync
  has failed there (bytes were dropped); the daemon is killed (its machine stays up: the cache
  stays), the disk mended (`mend`), the daemon started again. A daemon that died of the
  failing disk meanwhile (one starting then) is started again too. A disk that failed
  FAIL_WAIT_S while nothing synced there did nothing: the disk is mended and the start is a
  skip;
- the interval: the restarted daemon serves on what it read;
- stop (and the heal): that host loses power: the daemon killed, its unsynced and dropped bytes
  dropped (`lose`), the daemon started again.

The start is verified by what lazyfs counted: the bytes the failed syncs dropped (and, beside
them, how many the cache still held after the kill). The power
loss is observed as `lose-unfsynced` observes its own. The checkers judge the rest: the
history for lost writes, the logs checker for corruption no damage fault explains.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

from harness.cluster import ClusterError
from harness.control import Remote
from nemeses import observe
from nemeses.base import Context, Nemesis, draw_target, held_off
from nemeses.disk import LoseUnfsynced
from nemeses.lazyfs import control_command, stats_command
from nemeses.process import DEAD
from nemeses.registry import Package, register

FAIL_WAIT_S = 5.0  # how long the disk fails at most, waiting for a sync to fail there
TOTAL = "dropped_total_bytes"  # lazyfs's count of every byte a failed sync dropped
POLL_S = 0.2


@dataclass
class FailingDisk(Nemesis):
    ctx: Context = None  # type: ignore[assignment]  # set by the package's build
    name: str = "failing-disk"
    restarted: str | None = None  # the host whose daemon restarted on a failed disk's cache

    def start(self, choice: dict) -> dict:
        """On a tablet leader's host (the plan's fallback host when none is known): a leader
        syncs its log whenever a write comes, so its disk's failure is met at once. Every
        replica there fails until the restart, so it fires in the faults' one turn to take a
        replica (nemeses.redundancy), and only on a host whose every group can spare one: a
        group the membership fault shrank to two voters, or whose replica a disk fault
        damaged, would keep no live majority meanwhile."""
        host, resolved = self.ctx.resolve_leader(choice["target"])
        with self.ctx.redundancy.taking(self.name) as other:
            if other is not None:
                return held_off(f"{other} is taking a replica from a group now", host=host)
            # Asked of the hosts only when some group cannot spare one: a host slowed by
            # another fault (a packet delay) often does not answer a status call at once, and
            # asked every time, that held the fault off for its whole window in every cell.
            at_risk = self.ctx.db.cannot_spare() | self.ctx.redundancy.spared_for(self.name)
            if at_risk:
                host, resolved, why = self._clear_host(host, resolved, at_risk)
                if why:
                    return held_off(why, host=host)
            return self._fail(host, resolved)

    def _clear_host(self, host: str, resolved: str, at_risk: set[str]
                    ) -> tuple[str, str, str | None]:
        """The planned host if it holds no replica of a group `at_risk`; else another tablet
        leader's host that holds none ("another-leader"), so the fault still fires on a
        leader whose disk is met at once; or why there is none."""
        db = self.ctx.db
        why = []
        for h in [host, *sorted(set(db.tablet_leaders().values()) - {host})]:
            if db.held_by(h, db.data_daemon):
                continue
            groups = db.groups_on(h)
            if groups is None:
                why.append(f"{h} did not say which groups it holds")
            elif short := groups & at_risk:
                why.append(f"{h} holds a replica of {', '.join(sorted(short))}")
            else:
                return h, resolved if h == host else "another-leader", None
        return host, resolved, (f"no tablet leader's host clear of the groups that cannot spare "
                                f"a replica now ({', '.join(sorted(at_risk))}): "
                                f"{'; '.join(why) or 'every one is held by another fault'}")

    def _fail(self, host: str, resolved: str) -> dict:
        db = self.ctx.db
        daemon = db.data_daemon
        holder = db.claim(host, daemon, self.name)
        if holder:
            return held_off(f"{host}'s {daemon} is held by {holder}")
        mount = db.data_dir(daemon)
        remote = self.ctx.remotes[host]
        # Counted by every byte a failed sync ever dropped there, not by those held now: a
        # daemon that removes a temp file after its sync failed, then is killed, leaves none held
        # (lazyfs forgets an unlinked file's bytes), and the start read as not in force.
        before = self._stats(remote, mount).get(TOTAL, 0)  # left by an earlier start
        stats: dict = {}
        killed = died = False
        try:
            remote.sh(control_command(mount, "eio"))
            try:
                deadline = time.monotonic() + FAIL_WAIT_S
                while True:
                    stats = self._stats(remote, mount)
                    if stats.get(TOTAL, 0) > before or time.monotonic() > deadline:
                        break
                    time.sleep(POLL_S)
                if stats.get(TOTAL, 0) > before:
                    killed = True  # before the call: a kill that raised may still have killed
                    db.kill(host, daemon)
                    stats = {**stats, **self._stats(remote, mount)}
            finally:
                remote.sh(control_command(mount, "mend"))
            # A daemon starting when the disk began to fail (another fault's restart) can die
            # of it before any sync drops a byte ("cannot start: EIO"): the fault fired, and
            # its restart is this fault's to make. Released as it was, it stayed down through
            # the final heal, and the convergence check blamed the engine for a leaderless tablet.
            died = not killed and db.process_states(host, daemon)[daemon] in DEAD
        finally:
            if killed or died:
                db.give_back(host, daemon, self.name)
            else:
                db.release(host, daemon, self.name)
        if died:
            self.restarted, self.active = host, True
            return {"host": host, "resolved": resolved, "died_on_failing_disk": True,
                    "observed": observe.observation(True, died_on_failing_disk=True)}
        if not killed:
            return {"skipped": f"no sync failed on {host} in {FAIL_WAIT_S:g} s of a failing disk "
                               "(nothing was written there)", "host": host, "resolved": resolved}
        self.restarted, self.active = host, True
        dropped, held = stats.get(TOTAL, 0) - before, stats.get("dropped_bytes", 0)
        return {"host": host, "resolved": resolved, "dropped_bytes": dropped,
                "observed": observe.observation(dropped > 0, dropped_bytes=dropped,
                                                held_in_cache=held, failing=stats.get("failing"))}

    @staticmethod
    def _stats(remote: Remote, mount: str) -> dict:
        try:
            return json.loads(remote.sh(stats_command(mount)).stdout)
        except (ClusterError, ValueError):
            return {}

    def stop(self) -> dict:
        """The power loss of the host whose daemon restarted on a failed disk's cache."""
        host, self.restarted, self.active = self.restarted, None, False
        if host is None:
            return {}
        loss = LoseUnfsynced(db=self.ctx.db, hosts=[host], remotes=self.ctx.remotes, name=self.name)
        return loss.start({})


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": draw_target(rng, hosts, ("tablet-leader",))}


register(Package("failing-disk", heal_rank=81, draw=draw, lazyfs=True, needs=frozenset({"leaders", "fsync"}),
                 build=lambda ctx: FailingDisk(ctx=ctx)))
