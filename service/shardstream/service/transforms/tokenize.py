"""The built-in tokenize transform: a text column to token ids with a Hugging Face tokenizer.json.

Tokenizing is deterministic, so it is all ``prepare``, and the node's prepared-sample cache keeps
its output: a second epoch, or a second job with the same dataset, tokenizer and arguments, reads
the ids instead of tokenizing again. There is no ``augment``.

Output per sample: ``input_ids``, int64 [L], and nothing else but the columns named in `keep`.
Lengths vary, so a job collates with ``collate="pad"`` (``[B, Lmax]`` padded with ``pad_value``,
and ``input_ids_lengths``); the plain stacking collate is refused when the job opens.

With ``pack=L`` the transform collates its batches itself: the documents packed into rows of L
tokens, greedy in order within the batch (token_packing.py), with labels, position_ids and
cu_seqlens for variable-length attention; no collate is given then.

The ids are exactly ``Tokenizer.from_file(tokenizer).encode(text, add_special_tokens=...)``'s,
then BOS and EOS (``bos_token``/``eos_token`` looked up in the vocabulary) when asked; with
`max_length`, the text's tokens are cut (the tokenizer's own truncation: right side, its
post-processor's special tokens kept) so that the whole, BOS and EOS counted, has at most
`max_length` ids. Without it nothing is cut, and a text of more ids than the service's
`max_seq_len` is refused as a corrupt sample (or replaced under ``on_corrupt="skip"``). The
file's own truncation and padding settings are ignored: the job's arguments decide.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import tokenizers
from tokenizers import Tokenizer

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.limits import DEFAULT_LIMITS
from shardstream.service.transforms.base import Sample, check_tensor_column
from shardstream.service.transforms.token_packing import pack_documents
from shardstream.service.transforms.transform_files import TransformFile, read_file

log = logging.getLogger(__name__)

OUTPUT = "input_ids"
WHAT = "tokenizer file"


class TokenizeTransform:
    """prepare = tokenize; no augment. `files` and `cache_identity` name the tokenizer.json by its
    content (transform_files.py; the prepared-sample cache's key)."""

    def __init__(self, tokenizer: str, column: str = "text", add_bos: bool = False, add_eos: bool = False,
                 bos_token: str | None = None, eos_token: str | None = None, max_length: int | None = None,
                 add_special_tokens: bool = False, keep: list[str] | None = None, pack: int | None = None,
                 mask_across_documents: bool = False, pad_id: int = 0, *,
                 longest: int = DEFAULT_LIMITS.seq_len) -> None:
        """`longest`: the most ids a sample may have without `max_length` (the service's
        max_seq_len; the registry passes it, a job cannot)."""
        keep = [] if keep is None else keep
        _check_arguments(tokenizer, column, add_bos, add_eos, add_special_tokens, max_length, keep, longest)
        _check_packing(pack, mask_across_documents, pad_id, keep, longest)
        self.pack, self.mask_across_documents, self.pad_id = pack, mask_across_documents, pad_id
        data, sha256 = read_file(tokenizer, WHAT)
        self.files = {"tokenizer": TransformFile(tokenizer, sha256)}  # the manifest's, pinned at open
        # The prepared-sample cache's key besides the arguments (the URL): the file's content and
        # the library that reads it.
        self.cache_identity = {"tokenizer_sha256": sha256, "tokenizers": tokenizers.__version__}
        self.tokenizer = _load(tokenizer, data)
        self.column, self.keep, self.add_special_tokens = column, keep, add_special_tokens
        self.bos = _token_id(self.tokenizer, tokenizer, "bos", bos_token) if add_bos else None
        self.eos = _token_id(self.tokenizer, tokenizer, "eos", eos_token) if add_eos else None
        self.max_length = max_length
        self.longest = max_length if max_length is not None else longest
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        if max_length is not None:
            added = (self.bos is not None) + (self.eos is not None)
            if max_length - added - self._specials() < 1:
                raise InvalidJobSpec(f"tokenize max_length {max_length} leaves no room for text beside "
                                     f"{added} BOS/EOS and the {self._specials()} special tokens of "
                                     f"{WHAT} {tokenizer!r}")
            self.tokenizer.enable_truncation(max_length - added)  # the post-processor's tokens kept
        log.info("tokenize: %s (sha256 %s), %d tokens in its vocabulary", tokenizer, sha256[:16],
                 self.tokenizer.get_vocab_size(with_added_tokens=True))

    def _specials(self) -> int:
        """The ids the tokenizer's post-processor adds to one text (with add_special_tokens)."""
        processor = self.tokenizer.post_processor
        if not self.add_special_tokens or processor is None:
            return 0
        return int(processor.num_special_tokens_to_add(False))

    def check_schema(self, schema: pa.Schema) -> None:
        if self.column not in schema.names:
            raise InvalidJobSpec(f"tokenize column {self.column!r} not in dataset columns {schema.names}")
        kind = schema.field(self.column).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise InvalidJobSpec(f"tokenize column {self.column!r} must hold strings, has {schema.field(self.column).type}")
        for name in self.keep:
            if name not in schema.names:
                raise InvalidJobSpec(f"tokenize keep names {name!r}, not in dataset columns {schema.names}")
            check_tensor_column(schema.field(name), pads=True)

    def check_collate(self, collate: str) -> None:
        """The ids vary in length: stacking them cannot work (a user collate may)."""
        if not collate:
            raise InvalidJobSpec(f"transform 'tokenize' gives {OUTPUT!r} of varying length: use collate='pad' "
                                 f"(pads each batch to its longest with pad_value, adds {OUTPUT}_lengths) or a "
                                 "collate of your own")

    def prepare(self, row: Sample) -> Sample:
        """Deterministic: the text's ids. Raises, naming the column, on a null or a value that is
        not a string, and on a text past `longest` ids (without max_length)."""
        return self._sample(row, self.tokenizer.encode(self._text(row), add_special_tokens=self.add_special_tokens).ids)

    def prepare_many(self, rows: list[Sample]) -> list[Sample | Exception]:
        """``prepare`` of each row, the texts tokenized in one call: each row's sample, or the error
        ``prepare`` would raise for it. ``encode_batch_fast`` gives ``encode``'s ids without working
        out each token's character offsets, which nothing here uses: about a quarter less CPU a
        token. Its thread pool is held to the calling thread in a decode actor (decoder.py)."""
        out: list[Sample | Exception] = []
        texts: list[str] = []
        for row in rows:
            try:
                texts.append(self._text(row))
                out.append(row)
            except ValueError as exc:
                out.append(exc)
        encodings = iter(self.tokenizer.encode_batch_fast(texts, add_special_tokens=self.add_special_tokens))
        for i, text_row in enumerate(out):
            if isinstance(text_row, dict):
                try:
                    out[i] = self._sample(text_row, next(encodings).ids)
                except ValueError as exc:
                    out[i] = exc
        return out

    def _text(self, row: Sample) -> str:
        text = row.get(self.column)
        if not isinstance(text, str):
            what = "a null" if text is None else f"a {type(text).__name__}"
            raise ValueError(f"column {self.column!r} holds {what}, not a string")
        return text

    def _sample(self, row: Sample, ids: list[int]) -> Sample:
        """The sample of `row` whose text gave `ids` (BOS and EOS not yet added)."""
        count = len(ids) + (self.bos is not None) + (self.eos is not None)
        if count > self.longest:  # with max_length the tokenizer has cut it already
            bound = (f"max_length {self.longest:,}" if self.max_length is not None
                     else f"this service's max_seq_len of {self.longest:,}: set transform_args max_length to cut it")
            raise ValueError(f"column {self.column!r} holds a text of {count:,} tokens, above {bound}")
        out = np.empty(count, dtype=np.int64)
        start = 0
        if self.bos is not None:
            out[0], start = self.bos, 1
        out[start : start + len(ids)] = ids
        if self.eos is not None:
            out[-1] = self.eos
        sample: dict[str, Any] = {OUTPUT: out}
        for name in self.keep:
            sample[name] = row[name]
        return sample


class PackedTokenize(TokenizeTransform):
    """tokenize with `pack`: the same samples (and prepared-cache entries), collated into packed rows."""

    def check_collate(self, collate: str) -> None:
        if collate:
            raise InvalidJobSpec(f"tokenize with pack={self.pack} collates its batches itself (documents packed "
                                 f"into rows of {self.pack} tokens): leave collate={collate!r} out")

    def collate(self, samples: list[Sample]) -> dict[str, np.ndarray]:
        assert self.pack is not None
        return pack_documents([sample[OUTPUT] for sample in samples], self.pack, self.pad_id,
                              self.mask_across_documents)


def _check_packing(pack: Any, mask_across_documents: Any, pad_id: Any, keep: list[str], longest: int) -> None:
    if pack is None:
        if mask_across_documents:
            raise InvalidJobSpec("tokenize mask_across_documents is for packed rows: give pack=<tokens per row>")
        return
    if not isinstance(pack, int) or isinstance(pack, bool) or not 0 < pack <= longest:
        raise InvalidJobSpec(f"tokenize pack must be the tokens per packed row, 1 to {longest:,} (this service's "
                             f"max_seq_len), got {pack!r}")
    if not isinstance(mask_across_documents, bool):
        raise InvalidJobSpec(f"tokenize mask_across_documents must be true or false, got {mask_across_documents!r}")
    if not isinstance(pad_id, int) or isinstance(pad_id, bool):
        raise InvalidJobSpec(f"tokenize pad_id must be a token id, got {pad_id!r}")
    if keep:
        raise InvalidJobSpec(f"tokenize keep {keep} is per document, and a packed row holds several: leave keep "
                             "out with pack (document_lengths says where each document went)")


def _check_arguments(tokenizer: Any, column: Any, add_bos: Any, add_eos: Any, add_special_tokens: Any,
                     max_length: Any, keep: Any, longest: int) -> None:
    """InvalidJobSpec naming the first argument of a job's that is not what the transform takes,
    before anything is read."""
    if not isinstance(tokenizer, str) or not tokenizer:
        raise InvalidJobSpec(f"tokenize needs tokenizer=<path or URL of a tokenizer.json>, got {tokenizer!r}")
    if fsspec.core.split_protocol(tokenizer)[0] is None and not os.path.isabs(tokenizer):
        raise InvalidJobSpec(f"tokenizer {tokenizer!r} must be an absolute path or a URL: the service and each "
                             "decode actor read it, each from its own working directory")
    if not isinstance(column, str) or not column:
        raise InvalidJobSpec(f"tokenize column must be a column name, got {column!r}")
    for name, value in (("add_bos", add_bos), ("add_eos", add_eos), ("add_special_tokens", add_special_tokens)):
        if not isinstance(value, bool):
            raise InvalidJobSpec(f"tokenize {name} must be true or false, got {value!r}")
    if max_length is not None and (not isinstance(max_length, int) or isinstance(max_length, bool)
                                   or max_length <= 0):
        raise InvalidJobSpec(f"tokenize max_length must be a positive int or null, got {max_length!r}")
    if max_length is not None and max_length > longest:
        raise InvalidJobSpec(f"tokenize max_length {max_length:,} is above this service's limit of {longest:,} "
                             "(its max_seq_len setting)")
    if (not isinstance(keep, list) or not all(isinstance(name, str) for name in keep) or column in keep
            or OUTPUT in keep):
        raise InvalidJobSpec(f"tokenize keep must list other columns by name (not {column!r} or {OUTPUT!r}), "
                             f"got {keep!r}")


def _load(url: str, data: bytes) -> Tokenizer:
    """This job's own Tokenizer (its truncation is set per job) from the file's bytes."""
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception for JSON it cannot take
        reason = " ".join(str(exc).split())[:300]
        raise InvalidJobSpec(f"{WHAT} {url!r} does not load as a Hugging Face tokenizer.json: "
                             f"{type(exc).__name__}: {reason}") from None


def _token_id(tokenizer: Tokenizer, url: str, which: str, token: str | None) -> int:
    if not isinstance(token, str) or not token:
        raise InvalidJobSpec(f"tokenize add_{which} needs {which}_token, the token's string (e.g. '<s>'), "
                             f"got {token!r}")
    found = tokenizer.token_to_id(token)
    if found is None:
        raise InvalidJobSpec(f"tokenize {which}_token {token!r} is not in the vocabulary of {WHAT} {url!r}")
    return int(found)


__all__ = ["OUTPUT", "PackedTokenize", "TokenizeTransform"]
