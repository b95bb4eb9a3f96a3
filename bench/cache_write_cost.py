"""What keeping a prepared sample costs a decode actor, against decoding it: the figures behind the
prepared-sample cache's write budget (service/.../node/write_budget.py).

    python -m bench.cache_write_cost [--samples 300] [--rounds 3] [--disk-dir DIR]

Per sample, in CPU seconds of this process (the kernel's copying and page allocation included):
Pillow decoding one of the benchmark's JPEGs (256 x 256, quality 90), encoding the prepared entry
(key, header, CRC32C), allocating its share of a tier's chunk (service/.../node/tier_chunks.py),
writing it into the allocated chunk and reading it back verified, in a tier on a tmpfs (/dev/shm) and on a disk (--disk-dir, by default the system's
temporary directory). Best of `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

from bench.report import markdown_table
from bench.workload import encode_jpeg, synthetic_image
from shardstream.proto.slots import SHARED_MEMORY_DIR
from shardstream.service.node.prepared_entry import SampleKey, decode_entry, encode_entry
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.sample_index import ENTRY_ALIGN
from shardstream.service.node.tier_chunks import CHUNK_BYTES, allocate


def _decode(jpeg: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(jpeg)) as image:
        return np.asarray(image.convert("RGB"))


def _per_sample(work: Callable[[int], object], count: int) -> float:
    started = time.process_time()
    for i in range(count):
        work(i)
    return (time.process_time() - started) / count


def _round(name: str, jpegs: list[bytes], pictures: list[np.ndarray], memory: str, disk: str) -> dict[str, float]:
    keys = [SampleKey("bench", name, i) for i in range(len(jpegs))]
    entries: list[list[bytes | memoryview]] = []

    def encode(i: int) -> None:
        parts = encode_entry(keys[i], {"image": pictures[i], "label": i})
        assert parts is not None
        entries.append(parts)

    figures = {"decode (Pillow)": _per_sample(lambda i: _decode(jpegs[i]), len(jpegs)),
               "encode entry": _per_sample(encode, len(jpegs))}
    size = sum(len(p) for p in entries[0])
    for tier_name, directory in (("memory", memory), ("disk", disk)):
        chunk = CHUNK_BYTES
        chunks = -(-len(jpegs) // (chunk // (size + -size % ENTRY_ALIGN)))
        tier = SampleTier(tier_name, directory, chunks * chunk, chunk_bytes=chunk)
        started = time.process_time()
        allocate(str(tier.root), chunks, chunk)
        figures[f"allocate in {tier_name} tier"] = (time.process_time() - started) / len(jpegs)
        figures[f"write to {tier_name} tier"] = _per_sample(
            lambda i, t=tier: t.store(keys[i].folder, i, entries[i], size), len(jpegs))
        figures[f"read + verify, {tier_name} tier"] = _per_sample(
            lambda i, t=tier: decode_entry(t.load_file(keys[i].folder, i)[0], keys[i]), len(jpegs))  # type: ignore[index]
        tier.close()
    return figures


def measure(samples: int, rounds: int, disk_dir: str | None) -> dict[str, float]:
    jpegs = [encode_jpeg(synthetic_image(0, i, 256), 90) for i in range(samples)]
    pictures = [_decode(j) for j in jpegs]
    best: dict[str, float] = {}
    for rnd in range(rounds):
        memory = tempfile.mkdtemp(prefix="shardstream-write-cost-", dir=SHARED_MEMORY_DIR)
        disk = tempfile.mkdtemp(prefix="shardstream-write-cost-", dir=disk_dir)
        try:
            for name, value in _round(f"round-{rnd}", jpegs, pictures, memory, disk).items():
                best[name] = min(value, best.get(name, value))
        finally:
            shutil.rmtree(memory, ignore_errors=True)
            shutil.rmtree(disk, ignore_errors=True)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_write_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--disk-dir", default=None, help="a directory on the disk to time (default: $TMPDIR)")
    args = parser.parse_args(argv)
    figures = measure(args.samples, args.rounds, args.disk_dir)
    decode = figures["decode (Pillow)"]
    rows = [[name, f"{seconds * 1e6:,.0f}", f"{seconds / decode:.2f}"] for name, seconds in figures.items()]
    print(markdown_table(["per sample", "CPU us", "x decode"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
