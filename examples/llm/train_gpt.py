"""A GPT-style training loop over a two-corpus mixture, tokenized and packed on the service.

    .venv/bin/python examples/llm/train_gpt.py --address 127.0.0.1:50051 [--steps 60]

With no --prose/--code/--tokenizer it writes two small corpora (Parquet prose, JSON Lines code)
and trains a byte-level BPE tokenizer.json on them (nothing is fetched from a hub), in a
directory the service must be able to read too (--workdir; default a temporary one). Then it
reads a Mixture of the two, 70/30 and 50/50 from step --switch-at, tokenized with EOS and packed
into rows of --seq-len tokens on the decode nodes, and trains a tiny causal transformer on the
rows: position_ids and segments (from the rows' document starts) keep each document's attention
to itself. It prints the loss, each source's share of the documents against its weight, the
padding fraction and tokens per second, and resumes from a state_dict to show the rest of the
run is the same batches.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import nn

from shardstream.client import Mixture, RemoteLoader, Source

WORDS = ("the a river stone light early morning quiet field small house long road over under after before "
         "walked found carried opened watched remembered").split()
CODE = ["def {f}(x):\n    return x + {n}", "for i in range({n}):\n    {f}(i)", "if {f}(x) > {n}:\n    x = {n}",
        "class {F}:\n    size = {n}"]


def write_corpora(directory: str, documents: int = 400) -> tuple[str, str, str]:
    """(prose Parquet dir, code JSON Lines dir, tokenizer.json) of synthetic text."""
    rng = np.random.default_rng(0)
    prose = [" ".join(rng.choice(WORDS, rng.integers(8, 60))) + "." for _ in range(documents)]
    code = [rng.choice(CODE).format(f=f"f{rng.integers(9)}", F=f"C{rng.integers(9)}", n=rng.integers(99))
            for _ in range(documents // 2)]
    os.makedirs(f"{directory}/prose", exist_ok=True)
    os.makedirs(f"{directory}/code", exist_ok=True)
    pq.write_table(pa.table({"text": prose}), f"{directory}/prose/part-0.parquet", row_group_size=64)
    with open(f"{directory}/code/part-0.jsonl", "w") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text in code)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(prose + code, trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                                                    show_progress=False))
    tokenizer.save(f"{directory}/tokenizer.json")
    return f"{directory}/prose", f"{directory}/code", f"{directory}/tokenizer.json"


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.norm1, self.norm2, self.head = nn.LayerNorm(width), nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(position_ids)
        rows, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(rows, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        segment = torch.cumsum(position_ids == 0, dim=1)  # a document (or the padding) per segment
        same = segment[:, :, None] == segment[:, None, :]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        mask = (same & causal)[:, None]  # packed documents do not attend to each other
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attended.transpose(1, 2).reshape(rows, length, width))
        return self.head(x + self.mlp(self.norm2(x)))


def make_loader(args: argparse.Namespace, prose: str, code: str, tokenizer: str) -> RemoteLoader:
    mixture = Mixture([Source("prose", prose, weight=0.7), Source("code", code, format="jsonl", weight=0.3)],
                      schedule={args.switch_at: {"prose": 0.5, "code": 0.5}})
    return RemoteLoader(args.address, mixture, batch_size=args.batch_size, world_size=1, rank=0, seed=0,
                        job_name="llm-example", transform="tokenize",
                        transform_args={"tokenizer": tokenizer, "add_eos": True, "eos_token": "<|endoftext|>",
                                        "max_length": 4 * args.seq_len, "pack": args.seq_len,
                                        "mask_across_documents": True})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="host:port of a shardstream service")
    parser.add_argument("--prose", help="a Parquet dataset with a `text` column (default: written)")
    parser.add_argument("--code", help="a JSON Lines dataset with a `text` field (default: written)")
    parser.add_argument("--tokenizer", help="a tokenizer.json the service can read (default: trained)")
    parser.add_argument("--workdir", help="where to write the default corpora (the service reads them)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--switch-at", type=int, default=30, help="the global step the weights go 50/50")
    parser.add_argument("--batch-size", type=int, default=16, help="documents per batch")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per packed row")
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        written = write_corpora(scratch) if not (args.prose and args.code and args.tokenizer) else ()
        prose, code, tokenizer = (args.prose, args.code, args.tokenizer) if not written else written
        vocab = Tokenizer.from_file(tokenizer).get_vocab_size()
        model = TinyGPT(vocab, args.seq_len)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        with make_loader(args, prose, code, tokenizer) as loader:
            print(f"{len(loader)} batches per epoch from {loader.num_samples} documents")
            step, tokens, padded, places, started, state, after = 0, 0, 0, 0, time.perf_counter(), None, []
            while step < args.steps:
                loader.set_epoch(step // len(loader))
                for batch in loader:
                    logits = model(batch["input_ids"], batch["position_ids"])
                    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    real = int(batch["document_lengths"].sum())
                    tokens, places = tokens + real, places + batch["input_ids"].numel()
                    padded += batch["input_ids"].numel() - real
                    if state is not None:
                        after.append(batch["input_ids"].clone())
                    if step % 10 == 0:
                        print(f"step {step}: loss {loss.item():.3f}, rows {list(batch['input_ids'].shape)}")
                    step += 1
                    if step == args.steps // 2:
                        state = loader.state_dict()
                    if step == args.steps:
                        break
            elapsed = time.perf_counter() - started
            shares = loader.stats.source_shares()
            print("source shares: " + ", ".join(f"{name} {share:.3f}" for name, share in shares.items()) +
                  f" (weights 0.7/0.3 to step {args.switch_at}, 0.5/0.5 from it)")
            print(f"source tokens: {loader.stats.source_tokens}")
            print(f"padding fraction {padded / places:.2%}; {tokens / elapsed:,.0f} tokens/s with training")
        with make_loader(args, prose, code, tokenizer) as again:
            again.load_state_dict(state)
            resumed = [batch["input_ids"] for batch in again][: len(after)]  # the rest of the state's epoch
            same = bool(resumed) and all(torch.equal(a, b) for a, b in zip(resumed, after, strict=False))
            print(f"resumed at step {args.steps // 2}: the next {len(resumed)} batches are the same: {same}")
            if not same:
                raise SystemExit("a resumed run gave other batches")


if __name__ == "__main__":
    main()
