"""sample_rngs: a batch's generators made at once draw exactly what sample_rng's would."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.random import SeedSequence

from shardstream.service.transforms.base import sample_rng
from shardstream.service.transforms.sample_seeds import _uint32_words, pcg64_words, sample_rngs


def _draws(rng: np.random.Generator) -> tuple[list[int], float, list[float]]:
    return rng.integers(0, 33, 2).tolist(), rng.random(), rng.normal(size=3).tolist()


@pytest.mark.parametrize("seed", [0, 3, -1, 2**32 + 5, 2**63, 2**64 - 1, 2**64 + 7, -(2**40)])
@pytest.mark.parametrize("epoch", [0, 1, 2**32 - 1, 2**32, 2**70])
def test_each_generator_draws_what_sample_rng_draws(seed: int, epoch: int) -> None:
    indices = [0, 1, 5, 2**31, 2**32 - 1, *range(100, 110)]
    for index, rng in zip(indices, sample_rngs(seed, epoch, indices), strict=True):
        assert _draws(rng) == _draws(sample_rng(seed, epoch, index)), (seed, epoch, index)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(-(2**70), 2**70), epoch=st.integers(0, 2**40),
       indices=st.lists(st.integers(0, 2**33), min_size=1, max_size=8))
def test_any_seed_epoch_and_indices(seed: int, epoch: int, indices: list[int]) -> None:
    for index, rng in zip(indices, sample_rngs(seed, epoch, indices), strict=True):
        assert _draws(rng) == _draws(sample_rng(seed, epoch, index))


def test_each_sample_has_its_own_generator() -> None:
    first, second = sample_rngs(1, 2, [7, 7])
    first.random()
    assert first is not second and second.random() == sample_rng(1, 2, 7).random()


def test_spawning_and_other_state_sizes_are_the_seed_sequences() -> None:
    (rng,) = sample_rngs(4, 5, [6])
    reference = sample_rng(4, 5, 6)
    assert rng.bit_generator.seed_seq.generate_state(3).tolist() == \
        reference.bit_generator.seed_seq.generate_state(3).tolist()
    for _ in range(2):  # the second spawn continues where the first stopped, as a SeedSequence's does
        assert [_draws(child) for child in rng.spawn(2)] == [_draws(child) for child in reference.spawn(2)]


def test_what_sample_rng_refuses_is_refused_alike() -> None:
    with pytest.raises(ValueError) as expected:
        sample_rng(0, -1, 3)
    with pytest.raises(ValueError) as got:
        sample_rngs(0, -1, [3])
    assert str(got.value) == str(expected.value)
    assert sample_rngs(0, 0, []) == []


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**40),
       indices=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=16))
def test_the_native_hash_and_the_numpy_one_give_seed_sequences_words(seed: int, epoch: int,
                                                                      indices: list[int]) -> None:
    """The seed words in C (where the native library is built) and on numpy arrays (where it is
    not) are each SeedSequence's own."""
    from shardstream.service.transforms import jpeg_crop

    prefix = [*_uint32_words(seed), *_uint32_words(epoch)]
    column = np.asarray(indices, dtype=np.uint32)
    reference = [SeedSequence([seed, epoch, index]).generate_state(4, np.uint64).tolist() for index in indices]
    assert pcg64_words(prefix, column).tolist() == reference
    native = jpeg_crop.seed_words(prefix, column)
    if native is None:
        pytest.skip("the native library is not built here")
    assert native.tolist() == reference
