"""`make test`: the suite as two pytest runs side by side, the tests marked netns in one and
everything else in the other, so the suite's wall time is about the longer of the two instead
of their sum (CI has a budget; the netns tests mostly wait on time-limited chaos runs).

The netns tests share the machine's one netns test cluster (10.77.0.0/24), so they run one at a
time, in their own run. (pytest-xdist's loadgroup would schedule them so, but with pytest 9 it
no longer tags the grouped tests and spreads them over its workers.) The rest's output streams
as it runs; the netns run's is printed after it, whole. The exit code is the first run's that
failed: 0 only when every run passed, and pytest's 5 ("no tests ran") fails as any other.

The machine is CPU-bound through most of the suite, and whichever run ended first left a core
idle for minutes (which one varied with the host: the netns run on one, the other on the next).
The files in SHARED (long ones, in no need of the netns cluster) are in neither run: once a run
is done, its lane takes the next of them, longest first, as a pytest run of its own, until none
is left, so the two lanes end within about one file of each other.

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
# Long test files in no need of the netns cluster, longest first (measured on the slow host
# kind: about 210, 100, 95 and 90 s): run by whichever lane is free first.
SHARED = ("tests/test_sim_stack.py", "tests/test_analyze_spark_standalone.py",
          "tests/test_client_mutants.py", "tests/test_tablet_copy_e2e.py")


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
    # file in the other run, as before: no lane may run them a second time.
    shared = [] if any(not a.startswith("-") for a in argv) else list(SHARED)
    take = threading.Lock()

    def next_shared() -> str | None:
        with take:
            return shared.pop(0) if shared else None

    codes: list[tuple[str, int]] = []
    ignored = [f"--ignore={f}" for f in shared]  # before the netns lane can take any
    with tempfile.TemporaryFile("w+") as log:
        netns = threading.Thread(target=lambda: codes.extend(
            _netns_lane(pytest, next_shared, log)))
        netns.start()
        try:
            rest = subprocess.run([*pytest, "-m", "not netns", *ignored],
                                  stdin=subprocess.DEVNULL).returncode
            codes.append(("not netns", rest))
            while (f := next_shared()) is not None:
                codes.append((f, _code(subprocess.run([*pytest, "-m", "not netns", f],
                                                      stdin=subprocess.DEVNULL).returncode)))
        finally:
            netns.join()
        log.seek(0)
        print("\n==================== the netns tests (run beside the others) "
              "====================", flush=True)
        sys.stdout.write(log.read())
    print("\n" + "; ".join(f"{name}: exit {code}" for name, code in codes), flush=True)
    return next((code for _, code in codes if code), 0)


def _code(code: int) -> int:
    """A shared file's exit code: 5 (it selected nothing, when the caller's options leave it
    nothing) is not a failure of its own; the other run still fails a suite with no test."""
    return 0 if code == 5 else code


def _netns_lane(pytest: list[str], next_shared, log) -> list[tuple[str, int]]:
    """The netns tests, then shared files while `next_shared` gives one, into `log`: each run's
    name and exit code."""
    def run(*args: str) -> int:
        log.flush()
        return subprocess.run([*pytest, *args, "-p", "no:cacheprovider"], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    codes = [("netns", run("-m", "netns"))]
    while (f := next_shared()) is not None:
        codes.append((f, _code(run("-m", "not netns", f))))
    return codes


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
