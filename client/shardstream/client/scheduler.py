"""Which step to request from which sender: one rank drawing its batches from many decoders.

Pure bookkeeping, no I/O (docs/data-plane.md). The prefetcher asks
`requests()` what to send where, and reports what arrived (`received`), what
failed (`failed`), and what the training loop has finished with (`consumed`).
The scheduler keeps these invariants:

- every step from the start to the end is delivered to the loop once, in
  order (`pop_ready`), whichever sender answered and in whatever order;
- a step is outstanding at one sender at a time; a failed sender's steps go
  back to the queue, the lowest first, for the senders still alive;
- steps go to the live sender with the fewest outstanding, below `per_sender`; with a
  `placement`, to the least loaded sender on the step's home host instead while it has at
  most `LOCALITY_SLACK` more outstanding than the least loaded (placement.py);
- requested, received and handed-out batches together stay within
  `window_batches` and `window_bytes`. A batch larger than the room its request had is
  answered with its size (`needs_room`) and asked for again once there is that much room. A step not yet received counts as the
  largest batch seen so far (`batch_bytes_hint` until one arrives: the rank's
  largest of earlier epochs); with neither, one step is requested at a time. When a failure sends back a step the loop is waiting for while later
  batches fill the window, the latest of those are given up and requested
  again afterwards, so the window holds and the rank never deadlocks.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field

from shardstream.client.placement import StepPlacement
from shardstream.proto.errors import BatchExceedsWindow

# Steps a sender on a step's home host may have outstanding beyond the least loaded sender and
# still get the step: enough to keep most steps at home, too few for a slow host to stall a rank.
LOCALITY_SLACK = 2


@dataclass(frozen=True)
class Request:
    sender: Hashable
    step: int
    max_bytes: int  # what the window still allows this batch
    home: bool = False  # the sender is on the step's home host (with a placement)


@dataclass
class _Sender:
    host: str = ""  # with a placement: the host the sender runs on
    outstanding: set[int] = field(default_factory=set)


class StepScheduler:
    def __init__(self, start_step: int, end_step: int, window_batches: int, window_bytes: int,
                 per_sender: int, placement: StepPlacement | None = None, batch_bytes_hint: int = 0) -> None:
        if not 0 <= start_step <= end_step:
            raise ValueError(f"steps {start_step}..{end_step} are not a range")
        if window_batches < 1 or window_bytes < 1 or per_sender < 1:
            raise ValueError("window_batches, window_bytes and per_sender must be >= 1")
        self.end_step = end_step
        self.window_batches = window_batches
        self.window_bytes = window_bytes
        self.per_sender = per_sender
        self.placement = placement
        self._next_new = start_step  # the lowest step never requested
        self._retry: list[int] = []  # heap: steps whose sender failed, to request again
        self._senders: dict[Hashable, _Sender] = {}
        self._where: dict[int, Hashable] = {}  # outstanding step -> its sender
        self._arrived: dict[int, int] = {}  # received, not yet handed out: step -> bytes
        self._handed: dict[int, int] = {}  # handed to the loop, not yet consumed: step -> bytes
        self._next_out = start_step  # the next step the loop gets
        # bytes of the largest batch received (or, until one is, of an earlier epoch's): the
        # estimate for one in flight
        self._largest = max(0, batch_bytes_hint)
        self.given_up = 0  # received batches dropped to make room for an earlier step (after failures)

    # ------------------------------------------------------------ senders

    def add_sender(self, sender: Hashable) -> None:
        if sender not in self._senders:
            host = self.placement.host_of(str(sender)) if self.placement is not None else ""
            self._senders[sender] = _Sender(host)

    def failed(self, sender: Hashable) -> list[int]:
        """Forget `sender`; its outstanding steps are requested again elsewhere. Returns them."""
        state = self._senders.pop(sender, None)
        if state is None:
            return []
        for step in state.outstanding:
            del self._where[step]
            heapq.heappush(self._retry, step)
        return sorted(state.outstanding)

    @property
    def senders(self) -> list[Hashable]:
        return list(self._senders)

    # ------------------------------------------------------------ flow

    def requests(self) -> list[Request]:
        """The steps to request now, each from the least-loaded live sender, within the window."""
        out: list[Request] = []
        while True:
            step = self._peek_step()
            if step is None:
                return out
            if not self._window_allows() and not self._make_room_for(step):
                return out
            chosen = self._sender_for(step)
            if chosen is None:
                return out
            sender, home = chosen
            self._take_step()
            self._senders[sender].outstanding.add(step)
            self._where[step] = sender
            out.append(Request(sender, step, self.window_bytes - self._bytes_in_use(excluding=step), home))

    def received(self, sender: Hashable, step: int, nbytes: int) -> bool:
        """A batch arrived. False when it is not wanted (a duplicate, or from a sender whose steps
        were already given to others): the caller drops it."""
        if self._where.get(step) != sender:
            return False
        del self._where[step]
        self._senders[sender].outstanding.discard(step)
        self._arrived[step] = nbytes
        self._largest = max(self._largest, nbytes)
        return True

    def needs_room(self, sender: Hashable, step: int, nbytes: int) -> None:
        """A sender answered that `step` is `nbytes`, more than the room its request had: the step
        is asked for again (before any later one) once the window has room for a batch that
        large. BatchExceedsWindow when no window of this size ever will."""
        if self._where.get(step) != sender:
            return  # the step went to another sender meanwhile
        if nbytes > self.window_bytes:
            raise BatchExceedsWindow(f"batch {step} is {nbytes} bytes, more than the rank's whole window of "
                                     f"{self.window_bytes} bytes: raise the client's prefetch_bytes (or the "
                                     "service's job_max_in_flight_bytes)")
        del self._where[step]
        self._senders[sender].outstanding.discard(step)
        self._largest = max(self._largest, nbytes)  # a step in flight counts this much from now on
        heapq.heappush(self._retry, step)

    def _make_room_for(self, step: int) -> bool:
        """After a failure, the step the loop waits for may be queued again while later steps fill
        the window: give up the latest received batches (never handed out, so requested again
        later) until it fits. True when it does."""
        while self._arrived and step < min(self._arrived) and not self._window_allows():
            latest = max(self._arrived)
            del self._arrived[latest]
            heapq.heappush(self._retry, latest)
            self.given_up += 1
        return self._window_allows() and step == self._peek_step()

    def pop_ready(self) -> int | None:
        """The next step for the loop, if it has arrived."""
        if self._next_out not in self._arrived:
            return None
        step = self._next_out
        self._handed[step] = self._arrived.pop(step)
        self._next_out += 1
        return step

    def consumed(self, step: int) -> None:
        """The loop is done with `step`: its bytes leave the window."""
        self._handed.pop(step, None)

    @property
    def finished(self) -> bool:
        """Every step has been handed to the loop."""
        return self._next_out >= self.end_step

    @property
    def outstanding(self) -> dict[int, Hashable]:
        return dict(self._where)

    @property
    def largest_batch(self) -> int:
        """Bytes of the largest batch received (the hint until one is)."""
        return self._largest

    @property
    def in_flight(self) -> int:
        """Batches requested, received or handed out, and not yet consumed."""
        return self._in_flight()

    @property
    def bytes_in_use(self) -> int:
        """What the window in bytes holds now: batches received or handed out and not yet
        consumed, at their sizes, and steps requested, each at the largest batch seen."""
        return self._bytes_in_use()

    # ------------------------------------------------------------ helpers

    def _peek_step(self) -> int | None:
        if self._retry:
            return self._retry[0]
        return self._next_new if self._next_new < self.end_step else None

    def _take_step(self) -> None:
        if self._retry:
            heapq.heappop(self._retry)
        else:
            self._next_new += 1

    def _sender_for(self, step: int) -> tuple[Hashable, bool] | None:
        """The sender for `step` (and whether it is on the step's home host): the least loaded one
        below its cap, or one on the home host not much busier."""
        senders = self._senders
        open_ = [(len(s.outstanding), i, name) for i, (name, s) in enumerate(senders.items())
                 if len(s.outstanding) < self.per_sender]
        if not open_:
            return None
        least = min(open_)
        if self.placement is None:
            return least[2], False
        home = self.placement.home(step, {s.host for s in senders.values()})
        near = [o for o in open_ if senders[o[2]].host == home and o[0] <= least[0] + LOCALITY_SLACK]
        return (min(near)[2], True) if near else (least[2], False)

    def _in_flight(self) -> int:
        return len(self._where) + len(self._arrived) + len(self._handed)

    def _bytes_in_use(self, excluding: int | None = None) -> int:
        pending = sum(1 for step in self._where if step != excluding)
        return pending * self._largest + sum(self._arrived.values()) + sum(self._handed.values())

    def _window_allows(self) -> bool:
        if self._in_flight() == 0:  # always one: a batch larger than the window is the server's error
            return True
        if self._in_flight() >= self.window_batches:
            return False
        if self._largest == 0:  # no batch size known yet: one step at a time
            return not self._where
        return self._bytes_in_use() + self._largest <= self.window_bytes


__all__ = ["Request", "StepScheduler"]
