"""Packet delay without netem: a daemon on the host holds the packets an iptables NFQUEUE rule
hands it and releases them, in arrival order, after `--delay-ms` (± `--jitter-ms`).

    python -m nemeses.delay --queue 7 --delay-ms 100 --jitter-ms 20

This kernel has no netem, and a userspace TCP proxy would only delay connections opened after it
was interposed, while Tessera's RPC connections live for the whole run; NFQUEUE delays every
packet of every existing connection at once, as netem would. Release times never decrease, so
the fault adds latency without reordering. On SIGTERM every held packet is released before exit,
and the NFQUEUE rule uses --queue-bypass, so traffic flows normally whenever no daemon is bound.
"""

from __future__ import annotations

import argparse
import collections
import random
import select
import signal
import time


def main(argv: list[str] | None = None) -> int:
    from netfilterqueue import NetfilterQueue

    ap = argparse.ArgumentParser(prog="python -m nemeses.delay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, default=7)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    a = ap.parse_args(argv)
    held: collections.deque = collections.deque()  # (release_at, packet), release_at non-decreasing
    last = [0.0]
    rng = random.Random()

    def hold(pkt) -> None:
        at = time.monotonic() + (a.delay_ms + rng.uniform(-a.jitter_ms, a.jitter_ms)) / 1000
        last[0] = max(last[0], at)
        held.append((last[0], pkt))

    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    nfq = NetfilterQueue()
    nfq.bind(a.queue, hold, max_len=8192)
    fd = nfq.get_fd()
    try:
        while not stop[0]:
            wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
            readable, _, _ = select.select([fd], [], [], wait)
            if readable:
                nfq.run(block=False)
            now = time.monotonic()
            while held and held[0][0] <= now:
                held.popleft()[1].accept()
    finally:
        while held:
            held.popleft()[1].accept()
        nfq.unbind()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
