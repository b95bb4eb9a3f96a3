"""A mixture's sequence against its definition (mixture_plan.py) written as a loop over places."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.service.mixture_plan import mixture_sequence
from tests.mixture_oracle import oracle_sources


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4).filter(any),
       weights=st.lists(st.floats(0.05, 5), min_size=4, max_size=4), seed=st.integers(0, 9),
       length=st.integers(1, 300))
def test_constant_weights_follow_the_definition_and_hold_at_every_prefix(sizes: list[int], weights: list[float],
                                                                         seed: int, length: int) -> None:
    phases = [(0, weights[:len(sizes)])]
    source, sample = mixture_sequence(sizes, phases, length, seed, epoch=2)
    assert source.tolist() == oracle_sources(sizes, phases, length, seed, 2, 1)
    live = [s for s, n in enumerate(sizes) if n > 0]
    share = np.array(weights[:len(sizes)]) * np.array([n > 0 for n in sizes])
    share = share / share.sum()
    counts = np.zeros(len(sizes))
    for n, s in enumerate(source.tolist(), start=1):
        counts[s] += 1
        assert np.all(np.abs(counts[live] - n * share[live]) <= 2.0 + 1e-9)  # one draw of its own, one of the others'
    for s in live:  # without replacement within a cycle: each run of N_s draws is a permutation
        mine = sample[source == s]
        for start in range(0, len(mine) - sizes[s] + 1, sizes[s]):
            assert sorted(mine[start:start + sizes[s]].tolist()) == list(range(sizes[s]))


def test_a_schedule_changes_the_proportions_at_its_step() -> None:
    phases = [(0, [1.0, 0.0]), (10, [0.25, 0.75])]
    source, _ = mixture_sequence([100, 100], phases, 200, seed=3, epoch=0, places_per_step=8)
    assert source.tolist() == oracle_sources([100, 100], phases, 200, 3, 0, 8)
    assert set(source[:80].tolist()) == {0}
    assert abs(int((source[80:] == 1).sum()) - 0.75 * 120) <= 1


def test_epochs_and_seeds_draw_other_samples_and_the_same_arguments_the_same() -> None:
    a = mixture_sequence([50, 20], [(0, [1, 1])], 100, seed=1, epoch=0)
    assert all(np.array_equal(x, y) for x, y in zip(a, mixture_sequence([50, 20], [(0, [1, 1])], 100, 1, 0),
                                                    strict=True))
    assert not np.array_equal(a[1], mixture_sequence([50, 20], [(0, [1, 1])], 100, seed=1, epoch=1)[1])
    assert not np.array_equal(a[1], mixture_sequence([50, 20], [(0, [1, 1])], 100, seed=2, epoch=0)[1])


@pytest.mark.parametrize(("phases", "match"), [
    ([(1, [1, 1])], "starts at step 0"),
    ([(0, [1, 1]), (0, [1, 2])], "steps rise"),
    ([(0, [1, -1])], "weights >= 0"),
    ([(0, [0, 0])], "a weight > 0"),
    ([(0, [1])], "2 weights"),
])
def test_bad_schedules_are_refused_by_name(phases: list[tuple[int, list[float]]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mixture_sequence([5, 5], phases, 10, seed=0, epoch=0)


def test_weights_near_the_float_maximum_are_weights_like_any_other() -> None:
    huge = mixture_sequence([5, 5], [(0, [1e308, 1e308])], 10, seed=0, epoch=0)
    same = mixture_sequence([5, 5], [(0, [1, 1])], 10, seed=0, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(huge, same, strict=True))
