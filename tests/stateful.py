"""One resume check for every stateful iterator: save its state anywhere, load it into a new one, and
the new one gives exactly what the first gave after that point.

`check_resumes` runs one iterator `total` items, taking its state at each of `points` (0 included:
a fresh one), and checks every state through the round trip a checkpoint makes (torch.save /
torch.load, and pickle); then, for each point, it builds a new iterator, loads that state and
checks the rest equals the first run's rest. The uninterrupted run is returned, and compared with
`expected` when given, so a caller also pins it to an oracle.

`loader_passes` is how a RemoteLoader is consumed here: pass after pass without set_epoch (each
pass runs the next epoch, a resumed one first finishes its epoch), each pass's batches followed by
an END marker. A resumed loader must end the same passes, so an empty pass or an epoch run twice
shows as a difference. A state taken after a pass's last batch but before its end is not a point
to resume from: it cannot tell a loop that will finish the pass from one that already did, and the
loader takes it as finished.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch

T = TypeVar("T")
END = "end of pass"


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


S = TypeVar("S", bound=Stateful)


@dataclass(frozen=True)
class Resumes(Generic[T]):
    reference: list[T]  # the uninterrupted run
    states: dict[int, dict[str, Any]]  # the state taken after that many items, round-tripped


def through_a_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as a training script gets it back: torch.save then torch.load (weights_only, the
    default). Pickle must give the same."""
    buffer = io.BytesIO()
    torch.save({"loader": state}, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer)["loader"]
    assert loaded == state, "the state changed through torch.save / torch.load"
    assert pickle.loads(pickle.dumps(state)) == state, "the state changed through pickle"
    return loaded


def check_resumes(make_iterator: Callable[[], S], consume: Callable[[S], Generator[T, None, None]], total: int,
                  points: Sequence[int], expected: Sequence[T] | None = None) -> Resumes[T]:
    """Resuming from each of `points` (items consumed before the state is taken) continues exactly."""
    assert points and all(0 <= k <= total for k in points), points
    states: dict[int, dict[str, Any]] = {}
    reference: list[T] = []
    first = make_iterator()
    try:
        items = consume(first)
        for k in range(total + 1):
            if k in points:
                states[k] = through_a_checkpoint(first.state_dict())
            if k < total:
                reference.append(next(items))
        items.close()
    finally:
        first.close()
    if expected is not None:
        assert reference == list(expected), "the uninterrupted run is not the expected one"
    for k in sorted(set(points)):
        resumed = make_iterator()
        try:
            resumed.load_state_dict(states[k])
            items = consume(resumed)
            rest = [next(items) for _ in range(total - k)]
            items.close()
        finally:
            resumed.close()
        assert rest == reference[k:], f"resumed from the state after {k} items: {rest} != {reference[k:]}"
    return Resumes(reference, states)


def loader_passes(loader: Any, key: Callable[[Any], Any]) -> Generator[tuple[Any, Any], None, None]:
    """(epoch, key(batch)) for each batch, and (END, epoch) after each pass, pass after pass."""
    while True:
        batches = iter(loader)
        try:
            for batch in batches:
                yield loader.epoch, key(batch)
        finally:
            batches.close()
        yield END, loader.epoch


__all__ = ["END", "Resumes", "Stateful", "check_resumes", "loader_passes", "through_a_checkpoint"]
