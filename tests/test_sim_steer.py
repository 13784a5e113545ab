"""harness.sim.steer: the matrix's steered seeds go to the bundles no swarm seed of the run has
reached an aim of, the least tried first, and stop once every bundle reached one."""

from __future__ import annotations

from harness.sim.steer import GIVE_UP, OFFSET, BundleSteer
from harness.sim.swarm import ALL_BUNDLES, BUNDLE_AIMS, bundle_of


def test_steered_seeds_run_the_wanted_bundle_each_seed_once_apart_from_the_cells_own():
    steer = BundleSteer(6000)
    picked = [steer.next_seed() for _ in range(2 * len(ALL_BUNDLES))]
    assert all(s is not None and s >= 6000 + OFFSET for s in picked)
    assert len(set(picked)) == len(picked)
    # every bundle once, in ALL_BUNDLES' order, then every bundle a second time
    assert [bundle_of(s) for s in picked] == list(ALL_BUNDLES) * 2
    assert steer.steered == set(picked)


def test_a_bundle_whose_aim_fired_is_no_longer_wanted_and_a_miss_keeps_it_wanted():
    steer = BundleSteer(0)
    first, second = list(ALL_BUNDLES)[:2]
    s = steer.next_seed()
    assert bundle_of(s) == first
    steer.note(s, {"some.other.probe": 3})  # ran, missed its aims: still wanted
    assert first not in steer.reached
    s = steer.next_seed()
    assert bundle_of(s) == second
    steer.note(s, {BUNDLE_AIMS[second][-1]: 1})
    assert steer.reached == {second}
    rest = [bundle_of(steer.next_seed()) for _ in range(len(ALL_BUNDLES) - 2)]
    assert second not in rest and first not in rest  # tried once already, least tried go first
    assert bundle_of(steer.next_seed()) == first


def test_a_seed_the_run_drew_itself_counts_for_its_bundle_and_all_reached_means_none():
    steer = BundleSteer(0)
    own = next(s for s in range(10_000) if bundle_of(s) == list(ALL_BUNDLES)[0])
    steer.note(own, {})
    assert steer.seeds[list(ALL_BUNDLES)[0]] == 1
    assert bundle_of(steer.next_seed()) == list(ALL_BUNDLES)[1]  # the untried go first
    plain = next(s for s in range(100) if bundle_of(s) is None)
    steer.note(plain, {"some.other.probe": 1})  # a seed without a bundle changes nothing
    assert steer.seeds[list(ALL_BUNDLES)[0]] == 1 and not steer.reached
    for bundle, aims in BUNDLE_AIMS.items():
        seed = next(s for s in range(OFFSET, 2 * OFFSET) if bundle_of(s) == bundle)
        steer.note(seed, {aims[0]: 1})
    assert steer.reached == set(ALL_BUNDLES) and steer.wanted() is None
    assert steer.next_seed() is None


def test_a_bundle_that_gave_nothing_in_give_up_seeds_is_steered_to_no_more():
    steer = BundleSteer(0)
    first = list(ALL_BUNDLES)[0]
    for _ in range(GIVE_UP):
        steer.note(steer.seed_for(first), {})
    assert steer.seeds[first] == GIVE_UP and first not in steer.reached
    assert all(bundle_of(steer.next_seed()) != first for _ in range(3 * len(ALL_BUNDLES)))
