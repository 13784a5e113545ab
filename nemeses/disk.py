"""Disk corruption on a stopped node: a flipped bit or a truncation in a WAL segment or in a
consensus-metadata file, then a restart. The node must refuse the damaged replica with a clear
message (its WAL CRCs and metadata checksums catch it) and keep serving its other tablets; it must
never serve wrong data.

One mode is aimed (issue 32): `head-flip` flips a bit in the header of the newest batch of an
unfinished WAL segment, the one flip a reader could take for a torn write. The replica must
come back FAILED; one that runs again cut the batch as torn (the logs checker's
`undetected-damage`).

Damage is permanent until the test's teardown (there is no tablet copy to repair a replica yet),
so the nemesis damages at most one replica of each tablet over a whole run: a minority of a
3-replica config. Beyond that it would only show that a majority of failed disks loses data,
which no replicated system survives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.control import Remote
from harness.db import DATA, TesseraDB
from nemeses.base import Nemesis
from nemeses.registry import Package, register

# Runs on the host: pick a file, damage it, print what was done as JSON.
_DAMAGE = r"""
import json, os, random, sys
rng = random.Random(int(sys.argv[1]))
root = sys.argv[2]
spared = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()  # tablets damaged elsewhere
files = []
for sub, kind in (("wals", "wal"), ("consensus-meta", "cmeta")):
    base = os.path.join(root, sub)
    for dirpath, _, names in os.walk(base):
        tablet = os.path.basename(dirpath) if kind == "wal" else None
        files += [(kind, os.path.join(dirpath, n)) for n in names
                  if not n.startswith(".") and os.path.getsize(os.path.join(dirpath, n)) > 64
                  and (tablet or n) not in spared]
if not files:
    print(json.dumps({"skipped": "no WAL or metadata files yet"})); sys.exit(0)
mode = sys.argv[4] if len(sys.argv) > 4 else rng.choice(["bitflip", "bitflip", "truncate",
                                                          "head-flip"])


def newest_head(path):
    # Offset of the newest batch header of an unfinished segment (no footer), or None. The
    # format is node/wal/format.py's: header = magic(8) version(2) tid-length(2) seq(8) tid
    # crc(4); batch = length u32, kind u16, reserved u16, data crc u32, header crc u32, data.
    import struct
    buf = open(path, "rb").read()
    if len(buf) < 24 or buf[:8] != b"TSRWALSG" or buf[-36:].startswith(b"TSRWALFT"):
        return None
    off, last = 24 + struct.unpack_from("<H", buf, 10)[0], None
    while off + 16 <= len(buf):
        length, kind, reserved = struct.unpack_from("<IHH", buf, off)
        if kind not in (1, 2) or reserved or off + 16 + length > len(buf):
            break
        last, off = off, off + 16 + length
    return last


if mode == "head-flip":
    heads = [(p, o) for k, p in sorted(files) if k == "wal" and (o := newest_head(p)) is not None]
    if heads:
        path, start = rng.choice(heads)
        offset, bit = start + rng.randrange(16), rng.randrange(8)
        with open(path, "r+b") as f:
            f.seek(offset); b = f.read(1)[0]; f.seek(offset); f.write(bytes([b ^ (1 << bit)]))
            f.flush(); os.fsync(f.fileno())
        print(json.dumps({"file": path, "kind": "wal", "mode": mode, "offset": offset,
                          "bit": bit, "batch": start}))
        sys.exit(0)
    mode = "bitflip"  # no unfinished segment with a batch: an ordinary flip
kind, path = rng.choice(sorted(files))
data = open(path, "rb").read()
size = len(data.rstrip(b"\0")) or len(data)  # preallocated zeros hold nothing to damage
if mode == "bitflip":
    offset, bit = rng.randrange(32, size), rng.randrange(8)
    with open(path, "r+b") as f:
        f.seek(offset); b = f.read(1)[0]; f.seek(offset); f.write(bytes([b ^ (1 << bit)]))
        f.flush(); os.fsync(f.fileno())
    print(json.dumps({"file": path, "kind": kind, "mode": mode, "offset": offset, "bit": bit}))
else:
    length = rng.randrange(16, size)
    os.truncate(path, length)
    print(json.dumps({"file": path, "kind": kind, "mode": mode, "from": size, "to": length}))
"""


@dataclass
class DiskCorruption(Nemesis):
    db: TesseraDB = None
    hosts: list[str] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    name: str = "disk"
    damaged: dict = field(default_factory=dict)  # tablet -> the one host whose replica was hit

    def start(self, choice: dict) -> dict:
        import json

        host = choice["host"]
        spared = sorted(t for t, h in self.damaged.items() if h != host)
        self.db.kill(host, "tserver")
        out = self.remotes[host].run(["python3", "-c", _DAMAGE, str(choice["damage_seed"]),
                                      f"{DATA}/tserver", ",".join(spared)]).stdout
        self.db.start(host, "tserver")
        done = json.loads(out.strip().splitlines()[-1])
        if "file" in done:
            done["replica"] = self._outcome(host, done["file"])
            self.damaged[done["replica"]["tablet"]] = host
        self.active = True
        return {"host": host, **done}

    def _outcome(self, host: str, path: str) -> dict:
        """How the restarted server treats the damaged tablet: FAILED naming the file, or
        RUNNING when the damage was a torn tail that bootstrap may legitimately cut off."""
        import time

        from node.protocol import ServerStatus

        tablet = path.rstrip("/").split("/")[-2 if "/wals/" in path else -1]
        target = [h for h in self.db.hosts if h.name == host]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = self.db.ask_each(target, "tserver", "ts.status", ServerStatus).get(host)
            rep = next((t for t in st.tablets if t.tablet_id == tablet), None) if st else None
            if rep is not None:  # the server's uuid: how its leaders' log lines name it
                return {"tablet": tablet, "state": rep.state, "error": rep.error, "uuid": st.uuid}
            time.sleep(0.2)
        return {"tablet": tablet, "state": "UNKNOWN", "error": "server did not answer"}

    def stop(self) -> dict:
        self.active = False  # the damage stays; the node was restarted right after it
        return {"damaged": dict(sorted(self.damaged.items()))}


@dataclass
class LoseUnfsynced(Nemesis):
    """Power loss: every data daemon (Tessera: tablet server) is killed at once and its data dir
    (a lazyfs mount) drops every write not yet fsynced, then all restart. With Tessera's
    log_force_fsync_all=true nothing acknowledged may be lost; with false, or with a system that
    never fsyncs (PySyncObj), acknowledged writes vanish and the checker must say so."""

    db: object = None  # harness.db.Deployment
    hosts: list[str] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    name: str = "lose-unfsynced"

    def start(self, choice: dict) -> dict:
        import json

        from nemeses.lazyfs import control_command

        for h in self.hosts:
            self.db.kill(h, self.db.data_daemon)  # until gone: no write may land after the loss
        lost = {}
        for h in self.hosts:
            mount = self.db.data_dir(self.db.data_daemon)
            stats = self.remotes[h].sh(f"cat {mount}/.lazyfs-control").stdout
            self.remotes[h].sh(control_command(mount, "lose"))
            lost[h] = json.loads(stats).get("unsynced_bytes", 0)
        for h in self.hosts:
            self.db.start(h, self.db.data_daemon)
        return {"power_loss": self.hosts, "unsynced_bytes_dropped": lost}

    def stop(self) -> dict:
        return {}


def draw_disk(rng: random.Random, hosts: list[str]) -> dict:
    """The host, and the seed of the file, offset and mode the damage script picks there."""
    return {"host": rng.choice(hosts), "damage_seed": rng.randrange(2**31)}


register(Package("disk", heal_rank=70, draw=draw_disk, needs=frozenset({"wal"}),
                 build=lambda ctx: DiskCorruption(
    db=ctx.db, hosts=ctx.names, remotes=ctx.remotes)))
register(Package("lose-unfsynced", heal_rank=80, draw=lambda rng, hosts: {}, lazyfs=True,
                 build=lambda ctx: LoseUnfsynced(db=ctx.db, hosts=ctx.names, remotes=ctx.remotes)))
