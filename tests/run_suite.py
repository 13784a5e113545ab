"""`make test`: the suite as two pytest runs side by side, the tests marked netns in one and
everything else in the other, so the suite's wall time is about the longer of the two instead
of their sum (CI has a budget; the netns tests mostly wait on time-limited chaos runs).

The netns tests share the machine's one netns test cluster (10.77.0.0/24), so they run one at a
time, in their own run. (pytest-xdist's loadgroup would schedule them so, but with pytest 9 it
no longer tags the grouped tests and spreads them over its workers.) The rest's output streams
as it runs; the netns run's is printed after it, whole. The exit code is the first run's that
failed: 0 only when both passed, and pytest's 5 ("no tests ran") fails as any other.

A netns cluster left up (`make demo` leaves its five hosts up for the next run) holds the test
subnet the netns tests need, and each of them would refuse to start: the suite takes it down
first, saying so, as `tessera cluster down` would.

    python tests/run_suite.py [pytest arguments for both runs]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def take_down_a_cluster_left_up() -> None:
    """`tessera cluster down` when a tessera netns host is up, so the netns tests find the subnet free."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    hosts = [line.split()[0] for line in listed.stdout.splitlines()
             if line.strip().startswith("tessera-")]
    if not hosts:
        return
    print(f"a netns cluster is up ({', '.join(sorted(hosts))}); the netns tests need its subnet: "
          "`tessera cluster down` first", flush=True)
    subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "down"], cwd=ROOT,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)


def main(argv: list[str]) -> int:
    take_down_a_cluster_left_up()
    pytest = [sys.executable, "-m", "pytest", *argv]
    with tempfile.TemporaryFile("w+") as log:
        netns = subprocess.Popen([*pytest, "-m", "netns", "-p", "no:cacheprovider"],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rest = subprocess.run([*pytest, "-m", "not netns"], stdin=subprocess.DEVNULL)
        finally:
            netns_code = netns.wait()
        log.seek(0)
        print("\n==================== the netns tests (run beside the others) "
              "====================", flush=True)
        sys.stdout.write(log.read())
    print(f"\nnot netns: exit {rest.returncode}; netns: exit {netns_code}", flush=True)
    return next((code for code in (rest.returncode, netns_code) if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
