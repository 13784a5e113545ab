"""Bank transfers as transactions: totals are conserved and no balance ever goes negative."""

from hypothesis import given, settings
from hypothesis import strategies as st

from node.entry import Entry, EntryType
from node.tablet.ops import MicroOp, OpenSession, Rejection, Txn, encode_command
from node.tablet.state import StateMachine

ACCOUNTS = [f"acct-{i}" for i in range(5)]
INITIAL = 10


def transfer(src, dst, amount):
    return Txn(
        [MicroOp("add", src, -amount), MicroOp("require_ge", src, 0), MicroOp("add", dst, amount)]
    )


READ_ALL = Txn([MicroOp("r", a) for a in ACCOUNTS])


class Bank:
    def __init__(self):
        self.sm = StateMachine("bank")
        self.index = self.session = self.seq = 0
        self.session = self.apply(OpenSession()).value
        for a in ACCOUNTS:
            assert self.submit(Txn([MicroOp("w", a, INITIAL)])).ok

    def apply(self, op, seq=0):
        self.index += 1
        payload = encode_command(op, session=self.session, seq=seq)
        return self.sm.apply(Entry(1, self.index, EntryType.REPLICATE, payload))

    def submit(self, op):
        self.seq += 1
        return self.apply(op, self.seq)

    def balances(self):
        return {k: v for _, k, v in self.sm.query(READ_ALL).value}


def test_an_overdraft_aborts_and_changes_nothing():
    bank = Bank()
    r = bank.submit(transfer("acct-0", "acct-1", INITIAL + 1))
    assert (r.ok, r.error, r.value) == (False, Rejection.PRECONDITION_FAILED, 1)
    assert bank.balances() == dict.fromkeys(ACCOUNTS, INITIAL)
    assert bank.submit(transfer("acct-0", "acct-1", INITIAL)).ok
    assert bank.balances()["acct-0"] == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(ACCOUNTS),
            st.sampled_from(ACCOUNTS),
            st.integers(1, 25),
            st.integers(0, 3),
        ),
        max_size=60,
    )
)
def test_transfers_with_retries_conserve_the_total_and_refuse_negatives(transfers):
    bank = Bank()
    expected = dict.fromkeys(ACCOUNTS, INITIAL)
    for src, dst, amount, retries in transfers:
        result = bank.submit(transfer(src, dst, amount))
        for _ in range(retries):  # the client did not hear back and retries the same seq
            assert bank.apply(transfer(src, dst, amount), bank.seq) == result
        if expected[src] >= amount:
            assert result.ok
            expected[src] -= amount
            expected[dst] += amount
        else:
            assert result.error is Rejection.PRECONDITION_FAILED
        balances = bank.balances()
        assert balances == expected
        assert sum(balances.values()) == INITIAL * len(ACCOUNTS)
        assert min(balances.values()) >= 0
