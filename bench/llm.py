"""``python -m bench.llm``: language-model data on the service against a DataLoader, PASS/FAIL lines.

Two corpora, prose in Parquet and shorter "code" documents in JSON Lines (bench.tokenizing's
pseudo-word documents), and a byte-level BPE tokenizer trained on them here (nothing fetched).
A Mixture of the two (0.7/0.3, then 0.5/0.5 from the middle of epoch 0), each document tokenized
with EOS and the batch's documents packed into rows of --seq-len tokens:

- **tokens/s**: shardstream (2 decode actors) in epoch 0, which tokenizes, and from the prepared-sample
  cache, against a DataLoader at equal cores (num_workers=2) whose workers tokenize the same texts
  with the same tokenizer and pack them with the same function, in the same order (the mixture's
  plan as its batch sampler). Epoch 0 keeps what it can in 5% of its time and epoch 1 keeps every
  document it tokenizes (docs/prepared-cache.md); the tiers are at their default sizes, in
  directories of the run's own that start empty. A mixture's epoch does not read every document
  (a source drawn above its share repeats documents, one below it leaves some out), so epoch 2
  still meets documents no epoch read before: it is printed with the share the cache gave, and
  "from the cache" is measured on epoch 1 read again, whose documents all are (the share is
  checked from the service's counters). Each pair's first batch is checked equal. The runs take
  turns, --repetitions times; ratios are medians of the per-repetition ratios. Targets: >= 1.0x in
  epoch 0, >= 3x from the cache.
- **consumer CPU per token**: the training process's own CPU seconds per token in each.
- **proportions**: 10,000 batches of a mixture of two sources of bare numbers (no transform), weights
  0.7/0.3 for 5,000 steps then 0.5/0.5: each phase's shares within 1% of its weights.
- **resume**: a state_dict at a random step of the packed job; a new loader resumed from it gives
  the remaining batches bit for bit.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bench.services import shardstream_service
from bench.tokenizing import documents, trained

log = logging.getLogger(__name__)

SHM = "/dev/shm"
REPORT_SETTLE_S = 10.0  # the decode actors report their counters each second
WORKERS = 2  # the DataLoader's, and the service's decode actors: the machine's cores
WEIGHTS = ((0.7, 0.3), (0.5, 0.5))
EOS = "</s>"


def write_corpora(directory: Path, prose_docs: int, code_docs: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Under `directory`: prose/ (Parquet) and code/ (JSON Lines); their texts."""
    prose = documents(prose_docs, seed=2 * seed)
    code = [text[: len(text) // 3] for text in documents(code_docs, seed=2 * seed + 1)]  # shorter documents
    (directory / "prose").mkdir(parents=True)
    (directory / "code").mkdir()
    pq.write_table(pa.table({"text": prose}), directory / "prose" / "part-0.parquet", row_group_size=512)
    with open(directory / "code" / "part-0.jsonl", "w") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text in code)
    return prose, code


class TokenizedTexts(torch.utils.data.Dataset[np.ndarray]):
    """Text i of the two corpora (prose first, as the mixture numbers them) tokenized, with EOS:
    what a DataLoader worker does for a sample."""

    def __init__(self, texts: list[str], tokenizer: str) -> None:
        self.texts, self.path = texts, tokenizer
        self.tokenizer: Any = None

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> np.ndarray:
        if self.tokenizer is None:  # loaded in each worker
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(self.path)
            self.eos = self.tokenizer.token_to_id(EOS)
        return np.array([*self.tokenizer.encode(self.texts[i], add_special_tokens=False).ids, self.eos],
                        dtype=np.int64)


class Packed:
    """The DataLoader's collate_fn: the same packing the service does."""

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len

    def __call__(self, docs: list[np.ndarray]) -> dict[str, torch.Tensor]:
        from shardstream.service.transforms.token_packing import pack_documents

        return {k: torch.from_numpy(v) for k, v in pack_documents(docs, self.seq_len, 0, True).items()}


def mixture_batches(sizes: Sequence[int], phases: Sequence[tuple[int, Sequence[float]]], batch_size: int,
                    seed: int, epoch: int) -> list[list[int]]:
    """The mixture's batches of global indices for one rank of one, from the service's own plan."""
    from shardstream.service.plan import EpochPlan, SamplingSpec

    sampling = SamplingSpec(sum(sizes), 1, batch_size, True, seed, False, mixture_rows=tuple(sizes),
                            mixture_phases=tuple((step, tuple(w)) for step, w in phases))
    plan = EpochPlan(sampling, epoch)
    return [plan.batch_indices(0, step).tolist() for step in range(sampling.batches_per_rank)]


def consume(batches: Iterable[dict[str, Any]]) -> tuple[dict[str, float], dict[str, Any]]:
    """Tokens, wall seconds and this process's CPU seconds over every batch, and the first batch."""
    wall, cpu = time.perf_counter(), time.process_time()
    tokens, places, first = 0, 0, None
    for batch in batches:
        first = first if first is not None else batch
        tokens += int(batch["document_lengths"].sum())
        places += batch["input_ids"].numel()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert first is not None
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu, "pad": 1 - tokens / places}, first


def same_batch(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prose", type=int, default=64_000, help="prose documents")
    parser.add_argument("--code", type=int, default=32_000, help="code documents")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=256,
                        help="documents per batch (about 13,600 tokens: 27 rows of 512)")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from torch.utils.data import DataLoader

    from shardstream.client import RemoteLoader

    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        prose, code = write_corpora(work, args.prose, args.code)
        tokenizer = trained(prose[:4000] + code[:2000], work / "tokenizer.json")
        sizes = (len(prose), len(code))
        switch = len(mixture_batches(sizes, [(0, WEIGHTS[0])], args.batch_size, 0, 0)) // 2
        phases = [(0, WEIGHTS[0]), (switch, WEIGHTS[1])]
        transform_args = {"tokenizer": tokenizer, "add_eos": True, "eos_token": EOS, "pack": args.seq_len,
                          "mask_across_documents": True}
        rows = []
        # The cache's tiers in directories of this run's own, sized at their defaults: they start empty,
        # as on a fresh node, whatever earlier runs left in the default directories.
        with tempfile.TemporaryDirectory(dir=SHM if Path(SHM).is_dir() else None) as memory, \
                shardstream_service(WORKERS, work, config={"prepared_cache_memory_dir": memory,
                                                           "prepared_cache_disk_dir": str(work / "disk")}) as server:
            address = f"127.0.0.1:{server.announced}"
            for repetition in range(args.repetitions):
                seed = 100 + repetition
                if repetition:  # new texts: the cache holds the last repetition's, and epoch 0 is to tokenize
                    prose, code = write_corpora(work / f"repetition-{repetition}", args.prose, args.code, repetition)
                mixture = mixture_of(work / (f"repetition-{repetition}" if repetition else ""), switch)
                dataset = TokenizedTexts(prose + code, tokenizer)
                baseline = DataLoader(dataset, batch_sampler=mixture_batches(sizes, phases, args.batch_size, seed, 0),
                                      num_workers=WORKERS, collate_fn=Packed(args.seq_len))
                dl, dl_first = consume(baseline)
                with RemoteLoader(address, mixture, batch_size=args.batch_size, world_size=1, rank=0, seed=seed,
                                  job_name=f"llm-{repetition}", transform="tokenize",
                                  transform_args=transform_args) as remote:
                    cold, cold_first = consume(remote)
                    remote.set_epoch(1)
                    filling, _ = consume(remote)
                    filled_reads = prepared_reads(address)
                    remote.set_epoch(2)
                    warm, _ = consume(remote)
                    warm["cached"] = cached_share(address, before=filled_reads)
                    again_reads = prepared_reads(address)
                    remote.set_epoch(1)  # its documents, every one kept when epoch 1 first read them
                    again, _ = consume(remote)
                    again["cached"] = cached_share(address, before=again_reads)
                if not same_batch(cold_first, dl_first):
                    print("FAIL shardstream's first batch differs from the DataLoader's")
                    failed = True
                rows.append((dl, cold, again))
                rate = lambda r: r["tokens"] / r["wall_s"]  # noqa: E731
                print(f"repetition {repetition}: DataLoader {rate(dl):,.0f} tokens/s; shardstream epoch 0 "
                      f"{rate(cold):,.0f} ({rate(cold) / rate(dl):.2f}x), epoch 1 {rate(filling):,.0f} "
                      f"({rate(filling) / rate(dl):.2f}x), epoch 2 {rate(warm):,.0f} ({rate(warm) / rate(dl):.2f}x, "
                      f"{warm['cached']:.1%} of its documents from the cache), epoch 1 again {rate(again):,.0f} "
                      f"({rate(again) / rate(dl):.2f}x, {again['cached']:.1%} from the cache)", flush=True)
            cold_x = statistics.median(r[1]["tokens"] / r[1]["wall_s"] / (r[0]["tokens"] / r[0]["wall_s"]) for r in rows)
            warm_x = statistics.median(r[2]["tokens"] / r[2]["wall_s"] / (r[0]["tokens"] / r[0]["wall_s"]) for r in rows)
            per_token = lambda i: statistics.median(r[i]["cpu_s"] / r[i]["tokens"] * 1e9 for r in rows)  # noqa: E731
            tokens = rows[0][0]["tokens"]
            print(f"{tokens:,} tokens an epoch ({sizes[0]:,} + {sizes[1]:,} documents), rows of {args.seq_len}, "
                  f"{args.batch_size} documents a batch, padding {rows[0][1]['pad']:.2%}")
            print(f"{verdict(cold_x >= 1.0)} tokenize + pack, epoch 0: {cold_x:.2f}x DataLoader(num_workers={WORKERS}) "
                  "(target >= 1.0x)")
            cached = min(r[2]["cached"] for r in rows)
            print(f"{verdict(warm_x >= 3.0 and cached == 1.0)} from the prepared cache (epoch 1 read again, "
                  f"{cached:.1%} of its documents from the cache): {warm_x:.2f}x DataLoader (target >= 3x)")
            print(f"consumer CPU per token: DataLoader {per_token(0):.0f} ns, shardstream {per_token(1):.0f} ns "
                  f"(epoch 0), {per_token(2):.0f} ns (from the cache)")
            failed |= cold_x < 1.0 or warm_x < 3.0 or cached < 1.0
            failed |= not proportions(address, work)
            failed |= not resume(address, mixture, args.batch_size, transform_args)
    return 1 if failed else 0


def prepared_reads(address: str) -> tuple[int, int]:
    """(documents found in the prepared cache, documents tokenized) on the service so far, once the
    decode actors' reports (each second) have stopped changing."""
    import grpc

    from shardstream.proto.v1 import loader_pb2 as pb
    from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc

    last: tuple[int, int] | None = None
    deadline = time.monotonic() + REPORT_SETTLE_S
    with grpc.insecure_channel(address) as channel:
        while True:
            status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
            now = (sum(n.prepared_memory_hits + n.prepared_disk_hits + n.prepared_peer_hits for n in status.node_reads),
                   sum(n.prepared_misses for n in status.node_reads))
            if now == last or time.monotonic() > deadline:
                return now
            last = now
            time.sleep(1.5)


def cached_share(address: str, before: tuple[int, int]) -> float:
    """The share of the documents read since `before` that came from the prepared cache."""
    hits, misses = (now - then for now, then in zip(prepared_reads(address), before, strict=True))
    return hits / max(1, hits + misses)


def mixture_of(directory: Path, switch: int) -> Any:
    from shardstream.client import Mixture, Source

    return Mixture([Source("prose", str(directory / "prose"), weight=WEIGHTS[0][0]),
                    Source("code", str(directory / "code"), format="jsonl", weight=WEIGHTS[0][1])],
                   schedule={switch: dict(zip(("prose", "code"), WEIGHTS[1], strict=True))})


def proportions(address: str, work: Path, batches: int = 10_000, batch_size: int = 16) -> bool:
    """10,000 batches of a mixture of bare numbers; each phase's shares against its weights."""
    from shardstream.client import Mixture, RemoteLoader, Source

    for name, rows in (("a", 60_000), ("b", 40_000)):
        (work / name).mkdir()
        pq.write_table(pa.table({"n": np.arange(rows)}), work / name / "part-0.parquet", row_group_size=4096)
    half = batches // 2
    mixture = Mixture([Source("a", str(work / "a"), weight=WEIGHTS[0][0]),
                       Source("b", str(work / "b"), weight=WEIGHTS[0][1])],
                      schedule={half: {"a": WEIGHTS[1][0], "b": WEIGHTS[1][1]}})
    counts: list[dict[str, int]] = []
    with RemoteLoader(address, mixture, batch_size=batch_size, world_size=1, rank=0, job_name="llm-proportions") as it:
        step = 0
        while step < batches:
            it.set_epoch(step // len(it))
            for _ in it:
                step += 1
                if step in (half, batches):
                    counts.append(dict(it.stats.source_samples))
                if step == batches:
                    break
    ok = True
    for phase, (before, after) in enumerate(zip([{"a": 0, "b": 0}, counts[0]], counts, strict=True)):
        got = {k: after[k] - before[k] for k in after}
        total = sum(got.values())
        shares = {k: v / total for k, v in got.items()}
        worst = max(abs(shares[k] - w) for k, w in zip("ab", WEIGHTS[phase], strict=True))
        ok &= worst <= 0.01
        print(f"{verdict(worst <= 0.01)} proportions over batches {phase * half:,}-{(phase + 1) * half - 1:,}: "
              f"a {shares['a']:.4f}, b {shares['b']:.4f} against {WEIGHTS[phase][0]}/{WEIGHTS[phase][1]} "
              f"(largest difference {worst:.4f}; target within 0.01)")
    return ok


def resume(address: str, mixture: Any, batch_size: int, transform_args: dict[str, Any]) -> bool:
    """A state_dict at a random step of epoch 1; the remaining batches again from a new loader."""
    from shardstream.client import RemoteLoader

    def loader(name: str) -> RemoteLoader:
        return RemoteLoader(address, mixture, batch_size=batch_size, world_size=1, rank=0, seed=7, job_name=name,
                            transform="tokenize", transform_args=transform_args)

    with loader("llm-resume-1") as first:
        first.set_epoch(1)
        at = int(np.random.default_rng().integers(1, len(first)))
        batches = iter(first)
        for _ in range(at):
            next(batches)
        state = first.state_dict()
        rest = list(batches)
    with loader("llm-resume-2") as again:
        again.load_state_dict(state)
        resumed = list(again)
    same = len(resumed) == len(rest) and all(same_batch(a, b) for a, b in zip(resumed, rest, strict=True))
    print(f"{verdict(same)} resume at step {at} of epoch 1: the remaining {len(rest)} batches bit for bit")
    return same


if __name__ == "__main__":
    raise SystemExit(main())
