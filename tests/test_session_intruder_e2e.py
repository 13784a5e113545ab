"""Another user against the workloads' sessions, on the netns cluster: the
session-intruder nemesis, as the `intruder` user certificate, probes each session for the
owner's frontier and writes a window of seqs just ahead of it, closes sessions and floods the
table. On the engine as it is every op in another's session is refused and the run is valid;
with the owner check switched off (fault_ignore_session_owner: the engine before the fix) the
same seed is invalid: ops applied in sessions the intruder did not open (logs), and the owners'
writes answered from its results (linearizability)."""

from __future__ import annotations

import json
import os

import pytest
from netns_run import tessera

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]
RUN = ("test", "--workload", "register", "--nemesis", "session-intruder", "--time-limit", "20",
       "--nemesis-interval", "3", "--seed", "3")


def _starts(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "history.jsonl")) as f:
        ops = [json.loads(line) for line in f]
    # the starts that ran (not one skipped: its turn came after the workload ended)
    return [o["value"] for o in ops
            if o.get("f") == "start-session-intruder" and isinstance(o.get("value"), dict)
            and "skipped" not in o["value"]]


def test_another_users_ops_in_the_workloads_sessions_are_refused(env, tmp_path):
    out = tessera(*RUN, "--store", str(tmp_path / "fixed"), env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    starts = _starts(out.stdout.strip().splitlines()[-1])
    poisons = [s for s in starts if s["step"] == "poison"]
    assert poisons and all(s["foreign_applied"] == 0 and s["refused"] > 0 for s in poisons)
    # the calls only daemons or superusers may make, tried at every start: all refused
    assert all(s["overreached"] == 0 for s in starts)
    assert sum(s["overreach_refused"] for s in starts) > 0
    # a write whose propagated timestamp is two hours ahead, at every start: all refused
    assert all(s["clock_pushed"] == 0 for s in starts)
    assert sum(s["clock_push_refused"] for s in starts) > 0
    results = json.loads(open(os.path.join(out.stdout.strip().splitlines()[-1],
                                           "results.json")).read())
    assert "rpc.server.refused_not_authorized" in results["probes"]["runs"]
    assert "tserver.write.propagated_too_far_ahead" in results["probes"]["runs"]  # the mark
    assert all(s["observed"]["ok"] for s in starts)
    bugged = tessera(*RUN, "--flag", "unlock_unsafe_flags=true",
                     "--flag", "fault_ignore_session_owner=true",
                     "--store", str(tmp_path / "bugged"), env=env)
    assert bugged.returncode == 1, bugged.stdout[-2000:] + bugged.stderr[-2000:]
    assert "session-intrusion" in bugged.stderr
    assert any(s["foreign_applied"] > 0 for s in _starts(bugged.stdout.strip().splitlines()[-1]))
