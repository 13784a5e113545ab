"""The runner's op lifecycle against an in-process fake client (a unit test: no cluster here)."""

import asyncio
import random

from harness.recorder import Recorder
from harness.runner import BURST_MAX, Pacer, RunOptions, run
from harness.store import new_run_dir
from reports.history import read_jsonl
from workloads import make
from workloads.base import Invocation
from workloads.outcomes import OpFailed, OpUnknown


class FlakyRegisterClient:
    """A single-copy register map that sometimes fails definitely and sometimes ambiguously."""

    def __init__(self, seed):
        self.data, self.rng = {}, random.Random(seed)

    async def _maybe_fail(self):
        await asyncio.sleep(0)
        roll = self.rng.random()
        if roll < 0.05:
            raise OpFailed("refused")
        if roll < 0.10:
            raise OpUnknown("connection lost after send")
        if roll < 0.12:
            raise RuntimeError("surprise")

    async def read(self, key):
        await self._maybe_fail()
        return self.data.get(key)

    async def write(self, key, value):
        await self._maybe_fail()
        self.data[key] = value

    async def cas(self, key, expected, new):
        await self._maybe_fail()
        if self.data.get(key) != expected:
            return False
        self.data[key] = new
        return True


def _run(tmp_path, seed, concurrency=6, time_limit=0.3):
    rec = Recorder(tmp_path / f"h{seed}.jsonl")
    opts = RunOptions(concurrency=concurrency, time_limit=time_limit, rate=0, seed=seed)
    shared = FlakyRegisterClient(seed)
    asyncio.run(run(make("register"), lambda _thread: shared, rec, opts))
    rec.close()
    return read_jsonl(tmp_path / f"h{seed}.jsonl")


def test_every_invoke_completes_and_info_retires_the_process(tmp_path):
    ops = _run(tmp_path, seed=1)
    assert [o.index for o in ops] == list(range(len(ops)))
    assert all(a.time <= b.time for a, b in zip(ops, ops[1:], strict=False))
    open_ = {}
    retired = set()
    for o in ops:
        if o.type == "invoke":
            assert o.process not in open_ and o.process not in retired
            open_[o.process] = o
        else:
            inv = open_.pop(o.process)
            assert (o.f, o.key) == (inv.f, inv.key)
            if o.type == "info":
                retired.add(o.process)
    assert not open_
    types = {o.type for o in ops}
    assert {"ok", "fail", "info"} <= types, types
    # an unexpected client exception is unknown, never a failure
    assert any(o.type == "info" and "surprise" in (o.error or "") for o in ops)
    # a cas that did not match is a definite failure
    assert any(o.type == "fail" and o.f == "cas" for o in ops)


def test_op_streams_are_reproducible_from_the_seed():
    w = make("register")
    a = [next(s) for s in [w.ops(3, 10, random.Random("7/3"))] for _ in range(50)]
    b = [next(s) for s in [w.ops(3, 10, random.Random("7/3"))] for _ in range(50)]
    c = [next(s) for s in [w.ops(3, 10, random.Random("8/3"))] for _ in range(50)]
    assert a == b and a != c
    assert all(isinstance(i, Invocation) for i in a)


def test_register_keys_rotate():
    w = make("register", ops_per_key=20, threads_per_key=5)
    stream = w.ops(0, 10, random.Random(1))
    keys = [next(stream).key for _ in range(40)]
    assert keys[:4] == ["r0"] * 4 and keys[4] == "r2"
    assert len(set(keys)) == 10


def test_store_layout_and_latest_link(tmp_path):
    a = new_run_dir(tmp_path, "register")
    b = new_run_dir(tmp_path, "register")
    assert a != b and a.parent == b.parent == tmp_path / "register"
    assert (tmp_path / "latest").resolve() == b.resolve()


def test_unknown_workload_is_a_clear_error():
    import pytest
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        make("nope")


class BankClient:
    """A single-copy bank: enough for the runner's phases (unit test)."""

    def __init__(self):
        self.data = {}

    async def txn(self, ops):
        await asyncio.sleep(0)
        out = []
        for f, k, v in ops:
            if f == "w":
                self.data[k] = v
            elif f == "add":
                self.data[k] = self.data.get(k, 0) + v
            out.append([f, k, self.data.get(k) if f == "r" else v])
        return out


def test_rate_is_an_upper_bound_and_the_time_limit_stops_invokes(tmp_path):
    rec = Recorder(tmp_path / "h.jsonl")
    opts = RunOptions(concurrency=4, time_limit=1.0, rate=40, seed=2)
    shared = FlakyRegisterClient(2)
    asyncio.run(run(make("register"), lambda _t: shared, rec, opts))
    rec.close()
    ops = read_jsonl(tmp_path / "h.jsonl")
    invokes = [o for o in ops if o.type == "invoke"]
    # never faster than asked (a slow machine only makes fewer), and nothing after the limit
    assert len(invokes) <= 40 * 1.0 * 1.5 + opts.concurrency
    assert all(o.time <= 1.2e9 for o in invokes)


def test_pacer_spreads_slots_at_the_rate_and_never_banks_missed_ones():
    pacer = Pacer(rate=50, seed=1)
    delays = [pacer.delay(0.0) for _ in range(1000)]  # everyone asks at once: slots queue up
    assert delays[0] == 0 and delays == sorted(delays)
    assert 1000 / 50 * 0.9 < pacer.next < 1000 / 50 * 1.1
    assert pacer.delay(10_000.0) == 0  # slots missed while all workers were busy are gone
    assert Pacer(rate=0, seed=1).delay(5.0) == 0


def test_phases_setup_then_main_with_nemesis_then_final(tmp_path):
    rec = Recorder(tmp_path / "h.jsonl")
    events = []

    async def nemesis(rec_, deadline):
        rec_.record("nemesis", "info", "start-fake", {"x": 1})
        await asyncio.sleep(max(0, deadline - asyncio.get_running_loop().time()))

    async def heal(rec_):
        rec_.record("nemesis", "info", "heal-fake", {})
        events.append("healed")

    bank = BankClient()
    opts = RunOptions(concurrency=3, time_limit=0.5, rate=0, seed=5, final_settle=0)
    asyncio.run(run(make("bank"), lambda _t: bank, rec, opts, nemesis=nemesis, heal=heal))
    rec.close()
    ops = read_jsonl(tmp_path / "h.jsonl")
    fs = [o.f for o in ops if o.process != "nemesis"]
    assert fs[:2] == ["init", "init"]  # setup first
    assert fs[-2:] == ["read", "read"] and ops[-1].process == 2 * 10**6  # final read last
    heal = next(o.index for o in ops if o.f == "heal-fake")
    main = [o.index for o in ops if o.process not in ("nemesis",) and o.process < 10**6]
    assert main and max(main) < heal < ops[-2].index  # the final read runs on a healed cluster
    assert sum(bank.data.values()) == 100 and events == ["healed"]


class HealingBankClient(BankClient):
    """A bank whose reads, once healed, go wrong in the order given (a definite failure, an
    ambiguous one, a hang) and then work: the cluster still recovering from the faults."""

    def __init__(self, after_heal):
        super().__init__()
        self.after_heal, self.healed = list(after_heal), False

    async def txn(self, ops):
        if self.healed and self.after_heal and ops[0][0] == "r":
            trouble = self.after_heal.pop(0)
            if trouble == "fail":
                raise OpFailed("no leader yet")
            if trouble == "info":
                raise OpUnknown("connection reset")
            await asyncio.sleep(3600)  # "hang": only the op timeout ends it
        return await super().txn(ops)


def _final_phase(tmp_path, after_heal, **options):
    bank = HealingBankClient(after_heal)
    healed_at = []

    async def heal(rec_):
        bank.healed = True
        healed_at.append(rec_.record("nemesis", "info", "heal-fake", {}).time)

    rec = Recorder(tmp_path / "h.jsonl")
    opts = RunOptions(concurrency=2, time_limit=0.2, rate=0, seed=3, op_timeout=0.2,
                      final_backoff=0.02, **options)
    tried = asyncio.run(run(make("bank"), lambda _t: bank, rec, opts, heal=heal))
    rec.close()
    ops = read_jsonl(tmp_path / "h.jsonl")  # validates invoke/completion pairing
    return tried, [o for o in ops if o.process != "nemesis" and o.process >= 2 * 10**6], healed_at[0]


def test_final_read_is_retried_until_ok_and_every_attempt_is_in_the_history(tmp_path):
    tried, final, healed_at = _final_phase(tmp_path, ["fail", "info", "hang", "fail"], final_settle=0.1)
    completions = [o for o in final if o.type != "invoke"]
    assert [o.type for o in completions] == ["fail", "info", "info", "fail", "ok"]
    assert completions[2].error == "timeout"
    assert sum(completions[-1].value.values()) == 100
    # an info attempt retires its process; a fail does not
    assert [o.process for o in completions] == [2 * 10**6, 2 * 10**6, 2 * 10**6 + 1,
                                                2 * 10**6 + 2, 2 * 10**6 + 2]
    assert final[0].time - healed_at >= 0.1e9  # the settle pause
    (summary,) = tried
    assert summary["f"] == "read" and summary["outcome"] == "ok" and summary["attempts"] == 5
    assert [f["type"] for f in summary["failures"]] == ["fail", "info", "info", "fail"]


def test_a_final_read_that_never_succeeds_stops_at_its_deadline(tmp_path):
    tried, final, _ = _final_phase(tmp_path, ["info"] * 1000, final_settle=0, final_timeout=0.3)
    (summary,) = tried
    assert summary["outcome"] == "info" and summary["attempts"] == len(final) // 2 > 3
    assert summary["seconds"] < 0.3 + 0.2 + 0.1  # no attempt starts after the deadline
    assert {o.type for o in final if o.type != "invoke"} == {"info"}
    assert len({o.process for o in final}) == summary["attempts"]  # each info retired its process


def test_list_append_txns_keep_their_keys_in_one_tablet_and_cover_every_tablet():
    from harness.systems.tessera.clients import hash_placement
    from node.tablet.superblock import HashBucket

    w = make("list-append", tablets=4, ops_per_key=20, threads_per_key=2)
    w.placement = hash_placement  # as Tessera's adapter does when it opens the run's clients
    buckets, keys_seen = set(), set()
    for thread in range(4):
        stream = w.ops(thread, 4, random.Random(thread))
        for _ in range(60):
            txn = next(stream).value
            owners = {b for _, k, _ in txn for b in range(4) if HashBucket(b, 4).contains(k)}
            assert len(owners) == 1, txn  # one tablet per transaction
            buckets |= owners
            keys_seen |= {k for _, k, _ in txn}
    assert buckets == {0, 1, 2, 3}
    assert len(keys_seen) > 8 * 4  # fresh key sets replace used ones


def test_each_workload_carries_its_checker_with_its_parameters():
    assert make("bank", total=80).checker.to_json() == {"model": "bank", "options": {"total": 80}}
    assert make("register").checker.model == "cas-register"
    assert make("list-append").checker.model == "list-append"
    assert make("set").checker.model == "set"


def test_a_bursty_pacer_keeps_the_rate_and_puts_each_bursts_starts_at_one_instant():
    """Bursts: the same mean rate as the even pacer, the slots in groups of 1 to BURST_MAX at
    one instant (so the workers given them wake in one loop turn), a burst's slot still untaken
    at its instant started at once by the next caller, and --rate 0 unpaced."""
    from collections import Counter

    pacer = Pacer(rate=50, seed=1, bursts=True)
    slots = [pacer.delay(0.0) for _ in range(5000)]  # everyone asks at once: slots queue up
    assert slots[0] == 0 and slots == sorted(slots)
    assert 5000 / 50 * 0.9 < pacer.next < 5000 / 50 * 1.1
    sizes = Counter(Counter(slots).values())
    assert set(sizes) == set(range(1, BURST_MAX + 1))  # every size, and none larger
    assert sum(n * c for n, c in sizes.items()) == 5000
    pacer = Pacer(rate=50, seed=2, bursts=True)
    pacer.delay(0.0)
    while pacer.left < 2:  # a burst with slots left after the caller that opened it
        pacer.delay(pacer.at)
    at, following, left = pacer.at, pacer.next, pacer.left
    assert pacer.delay(at) == 0 and pacer.at == at  # another caller at its instant joins it
    late = at + 1e-3  # past its instant: a slot it still has starts at once
    assert pacer.delay(late) == 0 and pacer.left == left - 2 and pacer.next == following
    assert Pacer(rate=0, seed=1, bursts=True).delay(5.0) == 0


# The even pacer's first slots for rate 100 and seed 7, as the pacer drew them before bursts
EVEN_SLOTS_SEED_7 = [0.0, 0.011622501, 0.027163488, 0.034807114]


def test_even_pacing_is_unchanged_by_the_bursty_one():
    """The even pacer draws what it always drew (recorded runs and simulator seeds replay)."""
    pacer = Pacer(rate=100, seed=7)
    assert [round(pacer.delay(0.0), 9) for _ in range(4)] == EVEN_SLOTS_SEED_7
