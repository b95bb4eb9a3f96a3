"""bench.decode_parts: a decode actor's decode-thread stacks, given to the part of the work they are in."""

from __future__ import annotations

from bench.decode_parts import PARTS, decode_parts, format_parts, part_of

ACTOR = 'process 10:"python -m shardstream.service.cli serve";process 20:"ray::DecodeWorker.decode_step";'
LOOP = "_run (service/node/fair_queue.py:9);DecodeWorker.decode_step (service/node/decoder.py:120);" \
       "decode_batch (service/node/batching.py:140)"
RAW = [
    f"{ACTOR}thread (0x1);{LOOP};ImageTransform.prepare (service/transforms/image.py:60);"
    "ImageFile.load (PIL/ImageFile.py:200) 30",
    f"{ACTOR}thread (0x1);{LOOP};ImageTransform.prepare (service/transforms/image.py:70);"
    "Image.__array_interface__ (PIL/Image.py:700);Image.tobytes (PIL/Image.py:750) 6",
    f"{ACTOR}thread (0x1);{LOOP};_augment (service/node/batching.py:290);sample_rng (service/transforms/base.py:30) 3",
    f"{ACTOR}thread (0x1);{LOOP};_collate_framed (service/node/batching.py:250);stack (numpy/_core/shape_base.py:9) 8",
    f"{ACTOR}thread (0x1);{LOOP} 2",
    f"{ACTOR}thread (0x1);{LOOP};sample_rngs (service/transforms/sample_seeds.py:60) 1",
    f"{ACTOR}thread (0x1);{LOOP};ShardReader.rows (service/node/reader.py:150) 4",
    f"{ACTOR}thread (0x1);{LOOP};_native (service/node/batching.py:230);native_batch (service/node/native_batch.py:90);"
    "ImageTransform.crop_batch (service/transforms/image.py:190);crop_batch (service/transforms/jpeg_crop.py:160) 9",
    f"{ACTOR}thread (0x1);{LOOP};_native (service/node/batching.py:230);native_batch (service/node/native_batch.py:95);"
    "seed_words (service/transforms/sample_seeds.py:75) 1",
    f"{ACTOR}thread (0x1);{LOOP};_native (service/node/batching.py:230);native_batch (service/node/native_batch.py:99) 2",
    # another thread of the actor (blocked in C, which py-spy counts as busy): not the decode's
    f"{ACTOR}thread (0x2);main_loop (ray/_private/worker.py:10) 50",
    # another process
    'process 10:"python -m shardstream.service.cli serve";thread (0x1);_serve (grpc/_server.py:5) 5',
    "not a stack line",
]


def test_each_decode_thread_stack_counts_once_in_its_innermost_part() -> None:
    parts = decode_parts(RAW)
    assert sum(parts.values()) == 66  # the decode thread's samples only
    assert parts[PARTS[0][0]] == 39  # the JPEG decode, not "the rest of prepare" or the native batch's
    assert parts["a batch made in one native call, around the call (addresses, columns, frame)"] == 2
    assert parts["pixel copies (convert, np.asarray -> tobytes)"] == 6
    assert parts["per-sample RNG (np.random.default_rng)"] == 5
    assert parts["reading rows (Arrow -> Python bytes)"] == 4
    assert parts["collate into the message (each sample copied in as it is made)"] == 8
    assert parts["the rest of decode_batch (the per-sample loop)"] == 2


def test_a_stack_outside_the_decode_thread_has_no_part() -> None:
    assert part_of(["main_loop (ray/_private/worker.py)"]) is None


def test_format_parts_gives_shares_of_the_decode_thread() -> None:
    text = format_parts(decode_parts(RAW))
    assert "59.1%  JPEG decode" in text
    assert format_parts(decode_parts([])) == ""
