"""Raft interaction transcripts in etcd/raft's datadriven style: tests/testdata/raft/*.txt.

Each file is a list of blocks separated by blank lines. A block is optional `# comment` lines,
one command line, `----`, then the output the command must print (no blank lines in it). The
commands drive harness.sim.script.ScriptCluster (one FIFO message queue, time only by `tick`); the
output is the message trace: every delivered message on one line (`n1->n2 MsgApp term=1
log=1/1 commit=1 entries=[1/2 "x"]`; `DROPPED` when a partition or a crash eats it), indented
lines for what it made a node decide (role or term changes, elections, config changes), and
state lines where a command asks for them (`status`, `progress`, `config`).

Commands (uuid arguments are node names; `k=v` are options):
    cluster [voters=n1,n2,n3] [learners=...] [pre-vote=true] [seed=0]   a fresh cluster
    tick N [times=1]            campaign N             propose N DATA
    elect N                     ScriptCluster.elect: leases run out, N campaigns and wins (the
                                vote traffic is not printed, the rest stays queued)
    deliver [from=N] [to=N] [type=MsgApp] [limit=N]    stabilize (deliver until quiet)
    drop N (discard what N has queued)                 isolate N | partition N,N N | heal
    crash N | restart N | add-node N                   transfer N TO | compact N INDEX
    change N add|promote|remove TARGET [promote=false] [cas=INDEX]  (cas: the committed one)
    copy N from=SRC             tablet copy of SRC's committed state onto N, then reset_progress
    status [N...] | progress N | config N

A behaviour change shows up as a diff to review. To accept it, regenerate the expected output
(like etcd's -rewrite) and review the file diff before committing:

    REWRITE_TRANSCRIPTS=1 .venv/bin/python -m pytest tests/test_raft_transcripts.py -q
"""

from __future__ import annotations

import difflib
import os
import pathlib

import pytest

from harness.sim.script import ScriptCluster
from node.consensus import (
    AppendEntries,
    AppendResponse,
    ChangeOp,
    ConfigChange,
    ConfigPending,
    ConfigRolledBack,
    Election,
    FollowerLostEntries,
    Heartbeat,
    HeartbeatResponse,
    MemberType,
    ProposalError,
    RaftConfig,
    TimeoutNow,
    VoteCast,
    VoteRequest,
    VoteResponse,
    decode_config,
)
from node.entry import EntryType

TESTDATA = pathlib.Path(__file__).parent / "testdata" / "raft"
REWRITE = os.environ.get("REWRITE_TRANSCRIPTS") == "1"

MSG_TYPES = {
    "MsgApp": AppendEntries, "MsgAppResp": AppendResponse, "MsgVote": VoteRequest,
    "MsgVoteResp": VoteResponse, "MsgHeartbeat": Heartbeat, "MsgHeartbeatResp": HeartbeatResponse,
    "MsgTimeoutNow": TimeoutNow,
}


# ------------------------------------------------------------------ rendering

def _members(config: RaftConfig) -> str:
    return ",".join(m.uuid if m.member_type == MemberType.VOTER else f"~{m.uuid}"
                    for m in config.members) or "-"


def _entry(e) -> str:
    if e.type == EntryType.NO_OP:
        return f"{e.term}/{e.index} noop"
    if e.type == EntryType.CONFIG_CHANGE:
        return f"{e.term}/{e.index} conf:{_members(decode_config(e.payload))}"
    return f"{e.term}/{e.index} {e.payload.decode(errors='replace')!r}".replace("'", '"')


def describe(src: str, m) -> str:
    """One message, in etcd's `from->to Type term=... ` shape."""
    head = f"{src}->{m.to_uuid}"
    if isinstance(m, AppendEntries):
        entries = ", ".join(_entry(e) for e in m.entries)
        return (f"{head} MsgApp term={m.term} log={m.prev_term}/{m.prev_index} commit={m.commit}"
                + (f" entries=[{entries}]" if m.entries else ""))
    if isinstance(m, AppendResponse):
        if m.success:
            return f"{head} MsgAppResp term={m.term} match={m.match_index}"
        return (f"{head} MsgAppResp term={m.term} rejected={m.reject_index} "
                f"hint={m.hint_term}/{m.hint_index}")
    if isinstance(m, VoteRequest):
        kind = "MsgPreVote" if m.pre_vote else "MsgVote"
        return f"{head} {kind} term={m.term} log={m.last_term}/{m.last_index}" + (
            " transfer" if m.transfer else "")
    if isinstance(m, VoteResponse):
        kind = "MsgPreVoteResp" if m.pre_vote else "MsgVoteResp"
        return f"{head} {kind} term={m.term} {'granted' if m.granted else 'rejected'}"
    if isinstance(m, Heartbeat):
        return f"{head} MsgHeartbeat term={m.term} commit={m.commit}" + (
            f" ctx={m.ctx.decode()}" if m.ctx else "")
    if isinstance(m, HeartbeatResponse):
        return (f"{head} MsgHeartbeatResp term={m.term} commit={m.commit}"
                + (f" ctx={m.ctx.decode()}" if m.ctx else ""))
    if isinstance(m, TimeoutNow):
        return f"{head} MsgTimeoutNow term={m.term}"
    raise AssertionError(f"unknown message {m!r}")


def _event(uuid: str, e) -> str | None:
    if isinstance(e, VoteCast):
        if e.granted:
            return None  # the response says so
        kind = "pre-vote" if e.pre_vote else "vote"
        return f"{uuid} refused {kind} to {e.candidate} term={e.term}: {e.reason}"
    if isinstance(e, Election):
        kind = "pre-election" if e.pre_vote else "election"
        votes = ",".join(f"{v}{'+' if g else '-'}" for v, g in e.votes)
        return f"{uuid} {kind} term={e.term} {e.outcome} votes={votes}" + (
            f" ({e.reason})" if e.reason else "")
    if isinstance(e, ConfigPending):
        return f"{uuid} config pending @{e.config.opid_index}: {_members(e.config)}"
    if isinstance(e, ConfigRolledBack):
        return f"{uuid} config rolled back @{e.config.opid_index}: {_members(e.config)}"
    if isinstance(e, FollowerLostEntries):
        return f"{uuid} {e.peer} lost acknowledged entries: acknowledged {e.acknowledged}, has {e.has}"
    raise AssertionError(f"unknown event {e!r}")


def status_line(c: ScriptCluster, uuid: str) -> str:
    core = c.cores[uuid]
    if core is None:
        return f"{uuid} DOWN"
    terms = " ".join(str(e.term) for e in core.log.entries)
    first = core.log.first_index()
    log = f"[{terms}]" if first == 1 else f"[{first}:{' ' if terms else ''}{terms}]"  # from index
    return (f"{uuid} {core.role.value} term={core.term} leader={core.lead or '-'} "
            f"commit={core.commit} applied={core.applied} log={log}")


# ------------------------------------------------------------------ driving

class Transcript:
    """Runs commands on a ScriptCluster and prints what they did."""

    def __init__(self):
        self.c: ScriptCluster | None = None
        self.states: dict[str, tuple | None] = {}  # uuid -> (role, term, lead) last printed
        self.printed: dict[int, object] = {}  # id -> event, kept alive so ids stay unique

    def _events(self, uuid: str) -> list:
        """The events a node reported, then those it decided but has not handed out yet: an
        event rides with the next Ready, and a refused vote alone makes no Ready, so the trace
        would otherwise show it only under some later command."""
        core = self.c.cores[uuid]
        return self.c.events[uuid] + (core._events if core is not None else [])

    def _changes(self) -> list[str]:
        """What each node decided since the last call: events, then its new role/term/leader."""
        out = []
        for u, core in self.c.cores.items():
            for e in self._events(u):
                if id(e) not in self.printed:
                    self.printed[id(e)] = e
                    line = _event(u, e)
                    if line is not None:
                        out.append("  " + line)
            state = (core.role, core.term, core.lead) if core is not None else None
            if state is not None and state != self.states.get(u):
                out.append(f"  {u} is {state[0].value} term={state[1]} leader={state[2] or '-'}")
            self.states[u] = state
        return out

    def _deliver(self, src=None, dst=None, types=None, limit=None) -> list[str]:
        """ScriptCluster.deliver one message at a time, so the trace can name the messages it
        dropped (the ones it took off the queue without delivering) and what each delivery
        made the receiver decide."""
        out: list[str] = []
        delivered = 0
        while limit is None or delivered < limit:
            before = list(self.c.queue)
            n = self.c.deliver(src, dst, types, limit=1)
            after = {id(item) for item in self.c.queue}
            taken = [item for item in before if id(item) not in after]
            for s, m in taken[: len(taken) - n]:
                out.append(describe(s, m) + " DROPPED")
            if not n:
                break
            s, m = taken[-1]
            out.append(describe(s, m))
            out.extend(self._changes())
            delivered += 1
            assert delivered < 10_000, "messages keep flowing: the cluster does not settle"
        return out

    def run(self, line: str) -> str:
        words = line.split()
        cmd, args = words[0], [w for w in words[1:] if "=" not in w]
        opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        out: list[str] = []
        if cmd == "cluster":
            voters = tuple(opts.get("voters", "n1,n2,n3").split(","))
            learners = tuple(x for x in opts.get("learners", "").split(",") if x)
            self.c = ScriptCluster(voters, learners=learners, pre_vote=opts.get("pre-vote", "true") == "true",
                                   seed=int(opts.get("seed", "0")))
            self._changes()
            out = [status_line(self.c, u) for u in self.c.cores]
            return "\n".join(out)
        c = self.c
        try:
            if cmd == "tick":
                c.tick(args[0], int(opts.get("times", "1")))
            elif cmd == "elect":
                c.elect(args[0])  # election traffic is delivered unprinted; its outcome shows
            elif cmd == "campaign":
                c.do(args[0], "campaign")
            elif cmd == "propose":
                out.append(f"index={c.do(args[0], 'propose', args[1].encode())}")
            elif cmd == "stabilize":
                out += self._deliver()
            elif cmd == "deliver":
                types = tuple(MSG_TYPES[t] for t in opts["type"].split(",")) if "type" in opts else None
                limit = int(opts["limit"]) if "limit" in opts else None
                out += self._deliver(opts.get("from"), opts.get("to"), types, limit)
            elif cmd == "drop":
                out += [describe(s, m) + " DROPPED" for s, m in c.queue if s == args[0]]
                c.drop(args[0])
            elif cmd == "isolate":
                c.isolate(args[0])
            elif cmd == "partition":
                c.partition(*(tuple(g.split(",")) for g in args))
            elif cmd == "heal":
                c.heal()
            elif cmd == "crash":
                c.crash(args[0])
            elif cmd == "restart":
                c.restart(args[0])
            elif cmd == "add-node":
                c.add_node(args[0])
            elif cmd == "transfer":
                c.do(args[0], "transfer_leadership", args[1])
            elif cmd == "compact":
                c.do(args[0], "compact", int(args[1]))
                out.append(status_line(c, args[0]))
            elif cmd == "change":
                uuid, op, target = args
                op = {"add": ChangeOp.ADD_NON_VOTER, "promote": ChangeOp.PROMOTE, "remove": ChangeOp.REMOVE}[op]
                core = c.core(uuid)
                cas = int(opts.get("cas", core.committed_config.opid_index))
                change = ConfigChange(op, target, opts.get("promote", "true") == "true")
                out.append(f"index={c.do(uuid, 'propose_config_change', change, cas)}")
            elif cmd == "copy":
                src = c.core(opts["from"])
                index, term = src.commit, src.log.term_at(src.commit)
                c.restart_from_copy(args[0], index, term, [], c.disks[opts["from"]]["config"])
                c.do(opts["from"], "reset_progress", args[0], index, src.term)
            elif cmd == "status":
                out += [status_line(c, u) for u in (args or list(c.cores))]
            elif cmd == "progress":
                for peer, ps in c.core(args[0]).status().peers.items():
                    pr = c.core(args[0]).progress[peer]
                    out.append(f"{peer} {ps.member_type.name} match={ps.match} next={ps.next} "
                               f"{pr.state.value}" + (" needs_tablet_copy" if ps.needs_tablet_copy else ""))
            elif cmd == "config":
                core = c.core(args[0])
                out.append(f"active @{core.active_config.opid_index}: {_members(core.active_config)}")
                out.append(f"committed @{core.committed_config.opid_index}: {_members(core.committed_config)}")
            else:
                raise AssertionError(f"unknown command {cmd!r}")
        except ProposalError as e:
            out.append(f"error: {type(e).__name__}: {e}")
        # what a command made nodes decide directly (ticks, proposals, restarts, ...)
        out += self._changes()
        return "\n".join(out) or "ok"


# ------------------------------------------------------------------ the file format

def parse(text: str) -> list[tuple[list[str], str, str]]:
    """Blocks of (comment lines, command, expected output)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        comments = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
            if lines[i].startswith("#"):
                comments.append(lines[i])
            i += 1
        if i >= len(lines):
            assert not comments, "trailing comment without a command"
            break
        command = lines[i]
        assert lines[i + 1] == "----", f"line {i + 2}: expected ---- after {command!r}"
        i += 2
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append((comments, command, "\n".join(expected)))
    return blocks


def render(blocks: list[tuple[list[str], str, str]]) -> str:
    return "\n\n".join("\n".join([*comments, command, "----", output])
                       for comments, command, output in blocks) + "\n"


def run_transcript(text: str) -> str:
    t = Transcript()
    return render([(comments, command, t.run(command)) for comments, command, _ in parse(text)])


FILES = sorted(TESTDATA.glob("*.txt"))


def test_there_are_transcripts():
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path: pathlib.Path):
    text = path.read_text()
    assert parse(text)[0][0], f"{path.name} must start with a comment saying what it shows"
    actual = run_transcript(text)
    if REWRITE:
        path.write_text(actual)
        return
    if actual != text:
        diff = "".join(difflib.unified_diff(
            text.splitlines(keepends=True), actual.splitlines(keepends=True),
            f"{path.name} (expected)", f"{path.name} (actual)"))
        pytest.fail(f"transcript differs (REWRITE_TRANSCRIPTS=1 regenerates it):\n{diff}", pytrace=False)


def test_transcripts_are_deterministic():
    for path in FILES:
        text = path.read_text()
        assert run_transcript(text) == run_transcript(text), path.name


def test_a_changed_expectation_fails():
    """The comparison sees a one-line change in the expected output."""
    path = TESTDATA / "replication.txt"
    text = path.read_text()
    actual = run_transcript(text)
    broken = text.replace("MsgAppResp", "MsgAppRsp", 1)
    assert broken != text and run_transcript(broken) != broken and run_transcript(broken) == actual
