"""StepScheduler: every step once and in order, through any arrival order and sender failures,
least-loaded, within the window."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.client.channels import host_of
from shardstream.client.placement import StepPlacement
from shardstream.client.scheduler import LOCALITY_SLACK, StepScheduler
from shardstream.proto.errors import BatchExceedsWindow


def test_steps_go_to_the_least_loaded_sender_within_its_cap() -> None:
    s = StepScheduler(0, 100, window_batches=10, window_bytes=10**9, per_sender=2)
    for name in ("a", "b", "c"):
        s.add_sender(name)
    first = s.requests()
    assert [(r.sender, r.step) for r in first] == [("a", 0)]  # no size known yet: one at a time
    assert s.received("a", 0, 100)
    more = s.requests()  # ties go to the sender that joined first
    assert [(r.sender, r.step) for r in more] == [("a", 1), ("b", 2), ("c", 3), ("a", 4), ("b", 5), ("c", 6)]
    assert s.requests() == []  # every sender at its cap of 2
    assert s.received("c", 6, 100)
    assert [(r.sender, r.step) for r in s.requests()] == [("c", 7)]


def test_an_earlier_epochs_batch_size_asks_every_sender_at_once_within_the_window() -> None:
    s = StepScheduler(0, 100, window_batches=10, window_bytes=350, per_sender=10, batch_bytes_hint=100)
    for name in ("a", "b", "c", "d"):
        s.add_sender(name)
    first = s.requests()  # no batch of this epoch yet: each step counts as the hint's 100 bytes
    assert [(r.sender, r.step) for r in first] == [("a", 0), ("b", 1), ("c", 2)]
    assert s.bytes_in_use == 300
    assert s.received("a", 0, 150)  # larger than the hint: the estimate grows
    assert s.largest_batch == 150
    assert s.requests() == []  # 150 received + 2 x 150 in flight: no room for another 150


def test_the_window_bounds_batches_and_bytes() -> None:
    s = StepScheduler(0, 100, window_batches=4, window_bytes=350, per_sender=10)
    s.add_sender("a")
    s.requests()
    s.received("a", 0, 100)
    assert [r.step for r in s.requests()] == [1, 2]  # 100 received + 2 x 100 estimated <= 350
    assert s.pop_ready() == 0
    assert s.requests() == []  # handed out but not consumed still counts
    s.consumed(0)
    assert [r.step for r in s.requests()] == [3]
    (request,) = [r for r in [*s.requests()]] or [None]
    assert request is None


def test_max_bytes_is_what_the_window_leaves_for_the_batch() -> None:
    s = StepScheduler(0, 10, window_batches=10, window_bytes=1000, per_sender=10)
    s.add_sender("a")
    (r0,) = s.requests()
    assert r0.max_bytes == 1000
    s.received("a", 0, 300)
    r1, r2 = s.requests()
    assert (r1.max_bytes, r2.max_bytes) == (1000 - 300, 1000 - 300 - 300)


def test_a_batch_larger_than_the_room_it_had_is_asked_for_again_once_there_is_room() -> None:
    s = StepScheduler(0, 10, window_batches=4, window_bytes=1000, per_sender=10)
    s.add_sender("a")
    assert [r.step for r in s.requests()] == [0]
    s.received("a", 0, 400)
    assert s.pop_ready() == 0  # handed to the loop: 400 of the window in use
    (r1,) = s.requests()  # 400 in use + one step at the largest (400) <= 1000; a second would not fit
    assert (r1.step, r1.max_bytes) == (1, 600)
    s.needs_room("a", 1, 700)  # step 1 is 700 bytes
    assert s.requests() == []  # 400 + 700 > 1000: not until the loop is done with step 0
    assert s.largest_batch == 700
    s.consumed(0)
    (again,) = s.requests()
    assert (again.step, again.max_bytes) == (1, 1000)  # step 1 before any later one, with room
    s.received("a", 1, 700)
    assert s.pop_ready() == 1


def test_a_batch_larger_than_the_whole_window_is_an_error_and_a_late_answer_is_dropped() -> None:
    s = StepScheduler(0, 10, window_batches=4, window_bytes=1000, per_sender=10)
    s.add_sender("a")
    s.add_sender("b")
    (r0,) = s.requests()
    with pytest.raises(BatchExceedsWindow, match=r"batch 0 is 1001 bytes, more than the rank's whole window of "
                                                 r"1000 bytes: raise the client's prefetch_bytes"):
        s.needs_room(r0.sender, 0, 1001)
    other = "b" if r0.sender == "a" else "a"
    s.needs_room(other, 0, 10**9)  # from a sender that does not have the step: nothing to do
    assert s.outstanding == {0: r0.sender}


def test_a_failed_senders_steps_go_elsewhere_lowest_first_and_late_answers_are_dropped() -> None:
    s = StepScheduler(0, 6, window_batches=6, window_bytes=10**9, per_sender=3)
    s.add_sender("a")
    s.add_sender("b")
    s.requests()
    s.received("a", 0, 1)
    s.requests()  # 1 -> a, 2 -> b, 3 -> a, 4 -> b, 5 -> a: the window of 6 is full
    assert s.failed("b") == [2, 4]
    assert not s.received("b", 4, 1)  # a late answer from the failed sender
    assert s.requests() == []  # a is at its cap of 3
    s.add_sender("c")
    assert [(r.sender, r.step) for r in s.requests()] == [("c", 2), ("c", 4)]
    assert s.outstanding == {1: "a", 3: "a", 5: "a", 2: "c", 4: "c"}


def test_a_sender_joining_takes_work() -> None:
    s = StepScheduler(0, 10, window_batches=10, window_bytes=10**9, per_sender=1)
    s.add_sender("a")
    s.requests()
    s.received("a", 0, 10)
    s.requests()
    assert s.requests() == []  # a holds step 1, its cap
    s.add_sender("b")
    assert [(r.sender, r.step) for r in s.requests()] == [("b", 2)]


def test_no_sender_no_requests() -> None:
    s = StepScheduler(3, 5, window_batches=4, window_bytes=10, per_sender=1)
    assert s.requests() == [] and not s.finished
    with pytest.raises(ValueError):
        StepScheduler(5, 3, window_batches=4, window_bytes=10, per_sender=1)


@settings(max_examples=300, deadline=None, database=None)
@given(start=st.integers(0, 5), steps=st.integers(0, 40), window=st.integers(1, 8),
       senders=st.integers(1, 4), per_sender=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5), window_bytes=st.integers(40, 400),
       hosts=st.integers(0, 3))
def test_every_step_once_in_order_through_random_arrivals_and_failures(
        start: int, steps: int, window: int, senders: int, per_sender: int, seed: int,
        sizes: list[int], window_bytes: int, hosts: int) -> None:
    """With `hosts` > 0, the senders are spread over that many hosts and steps placed by host."""
    rng = random.Random(seed)
    end = start + steps
    placement = StepPlacement(f"2/8/{seed}", host_of) if hosts else None
    s = StepScheduler(start, end, window, window_bytes, per_sender, placement)
    names = (f"10.0.0.{i % max(1, hosts)}:{i}" for i in range(10**6))
    for _ in range(senders):
        s.add_sender(next(names))
    in_flight: list[tuple[object, int, int]] = []  # (sender, step, max_bytes) answers still on their way
    delivered: list[int] = []
    holding: list[int] = []  # handed to the loop, not consumed yet
    size_of = {step: min(window_bytes, rng.choice(sizes)) for step in range(start, end)}  # a step's batch
    for _ in range(40 * (steps + 1) + 100):
        if s.finished and not holding:
            break
        for r in s.requests():
            assert r.sender in s.senders
            in_flight.append((r.sender, r.step, r.max_bytes))
        assert len(s.outstanding) <= len(s.senders) * per_sender
        assert s.in_flight <= window or s.in_flight == 1
        assert s.in_flight >= len(holding)
        event = rng.random()
        if in_flight and event < 0.6:
            sender, step, max_bytes = in_flight.pop(rng.randrange(len(in_flight)))
            if size_of[step] > max_bytes:  # the decoder answers with the room the batch needs
                s.needs_room(sender, step, size_of[step])
            else:
                s.received(sender, step, size_of[step])
        elif event < 0.65 and s.senders:
            s.failed(rng.choice(s.senders))  # its answers may still arrive: they must be dropped
            if not s.senders or rng.random() < 0.5:
                s.add_sender(next(names))
        elif event < 0.85:
            step_out = s.pop_ready()
            if step_out is not None:
                delivered.append(step_out)
                holding.append(step_out)
        elif holding:
            s.consumed(holding.pop(0))
    assert delivered == list(range(start, end))
    assert s.finished


def test_a_step_sent_back_by_a_failure_gets_room_from_later_batches() -> None:
    """Found by the property test: later steps filled the window while the step the loop waits
    for was queued again after its sender failed, and nothing could be requested any more."""
    s = StepScheduler(0, 4, window_batches=4, window_bytes=40, per_sender=3)
    s.add_sender("a")
    s.add_sender("b")
    s.requests()
    s.received("a", 0, 1)
    assert [(r.sender, r.step) for r in s.requests()] == [("a", 1), ("b", 2), ("a", 3)]
    s.received("a", 3, 21)  # the largest batch so far: 21 bytes, the estimate for the others
    assert s.failed("a") == [1]
    s.add_sender("c")
    # 1 (step 0) + 21 (step 3) + 21 (step 2, on its way) leaves no room for step 1: step 3 is given up.
    assert [(r.sender, r.step) for r in s.requests()] == []
    assert s.pop_ready() == 0
    s.consumed(0)
    s.received("b", 2, 10)
    assert [(r.sender, r.step) for r in s.requests()] == [("b", 1)]
    assert s.given_up >= 1
    s.received("b", 1, 10)
    delivered = [s.pop_ready(), s.pop_ready()]
    assert delivered == [1, 2]
    for step in delivered:
        s.consumed(step)
    (again,) = s.requests()
    assert again.step == 3  # requested again, once
    s.received(again.sender, 3, 21)
    assert s.pop_ready() == 3 and s.finished


def _placed(senders: list[str], steps: int) -> StepScheduler:
    """A scheduler over `senders` ("host:port"), its steps placed by host."""
    scheduler = StepScheduler(0, steps, window_batches=steps, window_bytes=10**12, per_sender=steps,
                              placement=StepPlacement("4/64/0", host_of))
    for sender in senders:
        scheduler.add_sender(sender)
    return _one_batch_known(scheduler)


def _one_batch_known(scheduler: StepScheduler) -> StepScheduler:
    """Step 0 asked, received and consumed: the batch size is known, so the window opens."""
    (first,) = scheduler.requests()
    assert scheduler.received(first.sender, first.step, 1)
    assert scheduler.pop_ready() == first.step
    scheduler.consumed(first.step)
    return scheduler


def test_a_step_goes_to_its_home_host_every_epoch_whatever_the_order_decoders_were_listed_in() -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    first = _placed([f"{h}:{p}" for h in hosts for p in (52000, 52002)], 13)
    first_requests = first.requests()
    again = _placed([f"{h}:{p}" for h in reversed(hosts) for p in (52002, 52000)], 13)
    second_requests = again.requests()
    homes = {r.step: host_of(str(r.sender)) for r in first_requests}
    assert homes == {r.step: host_of(str(r.sender)) for r in second_requests}
    assert len(set(homes.values())) == 3  # rendezvous hashing spreads the steps over every host
    # Nothing else in flight: every step went to its home, and the two decoders of a host shared it.
    assert all(r.home for r in first_requests)
    per_sender = collections.Counter(str(r.sender) for r in first_requests)
    assert max(per_sender.values()) - min(c for s, c in per_sender.items() if host_of(s) in homes.values()) <= 2


def test_a_host_leaving_moves_only_its_steps() -> None:
    placement = StepPlacement("4/64/0", host_of)
    three = {step: placement.home(step, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) for step in range(300)}
    two = {step: placement.home(step, ["10.0.0.1", "10.0.0.2"]) for step in range(300)}
    assert all(two[step] == home for step, home in three.items() if home != "10.0.0.3")
    assert 70 < sum(home == "10.0.0.3" for home in three.values()) < 130  # about a third moved


def test_a_busy_home_host_gives_the_step_to_the_least_loaded_sender() -> None:
    scheduler = StepScheduler(0, 40, window_batches=40, window_bytes=10**12, per_sender=40,
                              placement=StepPlacement("4/64/0", host_of))
    busy, idle = "10.0.0.1:1", "10.0.0.2:1"
    scheduler.add_sender(busy)
    _one_batch_known(scheduler)
    scheduler.end_step = 6  # five steps go to the only sender there is, and stay unanswered
    assert [str(r.sender) for r in scheduler.requests()] == [busy] * 5
    scheduler.end_step = 40
    scheduler.add_sender(idle)
    requests = scheduler.requests()
    # The busy host is LOCALITY_SLACK + 3 ahead: whatever their homes, the next steps go to the idle one.
    assert [str(r.sender) for r in requests[:5 - LOCALITY_SLACK]] == [idle] * (5 - LOCALITY_SLACK)
    hosts = {"10.0.0.1", "10.0.0.2"}
    placement = scheduler.placement
    assert placement is not None
    for r in requests:  # a step leaves its home only for a busier home
        assert r.home == (host_of(str(r.sender)) == placement.home(r.step, hosts))
    assert any(not r.home and placement.home(r.step, hosts) == "10.0.0.1" for r in requests)
    counts = collections.Counter(str(r.sender) for r in requests)
    assert abs(counts[busy] + 5 - counts[idle]) <= LOCALITY_SLACK + 1


def test_without_a_placement_no_step_counts_as_at_home() -> None:
    scheduler = StepScheduler(0, 5, window_batches=4, window_bytes=10**9, per_sender=4)
    scheduler.add_sender("10.0.0.1:1")
    _one_batch_known(scheduler)
    assert [r.home for r in scheduler.requests()] == [False] * 4
