"""An in-memory TCP network for SimLoop: seeded latencies, partitions, resets and crashes.

Just enough TCP for asyncio streams to behave as on a real network: each direction of a
connection is a FIFO pipe whose segments (data, FIN, RST) arrive after a random latency and in
order. A partition stalls a pipe instead of dropping its bytes, as retransmission would, and
the stalled bytes flow again after the heal unless the connection is reset first; a SYN across
a cut waits the same way, so the caller's connect timeout fires. A closed endpoint answers data
with RST, as a kernel does for a socket nobody owns. A crashed host's listeners vanish
(connecting is refused) and its peers receive RST after its in-flight data.

Write back-pressure as a kernel and asyncio give it: a connection holds SOCKET_BUFFER bytes
written and not yet read by the receiving protocol (the socket's send and receive buffers);
beyond that the writer's transport buffer grows (get_write_buffer_size()), and pause_writing /
resume_writing are called at its water marks, as asyncio's selector transport calls them, so
the RPC layer's drain waits. A receiver that stops reading, or a partition that stalls a pipe,
backs up to the writer. Without it the RPC layer's drains would never run under simulation.

Not modelled: loss, duplication and reordering inside a connection (TCP hides them), bandwidth,
one-way partitions, TLS, UDP, DNS. Reordering *across* connections is (`delay_flow`): each
connection may take a path of its own, as flows hashed onto the paths of a congested uplink do,
so an answer on one connection can overtake a request sent earlier on another.

Protocol callbacks run in the context of whoever opened the endpoint (the connecting task, or
the task that started the server), so the tasks they start belong to that host's process; the
network's own timers run in SYSTEM, which no crash cancels.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import functools
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable

from harness.sim.loop import SYSTEM, SimLoop, owner

Addr = tuple[str, int]

SOCKET_BUFFER = 1 << 20  # bytes in flight before a writer's transport buffer grows
_LISTEN_PORTS = 20000  # where port 0 allocation starts, per host
_EPHEMERAL_PORTS = 49152


class SimNetwork:
    def __init__(self, seed: int, *, latency: tuple[float, float] = (0.0001, 0.005),
                 record: bool = False, unpartitioned: Iterable[str] = ()):
        """`latency`: bounds of the uniform one-way delay in seconds. `record`: keep `log`, a
        list of (time, kind, src, dst, bytes) for every segment that arrives. `unpartitioned`:
        hosts that reach everyone whatever the cut, like Jepsen's control node, whose clients
        must still reach a partitioned-away leader to find what it serves."""
        self.rng = random.Random(seed)
        self.latency = latency
        self.stats = {"bytes": 0, "messages": 0, "connections": 0, "refused": 0, "resets": 0,
                      "held": 0, "write_pauses": 0}
        self.log: list[tuple[float, str, str, str, int]] | None = [] if record else None
        self._loop: SimLoop | None = None
        self._listeners: dict[Addr, _Listener] = {}
        self._conns: dict[int, tuple[_Endpoint, _Endpoint]] = {}
        self._conn_ids = itertools.count(1)
        self._next_port: dict[tuple[str, int], int] = {}
        self._group: dict[str, int] = {}
        self._isolated: set[str] = set()
        self._cut: set[frozenset[str]] = set()  # single links cut (`cut`), both directions
        self._slow: dict[frozenset[str], float] = {}  # link -> extra one-way delay (`slow`)
        # (src, dst, the host that opened the connection) -> extra one-way delay (`delay_flow`)
        self._flows: dict[tuple[str, str, str], float] = {}
        self._free = frozenset(unpartitioned)
        self._stalled: list[_Pipe] = []
        self._whole = True  # no partition, isolation or cut link: every host reaches every other
        self._held: list[tuple[str, str, str, Callable[[], None]]] = []
        # (src, dst) -> [how many payloads still to garble, the picker]: `garble`
        self._garble: dict[tuple[str, str], list] = {}

    def attach(self, loop: SimLoop) -> None:
        self._loop = loop

    # -- faults ----------------------------------------------------------------------------
    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        """Only hosts in the same group reach each other; unlisted hosts form one more group."""
        self._group = {h: i for i, group in enumerate(groups) for h in group}
        self._topology_changed()

    def isolate(self, host: str) -> None:
        self._isolated.add(host)
        self._topology_changed()

    def cut(self, a: str, b: str) -> None:
        """Cut the one link between `a` and `b`, both ways: each still reaches everyone else,
        as iptables drops between two hosts make it (a partial partition: the shape in which a
        leader keeps its lease or its quorum through one follower while another campaigns)."""
        self._cut.add(frozenset((a, b)))
        self._topology_changed()

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cut

    def uncut(self, a: str, b: str) -> None:
        self._cut.discard(frozenset((a, b)))
        self._topology_changed()

    def slow(self, a: str, b: str, seconds: float) -> None:
        """Add `seconds` to every segment's delay between `a` and `b`, both ways (netem's
        delay on one link); 0 ends it. Segments keep their order."""
        if seconds > 0:
            self._slow[frozenset((a, b))] = seconds
        else:
            self._slow.pop(frozenset((a, b)), None)

    def delay_flow(self, src: str, dst: str, opener: str, seconds: float) -> None:
        """Add `seconds` to every segment `src` sends to `dst` on connections that `opener`
        opened (one of the two), now and on connections opened while this lasts; 0 ends it.
        Each connection, one flow, takes a path of its own: flows hashed onto the paths of a
        congested uplink, or tc's delay on `src`'s egress filtered by port. So what `src` sends
        `dst` on one connection may overtake what it sent before on the other, while each
        connection stays in order."""
        key = (src, dst, opener)
        if seconds > 0:
            self._flows[key] = seconds
        elif self._flows.pop(key, None) is None:
            return
        for pair in self._conns.values():
            for ep in pair:
                pipe = ep._out
                if pipe is not None and (pipe.src, pipe.dst.host, pipe.opener) == key:
                    pipe.extra = max(seconds, 0.0)

    def flow_delayed(self, src: str, dst: str, opener: str) -> float:
        """The delay `delay_flow` added to that flow (0: none)."""
        return self._flows.get((src, dst, opener), 0.0)

    def garble(self, src: str, dst: str, count: int,
               pick: Callable[[bytes], int | None] | None) -> None:
        """The next `count` data segments from `src` to `dst` for which `pick` names an offset
        arrive with the two 16-bit words there swapped: the damage TCP's checksum (a ones'
        complement sum of 16-bit words, blind to their order) cannot see, as a router or NIC
        that reorders bytes past the checksum's reach delivers it. `count` 0 or `pick` None: off."""
        if count and pick is not None:
            self._garble[(src, dst)] = [count, pick]
        else:
            self._garble.pop((src, dst), None)

    def garbled(self, src: str, dst: str) -> int:
        """How many garblings from `src` to `dst` are still to happen."""
        return self._garble.get((src, dst), [0])[0]

    def _garbled(self, src: str, dst: str, payload: bytes) -> bytes:
        g = self._garble.get((src, dst))
        at = g[1](payload) if g is not None else None
        if at is None:
            return payload
        g[0] -= 1
        if not g[0]:
            del self._garble[(src, dst)]
        return payload[:at] + payload[at + 2:at + 4] + payload[at:at + 2] + payload[at + 4:]

    def slowed(self, a: str, b: str) -> float:
        """The delay `slow` added between `a` and `b` (0: none)."""
        return self._slow.get(frozenset((a, b)), 0.0)

    def heal(self) -> None:
        self._group.clear()
        self._isolated.clear()
        self._cut.clear()
        self._slow.clear()
        for key in list(self._flows):
            self.delay_flow(*key, 0.0)
        self._topology_changed()

    def reachable(self, a: str, b: str) -> bool:
        if self._whole:  # asked for every segment that arrives
            return True
        if a == b or a in self._free or b in self._free:
            return True
        if a in self._isolated or b in self._isolated or frozenset((a, b)) in self._cut:
            return False
        return self._group.get(a, -1) == self._group.get(b, -1)

    def reset_random_connection(self) -> tuple[Addr, Addr] | None:
        """RST both ends of one established connection, as a middlebox would; returns the
        (client, server) addresses, or None if there is no connection to reset."""
        live = [pair for pair in self._conns.values() if all(ep._established() for ep in pair)]
        if not live:
            return None
        pair = self.rng.choice(live)
        self._reset(pair)
        return pair[0].get_extra_info("sockname"), pair[1].get_extra_info("sockname")

    def reset_between(self, a: str, b: str) -> int:
        """RST both ends of every established connection between hosts `a` and `b`, either
        way, as a stateful firewall between them that lost its connection table does (or a
        link flap long enough for both kernels to give up); the number reset. Draws nothing
        from the network's random stream."""
        pairs = [pair for pair in self._conns.values() if {pair[0].host, pair[1].host} == {a, b}
                 and all(ep._established() for ep in pair)]
        for pair in pairs:
            self._reset(pair)
        return len(pairs)

    def _reset(self, pair: tuple[_Endpoint, _Endpoint]) -> None:
        for ep in pair:
            ep._out.clear()
            ep._rst_sent = True
            self._loop.call_soon(ep._lose, _reset_error(), context=SYSTEM)

    def host_crashed(self, host: str) -> None:
        for addr in [a for a in self._listeners if a[0] == host]:
            del self._listeners[addr]
        for pair in list(self._conns.values()):
            for ep in pair:
                if ep.host == host:
                    ep._killed = True
                    if not ep._rst_sent:
                        ep._reset_peer()
            self._forget(pair[0])

    # -- the socket API SimLoop exposes ----------------------------------------------------
    async def connect(self, protocol_factory, host: str, port: int,
                      local_addr: Addr | None) -> tuple[_Endpoint, asyncio.BaseProtocol]:
        if local_addr is None:
            raise ValueError("a simulated connection needs local_addr=(host, 0): it names the "
                             "connecting host")
        src = _own_host(local_addr[0])
        client = _Endpoint(self, (src, self._port(src, _EPHEMERAL_PORTS)),
                           contextvars.copy_context())
        client._extra["peername"] = (host, port)
        client._waiter = self._loop.create_future()
        self._packet(src, host, "syn", functools.partial(self._syn, client, host, port))
        try:
            await client._waiter
        except BaseException:
            client._abandon()
            raise
        protocol = protocol_factory()
        client._attach(protocol)
        return client, protocol

    def listen(self, protocol_factory, host: str | None, port: int) -> _Listener:
        proc = owner(None)
        if not host or host == "0.0.0.0":
            if proc is None:
                raise ValueError("listening on a wildcard address needs a process (SimLoop.spawn)")
            host = proc.host
        host = _own_host(host)
        if port == 0:
            port = self._port(host, _LISTEN_PORTS)
        if (host, port) in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host}:{port}")
        listener = _Listener(self, (host, port), protocol_factory, contextvars.copy_context())
        self._listeners[(host, port)] = listener
        return listener

    # -- connection set-up -----------------------------------------------------------------
    def _syn(self, client: _Endpoint, host: str, port: int) -> None:
        listener = self._listeners.get((host, port))
        if listener is None or not _alive(listener.context):
            self.stats["refused"] += 1
            self._packet(host, client.host, "refused", client._refused)
            return
        server = _Endpoint(self, (host, port), listener.context.copy())
        server._extra["peername"] = client.get_extra_info("sockname")
        client._peer, server._peer = server, client
        client._out = _Pipe(self, client.host, server, client.host)
        server._out = _Pipe(self, host, client, client.host)
        self._conns[next(self._conn_ids)] = (client, server)
        self.stats["connections"] += 1
        server._out.send("synack")
        server._attach(server._ctx.run(listener.protocol_factory))

    def _port(self, host: str, base: int) -> int:
        port = self._next_port.get((host, base), base)
        while (host, port) in self._listeners:
            port += 1
        self._next_port[(host, base)] = port + 1
        return port

    def _forget(self, ep: _Endpoint) -> None:
        """Drop a connection from the books once neither end can act on it."""
        if all(e._lost or e.dead for e in (ep, ep._peer)):
            for cid, pair in list(self._conns.items()):
                if ep in pair:
                    del self._conns[cid]

    # -- delivery --------------------------------------------------------------------------
    def _delay(self, src: str, dst: str) -> float:
        """A segment's one-way latency: `rng.uniform(lo, hi)`, written out as random.uniform
        computes it (`a + (b - a) * random()`, the same float from the same draw) to save a
        Python call per segment, plus the link's slowing if any."""
        extra = self._slow.get(frozenset((src, dst)), 0.0) if self._slow else 0.0
        lo, hi = self.latency
        return lo + (hi - lo) * self.rng.random() + extra

    def _packet(self, src: str, dst: str, kind: str, deliver: Callable[[], None]) -> None:
        """A connectionless segment (SYN, or the RST refusing one)."""
        self._loop.call_at(self._loop.time() + self._delay(src, dst), self._packet_arrives, src, dst,
                           kind, deliver, context=SYSTEM)

    def _packet_arrives(self, src: str, dst: str, kind: str, deliver: Callable[[], None]) -> None:
        if not self.reachable(src, dst):
            self.stats["held"] += 1
            self._held.append((src, dst, kind, deliver))
            return
        self._record(kind, src, dst, 0)
        deliver()

    def _record(self, kind: str, src: str, dst: str, size: int) -> None:
        if self.log is not None:
            self.log.append((self._loop.time(), kind, src, dst, size))

    def _topology_changed(self) -> None:
        self._whole = not (self._group or self._isolated or self._cut)
        stalled, self._stalled = self._stalled, []
        for pipe in stalled:
            if self.reachable(pipe.src, pipe.dst.host):
                pipe.unstall()
            else:
                self._stalled.append(pipe)
        held, self._held = self._held, []
        for src, dst, kind, deliver in held:
            if self.reachable(src, dst):
                self._packet(src, dst, kind, deliver)
            else:
                self._held.append((src, dst, kind, deliver))


class _Pipe:
    """One direction of a connection: segments leave in order and arrive in order."""

    def __init__(self, net: SimNetwork, src: str, dst: _Endpoint, opener: str):
        self.net, self.src, self.dst, self.opener = net, src, dst, opener
        self.queue: deque[tuple[float, str, bytes]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.stalled = False
        self.last_at = 0.0
        # this flow's own path (`delay_flow`)
        self.extra = net._flows.get((src, dst.host, opener), 0.0) if net._flows else 0.0

    def send(self, kind: str, payload: bytes = b"") -> None:
        self.queue.append((self._stamp(), kind, payload))
        if self.stalled:
            self.net.stats["held"] += 1
        elif self.timer is None:
            self._arm()

    def clear(self) -> None:
        self.queue.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def unstall(self) -> None:
        self.stalled = False
        self.queue = deque((self._stamp(), kind, payload) for _, kind, payload in self.queue)
        if self.queue:
            self._arm()

    def _stamp(self) -> float:
        self.last_at = max(self.last_at,
                           self.net._loop.time() + self.net._delay(self.src, self.dst.host)
                           + self.extra)
        return self.last_at

    def _arm(self) -> None:
        if self.net._loop.is_closed():
            return  # a dead coroutine collected after the run, closing its socket: no one hears
        self.timer = self.net._loop.call_at(self.queue[0][0], self._arrive, context=SYSTEM)

    def _arrive(self) -> None:
        self.timer = None
        if not self.net.reachable(self.src, self.dst.host):
            self.stalled = True
            self.net.stats["held"] += len(self.queue)
            self.net._stalled.append(self)
            return
        _, kind, payload = self.queue.popleft()
        if self.queue:
            self._arm()
        self.net._record(kind, self.src, self.dst.host, len(payload))
        if kind == "data":
            self.net.stats["messages"] += 1
            if self.net._garble:
                payload = self.net._garbled(self.src, self.dst.host, payload)
        self.dst._receive(kind, payload)


class _Endpoint(asyncio.Transport):
    """One end of a simulated TCP connection, as the protocol on that end sees it."""

    def __init__(self, net: SimNetwork, addr: Addr, context: contextvars.Context):
        super().__init__({"sockname": addr, "peername": None, "socket": None})
        self.host = addr[0]
        self._net, self._loop = net, net._loop
        self._ctx = context
        self._proc = owner(context)
        self._protocol: asyncio.BaseProtocol | None = None
        self._peer: _Endpoint | None = None
        self._out: _Pipe | None = None
        self._waiter: asyncio.Future | None = None  # a connecting client's SYN-ACK
        self._inbox: deque[tuple[str, bytes]] = deque()  # arrived, not yet handed over
        self._made = self._paused = self._eof = False
        self._closing = self._lost = self._killed = self._rst_sent = False
        self._limits = (16384, 65536)
        self._unread = 0  # written by us, not yet handed to the peer's protocol
        self._writing_paused = False

    @property
    def dead(self) -> bool:
        return self._killed or (self._proc is not None and not self._proc.alive)

    def _established(self) -> bool:
        return self._made and not self._closing and not self.dead

    # -- asyncio.Transport -----------------------------------------------------------------
    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing or self.dead

    def is_reading(self) -> bool:
        return not self._paused

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._loop.call_soon(self._flush, context=SYSTEM)

    def write(self, data) -> None:
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if not data or self._closing or self.dead:
            return  # as asyncio does once the connection is lost
        data = bytes(data)
        self._net.stats["bytes"] += len(data)
        self._unread += len(data)
        self._out.send("data", data)
        if not self._writing_paused and self.get_write_buffer_size() > self._limits[1]:
            self._writing_paused = True
            self._net.stats["write_pauses"] += 1
            self._ctx.run(self._protocol.pause_writing)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not (self._eof or self._closing or self.dead):
            self._eof = True
            self._out.send("eof")

    def get_write_buffer_size(self) -> int:
        return max(0, self._unread - SOCKET_BUFFER)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._limits

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        high = 65536 if high is None else high
        self._limits = (high // 4 if low is None else low, high)

    def close(self) -> None:
        if self._closing or self.dead:
            return
        self._closing = True
        self._inbox.clear()
        if not self._eof:
            self._out.send("eof")
        self._loop.call_soon(self._lose, None, context=SYSTEM)

    def abort(self) -> None:
        if self._lost or self.dead:
            return
        self._closing = True
        self._inbox.clear()
        self._reset_peer()
        self._loop.call_soon(self._lose, None, context=SYSTEM)

    # -- the network's side ----------------------------------------------------------------
    def _attach(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._made = True
        self._ctx.run(protocol.connection_made, self)
        if self._inbox:
            self._loop.call_soon(self._flush, context=SYSTEM)

    def _abandon(self) -> None:
        """The connecting task gave up (timeout, cancellation, refusal)."""
        self._closing = self._lost = True
        if self._out is not None:
            self._reset_peer()

    def _refused(self) -> None:
        if not self._waiter.done():
            host, port = self.get_extra_info("peername")
            self._waiter.set_exception(ConnectionRefusedError(
                errno.ECONNREFUSED, f"Connect call failed ('{host}', {port})"))

    def _receive(self, kind: str, payload: bytes) -> None:
        if self.dead or self._closing:  # nobody owns the socket: the kernel answers RST
            if kind in ("synack", "data") and not self._rst_sent:
                self._reset_peer()
        elif kind == "synack":
            if not self._waiter.done():
                self._waiter.set_result(None)
        elif kind == "rst" and self._made:
            self._inbox.clear()
            self._lose(_reset_error())
        elif self._inbox or self._paused or not self._made:
            self._inbox.append((kind, payload))
        else:
            self._deliver(kind, payload)

    def _flush(self) -> None:
        while self._inbox and not (self._paused or self._closing or self.dead):
            self._deliver(*self._inbox.popleft())

    def _deliver(self, kind: str, payload: bytes) -> None:
        if kind == "data":
            if self._peer is not None:
                self._peer._read_by_peer(len(payload))
            self._ctx.run(self._protocol.data_received, payload)
        elif kind == "eof":
            if not self._ctx.run(self._protocol.eof_received):
                self.close()
        else:
            self._lose(_reset_error())

    def _read_by_peer(self, n: int) -> None:
        """`n` of our bytes reached the peer's protocol: room in the socket's buffers again.
        The writer resumes in a turn of its own, as the selector's write callback would."""
        self._unread -= n
        if self._writing_paused and self.get_write_buffer_size() <= self._limits[0]:
            self._writing_paused = False
            self._loop.call_soon(self._resume_writing, context=SYSTEM)

    def _resume_writing(self) -> None:
        if not (self._lost or self.dead):
            self._ctx.run(self._protocol.resume_writing)

    def _reset_peer(self) -> None:
        self._rst_sent = True
        self._out.send("rst")

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = self._closing = True
        if exc is not None:
            self._net.stats["resets"] += 1
        if self._peer is not None:
            self._net._forget(self)
        if not self.dead:
            self._ctx.run(self._protocol.connection_lost, exc)


class _SimSocket:
    def __init__(self, addr: Addr):
        self._addr = addr

    def getsockname(self) -> Addr:
        return self._addr


class _Listener(asyncio.AbstractServer):
    """What create_server returns: enough of asyncio.Server for start_server's callers."""

    def __init__(self, net: SimNetwork, addr: Addr, protocol_factory, context: contextvars.Context):
        self._net, self.addr = net, addr
        self.protocol_factory, self.context = protocol_factory, context
        self.sockets = (_SimSocket(addr),)

    def close(self) -> None:
        if self.is_serving():
            del self._net._listeners[self.addr]

    def is_serving(self) -> bool:
        return self._net._listeners.get(self.addr) is self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._net._loop

    async def start_serving(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


def _own_host(host: str) -> str:
    """A process can only use its own host's address."""
    proc = owner(None)
    if proc is not None and proc.host != host:
        raise OSError(errno.EADDRNOTAVAIL, f"{proc.host} cannot use address {host}")
    return host


def _alive(context: contextvars.Context) -> bool:
    proc = owner(context)
    return proc is None or proc.alive


def _reset_error() -> ConnectionResetError:
    return ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
