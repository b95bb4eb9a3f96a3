"""JSON Lines (format="jsonl"): one JSON object per line, its keys the columns; text as list[str].

    .venv/bin/python examples/formats/jsonl.py --address 127.0.0.1:50051 [--data gs://bucket/corpus/]

Sample i is the i-th non-blank line of the .jsonl files concatenated in sorted path order, its values
what json.loads gives. The columns are inferred from the first lines (or given with
format_args={"schema": {...}}); a key the format cannot carry (a nested object) is left out with
columns=[...]. Strings arrive as a list of str, numbers as tensors, lists padded with collate="pad".
"""

from __future__ import annotations

import json
import os

from _common import run


def write_sample(directory: str) -> str:
    """Two shards of documents, as a corpus pipeline writes them (the meta object is left out)."""
    for shard in range(2):
        with open(os.path.join(directory, f"corpus-{shard:05d}.jsonl"), "w") as f:
            for i in range(shard * 10, shard * 10 + 10):
                doc = {"text": f"document {i}: " + "lorem ipsum " * (1 + i % 3), "id": i,
                       "tokens": list(range(i % 5 + 1)), "meta": {"source": "example", "lang": "en"}}
                f.write(json.dumps(doc) + "\n")
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, format="jsonl", columns=["text", "id", "tokens"], collate="pad",
        shuffle=True)
