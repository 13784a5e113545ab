"""A test is a value: `tessera test`'s arguments become one `TestSpec`, which test.json stores
and a replay reads back unchanged."""

import argparse

import pytest

from harness.chaos_cli import configure, spec_from_args
from harness.spec import FAST_FAILURE_DETECTION, TestSpec


def spec_of(*argv) -> TestSpec:
    p = argparse.ArgumentParser()
    configure(p)
    return spec_from_args(p.parse_args(list(argv)))


def test_arguments_become_a_spec_that_survives_test_json():
    spec = spec_of("--workload", "bank", "--workload-option", "total=80", "--nemesis", "kill,clock",
                   "--seed", "9", "--client", "smart", "--flag", "log_force_fsync_all=false",
                   "--time-limit", "12")
    assert (spec.workload, spec.workload_options, spec.nemesis, spec.seed, spec.client) == \
        ("bank", {"total": 80}, ["kill", "clock"], 9, "smart")
    assert spec.flags == {"log_force_fsync_all": False} and spec.time_limit == 12
    recorded = {**spec.to_dict(), "status": "complete", "started_at": 1.0}  # test.json: plus facts
    assert TestSpec.from_dict(recorded) == spec


def test_a_random_seed_is_drawn_once_and_kept_in_the_spec():
    a, b = spec_of(), spec_of()
    assert isinstance(a.seed, int) and a.seed != b.seed
    assert TestSpec.from_dict(a.to_dict()).seed == a.seed


@pytest.mark.parametrize("argv, message", [
    (["--workload-option", "no_such=1"], "bad --workload-option for register"),
    (["--workload-option", "novalue"], "--workload-option wants KEY=VALUE"),
    (["--nemesis", "kill,meteor"], "unknown nemesis 'meteor'"),
    (["--nemesis-interval", "0"], "--nemesis-interval must be > 0"),
])
def test_bad_arguments_are_one_clear_error(argv, message):
    with pytest.raises(ValueError, match=message):
        spec_of(*argv)


def test_fast_failure_detection_flags_are_daemon_flags_and_explicit_flags_win():
    from node.consensus import TICK_MS
    from node.daemon_cli import FLAGS

    for key in FAST_FAILURE_DETECTION:
        assert key.replace("_", "-") in FLAGS, key  # a key the daemons' config accepts
    assert FAST_FAILURE_DETECTION["raft_heartbeat_interval_ms"] % TICK_MS == 0
    spec = spec_of("--fast-failure-detection", "--flag", "heartbeat_interval_ms=500")
    assert spec.daemon_flags() == {**FAST_FAILURE_DETECTION, "heartbeat_interval_ms": 500}
    assert spec_of().daemon_flags() == FAST_FAILURE_DETECTION  # fast by default, as test-all
    assert spec_of("--no-fast-failure-detection").daemon_flags() == {}
