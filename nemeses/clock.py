"""Clock faults. Network-namespace hosts share one kernel clock, so each daemon runs under
libfaketime with a per-host timestamp file (FAKETIME_TIMESTAMP_FILE, re-read on every call with
FAKETIME_NO_CACHE=1) and only its wall clock is skewed: the monotonic clock stays real
(FAKETIME_DONT_FAKE_MONOTONIC=1), which is also why node code never calls time.sleep (measured
here: it raises EINVAL under faketime) and times everything with the monotonic clock.

A VM has a kernel clock of its own (Context.clock_source "kernel"): there the fault steps the
host's real-time clock itself (clock_settime, relative steps that the fault undoes), as Jepsen's
bump-time does, the daemons run without libfaketime, and the monotonic clock is again untouched.

Faults, as Jepsen's: bump (jump a host's clock by ± milliseconds to minutes), strobe (flip it back
and forth quickly for a while), and reset. Every change records each host's offset in
milliseconds, which the report plots; a bump also records each offset as read back on the host
right after it (`measured_ms`), and a strobe whether its loop runs, as Jepsen's time nemesis
returns what bump-time did.
"""

from __future__ import annotations

import random
import shlex
import time
from dataclasses import dataclass, field

from harness import pidfile
from harness.control import Remote
from nemeses import observe
from nemeses.base import Nemesis, choose_targets
from nemeses.registry import Package, register

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
FAKETIME_FILE = "/var/lib/tessera/faketime"
STROBE_PID = "/var/lib/tessera/strobe.pid"
STEPPED_FILE = "/var/lib/tessera/clock-stepped"  # kernel: the net step in ms this fault made
TOLERANCE_MS = 25.0  # a bump's read-back may differ from the step by this, beyond its reading


def faketime_env() -> dict[str, str]:
    """Environment under which the DB adapter starts daemons when clocks may be skewed."""
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": FAKETIME_FILE,
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def draw_clock(rng: random.Random, hosts: list[str], kinds: tuple = ("bump", "bump", "strobe")) -> dict:
    """Bumps are the common case, as in Jepsen: ms to minutes, either way, log-uniform so small
    and large skews both occur. A strobe flips a host's clock back and forth for seconds."""
    targets = choose_targets(rng.choice(["one", "minority", "majority"]), hosts, rng)
    if rng.choice(kinds) == "bump":
        return {"fault": "bump", "targets": targets,
                "offsets_ms": {h: round(rng.choice([-1, 1]) * 10 ** rng.uniform(1, 5.1), 1)
                               for h in targets}}
    return {"fault": "strobe", "targets": targets, "delta_ms": round(10 ** rng.uniform(1, 3.5), 1),
            "period_ms": rng.choice([10, 50, 200]), "seconds": round(rng.uniform(2, 8), 2)}


def _offset_text(ms: float) -> str:
    return f"{'+' if ms >= 0 else '-'}{abs(ms) / 1000:.3f}"


def set_offset(r: Remote, ms: float) -> None:
    r.sh(f"echo {_offset_text(ms)} > {FAKETIME_FILE}.tmp && mv {FAKETIME_FILE}.tmp {FAKETIME_FILE}")


# The kernel clock stepped by argv[1] ms; a strobe (argv[2:] = delta_ms period_ms flips) flips it
# up and back, and on SIGTERM or at its end leaves it where it started.
_STEP = """
import signal, sys, time
def step(ms):
    time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + ms / 1000)
if len(sys.argv) == 2:
    step(float(sys.argv[1])); sys.exit()
delta, period, flips = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
net = 0.0
def back(*_):
    step(-net); sys.exit()
signal.signal(signal.SIGTERM, back)
for i in range(flips):
    d = delta if i % 2 == 0 else -delta
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # a step and its count together
    step(d); net += d
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    time.sleep(period / 1000)
back()
"""


def step_kernel_clock(r: Remote, ms: float) -> None:
    """Step `r`'s real-time clock by `ms` (relative: a jump the caller undoes by -ms)."""
    r.run(["python3", "-c", _STEP, repr(float(ms))])


@dataclass
class Clock(Nemesis):
    hosts: list[str] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    name: str = "clock"
    offsets: dict[str, float] = field(default_factory=dict)
    source: str = "faketime"  # Context.clock_source: "faketime" or "kernel"
    stepped: dict[str, float] = field(default_factory=dict)  # kernel: bumps not yet undone

    def daemon_env(self) -> dict[str, str]:
        return faketime_env() if self.source == "faketime" else {}

    def _bump(self, host: str, ms: float) -> None:
        if self.source == "kernel":
            if delta := ms - self.stepped.get(host, 0.0):  # a clock left alone is not written
                step_kernel_clock(self.remotes[host], delta)
                # kept on the host too: a crashed harness forgets its steps, and the next
                # run's heal must still undo them
                self.remotes[host].sh(f"echo {ms!r} > {STEPPED_FILE}")
            self.stepped[host] = ms
        else:
            set_offset(self.remotes[host], ms)

    def start(self, choice: dict) -> dict:
        targets = choice["targets"]
        said = {"clock": self.source}
        if choice["fault"] == "bump":
            before = self._measure(targets) if self.source == "kernel" else {}
            for h, ms in choice["offsets_ms"].items():
                self._bump(h, ms)
                self.offsets[h] = ms
            self.active = True
            return {"fault": "bump", "targets": targets, "offsets_ms": dict(self.offsets), **said,
                    "observed": self._observe_bump(choice["offsets_ms"], before)}
        states = {}
        for h in targets:
            states[h] = self._strobe(self.remotes[h], choice["delta_ms"], choice["period_ms"],
                                     choice["seconds"])
            self.offsets[h] = choice["delta_ms"]
        self.active = True
        running = {h: st for h, st in states.items() if st not in ("gone", "Z", "no-pid-file")}
        return {"fault": "strobe", "targets": targets, "delta_ms": choice["delta_ms"],
                "period_ms": choice["period_ms"], "seconds": choice["seconds"],
                "offsets_ms": dict(self.offsets), **said,
                "observed": observe.observation(len(running) == len(targets), strobing=states)}

    def _observe_bump(self, intended: dict[str, float], before: dict) -> dict:
        """Each bumped host's wall clock read back (`_measure`): off by the intended step,
        within the reading's own uncertainty plus TOLERANCE_MS. On a kernel clock the step is
        the change since just before the bump (the guest's clock need not agree with ours)."""
        after = self._measure(list(intended))
        measured, wrong = {}, {}
        for h, ms in intended.items():
            offset, plus_minus = after[h]
            if h in before:
                offset, plus_minus = offset - before[h][0], plus_minus + before[h][1]
            measured[h] = round(offset, 1)
            if abs(offset - ms) > plus_minus + TOLERANCE_MS:
                wrong[h] = {"intended_ms": ms, "measured_ms": round(offset, 1)}
        return observe.observation(not wrong, measured_ms=measured, **({"off": wrong} if wrong else {}))

    def _measure(self, hosts: list[str]) -> dict[str, tuple[float, float]]:
        """host -> (its clock's offset in ms, the reading's uncertainty in ms). faketime: a
        process under the daemons' libfaketime settings reads the wall clock between two
        plain readings on the same host. kernel: the host's clock against ours, across one
        SSH round trip."""
        def one(h: str) -> tuple[float, float]:
            r = self.remotes[h]
            if self.source == "faketime":
                env = " ".join(f"{k}={v}" for k, v in faketime_env().items())
                a, b, c = map(int, r.sh(f"a=$(date +%s%N); b=$(env {env} date +%s%N); "
                                        f"c=$(date +%s%N); echo $a $b $c").stdout.split())
                return (b - (a + c) / 2) / 1e6, (c - a) / 2e6
            t0 = time.time_ns()
            theirs = int(r.run(["date", "+%s%N"]).stdout.strip())
            t1 = time.time_ns()
            return (theirs - (t0 + t1) / 2) / 1e6, (t1 - t0) / 2e6
        return observe.each(hosts, one)

    def _strobe(self, r: Remote, delta_ms: float, period_ms: int, seconds: float) -> str:
        """Start the strobe loop on the host behind `r`; its process state as seen there the
        moment its pid file appeared (see _background)."""
        flips = int(seconds * 1000 / period_ms)
        if self.source == "kernel":
            loop = f"exec python3 -c {shlex.quote(_STEP)} {delta_ms} {period_ms} {flips}"
            return self._background(r, loop)
        up, down, f = _offset_text(delta_ms), _offset_text(-delta_ms), FAKETIME_FILE
        loop = (f"i=0; while [ $i -lt {flips} ]; do "
                f"if [ $((i % 2)) -eq 0 ]; then echo {up} > {f}.s; else echo {down} > {f}.s; fi; "
                f"mv {f}.s {f}; i=$((i + 1)); sleep {period_ms / 1000:.3f}; done; echo +0.000 > {f}")
        return self._background(r, loop)

    @staticmethod
    def _background(r: Remote, loop: str) -> str:
        """Run `loop` detached; wait for its pid file (a stop() right after this must find the
        loop to kill it) and return its process's state read at that moment, in the same
        shell. Read later, after every target's start over SSH on a loaded machine, a 2 s
        strobe may already be over, and the start would count as never in force."""
        out = r.sh(f"{pidfile.remove(STROBE_PID)}; "
                   f"setsid sh -c {shlex.quote(f'{pidfile.record(STROBE_PID)}; {loop}')} "
                   f"</dev/null >/dev/null 2>&1 & "
                   f"for i in $(seq 500); do [ -s {STROBE_PID} ] && break; sleep 0.02; done; "
                   f"if [ ! -s {STROBE_PID} ]; then echo no-pid-file; "
                   f"elif {pidfile.live(STROBE_PID)}; then sed 's/.*) //' /proc/$p/stat 2>/dev/null "
                   f"| cut -d' ' -f1 | grep . || echo gone; else echo gone; fi",
                   check=False).stdout.split()
        return out[-1] if out else "unknown"

    def stop(self) -> dict:
        for h in self.hosts:
            r = self.remotes[h]
            # a kernel strobe steps its clock back on SIGTERM: wait until it has
            r.sh(f"if {pidfile.live(STROBE_PID)}; then kill $p 2>/dev/null; "
                 f"for i in $(seq 100); do {pidfile.live(STROBE_PID)} || break; sleep 0.02; done; "
                 f"fi; {pidfile.remove(STROBE_PID)}; true")
            if self.source == "kernel":
                self._bump(h, 0.0)
                r.sh(f"rm -f {STEPPED_FILE}")
            else:
                set_offset(r, 0)
        self.offsets = {h: 0.0 for h in self.hosts}
        self.active = False
        return {"fault": "reset", "offsets_ms": dict(self.offsets), "clock": self.source}

    def heal(self) -> dict:
        """Always, also before the daemons start: every clock at offset zero. On a kernel
        clock, first the steps an earlier run left on a host (its harness crashed) are read
        back from the host, so the reset undoes them, and the guest's own time
        synchronisation is stopped, as Jepsen stops ntpd: it would undo a bump unseen."""
        if self.source != "kernel":
            return self.stop()
        for h in self.hosts:
            r = self.remotes[h]
            left = r.sh(f"cat {STEPPED_FILE} 2>/dev/null || true", check=False).stdout.strip()
            try:
                self.stepped[h] = float(left) if left else self.stepped.get(h, 0.0)
            except ValueError:
                pass  # not ours to read: the reset steps by what this run knows
            r.sh("for s in systemd-timesyncd chrony chronyd ntp ntpsec openntpd; do "
                 "systemctl stop $s 2>/dev/null; done; true", check=False)
        return {**self.stop(), "time_sync": "stopped"}

    def teardown(self) -> None:
        for h in self.hosts:
            self.remotes[h].run(["rm", "-f", FAKETIME_FILE, f"{FAKETIME_FILE}.tmp",
                                 f"{FAKETIME_FILE}.s", STROBE_PID, f"{STROBE_PID}.start"])


# needs "faketime": daemons that never call time.sleep, which fails under libfaketime here.
register(Package("clock", heal_rank=30, draw=draw_clock, needs=frozenset({"faketime"}),
                 build=lambda ctx: Clock(hosts=ctx.names, remotes=ctx.remotes,
                                         source=ctx.clock_source)))
