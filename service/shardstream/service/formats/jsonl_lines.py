"""A JSON Lines file's lines, found without parsing them, and cut into units.

The job's sample count must be exact when it opens (DistributedSampler
splits N), so each file is read once at open and its lines counted. A line
ends at ``\\n`` (a ``\\r`` before it is part of the line, which JSON reads as
whitespace); the file's last line needs none. A line holding nothing but
JSON whitespace (space, tab, ``\\r``) is blank: it is no sample, here or when
a unit is read (`is_blank`, the one rule for both). A UTF-8 byte order mark
at the start of a file is not part of its first line.

A scan reads the file in chunks and finds the newlines with numpy, a slice
of a chunk at a time (so a file of short lines holds a few arrays of a
slice's lines, not of a chunk's); only a line that starts with whitespace is
looked at byte by byte, to tell whether it is blank. Units are cut as the scan goes, so only one unit's lines are
held at a time: consecutive samples, at most UNIT_LINES of them and
UNIT_BYTES from the first one's start to the last one's end (a longer line is
a unit by itself). Blank lines between two units belong to neither; those
inside a unit are in its byte range and skipped when it is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

WHITESPACE = b" \t\r"  # JSON's whitespace on a line (its fourth, "\n", ends the line)
BOM = b"\xef\xbb\xbf"
SCAN_CHUNK = 8 * 2**20  # bytes read at a time while scanning (one ranged read of an object store)...
SCAN_SLICE = 2**19  # ...looked at this many at a time: a slice of one-byte lines is 8 bytes of int64 per byte
UNIT_LINES = 4096  # samples a unit holds at most...
UNIT_BYTES = 4 * 2**20  # ...and bytes from its first sample's start to its last one's end
MAX_BLANK_RUNS = 65_536  # runs of blank lines a file's scan keeps to name samples by line number

_EMPTY = np.zeros(0, dtype=np.int64)


def is_blank(line: bytes) -> bool:
    """A line that is no sample: nothing but JSON whitespace."""
    return not line.strip(WHITESPACE)


@dataclass(frozen=True)
class LineScan:
    """One file's units (byte ranges of consecutive samples) and what names its samples' lines."""

    starts: np.ndarray  # [units] the byte where each unit's first sample starts
    ends: np.ndarray  # [units] the byte after its last sample (its "\n" included)
    counts: np.ndarray  # [units] samples
    first_lines: np.ndarray  # [units] the line number (1-based) of each unit's first sample
    blank_rows: np.ndarray | None  # samples that follow a run of blank lines (None: too many runs kept)
    blanks_before: np.ndarray | None  # blank lines before each of those samples, in all
    lines: int  # lines in the file, blank ones too
    longest: int  # bytes of its longest line, without its "\n"
    longest_line: int  # that line's number

    @property
    def samples(self) -> int:
        return int(self.counts.sum())

    def line_of(self, row: int) -> int | None:
        """The line number of sample `row`; None when the file had too many runs of blank lines
        to keep where they are."""
        if self.blank_rows is None or self.blanks_before is None:
            return None
        runs = int(np.searchsorted(self.blank_rows, row, side="right"))
        return row + 1 + (int(self.blanks_before[runs - 1]) if runs else 0)


def scan_lines(f: Any) -> LineScan:
    """Read the file object `f` from its start to its end and cut its lines into units."""
    head = b""
    while len(head) < len(BOM):
        more = f.read(len(BOM) - len(head))
        if not more:
            break
        head += more
    scanner = _Scanner(len(BOM) if head == BOM else 0)
    chunk = f.read(SCAN_CHUNK) if head == BOM else head
    while chunk:
        for at in range(0, len(chunk), SCAN_SLICE):
            scanner.feed(chunk[at:at + SCAN_SLICE])
        chunk = f.read(SCAN_CHUNK)
    return scanner.finish()


class _Scanner:
    def __init__(self, start: int) -> None:
        self.offset = start  # the byte the next chunk starts at
        self.line_start = start  # where the line not yet ended starts
        self.line_has_data = False  # whether it holds anything but whitespace so far
        self.line_no = 1  # its number
        self.rows = 0  # samples so far
        self.last_sample_line = 0
        self.blanks = 0  # blank lines before the last sample
        self.runs: list[tuple[np.ndarray, np.ndarray]] | None = []
        self.run_count = 0
        self.longest, self.longest_line = 0, 0
        self.pending = (_EMPTY, _EMPTY, _EMPTY)  # samples in no unit yet: starts, ends, line numbers
        self.units: list[tuple[int, int, int, int]] = []  # start, end, samples, first line

    def feed(self, chunk: bytes) -> None:
        buf = np.frombuffer(chunk, dtype=np.uint8)
        newlines = np.flatnonzero(buf == 10)
        tail = 0  # where the line left unfinished starts in this chunk
        if len(newlines):
            ends = newlines + self.offset
            starts = np.empty_like(ends)
            starts[0] = self.line_start
            starts[1:] = ends[:-1] + 1
            self._longest(ends - starts, self.line_no)
            local = np.maximum(starts - self.offset, 0)  # each line's first byte in this chunk
            nonempty = newlines > local
            first = buf[np.minimum(local, len(buf) - 1)]
            spaced = (first == 32) | (first == 9) | (first == 13)
            data = nonempty & ~spaced
            for k in np.flatnonzero(nonempty & spaced).tolist():  # rare: look at the line itself
                data[k] = not is_blank(chunk[local[k]:newlines[k]])
            data[0] |= self.line_has_data
            found = np.flatnonzero(data)
            if len(found):
                self._samples(starts[found], ends[found] + 1, self.line_no + found)
            self.line_no += len(newlines)
            self.line_start = int(ends[-1]) + 1
            self.line_has_data = False
            tail = int(newlines[-1]) + 1
        if tail < len(chunk) and not self.line_has_data:  # a copy of the rest only when it starts with whitespace
            self.line_has_data = chunk[tail] not in WHITESPACE or not is_blank(chunk[tail:])
        self.offset += len(chunk)
        self._cut(final=False)

    def finish(self) -> LineScan:
        lines = self.line_no - 1
        if self.offset > self.line_start:  # a last line without "\n"
            lines += 1
            self._longest(np.array([self.offset - self.line_start]), self.line_no)
            if self.line_has_data:
                self._samples(np.array([self.line_start]), np.array([self.offset]), np.array([self.line_no]))
        self._cut(final=True)
        units = np.array(self.units, dtype=np.int64).reshape(-1, 4)
        rows = blanks = None
        if self.runs is not None:
            rows = np.concatenate([r for r, _ in self.runs]) if self.runs else _EMPTY
            blanks = np.concatenate([b for _, b in self.runs]) if self.runs else _EMPTY
        return LineScan(units[:, 0].copy(), units[:, 1].copy(), units[:, 2].copy(), units[:, 3].copy(),
                        rows, blanks, lines, self.longest, self.longest_line)

    def _longest(self, lengths: np.ndarray, first_line: int) -> None:
        k = int(np.argmax(lengths))
        if int(lengths[k]) > self.longest:
            self.longest, self.longest_line = int(lengths[k]), first_line + k

    def _samples(self, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray) -> None:
        """Sample lines found, in order: where blank lines ran before them, then into the pending unit."""
        gaps = lines - np.concatenate([[self.last_sample_line], lines[:-1]]) - 1
        runs = np.flatnonzero(gaps)
        if len(runs) and self.runs is not None:
            self.run_count += len(runs)
            if self.run_count > MAX_BLANK_RUNS:
                self.runs = None
            else:
                self.runs.append((self.rows + runs, self.blanks + np.cumsum(gaps)[runs]))
        self.blanks += int(gaps.sum())
        self.rows += len(lines)
        self.last_sample_line = int(lines[-1])
        s, e, n = self.pending
        self.pending = (np.concatenate([s, starts]), np.concatenate([e, ends]), np.concatenate([n, lines]))

    def _cut(self, final: bool) -> None:
        """Close every pending unit that no later line can join."""
        starts, ends, lines = self.pending
        i, n = 0, len(starts)
        while i < n:
            by_bytes = int(np.searchsorted(ends, starts[i] + UNIT_BYTES, side="right"))
            j = min(i + UNIT_LINES, max(by_bytes, i + 1))
            if j == n and not final and j - i < UNIT_LINES:
                break  # the next line may still fit
            self.units.append((int(starts[i]), int(ends[j - 1]), j - i, int(lines[i])))
            i = j
        self.pending = (starts[i:], ends[i:], lines[i:])


__all__ = ["BOM", "UNIT_BYTES", "UNIT_LINES", "WHITESPACE", "LineScan", "is_blank", "scan_lines"]
