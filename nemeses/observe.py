"""What a fault did, seen on the hosts right after it fired: the probes a nemesis runs to check
its own work, from outside the system under test.

A fault that says "partitioned" while packets still flow, or "paused" while the process runs,
would let a run call itself valid under faults that were never in force. So each
start is followed by a look at the host (a TCP connect across a cut, /proc/<pid>/stat, the
rules and the daemons a fault needs), and the look is recorded: `observation(ok, **seen)` is
what the start's completion carries under "observed", and `nemeses.schedule` counts a start
whose observation is not ok as unverified, which the run's verdict reads
(`reports.checkers.faults`).

Every probe is one shell command per host, run over the host's SSH remote (so inside its
network namespace); `each` runs them on several hosts at once.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness import pidfile
from harness.control import Remote, Result

PROBE_PORT = 22  # every test host runs sshd on its test address: a port a cut must close
CONNECT_S = 1.5


def observation(ok: bool | None, **seen: Any) -> dict:
    """What a start's completion records under "observed": whether the fault was seen in force
    on the hosts (None: the look could not be made, e.g. nobody answered; counted as unchecked,
    never as verified), and what was seen."""
    return {"ok": None if ok is None else bool(ok), **seen}


def watch(look: Callable[[], Any], done: Callable[[Any], bool], timeout: float,
          period: float = 0.1) -> Any:
    """`look()` again every `period` seconds until `done` holds of what it saw or `timeout`
    passed; the last thing seen. For a fault whose effect shows a moment after the call that
    made it (a leader stepping down once its successor campaigns)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        seen = look()
        if done(seen) or time.monotonic() >= deadline:
            return seen
        time.sleep(period)


def each(hosts: list[str], probe: Callable[[str], Any]) -> dict[str, Any]:
    """`probe(host)` for every host at once (SSH round trips dominate)."""
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
        return dict(zip(hosts, pool.map(probe, hosts), strict=True))


def ask(r: Remote, script: str, timeout: float = 60.0) -> Result:
    """Run a look (`script`, which only reads) on the host behind `r`, once more if its SSH
    channel was lost before an exit status came (paramiko's -1, as under other faults' load):
    a lost channel says nothing about the fault, and a look run again changes nothing."""
    res = r.sh(script, check=False, timeout=timeout)
    return r.sh(script, check=False, timeout=timeout) if res.exit_status == -1 else res


def reachable(r: Remote, addresses: list[str], port: int = PROBE_PORT) -> dict[str, bool | None]:
    """From the host behind `r`: which of `addresses` accept a TCP connection on `port` within
    CONNECT_S (all tried at once); None for one the look gave no answer about (its SSH
    channel was lost: a host the other faults load may drop it), which is neither open nor
    cut."""
    if not addresses:
        return {}
    probe = (f"for a in {' '.join(map(shlex.quote, addresses))}; do "
             f"(timeout {CONNECT_S} bash -c \"exec 3<>/dev/tcp/$a/{port}\" 2>/dev/null "
             f"&& echo \"open $a\" || echo \"cut $a\") & done; wait")
    out = ask(r, probe, timeout=CONNECT_S + 30).stdout.split("\n")
    seen: dict[str, bool | None] = dict.fromkeys(addresses)
    for line in out:
        word, _, addr = line.strip().partition(" ")
        if addr in seen:
            seen[addr] = word == "open"
    return seen


def process_states(r: Remote, pidfiles: list[str]) -> dict[str, str]:
    """pid file -> the state letter of its process in /proc/<pid>/stat (R, S, T, Z, ...),
    "gone" for a pid with no process (or only another process that reuses the pid: see
    harness.pidfile), "no-pid-file" for a missing file."""
    script = "; ".join(
        f"f={shlex.quote(p)}; if [ ! -s $f ]; then echo \"$f no-pid-file\"; "
        f"elif {pidfile.live('$f')}; then echo \"$f $(sed 's/.*) //' /proc/$p/stat "
        f"| cut -d' ' -f1)\"; else echo \"$f gone\"; fi" for p in pidfiles)
    out = ask(r, script).stdout
    states = {}
    for line in out.splitlines():
        path, _, state = line.strip().rpartition(" ")
        if path in pidfiles:
            states[path] = state
    return {p: states.get(p, "unknown") for p in pidfiles}
