"""The clock fault's kernel source (VMs): bumps step the host's real-time clock relative to
where the fault left it and the reset undoes them; the strobe helper leaves the clock where it
found it, at its end or on SIGTERM. The helper runs here for real, with clock_settime replaced
by a recorder (stepping this machine's clock would disturb everything on it); on VMs it steps
the guest's clock (README "On VMs")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from nemeses.clock import _STEP, STEPPED_FILE, Clock, faketime_env


class Recorder:
    """A Remote that records the python3 steps it is asked to run, and answers `date` with
    this machine's clock moved by the steps so far (`lost`: a step that never lands)."""

    def __init__(self, lost: bool = False):
        self.steps: list[float] = []
        self.shell: list[str] = []
        self.offset_ms, self.lost = 0.0, lost

    def run(self, argv, **_):
        if argv == ["date", "+%s%N"]:
            return SimpleNamespace(stdout=f"{time.time_ns() + int(self.offset_ms * 1e6)}\n")
        assert argv[:2] == ["python3", "-c"] and argv[2] == _STEP
        self.steps.append(float(argv[3]))
        if not self.lost:
            self.offset_ms += float(argv[3])

    def sh(self, script, **_):
        self.shell.append(script)
        if script.startswith("echo ") and STEPPED_FILE in script:
            self.file = script.split()[1]
        elif script.startswith(f"rm -f {STEPPED_FILE}"):
            self.file = None
        elif script.startswith(f"cat {STEPPED_FILE}"):
            return SimpleNamespace(stdout=getattr(self, "file", None) or "")
        return SimpleNamespace(stdout="")


def test_kernel_bumps_are_relative_steps_that_the_reset_undoes():
    remotes = {"n1": Recorder(), "n2": Recorder()}
    c = Clock(hosts=["n1", "n2"], remotes=remotes, source="kernel")
    assert c.daemon_env() == {}  # the daemons read the real clock
    assert Clock(hosts=[], remotes={}).daemon_env() == faketime_env()  # faketime's, by default
    out = c.start({"fault": "bump", "targets": ["n1"], "offsets_ms": {"n1": 250.0}})
    assert out["clock"] == "kernel" and out["offsets_ms"] == {"n1": 250.0}
    assert out["observed"]["ok"] and abs(out["observed"]["measured_ms"]["n1"] - 250) < 25
    c.start({"fault": "bump", "targets": ["n1"], "offsets_ms": {"n1": -100.0}})
    reset = c.stop()
    assert remotes["n1"].steps == [250.0, -350.0, 100.0]  # net zero
    assert remotes["n2"].steps == [] and reset["offsets_ms"] == {"n1": 0.0, "n2": 0.0}
    assert not any("faketime" in s for s in remotes["n1"].shell)


def test_a_crashed_runs_kernel_step_is_undone_by_the_next_runs_heal():
    remote = Recorder()
    crashed = Clock(hosts=["n1"], remotes={"n1": remote}, source="kernel")
    crashed.start({"fault": "bump", "targets": ["n1"], "offsets_ms": {"n1": 750.0}})
    # the harness dies here; the next run's Clock knows nothing of the step
    healed = Clock(hosts=["n1"], remotes={"n1": remote}, source="kernel").heal()
    assert remote.steps == [750.0, -750.0] and remote.offset_ms == 0.0
    assert healed["time_sync"] == "stopped"
    assert any("systemd-timesyncd" in s for s in remote.shell)


def test_a_kernel_bump_that_never_landed_is_seen():
    c = Clock(hosts=["n1"], remotes={"n1": Recorder(lost=True)}, source="kernel")
    out = c.start({"fault": "bump", "targets": ["n1"], "offsets_ms": {"n1": 5000.0}})
    assert not out["observed"]["ok"] and out["observed"]["off"]["n1"]["intended_ms"] == 5000.0


_FAKE_CLOCK = """
import sys, time
log = open(sys.argv.pop(1), "a", buffering=1)
now = [1000.0]
time.clock_gettime = lambda clock: now[0]
def settime(clock, value):
    log.write(f"{(value - now[0]) * 1000:.3f}\\n")
    now[0] = value
time.clock_settime = settime
exec(compile(sys.stdin.read(), "step", "exec"))
"""


def _helper(log, *args):
    p = subprocess.Popen([sys.executable, "-c", _FAKE_CLOCK, str(log), *map(str, args)],
                         stdin=subprocess.PIPE, text=True)
    p.stdin.write(_STEP)
    p.stdin.close()
    return p, log


def _steps(log):
    return [float(x) for x in log.read_text().split()]


def test_the_strobe_helper_flips_the_clock_and_leaves_it_where_it_found_it(tmp_path):
    p, log = _helper(tmp_path / "ended", 40.0, 10, 5)  # 5 flips: up, down, up, down, up; back
    assert p.wait(timeout=60) == 0
    assert _steps(log) == [40.0, -40.0, 40.0, -40.0, 40.0, -40.0]
    p, log = _helper(tmp_path / "stopped", 40.0, 50, 10_000)  # stopped by the fault's reset
    deadline = time.monotonic() + 30
    while not (log.exists() and len(_steps(log)) >= 3):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    steps = _steps(log)
    assert len(steps) >= 4 and abs(sum(steps)) < 1e-6, steps
    p, log = _helper(tmp_path / "bump", -1234.5)  # a bump: one step
    assert p.wait(timeout=60) == 0 and _steps(log) == [-1234.5]


class _Shell:
    """A Remote that runs its shell scripts here, for real."""

    def sh(self, script, check=True, **_):
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=check,
                              stdin=subprocess.DEVNULL, timeout=60)


def test_a_strobe_is_seen_running_the_moment_its_pid_file_appears(tmp_path, monkeypatch):
    """The strobe's state is read in the shell that started it, as soon as its pid file is
    there: read later, after every target's start on a loaded machine, a 2 s strobe could be
    over and the start counted as never in force."""
    import nemeses.clock as clock

    monkeypatch.setattr(clock, "STROBE_PID", str(tmp_path / "strobe.pid"))
    state = Clock._background(_Shell(), "exec sleep 30")
    pid = int((tmp_path / "strobe.pid").read_text())
    try:
        assert state in ("S", "R"), state
    finally:
        subprocess.run(["kill", str(pid)], check=False)
