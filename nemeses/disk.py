"""Disk corruption on a stopped node: a flipped bit or a truncation in one of the files the
system under test keeps its replicated state in, then a restart. The system must refuse the
damaged data loudly (checksums catch it) or recover it provably (its peers hold every
acknowledged write); it must never serve wrong data.

One mode needs no stop: `lose` deletes a file under the running daemon, as an operator's stray
rm or a file system check moving it to lost+found does. A stopped daemon meets a missing file
only at its next start; a running one meets it wherever it next reads, deletes or copies the
file (log GC, a tablet copy's session, a tombstone), and each of those must refuse it or fail
the replica loudly. The newest WAL segment is never taken: its loss takes acknowledged entries
with nothing left on the disk to say so (the log simply ends earlier), which no system can see.

The nemesis knows no system's files. A system that offers "disk" (harness.deployment.Deployment.offers)
says, through `disk_layout()`, which daemon to stop, which files to pick from and how they group
into replicas, and which damage modes apply; `damaged(host, done)` says how its restarted daemon
took the damage, and `repair(host, done)` mends what an operator would mend at the heal (etcd:
the damaged member is replaced by a fresh one; Tessera: nothing, the replica stays FAILED).

One mode is aimed: `newest-flip` flips a bit anywhere in the newest batch of an unfinished
Tessera WAL segment (its header or its data), the flips a reader could take for a torn write:
a header's length cannot be trusted, and data next to zero runs looked like
unwritten space to the reader before sector stamps. The process was killed,
not the machine, so the batch is whole on disk. The replica must come back FAILED, unless the
flip hit a sector stamp (no data changed); one that runs again cut the batch as torn (the logs
checker's `undetected-damage`). A truncation of a Tessera WAL segment must FAIL its replica too: a crash
never shrinks a preallocated segment, so a replica that runs again took the cut for a torn tail
and dropped fsynced entries (once, such a replica's vote then elected a leader without
an acknowledged append, which the list-append checker caught as incompatible orders).

The nemesis damages at most one replica of each group over a whole run (a tablet, or etcd's one
cluster): a minority; and never one of a group that cannot spare it now
(`Deployment.cannot_spare`: the membership fault shrank it to two voters, where one replica is
a majority). It looks and damages in the faults' one turn to take a replica
(nemeses.redundancy), so no removal lands between its look and its damage. Beyond that it
would only show that a majority of failed disks loses data, which no replicated system
survives. The completion records the damaged daemon's log length
then, and a repair's the length before it, so the logs checker can tell the system's answer to
the damage from what came before and after.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from harness.cluster import ClusterError
from harness.control import Remote
from nemeses import observe
from nemeses.base import Nemesis, held_off
from nemeses.redundancy import Redundancy
from nemeses.registry import Package, register


@dataclass(frozen=True)
class DiskLayout:
    """Where a system keeps the state the disk nemesis may damage, on every host."""

    daemon: str  # stopped for the damage, started right after it
    root: str  # its data directory
    # (subdirectory of root, kind, group): the files under it that may be damaged, what the
    # completion calls them, and which replica each belongs to: "dir" (the name of the file's
    # directory), "name" (the file's own name), or a literal group name
    files: tuple[tuple[str, str, str], ...]
    modes: tuple[str, ...] = ("bitflip", "bitflip", "truncate")  # drawn from; repeats weigh
    log: str = ""  # the daemon's log file
    lose_files: tuple[tuple[str, str, str], ...] = ()  # as `files`: more the lose mode may take

    def mode(self, seed: int) -> str:
        """The damage mode a start of the nemesis with `seed` applies."""
        return random.Random(seed).choice(self.modes)


def damage_args(layout: DiskLayout, seed: int, spared: list[str], mode: str) -> list[str]:
    """The damage script's command line on a host: `python3 -c _DAMAGE ...`."""
    spec = {"root": layout.root, "files": layout.files, "lose_files": layout.lose_files,
            "spared": spared, "mode": mode}
    return ["python3", "-c", _DAMAGE, str(seed), json.dumps(spec)]


# Runs on the host: pick a file, damage it, print what was done as JSON.
_DAMAGE = r"""
import json, os, random, sys
rng = random.Random(int(sys.argv[1]))
spec = json.loads(sys.argv[2])
spared = set(spec["spared"])  # groups damaged on another host, or that cannot spare one now
mode = spec["mode"]


def walk(entries):
    found = []
    for sub, kind, group in entries:
        for dirpath, _, names in os.walk(os.path.join(spec["root"], sub)):
            for n in names:
                g = os.path.basename(dirpath) if group == "dir" else n if group == "name" else group
                if (not n.startswith(".") and os.path.getsize(os.path.join(dirpath, n)) > 64
                        and g not in spared):
                    found.append((kind, os.path.join(dirpath, n), g))
    return found


files = walk(spec["files"] + (spec["lose_files"] if mode == "lose" else []))
if mode == "lose":  # never a WAL's newest segment (a Tessera segment is wal-NNNNNNNNN)
    newest = {max(segs) for d in {os.path.dirname(p) for k, p, _ in files if k == "wal"}
              if (segs := [os.path.join(d, n) for n in os.listdir(d) if n.startswith("wal-")])}
    files = [f for f in files if f[1] not in newest]
if not files:
    print(json.dumps({"skipped": "no file to damage: none written yet, or each one's replica "
                                 "was damaged on another host"})); sys.exit(0)


def newest_batch(path):
    # (offset, stored end, stamped) of the newest batch of an unfinished Tessera segment (no
    # footer), or None. The format is node/wal/format.py's: header = magic(8) version(2)
    # tid-length(2) seq(8) [preallocated length(8), version 2 on] tid crc(4); batch = length
    # u32, kind u16, reserved u16, data crc u32, header crc u32, data; version 3 on, a stamp
    # byte before each data byte at a multiple of 512 (node/wal/segment.py stored_end).
    import struct
    buf = open(path, "rb").read()
    if len(buf) < 24 or buf[:8] != b"TSRWALSG" or buf[-36:].startswith(b"TSRWALFT"):
        return None
    version = struct.unpack_from("<H", buf, 8)[0]
    fixed = 24 if version == 1 else 32 if version < 4 else 40
    off, last = fixed + struct.unpack_from("<H", buf, 10)[0], None
    while off + 16 <= len(buf):
        length, kind, reserved = struct.unpack_from("<IHH", buf, off)
        start = end = off + 16
        while version >= 3 and (grown := start + length + len(range(-(-start // 512) * 512, end, 512))) != end:
            end = grown
        end = end if version >= 3 else start + length
        if kind not in (1, 2) or reserved or end > len(buf):
            break
        last, off = (off, end, version >= 3), end
    return last


def flip(path, offset, bit):
    with open(path, "r+b") as f:
        f.seek(offset); b = f.read(1)[0]; f.seek(offset); f.write(bytes([b ^ (1 << bit)]))
        f.flush(); os.fsync(f.fileno())
    return {"before": b, "after": b ^ (1 << bit)}


if mode == "newest-flip":
    heads = [(p, g, o) for k, p, g in sorted(files)
             if k == "wal" and (o := newest_batch(p)) is not None]
    if heads:
        path, group, (start, end, stamped) = rng.choice(heads)
        offset, bit = rng.randrange(start, end), rng.randrange(8)
        byte = flip(path, offset, bit)
        # a stamp marks a sector written and holds no data: flipping it changes nothing
        stamp = stamped and offset % 512 == 0 and offset >= start + 16
        print(json.dumps({"file": path, "kind": "wal", "group": group, "mode": mode,
                          "offset": offset, "bit": bit, "batch": start, "batch_end": end,
                          "stamp": stamp, **byte}))
        sys.exit(0)
    mode = "bitflip"  # no unfinished segment with a batch: an ordinary flip
files.sort()
if mode == "lose":
    kind, path, group = rng.choice(files)
    size = os.path.getsize(path)
    os.remove(path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(fd); os.close(fd)
    print(json.dumps({"file": path, "kind": kind, "group": group, "mode": mode, "size": size}))
    sys.exit(0)
while True:
    kind, path, group = files.pop(rng.randrange(len(files)))
    size = len(open(path, "rb").read().rstrip(b"\0"))  # preallocated zeros hold nothing
    if size > 64:
        break
    if not files:
        print(json.dumps({"skipped": "every file is preallocated space only"})); sys.exit(0)
done = {"file": path, "kind": kind, "group": group, "mode": mode}
if kind == "wal":  # where a torn write could be: only the newest batch of an unfinished segment
    done["newest_batch"] = (newest_batch(path) or (None,))[0]
if mode == "bitflip":
    offset, bit = rng.randrange(32, size), rng.randrange(8)
    done.update(offset=offset, bit=bit, **flip(path, offset, bit))
else:
    length = rng.randrange(16, size)
    os.truncate(path, length)
    done.update({"from": size, "to": length})
print(json.dumps(done))
"""


# Runs on the host: the byte at argv[2] of file argv[1], as a number.
_READ_BYTE = "import sys; f = open(sys.argv[1], 'rb'); f.seek(int(sys.argv[2])); print(f.read(1)[0])"


@dataclass
class DiskCorruption(Nemesis):
    db: object = None  # harness.deployment.Deployment offering "disk"
    hosts: list[str] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    name: str = "disk"
    damaged: dict = field(default_factory=dict)  # group -> the one host whose replica was hit
    _unrepaired: list = field(default_factory=list)  # (host, done) for the heal's repair
    redundancy: Redundancy = field(default_factory=Redundancy)  # shared by the run's faults

    def start(self, choice: dict) -> dict:
        """Damage one file of a replica on the plan's host, in the faults' one turn to take
        a replica (nemeses.redundancy): a removal that looked at the group before this
        damage and committed after it would leave the group one live voter of two."""
        with self.redundancy.taking(self.name) as other:
            if other is not None:
                return held_off(f"{other} is taking a replica from a group now",
                                host=choice["host"])
            return self._damage(choice)

    def _damage(self, choice: dict) -> dict:
        layout = self.db.disk_layout()
        host = choice["host"]
        if holder := self.db.claim(host, layout.daemon, self.name):
            # killed or paused by another fault: stopping and restarting it here would end
            # that fault early (a paused daemon replaced by a fresh one) while the history
            # shows it in force
            return held_off(f"{host}'s {layout.daemon} is held by {holder}", host=host)
        # A minority means a minority of the voters a group has now: one the membership
        # fault shrank to two cannot spare a replica.
        spared = sorted({g for g, h in self.damaged.items() if h != host} | self.db.cannot_spare()
                        | self.redundancy.spared_for(self.name))
        mode = layout.mode(choice["damage_seed"])
        stop = mode != "lose"  # a file lost under the running daemon: no stop, no restart
        started = not stop
        try:
            if stop:
                self.db.kill(host, layout.daemon)
            log_line = self._log_length(host, layout.log)
            out = self.remotes[host].run(damage_args(layout, choice["damage_seed"], spared,
                                                     mode)).stdout
            done = json.loads(out.strip().splitlines()[-1])
            if "file" in done:  # recorded, so the turn can go: the restart and answer need none
                self.redundancy.lose(done["group"], self.name)
            self.redundancy.let_go(self.name)
            observed = self._observe(host, done) if "file" in done else None
            if stop:
                self.db.start(host, layout.daemon, by=self.name)
                started = True
            if "file" in done:
                done["log"], done["log_line"] = layout.log.rsplit("/", 1)[-1], log_line
                # Still held while its answer to the damage is read: a pause that took the
                # restarted daemon meanwhile left the answer unread and the run unknown.
                done["replica"] = self.db.damaged(host, done)
        finally:
            if started:
                self.db.release(host, layout.daemon, self.name)
            else:  # the damage failed before the restart: restart it, then let it go
                self.db.give_back(host, layout.daemon, self.name)
        if "file" in done:
            self.damaged[done["group"]] = host
            self._unrepaired.append((host, done))
            done["observed"] = observed
        self.active = True
        return {"host": host, **done}

    def _observe(self, host: str, done: dict) -> dict:
        """The damage read back from the file on the host, by a process of its own, before the
        daemon starts again: the flipped byte as written, the file at its cut length, or no file
        by the lost one's name."""
        if done["mode"] == "lose":
            there = self.remotes[host].run(["test", "-e", done["file"]], check=False).exit_status
            return observe.observation(there == 1, exists=there == 0)
        if "to" in done:
            out = self.remotes[host].run(["stat", "-c", "%s", done["file"]], check=False).stdout
            size = int(out) if out.strip().isdigit() else None
            return observe.observation(size == done["to"], size=size, expected=done["to"])
        read = self.remotes[host].run(["python3", "-c", _READ_BYTE, done["file"],
                                       str(done["offset"])], check=False).stdout.strip()
        byte = int(read) if read.isdigit() else None
        return observe.observation(byte == done["after"], byte=byte, expected=done["after"],
                                   before=done["before"])

    def _log_length(self, host: str, log: str) -> int:
        """Lines in the daemon's log now: what the logs checker reads after is the answer."""
        if not log:
            return 0
        out = self.remotes[host].sh(f"wc -l < {log} 2>/dev/null || echo 0", check=False).stdout
        return int(out.split()[0]) if out.split() and out.split()[0].isdigit() else 0

    def stop(self) -> dict:
        """The damage stays (the node was restarted right after it); what the system's repair
        mends is mended."""
        layout = self.db.disk_layout()
        repaired, deferred, left = [], {}, []
        try:
            while self._unrepaired:
                host, done = self._unrepaired[0]
                # A repair replaces the daemon (etcd: removed, wiped, added back): one another
                # fault holds killed or paused waits for the heal, which undoes that fault
                # first (heal_rank). Replaced meanwhile, a paused etcd member was killed and
                # wiped under the pause, and the new one the pause held never answered.
                if holder := self.db.claim(host, layout.daemon, self.name):
                    deferred[host] = holder
                    left.append(self._unrepaired.pop(0))
                    continue
                try:
                    log_line = self._log_length(host, layout.log)  # after: the mended daemon's
                    what = self.db.repair(host, done, by=self.name)
                finally:
                    self.db.release(host, layout.daemon, self.name)
                self._unrepaired.pop(0)
                if what:  # whole again: its group may be damaged again, on any host
                    repaired.append({"host": host, **what, "log": done["log"],
                                     "log_line": log_line})
                    self.damaged.pop(done["group"], None)
                    self.redundancy.mend(done["group"], self.name)
        finally:
            self._unrepaired = left + self._unrepaired
        self.active = bool(self._unrepaired)  # the heal's stop repairs what waited
        return {"damaged": dict(sorted(self.damaged.items())), "repaired": repaired,
                **({"deferred": deferred} if deferred else {})}


@dataclass
class LoseUnfsynced(Nemesis):
    """Power loss: every data daemon (Tessera: tablet server) is killed at once and its data dir
    (a lazyfs mount) drops every write not yet fsynced, then all restart. With Tessera's
    log_force_fsync_all=true nothing acknowledged may be lost; with false, or with a system that
    never fsyncs (PySyncObj), acknowledged writes vanish and the checker must say so."""

    db: object = None  # harness.deployment.Deployment
    hosts: list[str] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    name: str = "lose-unfsynced"

    def start(self, choice: dict) -> dict:
        """Every daemon killed is started again, whatever the loss step met: a loss that could
        not be done on a host is named in `lose_failed`, never a dead cluster left behind
        (once an SSH channel closed under `echo lose` and the run ended with every tablet
        server down and its verdict unknown)."""
        db, daemon = self.db, self.db.data_daemon
        serving = [h for h in self.hosts if daemon in db.daemons(h)]  # MariaDB's single: one
        held = {h: holder for h in serving if (holder := db.claim(h, daemon, self.name))}
        targets = [h for h in serving if h not in held]
        if not targets:
            skip = (f"no host's {daemon} to cut the power of: held by another fault {held}, "
                    f"running none {sorted(set(self.hosts) - set(serving))}")
            return held_off(skip) if held else {"skipped": skip}
        lost, failed = {}, {}
        try:
            # all at once, as a power loss is; each until gone: no write lands after the loss
            observe.each(targets, lambda h: db.kill(h, daemon))
            states = observe.each(targets, lambda h: db.process_states(h, daemon)[daemon])
            for h in targets:
                try:
                    lost[h] = self._lose(h)
                except ClusterError as e:
                    failed[h] = str(e)
        finally:
            for h in targets:
                db.give_back(h, daemon, self.name)
        running = {h: s for h, s in states.items() if s not in ("gone", "Z", "X")}
        seen = {"daemons_at_loss": states, **({"lose_failed": failed} if failed else {})}
        out = {"power_loss": targets, "unsynced_bytes_dropped": lost,
               "observed": observe.observation(not failed and not running, **seen)}
        return out | ({"lose_failed": failed} if failed else {}) | ({"held": held} if held else {})

    def _lose(self, host: str) -> int:
        """Drop the unsynced bytes of `host`'s data dir (tried twice: `lose` again drops
        nothing more, its writers are dead); how many there were, with those a failed sync
        left in the cache (the failing-disk fault's)."""
        from nemeses.lazyfs import control_command, stats_command

        mount = self.db.data_dir(self.db.data_daemon)
        stats = self.remotes[host].sh(stats_command(mount)).stdout
        try:
            self.remotes[host].sh(control_command(mount, "lose"))
        except ClusterError:
            self.remotes[host].sh(control_command(mount, "lose"))
        seen = json.loads(stats)
        return seen.get("unsynced_bytes", 0) + seen.get("dropped_bytes", 0)

    def stop(self) -> dict:
        return {}


def draw_disk(rng: random.Random, hosts: list[str]) -> dict:
    """The host, and the seed of the file, offset and mode the damage script picks there."""
    return {"host": rng.choice(hosts), "damage_seed": rng.randrange(2**31)}


register(Package("disk", heal_rank=70, draw=draw_disk, needs=frozenset({"disk"}),
                 build=lambda ctx: DiskCorruption(
    db=ctx.db, hosts=ctx.names, remotes=ctx.remotes, redundancy=ctx.redundancy)))
register(Package("lose-unfsynced", heal_rank=80, draw=lambda rng, hosts: {}, lazyfs=True,
                 build=lambda ctx: LoseUnfsynced(db=ctx.db, hosts=ctx.names, remotes=ctx.remotes)))
