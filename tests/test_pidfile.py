"""The harness's pid files under pid reuse (harness.pidfile), on real processes in a local
shell: the shell snippets are what every host runs over SSH. A pid file names the recorded
process only while the start time beside it matches, so a pid the kernel gave to another
process after the daemon died is neither signalled nor reported running."""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from harness import pidfile


def _sh(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)


def _alive(pid_file) -> bool:
    return _sh(f"{pidfile.live(str(pid_file))} && echo yes || echo no").stdout.strip() == "yes"


def _spawn(pid_file) -> int:
    """A detached `sleep` recorded as the harness records a daemon, as deployment.start does."""
    record = shlex.quote(f"{pidfile.record(str(pid_file))}; exec sleep 60")
    out = _sh(f"setsid sh -c {record} </dev/null >/dev/null 2>&1 & "
              f"for i in $(seq 250); do [ -s {pid_file} ] && exit 0; sleep 0.02; done; exit 1")
    assert out.returncode == 0, out.stderr
    return int(pid_file.read_text())


def test_a_recorded_process_is_live_and_a_pid_reused_by_another_is_not(tmp_path):
    pid_file = tmp_path / "d.pid"
    pid = _spawn(pid_file)
    try:
        assert (tmp_path / "d.pid.start").read_text().strip().isdigit()
        assert _alive(pid_file)
        # the daemon's pid now held by another process (this test's own): not the daemon
        pid_file.write_text(f"{os.getpid()}\n")
        assert not _alive(pid_file)
        assert _sh(pidfile.signal(str(pid_file), "STOP")).returncode == 0  # sent nothing
        assert open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[0] != "T"
        pid_file.write_text(f"{pid}\n")
        assert _sh(pidfile.signal(str(pid_file), "KILL")).returncode == 0
        deadline = time.monotonic() + 10
        while _alive(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid_file)
    finally:
        subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)


def test_no_pid_file_is_not_live_and_one_without_a_start_time_is_taken_as_it_is(tmp_path):
    """A pid file written before start times were recorded beside pid files names its process."""
    pid_file = tmp_path / "old.pid"
    assert not _alive(pid_file)
    pid_file.write_text(f"{os.getpid()}\n")
    assert _alive(pid_file)
    assert _sh(pidfile.remove(str(pid_file))).returncode == 0 and not pid_file.exists()
