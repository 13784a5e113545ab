"""Bundle seeds steered by what a run has reached so far: the matrix's whole-stack cell gives a
share of its seeds to the bundles (harness.sim.swarm.ALL_BUNDLES) whose aims none of its seeds
has reached yet.

A swarm seed draws a bundle by chance, each of the rarer bundles in about 3 % of the seeds, so
a 300 s matrix ran two or three seeds of some bundles. A bundle reaches its aim in some of its
seeds only (forge-snapshot's forger picks a snapshot in one forgery of four, and only once
snapshots exist), so the matrix reported those bundles as never fired, night after night,
though the ensemble reaches them. FoundationDB's simulator steers the same way: what has not
been hit yet gets the next runs.

A steered seed is an ordinary swarm seed whose own draw (`bundle_of`) is the bundle wanted,
found by scanning seed numbers: it replays alone with `--mix swarm --seed N` like any other.
Which bundle the next steered seed runs depends on the results that came in before it, so two
runs of one matrix seed may choose different seeds here.
"""

from __future__ import annotations

from harness.sim.swarm import ALL_BUNDLES, aims_hit, bundle_of

# Steered seed numbers start this far above the cell's first seed, so that they never meet the
# cell's consecutive seeds (a cell runs a few hundred) and each seed keeps one directory.
OFFSET = 1_000_000
# A bundle that this many of a run's seeds ran without reaching an aim is steered to no more:
# some aims are rare in a matrix's short seeds (forge-snapshot's: about one seed of nine; 36
# seeds of 15 virtual s in one matrix reached none), and the steered quarter would otherwise run
# that one bundle for the rest of the cell.
GIVE_UP = 12


class BundleSteer:
    """Which bundle the next steered seed runs: of the bundles none of whose aims any swarm
    seed of this run reached, the one with the fewest seeds so far (the order of ALL_BUNDLES
    breaks ties), while it has had fewer than GIVE_UP; None once none is left."""

    def __init__(self, first_seed: int) -> None:
        self.seeds = dict.fromkeys(ALL_BUNDLES, 0)
        self.reached: set[str] = set()
        self._cursor = dict.fromkeys(ALL_BUNDLES, first_seed + OFFSET)
        self.steered: set[int] = set()

    def wanted(self) -> str | None:
        open_ = [b for b in ALL_BUNDLES if b not in self.reached and self.seeds[b] < GIVE_UP]
        return min(open_, key=lambda b: self.seeds[b]) if open_ else None

    def next_seed(self) -> int | None:
        """The next unused seed whose own bundle is the one wanted, counted as one of its
        seeds; None when no bundle is wanted."""
        bundle = self.wanted()
        return None if bundle is None else self.seed_for(bundle)

    def seed_for(self, bundle: str) -> int:
        """The next unused seed whose own bundle is `bundle`, counted as one of its seeds."""
        seed = self._cursor[bundle]
        while bundle_of(seed) != bundle:
            seed += 1
        self._cursor[bundle] = seed + 1
        self.seeds[bundle] += 1
        self.steered.add(seed)
        return seed

    def note(self, seed: int, probes: dict[str, int]) -> None:
        """A finished swarm seed's probes: its bundle, if any, is reached when one of its aims
        fired. A seed the run drew itself counts as one of its bundle's seeds here (a steered
        one was counted when it was chosen)."""
        bundle = bundle_of(seed)
        if bundle is None:
            return
        if seed not in self.steered:
            self.seeds[bundle] += 1
        if aims_hit(bundle, probes):
            self.reached.add(bundle)
