"""Each sample copied into the batch's message as soon as it is made, while its pixels are in cache.

Stacking a batch after all its samples are made reads every sample back from
main memory: a batch of decoded images is megabytes, more than a core's cache.
The filler frames the message from the first sample (its keys, shapes and
dtypes, times the batch size) and copies each next sample into its row at once,
so the copy reads what the decoder has just written, and the decoded image's
memory is free for the next decode. The result is the same bytes the stack
gives: a sample that does not match the first (another shape, key or dtype, which
the stack would promote or refuse) stops the filler, and the batch is collated
the usual way from the samples so far (copied out of the message) and the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardstream.proto.wire import Allocate, BatchFrame, FrameHeader, TensorSpec


class FrameFiller:
    """Appends a batch's samples to `samples`: as their rows of the message while it fills, as
    they are once it has stopped."""

    def __init__(self, header: FrameHeader, used: np.ndarray, allocate: Allocate,
                 samples: list[dict[str, Any]]) -> None:
        self._header, self._used, self._allocate, self.samples = header, used, allocate, samples
        self.frame: BatchFrame | None = None
        self.stopped = False
        self._placed: dict[str, np.ndarray] = {}  # the next sample's rows, handed out by `place`

    def append(self, sample: dict[str, Any]) -> None:
        position = len(self.samples)
        placed, self._placed = self._placed, {}
        if placed:
            if sample.keys() == placed.keys() and self._append_placed(sample, placed):
                return
            # A value that does not fit its row: the message is framed again, maybe in this memory.
            sample = {key: np.array(value) if value is placed.get(key) else value for key, value in sample.items()}
        if not self.stopped:
            values = {key: np.asarray(value) for key, value in sample.items()}
            if (self.frame is not None or self._start(position, values)) and self._fits(values):
                assert self.frame is not None
                row = {}
                for key, value in values.items():
                    rows = self.frame.arrays[key]
                    rows[position] = value
                    row[key] = rows[position]
                self.samples.append(row)
                return
            self.stop()
        self.samples.append(sample)

    def _append_placed(self, sample: dict[str, Any], placed: dict[str, np.ndarray]) -> bool:
        """A sample made in the rows `place` gave: the values written there are in the message
        already; the others (a label) are copied in if each has its row's shape and dtype (else
        False)."""
        values = {key: value if value is placed[key] else np.asarray(value) for key, value in sample.items()}
        if not all(value.shape == placed[key].shape and value.dtype == placed[key].dtype
                   for key, value in values.items()):
            return False
        for key, value in values.items():
            if value is not placed[key]:
                placed[key][...] = value
        self.samples.append(placed)
        return True

    def place(self) -> dict[str, np.ndarray] | None:
        """The next sample's rows of the message, for a transform that writes a value straight into
        its row (that value, appended, is not copied again); None before the message is framed (at
        the first sample) and once the filler has stopped."""
        if self.stopped or self.frame is None:
            return None
        position = len(self.samples)
        self._placed = {key: rows[position, ...] for key, rows in self.frame.arrays.items()}  # views, 0-d too
        return self._placed

    def stop(self) -> None:
        """Stop filling (a sample that does not match the first, or one replaced: the message's
        trailer names the indices planned): the rows so far are copied out of the message, which
        the usual collate may frame again in the same memory."""
        if self.frame is not None and not self.stopped:
            self.samples[:] = [{key: np.array(value) for key, value in sample.items()} for sample in self.samples]
        self.stopped = True

    def filled(self) -> BatchFrame | None:
        """The message, when every sample of the batch is in it."""
        if self.stopped or self.frame is None or len(self.samples) != len(self._used):
            return None
        return self.frame

    def _start(self, position: int, values: dict[str, np.ndarray]) -> bool:
        if position != 0 or not values:
            return False
        count = len(self._used)
        specs = [TensorSpec(key, value.dtype, (count, *value.shape)) for key, value in values.items()]
        try:
            self.frame = BatchFrame(self._header, specs, self._used, 0, self._allocate)
        except (TypeError, ValueError):  # a dtype that cannot travel: the usual collate says why
            return False
        return True

    def _fits(self, values: dict[str, np.ndarray]) -> bool:
        assert self.frame is not None
        arrays = self.frame.arrays
        return values.keys() == arrays.keys() and all(
            value.shape == arrays[key].shape[1:] and value.dtype == arrays[key].dtype
            for key, value in values.items())


__all__ = ["FrameFiller"]
