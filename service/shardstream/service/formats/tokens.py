"""Token streams: flat binary files of one integer dtype, read as windows of ``seq_len + 1`` tokens.

As nanoGPT and Megatron write them: ``.bin`` files of raw little-endian
integers (``dtype="uint16"`` or ``"uint32"``), or ``.npy`` files, whose header
gives the dtype. The files are concatenated in sorted path order; sample i is
the window ``tokens[i*L : i*L + L + 1]`` of that stream, so a window may run
from one file into the next, and N = (total_tokens - 1) // L. A sample is
``input_ids = window[:-1]`` and ``labels = window[1:]``, both int64 [L].

Nothing is read at open but each file's size (and a ``.npy`` header). A
sample belongs to the file its window starts in; a unit is a run of about
256K tokens of windows, read as one byte range per file it spans.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.lib import format as npy_format

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec, UnreadableShard
from shardstream.service.dataset import (
    DatasetIndex,
    Shard,
    check_columns,
    in_parallel,
    resolve_urls,
    stat_file,
)
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.token_documents import document_columns

log = logging.getLogger(__name__)

SUFFIXES = (".bin", ".npy")
UNIT_TOKENS = 2**18  # tokens of windows per unit: ~0.5-1 MiB read per unit, 4 MiB as int64 columns
OPTIONS = {"seq_len": None, "dtype": None, "eos_id": None, "mask_across_documents": False}


@dataclass(frozen=True)
class TokenFile:
    url: str
    version: str
    size: int
    start: int  # its first token's place in the concatenated stream
    tokens: int
    header: int  # bytes before the first token (a .npy header; 0 for .bin)
    dtype: str  # numpy dtype string, byte order included ("<u2")


@dataclass(frozen=True)
class TokenLayout:
    """What reading a token shard's units needs: its files (this one, then those its last
    windows run into), the window length and the shard's first sample."""

    files: tuple[TokenFile, ...]
    seq_len: int
    first_sample: int
    unit_samples: int
    eos_id: int | None = None  # where documents end: the window's document columns (token_documents.py)
    mask_across_documents: bool = False

    def sample_name(self, row: int) -> str:
        start = (self.first_sample + row) * self.seq_len
        return f"window {self.first_sample + row} (tokens {start}..{start + self.seq_len}) starting in {self.files[0].url}"


@dataclass(frozen=True)
class TokenOptions:
    seq_len: int
    dtype: np.dtype | None
    eos_id: int | None
    mask_across_documents: bool


def _parse_args(args: dict[str, Any]) -> TokenOptions:
    args = take_args("tokens", args, OPTIONS)
    seq_len = args["seq_len"]
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len <= 0:
        raise InvalidJobSpec(f"format 'tokens' needs seq_len=L, a positive int (tokens per sample), got {seq_len!r}")
    dtype = None
    if args["dtype"] is not None:
        try:
            dtype = np.dtype(args["dtype"])
        except TypeError:
            raise InvalidJobSpec(f"dtype {args['dtype']!r} is not a numpy dtype; token files are "
                                 "'uint16' or 'uint32' (any integer dtype)") from None
        if dtype.kind not in "iu":
            raise InvalidJobSpec(f"token dtype must be an integer dtype ('uint16', 'uint32'), got {dtype}")
    eos_id, mask = args["eos_id"], args["mask_across_documents"]
    if eos_id is not None and (not isinstance(eos_id, int) or isinstance(eos_id, bool) or eos_id < 0):
        raise InvalidJobSpec(f"format 'tokens' eos_id must be a token id (an int >= 0), got {eos_id!r}")
    if not isinstance(mask, bool):
        raise InvalidJobSpec(f"format 'tokens' mask_across_documents must be true or false, got {mask!r}")
    if mask and eos_id is None:
        raise InvalidJobSpec("format 'tokens' mask_across_documents needs eos_id, the token that ends a document")
    return TokenOptions(seq_len, dtype, eos_id, mask)


def _stat(url: str, dtype: np.dtype | None) -> TokenFile:
    """A file's size, version and token count (and for .npy, its header)."""
    fs, path, size, version = stat_file(url, "token file")
    header, found, count = 0, dtype, None
    if url.lower().endswith(".npy"):
        try:
            with fs.open(path, "rb", block_size=4096) as f:
                major, _minor = npy_format.read_magic(f)
                read_header = npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0
                shape, fortran, found = read_header(f)
                header = f.tell()
        except (OSError, ValueError) as exc:
            raise UnreadableShard(f"token file {url!r} cannot be read: {exc}") from None
        if found.kind not in "iu" or (len(shape) > 1 and fortran):
            raise UnreadableShard(f"token file {url!r} holds {found} in shape {shape}"
                                  f"{' (Fortran order)' if fortran else ''}: tokens are a flat array of one "
                                  "integer dtype (C order when it has more than one axis)")
        if dtype is not None and found.newbyteorder("=") != dtype.newbyteorder("="):
            raise UnreadableShard(f"token file {url!r} holds {found}, but dtype={str(dtype)!r} was asked for")
        count = int(np.prod(shape, dtype=np.int64))  # as np.load: the header's shape, trailing bytes unread
        if size - header < count * found.itemsize:
            raise UnreadableShard(f"token file {url!r} is truncated: its header says {shape} of {found} "
                                  f"({count * found.itemsize} bytes) but {size - header} bytes follow it")
    if found is None:
        raise InvalidJobSpec(f"{url!r} is a raw token file: give its dtype (dtype='uint16' or 'uint32')")
    payload = size - header
    if count is None and payload % found.itemsize:
        raise UnreadableShard(f"token file {url!r} has {payload} bytes of tokens, not a multiple of {found}'s "
                              f"{found.itemsize}: it is truncated, or its dtype is not {found}")
    return TokenFile(url, version, size, 0, payload // found.itemsize if count is None else count, header,
                     found.str)


class TokenFormat:
    name = "tokens"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        options = _parse_args(args)
        seq_len = options.seq_len
        urls = resolve_urls(dataset, allow, SUFFIXES, "token")
        log.info("indexing %d token file(s) of %s", len(urls), list(dataset))
        files = in_parallel(lambda url: _stat(url, options.dtype), urls, "files")
        dtypes = {np.dtype(f.dtype).newbyteorder("=") for f in files}  # byte orders may differ
        if len(dtypes) > 1:
            kinds = ", ".join(f"{f.url}: {np.dtype(f.dtype)}" for f in files)
            raise UnreadableShard(f"token files hold different dtypes ({kinds}); a stream has one")
        _check_eos_fits(options.eos_id, np.dtype(files[0].dtype))
        starts = np.cumsum([0] + [f.tokens for f in files])
        files = [TokenFile(f.url, f.version, f.size, int(s), f.tokens, f.header, f.dtype)
                 for f, s in zip(files, starts, strict=False)]
        total = int(starts[-1])
        num_samples = (total - 1) // seq_len
        if num_samples <= 0:
            raise DatasetNotFound(f"dataset {list(dataset)} holds {total} tokens, fewer than one window of "
                                  f"seq_len + 1 = {seq_len + 1}")
        unit = max(1, UNIT_TOKENS // seq_len)
        shards = tuple(_shard(files, i, options, num_samples, unit) for i in range(len(files)))
        window = pa.list_(pa.int64(), seq_len)
        fields = [("input_ids", window), ("labels", window)]
        if options.eos_id is not None:
            fields += [("position_ids", window), ("cu_seqlens", pa.list_(pa.int32(), seq_len + 1)),
                       ("num_documents", pa.int64())]
        schema = check_columns(pa.schema(fields), columns, f"token dataset {list(dataset)}")
        return DatasetIndex(shards=shards, schema=schema, format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        layout: TokenLayout = shard.layout
        count, length = shard.row_group_rows[unit], layout.seq_len
        first = layout.first_sample + unit * layout.unit_samples
        begin, end = first * length, (first + count) * length + 1  # tokens of the stream
        parts = []
        for f in layout.files:
            a, b = max(begin, f.start), min(end, f.start + f.tokens)
            if a >= b:
                continue
            itemsize = np.dtype(f.dtype).itemsize
            data = storage.read_range(f.url, f.version, f.header + (a - f.start) * itemsize,
                                      f.header + (b - f.start) * itemsize)
            part = np.frombuffer(data, dtype=f.dtype)
            if part.dtype.kind == "u" and part.dtype.itemsize == 8 and len(part) and part.max() >= 2**63:
                raise UnreadableShard(f"token file {f.url!r} holds token {int(part.max())}, beyond int64")
            parts.append(part)
        stream = np.concatenate(parts).astype(np.int64)
        if len(stream) != end - begin:
            raise UnreadableShard(f"{shard.url!r}: unit {unit} needs tokens {begin}..{end} but the files hold "
                                  f"{len(stream)} of them")
        inputs = stream[:-1].reshape(count, length)
        labels = stream[1:].reshape(count, length).copy()
        windows = {"input_ids": inputs, "labels": labels}
        if layout.eos_id is not None:
            windows.update(document_columns(inputs, labels, layout.eos_id, layout.mask_across_documents))
        names = columns if columns is not None else tuple(windows)
        return pa.table({name: _column(windows[name]) for name in names})


def _column(values: np.ndarray) -> pa.Array:
    """Rows of a 2-D array as fixed-size lists; a 1-D array as itself."""
    if values.ndim == 1:
        return pa.array(values)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def _check_eos_fits(eos_id: int | None, dtype: np.dtype) -> None:
    if eos_id is not None and eos_id > np.iinfo(dtype).max:
        raise InvalidJobSpec(f"eos_id {eos_id} cannot occur in a stream of {dtype} (at most {np.iinfo(dtype).max})")


def _shard(files: list[TokenFile], i: int, options: TokenOptions, num_samples: int, unit: int) -> Shard:
    """File i's shard: the windows that start in it, and the files their tokens lie in."""
    seq_len = options.seq_len
    f = files[i]
    first = -(-f.start // seq_len)  # the first window starting at or after the file's first token
    stop = min(num_samples, -(-(f.start + f.tokens) // seq_len))
    count = max(0, stop - first)
    last_token = (first + count) * seq_len + 1 if count else f.start
    spanned = [f] + [g for g in files[i + 1:] if g.start < last_token and g.tokens]
    units = tuple(min(unit, count - s) for s in range(0, count, unit))
    reading = f"tokens dtype={np.dtype(f.dtype).str} seq_len={seq_len} unit={unit}"
    if options.eos_id is not None:  # other columns: another reading (the local copy keeps units by it)
        reading += f" eos_id={options.eos_id} mask={int(options.mask_across_documents)}"
    if len(spanned) > 1:  # later files' tokens are part of this shard's samples: their versions too
        reading += "".join(f" +{g.url}@{g.size}:{g.version}" for g in spanned[1:])
    return Shard(url=f.url, size=f.size, num_rows=count, row_group_rows=units, version=f.version,
                 format="tokens", reading=reading,
                 layout=TokenLayout(tuple(spanned), seq_len, first, unit, options.eos_id,
                                    options.mask_across_documents))


__all__ = ["SUFFIXES", "TokenFormat", "TokenLayout"]
