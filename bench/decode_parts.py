"""Where a decode actor's CPU goes: its decode thread's py-spy samples, by part of the work.

A decode actor spends nearly all its CPU in one thread, the one that runs
``decode_step`` (the report and batch-server threads are idle, /proc says;
py-spy counts a thread blocked in C as busy, so only that thread's stacks are
counted). Each stack is given to the first part, in ``PARTS`` order, whose
frames it holds: the innermost work wins over the loop around it. The
shares are of the decode thread's samples, so of nearly all the actor's CPU.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

DECODE_THREAD = "DecodeWorker.decode_step"
_PROCESS = re.compile(r'^process \d+:"(.*)"$')
_LINE_NUMBER = re.compile(r":\d+\)$")

# (part, substrings of a frame that put a stack in it); the first part matched wins.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JPEG decode (entropy decoding, IDCT, colour conversion; the native crop's planes too)",
     ("ImageFile.load (", "(service/transforms/jpeg_decode.py)", "(service/transforms/jpeg_crop.py)")),
    ("Image.open (parsing the headers)", ("open (PIL/Image.py)",)),
    ("pixel copies (convert, np.asarray -> tobytes)",
     ("Image.tobytes (", "Image.copy (", "Image.convert (", "__array_interface__")),
    ("per-sample RNG (np.random.default_rng)", ("sample_rng (", "sample_rngs (", "seed_words (")),
    ("augment (crop, flip, transpose views)", (".augment (",)),
    ("collate into the message (each sample copied in as it is made)",
     ("FrameFiller.append (", "_collate_framed (", "collate (service/transforms/base.py)")),
    ("reading rows (Arrow -> Python bytes)", ("ShardReader.read (", "ShardReader.rows (", "to_pylist")),
    ("prepared-sample cache", ("prepared_cache.py",)),
    ("the rest of prepare (Python)", ("ImageTransform.prepare (",)),
    ("a batch made in one native call, around the call (addresses, columns, frame)",
     ("native_batch (service/node/native_batch.py)",)),
    ("the rest of decode_batch (the per-sample loop)", ("decode_batch (",)),
    ("the task around it (queueing, framing, sending)", (DECODE_THREAD,)),
)


def frames_of(line: str) -> tuple[str, list[str], int] | None:
    """A py-spy ``--format raw`` line -> (process command, its frames outermost first, count)."""
    line = line.rstrip("\n")
    if " " not in line:
        return None
    stack_text, count_text = line.rsplit(" ", 1)
    try:
        count = int(count_text)
    except ValueError:
        return None
    process, frames = "", []
    for frame in stack_text.split(";"):
        match = _PROCESS.match(frame)
        if match:
            process = match.group(1)
        elif not frame.startswith("thread ("):
            frames.append(_LINE_NUMBER.sub(")", frame))
    return process, frames, count


def part_of(frames: list[str]) -> str | None:
    """The part a decode-thread stack belongs to; None for a stack of another thread."""
    if not any(DECODE_THREAD in frame for frame in frames):
        return None
    for part, needles in PARTS:
        if any(needle in frame for frame in frames for needle in needles):
            return part
    return PARTS[-1][0]


def decode_parts(lines: Iterable[str]) -> Counter[str]:
    """Samples of the decode actors' decode threads, by part."""
    parts: Counter[str] = Counter()
    for line in lines:
        parsed = frames_of(line)
        if parsed is None or not parsed[0].startswith("ray::DecodeWorker"):
            continue
        part = part_of(parsed[1])
        if part is not None:
            parts[part] += parsed[2]
    return parts


def format_parts(parts: Counter[str]) -> str:
    total = sum(parts.values())
    if not total:
        return ""
    lines = [f"\n== the decode actors' decode threads by part ({total} samples)"]
    for part, _ in PARTS:
        if parts[part]:
            lines.append(f"  {100 * parts[part] / total:5.1f}%  {part}")
    return "\n".join(lines)


__all__ = ["DECODE_THREAD", "PARTS", "decode_parts", "format_parts", "frames_of", "part_of"]
