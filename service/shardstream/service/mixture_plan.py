"""A mixture's epoch: which source each place of the epoch's sequence draws from, and which sample.

Definition (one pure function of the sources' sizes, the weights, the seed and the epoch):

- Source s's k-th draw of an epoch sits at place p where its cumulative weight reaches k + u_s:
  W_s(p) = sum of w_s(q) for q < p (w_s(q): s's weight at place q, from a schedule piecewise by
  step), u_s in [0, 1) from (seed, epoch, s). The epoch's sequence is all sources' draws ordered
  by place (ties by source), its first `length` (the weights go on past place `length` as far as
  it takes to have that many).
- So every prefix of n draws holds each source within two draws of its share: the counts
  follow the weights at every scale, not only on average.
- Within a source, draw j takes sample perm_c[j mod N_s] of the permutation of cycle c = j // N_s,
  seeded by (seed, epoch, s, c): without replacement within a cycle, as an epoch of one dataset.
- An epoch of a mixture is as many draws as its sources hold samples together (`length`): a
  source weighed above its share of the samples is drawn more than once in it (cycle after
  cycle), one below it is not drawn whole.
- The places are then split across ranks as DistributedSampler splits its permutation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mixture_sequence(sizes: Sequence[int], phases: Sequence[tuple[int, Sequence[float]]], length: int, seed: int,
                     epoch: int, places_per_step: int = 1, first_place: int = 0,
                     shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(source, sample within its source) of each of the epoch's `length` places.

    `phases`: (first step, weights) pairs, the first at step 0; a step is `places_per_step`
    places (the global batch); `first_place`: the epoch's first place in the run's steps (epochs
    before it times their length), so a schedule runs on across epochs; `shuffle=False`: draw j of
    a source takes its sample j mod N_s (each source read in order, still interleaved by weight)."""
    weights = _normalized(phases, [size > 0 for size in sizes])
    # A source has more than W_s(P) - 1 draws by place P, so by place length + sources there are
    # more than `length` in all: the epoch takes the first `length` of them.
    extent = length + len(sizes)
    sources, draws = [], []
    for s, size in enumerate(sizes):
        if size <= 0:
            continue
        u = np.random.default_rng([seed, epoch, s, 0x6D69]).random()
        cumulative, places = _cumulative(weights[:, s], [p for p, _ in phases], places_per_step, first_place, extent)
        total = cumulative[-1]
        k = np.arange(int(np.floor(total - u)) + 1 if total > u else 0)
        at = np.interp(k + u, cumulative, places)  # the place its cumulative weight reaches k + u
        sources.append(np.full(len(k), s))
        draws.append(np.column_stack([at, k]))
    if not sources:
        raise ValueError("a mixture needs a source with samples")
    source = np.concatenate(sources)
    at, k = np.concatenate(draws)[:, 0], np.concatenate(draws)[:, 1].astype(np.int64)
    order = np.lexsort((source, at))[:length]
    assert len(order) == length, (len(order), length)
    source, k = source[order], k[order]
    sample = np.empty(len(k), dtype=np.int64)
    for s, size in enumerate(sizes):
        mine = source == s
        if mine.any():
            sample[mine] = _draws(k[mine], size, seed, epoch, s) if shuffle else k[mine] % size
    return source, sample


def _normalized(phases: Sequence[tuple[int, Sequence[float]]], live: list[bool]) -> np.ndarray:
    """Each phase's weights summing to 1 over the sources with samples (`live`)."""
    sources = len(live)
    if not phases or phases[0][0] != 0:
        raise ValueError("a weight schedule starts at step 0")
    steps = [p for p, _ in phases]
    if steps != sorted(set(steps)):
        raise ValueError(f"a weight schedule's steps rise: {steps}")
    table = np.array([list(w) for _, w in phases], dtype=np.float64)
    if table.shape != (len(phases), sources) or not np.isfinite(table).all() or (table < 0).any():
        raise ValueError(f"each phase gives {sources} weights >= 0")
    table = table * np.array(live, dtype=np.float64)
    largest = table.max(axis=1, keepdims=True)
    if (largest <= 0).any():
        raise ValueError("each phase gives some source a weight > 0")
    table = table / largest  # first: weights near the float maximum would sum to inf
    return table / table.sum(axis=1, keepdims=True)


def _cumulative(weight: np.ndarray, steps: list[int], places_per_step: int, first_place: int,
                length: int) -> tuple[np.ndarray, np.ndarray]:
    """W at the epoch's places 0..length where the weight changes (and its ends): piecewise linear."""
    starts = np.array(steps, dtype=np.float64) * places_per_step - first_place  # phases, in the epoch's places
    edges = np.clip(np.concatenate([starts[1:], [np.inf]]), 0, length)
    begins = np.clip(starts, 0, length)
    spans = np.maximum(edges - begins, 0)
    places = np.concatenate([[0.0], np.cumsum(spans)])
    # the phase in force at the epoch's start covers from place 0: spans already start there
    cumulative = np.concatenate([[0.0], np.cumsum(spans * weight)])
    keep = np.concatenate([[True], spans > 0])
    return cumulative[keep], places[keep]


def _draws(k: np.ndarray, size: int, seed: int, epoch: int, source: int) -> np.ndarray:
    cycles = k // size
    out = np.empty(len(k), dtype=np.int64)
    for cycle in np.unique(cycles):
        perm = np.random.default_rng([seed, epoch, source, int(cycle)]).permutation(size)
        mine = cycles == cycle
        out[mine] = perm[k[mine] % size]
    return out


__all__ = ["mixture_sequence"]
