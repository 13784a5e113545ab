"""Peer progress bookkeeping (node.consensus.progress): each transition in both directions, and
the answers that must be ignored."""

import pytest

from node.consensus.progress import PeerState, Progress

IDLE, IN_FLIGHT, NEEDS_COPY = PeerState.IDLE, PeerState.IN_FLIGHT, PeerState.NEEDS_COPY


def test_a_new_peer_is_idle_and_probed_from_the_leaders_tail():
    pr = Progress(next=8)
    assert (pr.match, pr.next, pr.state, pr.recent_active, pr.needs_copy) == (0, 8, IDLE, False, False)


@pytest.mark.parametrize("state,next_,compacted,copy_probe,want_prev,want_state", [
    (IDLE, 8, 0, False, 7, IN_FLIGHT),  # normal send after index 7
    (IDLE, 8, 7, False, 7, IN_FLIGHT),  # prev is the compaction point itself: still in the log
    (IN_FLIGHT, 8, 0, False, None, IN_FLIGHT),  # one request at a time
    (IN_FLIGHT, 8, 0, True, None, IN_FLIGHT),
    (IDLE, 5, 6, False, None, NEEDS_COPY),  # needs index 5, compacted through 6
    (IDLE, 5, 6, True, 6, NEEDS_COPY),  # heartbeat pace: an empty probe at the compaction point
    (NEEDS_COPY, 5, 6, False, None, NEEDS_COPY),
    (NEEDS_COPY, 5, 6, True, 6, NEEDS_COPY),  # a copy probe out still reports NEEDS_COPY
])
def test_start_append(state, next_, compacted, copy_probe, want_prev, want_state):
    pr = Progress(next=next_, state=state)
    assert pr.start_append(compacted, copy_probe, now=12) == want_prev
    assert pr.state is want_state and pr.next == next_
    assert pr.sent_tick == (12 if state is IDLE and want_state is IN_FLIGHT else 0)


@pytest.mark.parametrize("match,ack,stale,advanced,want_match,want_next", [
    (3, 2, True, None, 3, 9),  # a reordered older success: ignored
    (3, 3, False, False, 3, 9),  # a duplicate: frees the slot, nothing else
    (3, 5, False, True, 5, 9),  # next stays ahead of what was sent
    (3, 9, False, True, 9, 10),  # next follows match up
])
def test_ack(match, ack, stale, advanced, want_match, want_next):
    pr = Progress(next=9, match=match, state=IN_FLIGHT)
    assert pr.stale_ack(ack) is stale
    if not stale:
        assert pr.ack(ack, seq_now=4) is advanced
        assert pr.state is IDLE
        assert pr.matched_at_seq == (4 if advanced else 0)
    assert (pr.match, pr.next) == (want_match, want_next)


def test_an_ack_ends_needs_copy():
    """Success at the compaction point means a tablet copy landed."""
    pr = Progress(next=3, state=NEEDS_COPY)
    pr.ack(6, seq_now=1)
    assert (pr.state, pr.match, pr.next, pr.needs_copy) == (IDLE, 6, 7, False)


@pytest.mark.parametrize("match,next_,rejected,probe,want_match,want_next", [
    (0, 9, 8, 4, 0, 5),  # the hint skips a divergent term: back off to just above the probe
    (0, 9, 8, 8, 0, 8),  # a useless hint still backs off by one
    (3, 9, 8, 1, 3, 4),  # never to or below match...
    (5, 6, 5, 3, 3, 4),  # ...unless it lost what it acknowledged: match drops to the probe
    (5, 6, 5, 7, 5, 6),  # a probe above match does not raise it
])
def test_reject(match, next_, rejected, probe, want_match, want_next):
    pr = Progress(next=next_, match=match, state=IN_FLIGHT, matched_at_seq=2)
    assert not pr.stale_reject(rejected)
    lost = pr.lost_acknowledged(rejected, seq=3)  # an answer to an append sent after the ack
    assert lost is (rejected <= match)
    pr.reject(rejected, probe, lost)
    assert (pr.match, pr.next, pr.state) == (want_match, want_next, IDLE)


@pytest.mark.parametrize("seq,want", [(1, None), (2, None), (3, True)])
def test_a_refusal_below_match_shows_a_loss_only_if_its_append_left_after_the_ack(seq, want):
    """The ack for match 5 arrived when the leader had sent 2 appends. A refusal at 5 that
    answers append 1 or 2 (a duplicate, or reordered behind the ack) was answered before the peer
    stored entry 5: stale. One answering append 3 was refused after: the peer lost it."""
    pr = Progress(next=6, match=5, state=IN_FLIGHT, matched_at_seq=2)
    assert not pr.stale_reject(5)
    assert pr.lost_acknowledged(5, seq) is want


@pytest.mark.parametrize("rejected", [7, 9, 0])
def test_a_rejection_of_anything_but_the_outstanding_request_is_stale(rejected):
    assert Progress(next=9, match=2).stale_reject(rejected)


def test_a_rejection_keeps_needs_copy():
    pr = Progress(next=3, state=NEEDS_COPY)
    pr.reject(2, 0, lost=False)
    assert pr.state is NEEDS_COPY and pr.next == 1


@pytest.mark.parametrize("state,sent_tick,want", [
    (IDLE, 0, IDLE), (IN_FLIGHT, 10, IDLE), (IN_FLIGHT, 9, IDLE), (NEEDS_COPY, 0, NEEDS_COPY),
    (IN_FLIGHT, 11, IN_FLIGHT),  # sent within the last heartbeat interval: most likely being
])                               # written, not lost; resending it sent the same entries again
def test_a_heartbeat_answer_frees_a_slot_held_since_a_heartbeat_interval_ago(state, sent_tick,
                                                                              want):
    pr = Progress(next=4, state=state, sent_tick=sent_tick)
    pr.heartbeat_answered(sent_by=10, now=12)
    assert pr.state is want and pr.recent_active


@pytest.mark.parametrize("state", list(PeerState))
def test_reset_starts_over_from_the_copy(state):
    """Replication goes on just past the copy; the copy itself acknowledges nothing (its
    receiver may have voted in a later term meanwhile), so the match is unknown
    until the peer answers an append, and the peer is not marked active by it either."""
    pr = Progress(next=9, match=8, state=state)  # its old match may be above the copy
    pr.reset(3)
    assert (pr.match, pr.next, pr.state, pr.recent_active) == (0, 4, IDLE, False)
