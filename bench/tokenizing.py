"""``python -m bench.tokenizing``: the tokenize transform's tokens/s per core against plain tokenizers.

~10k short documents (Zipf-drawn pseudo-words, 20-120 words each) and a byte-level BPE tokenizer
trained on them here (vocabulary 8,000; nothing fetched), all in this one process:

- **encode_batch**: ``Tokenizer.encode_batch(texts)``, as tokenizers runs it (a thread per core);
- **encode_batch, one thread**: the same with ``RAYON_NUM_THREADS=1`` (a decode actor's share is a
  core: several threads each would contend with the node's other actors);
- **encode loop**: ``Tokenizer.encode(text)`` per text, the reference's per-sample cost;
- **encode_batch_fast, one thread**: ``Tokenizer.encode_batch_fast`` of batches of 256 texts
  (the same ids, without each token's character offsets) with ``TOKENIZERS_PARALLELISM=false``,
  as a decode actor calls it;
- **prepare**: ``TokenizeTransform.prepare`` per sample;
- **prepare_many**: ``TokenizeTransform.prepare_many`` of batches of 256 rows, on one thread: what
  a decode actor runs for a batch's cold samples;
- **decode_batch**: whole batches through ``decode_batch`` (Parquet rows read from the in-memory
  LRU, prepare_many, pad) on one thread, the prepared-sample cache off: a cold epoch's cost per
  decode actor;
- **decode_batch, warm**: the same batches again with the prepared-sample cache on, every
  sample found (a second epoch's: no tokenizing).

Tokens/s per core is tokens over this process's CPU seconds. Run with TOKENIZERS_PARALLELISM
unset; the one-thread row runs in a child process (rayon reads its thread count once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DOCS = 10_000
BATCH = 256


def documents(count: int, seed: int = 0) -> list[str]:
    """Short documents of Zipf-distributed pseudo-words with some punctuation."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "an", "el", "mo", "su", "ve", "th", "in", "qu", "or", "ly", "ed", "ing", "st"]
    words = ["".join(rng.choice(syllables, size=rng.integers(1, 5))) for _ in range(5000)]
    ranks = np.arange(1, len(words) + 1)
    weights = 1 / ranks / (1 / ranks).sum()
    out = []
    for _ in range(count):
        picked = rng.choice(len(words), size=int(rng.integers(20, 120)), p=weights)
        text = " ".join(words[i] for i in picked)
        out.append(text[:1].upper() + text[1:] + rng.choice([".", "!", "?", "."]))
    return out


def trained(texts: list[str], path: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=8000, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(path))
    return str(path)


def timed(runs: dict[str, Callable[[], int]], repeats: int) -> dict[str, dict[str, float]]:
    """Each run's best of `repeats` (by CPU seconds): tokens, wall seconds, CPU seconds (this
    process's, all its threads), tokens per second of each. The runs take turns, so a burst of
    another process's work costs one turn of one run, not all of its repeats."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            tokens = run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if name not in best or cpu < best[name]["cpu_s"]:
                best[name] = {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}
    for row in best.values():
        row["tokens_per_s"] = row["tokens"] / row["wall_s"]
        row["tokens_per_cpu_s"] = row["tokens"] / row["cpu_s"]
    return best


def measure(directory: Path, repeats: int, only: str = "") -> dict[str, dict[str, float]]:
    from tokenizers import Tokenizer

    from shardstream.service.transforms import build_transform

    texts = documents(DOCS)
    path = trained(texts, directory / "tokenizer.json")
    plain = Tokenizer.from_file(path)

    def encode_batch() -> int:
        return sum(len(e.ids) for e in plain.encode_batch(texts, add_special_tokens=False))

    if only:
        return timed({only: encode_batch}, repeats)
    transform = build_transform("tokenize", {"tokenizer": path}, ())
    assert transform is not None
    cold, warm = _decode_batch(directory, path, texts)
    batches = [texts[start:start + BATCH] for start in range(0, len(texts), BATCH)]
    results = timed({
        "encode_batch": encode_batch,
        "encode loop": lambda: sum(len(plain.encode(t, add_special_tokens=False).ids) for t in texts),
        "encode_batch_fast, one thread": _one_thread(lambda: sum(
            len(e.ids) for batch in batches for e in plain.encode_batch_fast(batch, add_special_tokens=False))),
        "prepare": lambda: sum(len(transform.prepare({"text": t})["input_ids"]) for t in texts),
        "prepare_many": _one_thread(lambda: sum(
            len(sample["input_ids"]) for batch in batches
            for sample in transform.prepare_many([{"text": t} for t in batch]))),
        "decode_batch": _one_thread(cold),
        "decode_batch, warm": warm,
    }, repeats)
    results["encode_batch, one thread"] = _child(repeats)
    order = ["encode_batch", "encode_batch, one thread", "encode loop", "encode_batch_fast, one thread", "prepare",
             "prepare_many", "decode_batch", "decode_batch, warm"]
    return {name: results[name] for name in order}


def _one_thread(run: Callable[[], int]) -> Callable[[], int]:
    """`run` with tokenizers' batch calls on the calling thread, as in a decode actor (decoder.py)."""
    def once() -> int:
        before = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            return run()
        finally:
            if before is None:
                del os.environ["TOKENIZERS_PARALLELISM"]
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = before
    return once


def _decode_batch(directory: Path, path: str, texts: list[str]) -> tuple[Callable[[], int], Callable[[], int]]:
    """Whole batches through decode_batch: cold (no cache), and warm (every sample cached)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardstream.service.formats import index_dataset
    from shardstream.service.node.batching import decode_batch
    from shardstream.service.node.job_samples import JobSamples
    from shardstream.service.node.prepared_cache import PreparedCache
    from shardstream.service.node.prepared_tier import SampleTier
    from shardstream.service.node.read_counters import SharedReadCounters
    from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
    from shardstream.service.node.storage_reader import StorageReader
    from shardstream.service.node.write_budget import WriteBudget
    from shardstream.service.node_messages import DecodeJob
    from shardstream.service.transforms import build_transform
    from shardstream.service.transforms.collate import Collation

    data = directory / "data"
    data.mkdir()
    pq.write_table(pa.table({"text": texts}), data / "part-0.parquet", row_group_size=1024)
    index = index_dataset((str(data),))
    args = {"tokenizer": path}
    job = DecodeJob.alone("bench", index, transform="tokenize", transform_args=args, collate="pad")
    transform = build_transform("tokenize", args, ())
    reader = ShardReader(index, None, RowGroupSource(StorageReader(SharedReadCounters()), RowGroupCache(1 << 30)))
    batches = [np.arange(start, min(start + BATCH, len(texts))) for start in range(0, len(texts), BATCH)]

    def run(samples: JobSamples | None = None) -> int:
        return sum(int(np.asarray(decode_batch(job, reader, transform, 0, b, prepared_samples=samples,
                                               collation=Collation("pad")).arrays["input_ids_lengths"]).sum())
                   for b in batches)

    run()  # the row groups into the LRU
    tier = SampleTier("memory", str(directory / "tier"), 1 << 30)
    samples = PreparedCache([tier], SharedReadCounters(), budget=WriteBudget(bank_s=1e6)).for_transform(
        index, "tokenize", args, [], transform)
    run(samples)  # every sample kept
    return run, lambda: run(samples)


def _child(repeats: int) -> dict[str, float]:
    """encode_batch on one thread: rayon takes its thread count from the environment at start."""
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "bench.tokenizing", "--only", "encode_batch", "--repeats",
                          str(repeats), "--json"], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["encode_batch"]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        results = measure(Path(directory), args.repeats, args.only)
    if args.json:
        print(json.dumps(results))
        return
    print(f"{DOCS:,} documents, {int(results['encode loop']['tokens']):,} tokens; best of {args.repeats}")
    print(f"{'':30} {'tokens/s':>12} {'tokens/CPU-s':>14}")
    for name, row in results.items():
        print(f"{name:30} {row['tokens_per_s']:>12,.0f} {row['tokens_per_cpu_s']:>14,.0f}")


if __name__ == "__main__":
    main()
