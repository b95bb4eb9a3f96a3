"""The decode scaling policy on observations, and on a simulated decode-bound system run for many
windows: it reaches the demand, keeps no decoder that does not help, gives capacity back when
demand falls, and does not oscillate."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from shardstream.service.control.scaling_policy import (
    Decision,
    JobDemand,
    Observation,
    PolicySettings,
    ScalingPolicy,
)

PER_DECODER = 100.0  # samples/s one decoder serves when busy


def _obs(ready: int, busy: float, rate: float, stall: float | None, steady: bool = True) -> Observation:
    return Observation(ready, steady, (JobDemand("train", busy, rate, stall),))


def _policy(start: int = 1, low: int = 1, high: int = 8) -> ScalingPolicy:
    return ScalingPolicy(PolicySettings(low, high), start=start)


def test_a_starved_job_asks_for_what_its_busy_decoders_and_stall_imply() -> None:
    policy = _policy()
    decision = policy.decide(_obs(1, busy=1.0, rate=100, stall=0.6))
    # 1 busy decoder, waiting 60%: about 1 / 0.4 = 2.5 decoders serve it; 1.25x headroom: 4
    assert decision == Decision(4, "up", decision.reason) and "waits 60%" in decision.reason


def test_the_request_stays_within_the_bounds() -> None:
    assert _policy(high=3).decide(_obs(1, busy=1.0, rate=100, stall=0.9)).wanted == 3
    assert _policy(start=20, high=5).wanted == 5
    assert _policy(start=0, low=2).wanted == 2
    with pytest.raises(ValueError, match="min_decoders"):
        PolicySettings(3, 2)


def test_it_waits_for_the_pool_to_settle_before_judging() -> None:
    policy = _policy()
    policy.decide(_obs(1, busy=1.0, rate=100, stall=0.6))
    held = policy.decide(_obs(2, busy=2.0, rate=200, stall=0.5, steady=False))
    assert held.direction == "hold" and held.wanted == 4 and "settle" in held.reason


def test_a_step_up_that_did_not_raise_throughput_is_given_back() -> None:
    policy = _policy()
    assert policy.decide(_obs(1, busy=1.0, rate=100, stall=0.6)).wanted == 4
    # Four decoders, busy (waiting on storage), serve 110 samples/s: the rate one decoder served.
    back = policy.decide(_obs(4, busy=4.0, rate=110, stall=0.55))
    assert back.direction == "down" and back.wanted == 2 and "something else limits" in back.reason
    # ... and it does not climb again while the demand is the same
    again = policy.decide(_obs(2, busy=2.0, rate=110, stall=0.55))
    assert again.direction == "hold" and again.wanted == 2 and "raised throughput" in again.reason


def test_a_calm_pool_with_headroom_to_spare_drains_one_decoder_a_window() -> None:
    policy = _policy(start=6)
    first = policy.decide(_obs(6, busy=1.0, rate=100, stall=0.0))
    assert first == Decision(5, "down", first.reason) and "draining one" in first.reason
    assert policy.decide(_obs(5, busy=1.0, rate=100, stall=0.0)).wanted == 4
    # busy 3 of 4: 3 would leave no headroom (3 x 1.25 > 3)
    assert policy.decide(_obs(4, busy=3.0, rate=300, stall=0.0)).direction == "hold"
    # a job waiting a little (between the thresholds) holds the size too
    assert policy.decide(_obs(4, busy=1.0, rate=100, stall=0.09)).direction == "hold"


def test_a_step_down_that_starves_a_job_is_undone_and_becomes_a_floor() -> None:
    policy = _policy(start=4)
    assert policy.decide(_obs(4, busy=2.3, rate=230, stall=0.0)).wanted == 3
    undone = policy.decide(_obs(3, busy=3.0, rate=200, stall=0.3))
    assert undone == Decision(4, "up", undone.reason) and "the fewest" in undone.reason
    assert policy.decide(_obs(4, busy=2.3, rate=230, stall=0.0)).direction == "hold"  # the floor holds
    # demand halves: the floor no longer holds
    assert policy.decide(_obs(4, busy=1.1, rate=110, stall=0.0)).direction == "down"


def test_no_rank_fetching_returns_to_the_minimum() -> None:
    policy = _policy(start=5, low=2)
    decision = policy.decide(Observation(5, True, (JobDemand("done", 0.0, 0.0, None),)))
    assert decision == Decision(2, "down", "no rank is fetching: back to the minimum")


def test_two_jobs_add_up_their_needs() -> None:
    policy = _policy(start=2)
    obs = Observation(2, True, (JobDemand("a", 1.0, 100, 0.5), JobDemand("b", 1.0, 100, 0.0)))
    assert obs.needed() == pytest.approx(3.0)  # 1 / 0.5 + 1 / 1
    assert policy.decide(obs).wanted == 4  # ceil(3 x 1.25)


@dataclass
class _System:
    """Decoders that serve PER_DECODER samples/s each, a job that would take `demand` samples/s,
    and (optionally) a limit elsewhere, e.g. storage, at which decoders sit busy waiting on reads."""

    demand: float
    limit: float = float("inf")

    def window(self, decoders: int) -> Observation:
        rate = min(self.demand, decoders * PER_DECODER, self.limit)
        busy = decoders if rate >= self.limit else rate / PER_DECODER
        return _obs(decoders, busy, rate, 1.0 - rate / self.demand)


def _run(policy: ScalingPolicy, system: _System, windows: int) -> list[int]:
    sizes = []
    for _ in range(windows):
        sizes.append(policy.wanted)  # capacity arrives within the window (settled)
        policy.decide(system.window(policy.wanted))
    return sizes


def _changes(sizes: list[int]) -> int:
    return sum(a != b for a, b in itertools.pairwise(sizes))


@pytest.mark.parametrize("demand", [150.0, 340.0, 500.0, 780.0])
def test_a_decode_bound_job_is_served_and_the_size_stays_put(demand: float) -> None:
    policy = _policy(high=16)
    sizes = _run(policy, _System(demand), 40)
    final = sizes[-1]
    assert final * PER_DECODER >= demand  # served: no stall
    assert final <= -(-demand * 1.25 // PER_DECODER) + 1  # no more than the headroom asks
    assert _changes(sizes[10:]) == 0  # settled, and stays


def test_a_limit_elsewhere_keeps_only_the_decoders_that_help() -> None:
    policy = _policy(high=16)
    sizes = _run(policy, _System(demand=800.0, limit=250.0), 40)
    assert sizes[-1] == 3  # 250 samples/s needs 3 decoders at 100 each; more did nothing
    assert _changes(sizes[5:]) == 0


def test_demand_that_falls_gives_capacity_back_then_rises_again() -> None:
    policy = _policy(high=16)
    system = _System(demand=600.0)
    high = _run(policy, system, 15)[-1]
    system.demand = 120.0
    low = _run(policy, system, 20)
    assert low[-1] < high and low[-1] * PER_DECODER >= 120 and _changes(low[-5:]) == 0
    system.demand = 600.0
    assert _run(policy, system, 10)[-1] * PER_DECODER >= 600


def test_a_step_past_the_demand_is_judged_by_what_the_demand_let_it_bring() -> None:
    # 2 busy decoders serve 200 samples/s to a job waiting half its time: it wants 400.
    policy = _policy(start=2)
    assert policy.decide(_obs(2, busy=2.0, rate=200, stall=0.5)).wanted == 5
    # 5 decoders serve 340: 47 a decoder added, under half of a decoder's 100, but the job wanted
    # only 200 more, 67 a decoder at most: the step paid, and is kept.
    kept = policy.decide(_obs(5, busy=3.4, rate=340, stall=0.05))
    assert kept.wanted == 5 and kept.direction != "down"


def test_a_stall_still_falling_after_a_step_up_waits_instead_of_climbing_again() -> None:
    policy = _policy(start=1)
    assert policy.decide(_obs(1, busy=1.0, rate=100, stall=0.75)).wanted == 5
    # The rank's stall (a ~10 s average) trails the decoders that joined: still above 10%, falling.
    waiting = policy.decide(_obs(5, busy=4.0, rate=400, stall=0.2))
    assert waiting == Decision(5, "hold", waiting.reason) and "catching up" in waiting.reason
    assert policy.decide(_obs(5, busy=4.0, rate=400, stall=0.04)).direction == "hold"
    # A stall that stays up is starvation: it climbs.
    assert policy.decide(_obs(5, busy=5.0, rate=500, stall=0.3)).direction == "up"


def test_no_rank_fetching_gives_back_even_while_the_pool_is_still_changing() -> None:
    policy = _policy(start=1)
    assert policy.decide(_obs(1, busy=1.0, rate=100, stall=0.8)).wanted == 7
    idle = policy.decide(Observation(3, False, (JobDemand("done", 0.0, 0.0, None),)))
    assert idle == Decision(1, "down", "no rank is fetching: back to the minimum")
