"""Values of every size: the register workload's wide value sizes, and the
simulator seed they found.

Seed 1 of `tessera sim --stack full --workload register --value-sizes wide --seconds 20`
writes 0 to r0 at 8 MiB - 272 bytes: its request fits the simulator's 8 MiB frame, the
AppendEntries replicating it does not. Before the fix the leader proposed it, every follower
refused the frame and hung up, tablet 2 never committed again, and the seed came out invalid
(writes and cas never ok: 22 ok ops in 20 s, all reads). Seed 7 wedged a tablet later, after
other writes succeeded: the checker passed it, and the liveness probe after the heal failed it
("liveness: 1 tablet(s) took no write within 30 s of the heal"). Now the leader refuses such a
write with TOO_LARGE, the client records a definite failure, and the tablet goes on.
"""

import pytest

from harness.sim.stack import MAX_FRAME, StackConfig, run_seeds
from workloads import make
from workloads.values import DEFAULT_LIMIT, EDGE_BYTES, ValueSizes


def test_the_workloads_default_limit_is_tesseras_frame_limit():
    """The workloads know no system, so their default reach is a number of their own: it must
    stay Tessera's RPC frame limit, which wide values are drawn to test."""
    from node.rpc.wire import DEFAULT_MAX_FRAME

    assert DEFAULT_LIMIT == DEFAULT_MAX_FRAME


def test_wide_values_are_mostly_small_and_reach_the_frame_limit():
    sizes = ValueSizes("wide", MAX_FRAME, seed=7)
    drawn = [sizes.size(f"r{k}", v) for k in range(400) for v in range(5)]
    assert max(drawn) <= MAX_FRAME
    assert sum(s < 64 for s in drawn) > len(drawn) / 2
    assert sum(s > MAX_FRAME - EDGE_BYTES for s in drawn) > len(drawn) / 20
    assert sum(1 << 20 < s <= MAX_FRAME - EDGE_BYTES for s in drawn) > 0
    assert ValueSizes("small").encode("r0", 3) == 3


def test_a_wide_value_reads_back_as_its_int_and_foreign_bytes_do_not():
    sizes = ValueSizes("wide", 1 << 20, seed=3)
    for v in range(5):
        stored = sizes.encode("r1", v)
        assert isinstance(stored, str) and sizes.decode("r1", stored) == v
        assert len(stored) == max(len(f"{v}|"), sizes.size("r1", v))
    assert sizes.decode("r1", None) is None
    for foreign in ("3|", "x" * 10, 3, sizes.encode("r1", 2) + "."):
        decoded = sizes.decode("r1", foreign)
        assert isinstance(decoded, str) and decoded.startswith("not a written value")


def test_bad_value_size_options_are_refused():
    with pytest.raises(ValueError, match="value_sizes must be one of small, wide"):
        make("register", value_sizes="huge")
    with pytest.raises(ValueError, match="value_max_bytes must be at least"):
        make("register", value_sizes="wide", value_max_bytes=100)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 7])
def test_the_seeds_that_wedged_a_tablet_with_a_value_near_the_frame_limit_are_valid(tmp_path,
                                                                                    seed):
    cfg = StackConfig(seed=seed, workload="register", seconds=20, value_sizes="wide")
    (r,) = run_seeds([cfg], tmp_path, jobs=1)
    assert r.ok(), (r.violation, r.verdict, r.results)
    counts = r.results["counts"]
    # the oversized writes were refused, definitely, and writes went on being acknowledged
    assert counts.get("write:fail", 0) > 0, counts
    assert counts.get("write:ok", 0) > 50, counts
