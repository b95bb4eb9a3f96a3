"""Tokenizers trained in the test (nothing fetched from a hub) and Parquet text datasets for them."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "Sphinx of black quartz, judge my vow!",
    "naïve café résumé, Ærøskøbing, Straße",
    "東京は日本の首都です。北京是中国的首都。",
    "안녕하세요 세계",
    "emoji 🎉🚀👩‍👩‍👧 and flags 🇫🇷🇯🇵",
    "tabs\tand\nnewlines\r\n  and   runs   of spaces",
    "numbers 0123456789 3.14159 1e-9",
    "код на русском языке",
]
# Texts the fidelity tests compare: unicode, empty, whitespace only, emoji, CJK, a very long one.
TEXTS = [
    *CORPUS,
    "",
    " ",
    "\n\t  \r\n",
    "🎉",
    "zzzzqqqq words the model never saw: xylophone quixotic",
    "日本語" * 50,
    " ".join(CORPUS) * 40,  # ~13k characters
    "\u200b\u00a0\ufeff zero-width and no-break spaces",
    "combining e\u0301 vs \u00e9",
]


def bpe_tokenizer(vocab_size: int = 400) -> Tokenizer:
    """Byte-level BPE (GPT-2's kind) with a BERT-like post-processor: "<s> $A </s>"."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tokenizer.token_to_id("<s>")),
                                              ("</s>", tokenizer.token_to_id("</s>"))])
    return tokenizer


def wordpiece_tokenizer(vocab_size: int = 300) -> Tokenizer:
    """BERT's kind: NFD, lower case, strip accents, WordPiece, "[CLS] $A [SEP]"."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, show_progress=False,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"])
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")),
                                                 ("[SEP]", tokenizer.token_to_id("[SEP]"))])
    return tokenizer


def save(tokenizer: Tokenizer, path: str) -> str:
    tokenizer.save(path)
    return path


def write_texts(directory: str, texts: Sequence[str | None], row_group_size: int = 4,
                shards: int = 2) -> list[str]:
    """`texts` over `shards` Parquet files (sorted path order = text order): `text` (string) and
    `idx` (int64, the global index)."""
    os.makedirs(directory, exist_ok=True)
    per = -(-len(texts) // shards)
    paths = []
    for i in range(shards):
        part = list(texts[i * per : (i + 1) * per])
        table = pa.table({"text": pa.array(part, pa.string()),
                          "idx": pa.array(range(i * per, i * per + len(part)), pa.int64())})
        path = os.path.join(directory, f"text-{i:05d}.parquet")
        pq.write_table(table, path, row_group_size=row_group_size)
        paths.append(path)
    return paths
