"""The netns end-to-end tests' way to run the CLI as a user does (`python -m harness.cli ...`
with no standard input), and the one netns cluster they share.

The netns tests run one after another in one pytest process (tests/run_suite.py), on one
cluster left up between them, as a user's runs and the matrix's cells share theirs (`make demo`
leaves it up, `tessera test` finds it so). Bringing five hosts up and down again for every test
was a fifth of each short run. After each test its hosts must carry no trace of it (the
checks of `traces`): a test that leaves one fails, and the cluster is taken down so the next
starts clean. The session's end takes it down and the machine must be as it was before."""

from __future__ import annotations

import os
import subprocess
import sys
import time

# One state dir for the whole pytest run: every netns test and fixture finds the same cluster.
STATE = f"/run/tessera-netns-e2e-{os.getpid()}"

# What a test may leave on a host, each kind counted by one shell command: our iptables rules, a
# tbf qdisc, a FUSE mount, a faked clock, a stopped process, a nemesis helper (the fault kinds), a
# process besides the host's sshd and the probe's own session (a daemon still running), a data
# file (teardown wipes them).
_OTHERS = "ps -eo comm= | grep -vxE 'sshd|bash|sh|ps|grep|sort|head|wc'"
_DATA_FILES = "find /var/lib/tessera -mindepth 1 -not -path '/var/lib/tessera/logs*'"
_COUNT = {"iptables": "iptables -w -S | grep -c TESSERA",
          "tbf": "tc qdisc show dev eth0 | grep -c tbf",
          "fuse": "grep -c fuse /proc/mounts",
          "faketime": "ls /var/lib/tessera/ | grep -c faketime",
          "stopped": "ps -eo stat= | grep -c '^T'",
          "helpers": "pgrep -fc 'nemeses[.]'",
          "processes": f"{_OTHERS} | wc -l",
          "data": f"{_DATA_FILES} | wc -l"}
_WHICH = f"{{ {_OTHERS}; {_DATA_FILES}; }} | head -n 8"  # the first few, by name
TRACE_KINDS = tuple(_COUNT)
FAULT_KINDS = TRACE_KINDS[:6]


def counts(remote, kinds: tuple[str, ...] = TRACE_KINDS) -> dict[str, int]:
    """kind -> how many of it `remote`'s host holds, for each of `kinds` (one shell round)."""
    out = remote.sh("; ".join(_COUNT[k] for k in kinds) + "; true").stdout.split()
    return dict(zip(kinds, map(int, out), strict=True))


def tessera(*argv, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def netns_env() -> dict:
    return dict(os.environ, TESSERA_NETNS_STATE=STATE)


def cluster_up() -> bool:
    from harness.cluster.netns import _namespaces

    return any(ns.startswith("tessera-") for ns in _namespaces())


def cluster_down() -> None:
    """`tessera cluster down` of the shared cluster (nothing when none is up)."""
    down = tessera("cluster", "down", env=netns_env())
    assert down.returncode == 0, down.stderr


def traces(wait_s: float = 10.0) -> dict:
    """host -> what it still holds of the last test (TRACE_KINDS, counted), for each host of
    the shared cluster that holds anything; {} when none does or no cluster is up. A daemon
    the teardown stopped may take a moment to exit: asked again until `wait_s` has passed."""
    from harness.cluster.netns import NetnsCluster
    from harness.control import Remote

    if not cluster_up() or not os.path.exists(os.path.join(STATE, "state.json")):
        return {}
    deadline = time.monotonic() + wait_s
    while True:
        left = {}
        for h in NetnsCluster(1, state_dir=STATE).hosts():
            r = Remote(h)
            try:
                held = counts(r)
                if any(held.values()):
                    left[h.name] = {k: n for k, n in held.items() if n}
                    if held["data"] or held["processes"]:
                        left[h.name]["which"] = r.sh(_WHICH).stdout.split()
            finally:
                r.close()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
