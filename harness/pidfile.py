"""The pid files of the processes the harness starts on a host (daemons, a clock strobe, a
delay relay), as shell snippets for the host's remote: each pid file has the process's start
time beside it (`<pid file>.start`, /proc/<pid>/stat's field 22, in clock ticks since boot),
and a pid counts as the recorded process only while that start time still matches.

Why: a pid file outlives its process (a daemon killed on purpose, or crashed), and a host's
kernel hands the pid to another process once its pids wrap at pid_max (32,768 on this machine,
in each netns host's own pid namespace; every command the harness runs forks a few, and a
run's kill-wait loops fork hundreds). Without the check a pause or a second kill aimed at a
daemon that was already down lands on whatever holds its old pid (an sshd session, a command
of the harness), a "still running" check leaves a crashed daemon down, and a fault's check on
the host reads another process's state.
A pid file without a start time beside it (written before this existed) is taken as it is.

The pid file itself keeps the plain pid, as an operator's `kill $(cat ...pid)` expects."""

from __future__ import annotations

_START = "sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f20"  # fields after comm


def record(pid_file: str) -> str:
    """Shell run by the process about to `exec` the program (its pid is $$, and exec keeps both
    pid and start time): its start time, then its pid, each by an atomic rename, so a pid file
    that exists always has the matching start time beside it."""
    return (f"{_START.format(pid='$$')} > {pid_file}.start.new && "
            f"mv {pid_file}.start.new {pid_file}.start && "
            f"echo $$ > {pid_file}.new && mv {pid_file}.new {pid_file}")


def live(pid_file: str) -> str:
    """A shell condition: true, with the pid in $p, when the pid file names a process that
    exists and is the one recorded (its start time matches); false for no file, no process, or
    a process that only reuses the pid."""
    return (f'{{ p=$(cat {pid_file} 2>/dev/null) && [ -n "$p" ] && [ -r /proc/$p/stat ] && '
            f'{{ [ ! -f {pid_file}.start ] || '
            f'[ "$({_START.format(pid="$p")})" = "$(cat {pid_file}.start 2>/dev/null)" ]; }}; }}')


def signal(pid_file: str, sig: str) -> str:
    """Shell that sends `sig` to the recorded process if it is still the one, else nothing."""
    return f"{live(pid_file)} && kill -{sig} $p 2>/dev/null; true"


def remove(pid_file: str) -> str:
    """Shell that removes a pid file and its start time."""
    return f"rm -f {pid_file} {pid_file}.start"
