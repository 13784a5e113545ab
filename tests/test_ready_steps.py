"""The one order a Ready is carried out in (node/consensus/ready_steps.py), which production and
both simulators take: what may leave or be applied before the write, and what must wait."""

import pytest

import harness.sim.cluster
import harness.sim.script
import node.replica.replica
from node.consensus import (
    AppendEntries,
    AppendResponse,
    HardState,
    Heartbeat,
    RaftConfig,
    Role,
    SoftState,
    VoteResponse,
    ready_steps,
)
from node.consensus.ready_steps import steps
from node.consensus.types import Ready
from node.entry import Entry, EntryType


def _e(index: int) -> Entry:
    return Entry(1, index, EntryType.REPLICATE, b"")


APPEND = AppendEntries(1, "a", "b", 5, 1, [], 5)
BEAT = Heartbeat(1, "a", "b", 5)


def test_production_and_both_simulators_take_their_steps_from_one_function():
    for driver in (node.replica.replica, harness.sim.cluster, harness.sim.script):
        assert driver.steps is ready_steps.steps, driver.__name__


def test_a_leaders_messages_leave_before_its_write_and_durable_entries_apply_before_it():
    rd = Ready(messages=[APPEND, BEAT], entries_to_persist=[_e(6), _e(7)],
               committed_entries=[_e(4), _e(5), _e(6)])
    st = steps(rd)
    assert st.send_early == (APPEND, BEAT) and st.send == ()
    assert [e.index for e in st.apply_early] == [4, 5]  # 6 is in this Ready's write: after it
    assert [e.index for e in st.apply] == [6] and [e.index for e in st.entries] == [6, 7]
    assert st.write_behind  # nothing in it waits on the write: it may finish after advance


@pytest.mark.parametrize("extra", [
    {"hard_state": HardState(2, "a")},  # a new term or vote: a crash could forget it
    {"messages": [APPEND, AppendResponse(1, "b", "a", True, match_index=5)]},  # reports the write
    {"messages": [VoteResponse(2, "b", "a", True)]},
], ids=["hard-state", "an-acknowledgement", "a-vote"])
def test_everything_waits_for_the_write_when_anything_depends_on_it(extra):
    rd = Ready(**{"messages": [APPEND], "entries_to_persist": [_e(6)],
                  "committed_entries": [_e(5)], **extra})
    st = steps(rd)
    assert st.send_early == () and st.send == tuple(rd.messages)
    assert st.apply_early == () and [e.index for e in st.apply] == [5]
    assert not st.write_behind


def test_a_newly_committed_config_holds_nothing_back():
    """Its entry is durable here before the core hands it over (RaftCore._config_to_persist):
    held, a leader on a slow disk awaited its own write behind every write queued before it,
    and sent its followers nothing meanwhile (harness.sim.stack_silence found it)."""
    rd = Ready(messages=[APPEND], entries_to_persist=[_e(6)], committed_entries=[_e(5)],
               committed_config=RaftConfig(3, ()))
    st = steps(rd)
    assert st.send_early == (APPEND,) and st.write_behind and [e.index for e in st.apply_early] == [5]
    assert st.committed_config == RaftConfig(3, ())


def test_an_unchanged_hard_state_is_not_written_and_holds_nothing_back():
    rd = Ready(messages=[APPEND], entries_to_persist=[_e(6)], hard_state=HardState(1, "a"))
    st = steps(rd, unchanged_hard_state=True)
    assert st.hard_state is None and st.send_early == (APPEND,)
    assert steps(rd).hard_state == HardState(1, "a") and steps(rd).send_early == ()


def test_nothing_applies_early_while_the_role_changes():
    rd = Ready(messages=[APPEND], entries_to_persist=[_e(6)], committed_entries=[_e(5)],
               soft_state=SoftState(Role.LEADER, "a", 1))
    st = steps(rd)
    assert st.send_early == (APPEND,) and st.apply_early == () and [e.index for e in st.apply] == [5]


def test_with_nothing_to_write_nothing_is_early():
    rd = Ready(messages=[BEAT], committed_entries=[_e(8), _e(9)])
    st = steps(rd)
    assert st.send_early == () and st.send == (BEAT,) and [e.index for e in st.apply] == [8, 9]
    assert not st.write_behind
