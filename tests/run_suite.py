"""`make test`: the suite as two pytest runs side by side, the tests marked netns in one and
everything else in the other, so the suite's wall time is about the longer of the two instead
of their sum (CI has a budget; the netns tests mostly wait on time-limited chaos runs).

The netns tests share the machine's one netns test cluster (10.77.0.0/24), so they run one at a
time, in their own run. (pytest-xdist's loadgroup would schedule them so, but with pytest 9 it
no longer tags the grouped tests and spreads them over its workers.) The rest's output streams
as it runs; the netns run's is printed after it, whole. The exit code is the first run's that
failed: 0 only when both passed, and pytest's 5 ("no tests ran") fails as any other.

The machine is CPU-bound through most of the suite, and the netns run ended minutes before the
other, leaving a core idle: the files in AFTER_NETNS move from the other run to the netns run's
lane, run there once the netns tests are done (a pytest run of their own).

A netns cluster left up (`make demo` leaves its five hosts up for the next run) holds the test
subnet the netns tests need, and each of them would refuse to start: the suite takes it down
first, saying so, as `tessera cluster down` would.

    python tests/run_suite.py [pytest arguments for both runs]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Test files of the other run's, about as long as the gap between the two runs' ends (measured
# from clean clones on the slow host kind: 2032 s and 2469 s; these took about 240 s), in no need
# of the netns cluster: run in the netns lane, after the netns tests.
AFTER_NETNS = ("tests/test_client_mutants.py",)


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
    # Arguments that name tests (or an option's value: taken for one, to be safe) keep every
    # other file in the other run, as before: the netns lane must not run them a second time.
    after = () if any(not a.startswith("-") for a in argv) else AFTER_NETNS
    with tempfile.TemporaryFile("w+") as log:
        lane: list[int] = []
        netns = threading.Thread(target=lambda: lane.extend(_netns_lane(pytest, after, log)))
        netns.start()
        try:
            rest = subprocess.run([*pytest, "-m", "not netns",
                                   *(f"--ignore={f}" for f in after)],
                                  stdin=subprocess.DEVNULL)
        finally:
            netns.join()
        netns_code, after_code = lane
        log.seek(0)
        print("\n==================== the netns tests (run beside the others) "
              "====================", flush=True)
        sys.stdout.write(log.read())
    print(f"\nnot netns: exit {rest.returncode}; netns: exit {netns_code}; "
          f"after them ({', '.join(after) or 'none'}): exit {after_code}", flush=True)
    return next((code for code in (rest.returncode, netns_code, after_code) if code), 0)


def _netns_lane(pytest: list[str], after: tuple[str, ...], log) -> tuple[int, int]:
    """The netns tests, then the `after` files, one after the other, into `log`: their exit
    codes. The second may select nothing when the caller's arguments leave it nothing (exit 5):
    that is not a failure of its own (the other run still fails a suite with no test)."""
    def run(*args: str) -> int:
        log.flush()
        return subprocess.run([*pytest, *args, "-p", "no:cacheprovider"], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    netns = run("-m", "netns")
    code = run("-m", "not netns", *after) if after else 0
    return netns, 0 if code == 5 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
