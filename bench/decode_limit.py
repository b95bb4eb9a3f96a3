"""What one core spends on the workload's per-sample work alone: the floor under a decode actor.

    python -m bench.decode_limit [--quick] [--samples 1000]

For each JPEG decoder available (Pillow, as DataLoader's workers use it,
bench/augment.py; simplejpeg, libjpeg-turbo straight into numpy, as the
image transform uses it where its pixels are Pillow's; and the service's
native crop, transforms/jpeg_crop.py, which decodes only what the crop needs
straight into its planes), one thread decodes the workload's own JPEGs, read
into memory first, takes the random crop and flip and makes the CHW copy
(``crop_flip_chw``; the native crop does all of it in one call): CPU seconds
of that thread (``thread_time``) per 1000 samples, the least of a few passes. ``python -m
bench`` measures it in every round, beside the systems, as the mean over a
few new processes (``measure_in_processes``), and judges the
decode actors' CPU per sample against the fastest decoder's
(bench/targets.py): what is left between the two is what serving costs
(reading rows, seeding generators, collating into the message, Ray).

Why new processes: the cost depends on where in memory a process's copy of
the JPEGs and its buffers happen to lie. In one process it holds pass after
pass; from one process to the next it is one of two costs about 20% apart
(0.21-0.23 or 0.25-0.26 CPU-s here), and a new copy of the same images in the
same process may switch it. A decode actor reads its JPEGs into new memory
all the time and so pays a mix of the two; one process's figure, which the
benchmark took before, was whichever one that process drew.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bench.augment import crop_flip_chw, decode_jpeg
from bench.config import full_config, quick_config
from bench.workload import jpeg_workload, parquet_files

SAMPLES = 1000
PASSES = 3
PROCESSES = 2  # per round: three rounds give six draws of the memory layout (see above)
PROCESS_TIMEOUT_S = 300


def _simplejpeg(data: bytes) -> np.ndarray:
    import simplejpeg

    return simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False)  # type: ignore[no-any-return]


Work = Callable[[bytes, int, np.random.Generator], np.ndarray]  # (JPEG, crop, rng) -> uint8 [3, crop, crop]


def _full_then_crop(decode: Callable[[bytes], np.ndarray]) -> Work:
    return lambda data, crop, rng: crop_flip_chw(decode(data), crop, rng)


def _native_crop(data: bytes, crop: int, rng: np.random.Generator) -> np.ndarray:
    """The service's own path (transforms/jpeg_crop.py): the header read, the same draws as
    crop_flip_chw, and one call that decodes only what the crop needs into its planes."""
    from shardstream.service.transforms import jpeg_crop, jpeg_decode

    width, height = jpeg_decode.jpeg_size(data)[:2]  # type: ignore[index]
    top = int(rng.integers(0, height - crop + 1))
    left = int(rng.integers(0, width - crop + 1))
    out = np.empty((3, crop, crop), np.uint8)
    if not jpeg_crop.crop_into(data, 3, width, height, top, left, rng.random() < 0.5, out):
        raise ValueError("the native crop did not decode a workload JPEG")
    return out


def decoders() -> dict[str, Work]:
    """The decoders installed here, by name: each decodes, crops, flips and makes the CHW copy."""
    found: dict[str, Work] = {"pillow": _full_then_crop(decode_jpeg)}
    if importlib.util.find_spec("simplejpeg") is not None:
        found["simplejpeg"] = _full_then_crop(_simplejpeg)
    if _native_available():
        found["native crop"] = _native_crop
    return found


def _native_available() -> bool:
    try:
        from shardstream.service.transforms import jpeg_crop
    except ImportError:
        return False
    return jpeg_crop.available()


def workload_images(directory: Path, count: int) -> list[bytes]:
    """The first `count` JPEGs of the workload, in file order."""
    images: list[bytes] = []
    for path in parquet_files(directory):
        images += pq.read_table(path, columns=["image"]).column("image").to_pylist()
        if len(images) >= count:
            break
    return images[:count]


def cpu_per_1k(images: Sequence[bytes], work: Work, crop: int, passes: int = PASSES) -> float:
    """CPU-s of this thread per 1000 samples of decode + crop + flip + CHW copy, the least of `passes`."""
    rng = np.random.default_rng(0)
    best = float("inf")
    for _ in range(passes):
        started = time.thread_time()
        for data in images:
            work(data, crop, rng)
        best = min(best, time.thread_time() - started)
    return best * 1000 / max(1, len(images))


def measure(directory: Path, crop: int, samples: int = SAMPLES, passes: int = PASSES) -> dict[str, float]:
    """Decoder name -> its single-core CPU-s per 1000 samples on the workload in `directory`."""
    images = workload_images(directory, samples)
    return {name: cpu_per_1k(images, work, crop, passes) for name, work in decoders().items()}


def measure_in_processes(directory: Path, crop: int, processes: int = PROCESSES, samples: int = SAMPLES,
                         passes: int = PASSES) -> dict[str, float]:
    """`measure` in `processes` new processes, one after another: each decoder's mean."""
    found: dict[str, list[float]] = {}
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-m", "bench.decode_limit", "--json", "--directory", str(directory),
                              "--crop", str(crop), "--samples", str(samples), "--passes", str(passes)],
                             check=True, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S,
                             cwd=Path(__file__).resolve().parent.parent).stdout
        for name, value in json.loads(out.strip().splitlines()[-1]).items():
            found.setdefault(name, []).append(float(value))
    return {name: statistics.fmean(values) for name, values in found.items()}


def summarize(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The rounds' measurements and each decoder's median, as the results document holds them."""
    names = sorted({name for run in runs for name in run})
    return {"runs": list(runs),
            "cpu_per_1k": {name: statistics.median(run[name] for run in runs if name in run) for name in names}}


def fastest(results: dict[str, Any]) -> tuple[str, float] | None:
    """(decoder, CPU-s per 1000 samples) of the fastest decoder in a results document, if measured."""
    limits = (results.get("decode_limit") or {}).get("cpu_per_1k") or {}
    if not limits:
        return None
    name = min(limits, key=limits.__getitem__)
    return name, float(limits[name])


def limit_text(results: dict[str, Any]) -> str:
    limits = (results.get("decode_limit") or {}).get("cpu_per_1k") or {}
    if not limits:
        return ""
    each = ", ".join(f"{name} {value:.3f}" for name, value in sorted(limits.items(), key=lambda kv: kv[1]))
    return (f"one core's decode + crop + flip + CHW copy of the workload's JPEGs (CPU-s per 1000 samples, "
            f"each round the mean of new processes, medians over the rounds): {each}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_limit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick workload")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--passes", type=int, default=PASSES)
    parser.add_argument("--processes", type=int, default=PROCESSES, help="measured in this many new processes")
    parser.add_argument("--directory", type=Path, help=argparse.SUPPRESS)  # a new process's: the workload given
    parser.add_argument("--crop", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # this process's figures
    args = parser.parse_args(argv)
    config = quick_config() if args.quick else full_config()
    directory = args.directory or jpeg_workload(config.workload)
    crop = args.crop or config.crop
    if args.json:
        print(json.dumps(measure(directory, crop, args.samples, args.passes)))
        return 0
    limits = measure_in_processes(directory, crop, args.processes, args.samples, args.passes)
    print(limit_text({"decode_limit": summarize([limits])}))
    return 0


__all__ = ["cpu_per_1k", "decoders", "fastest", "limit_text", "measure", "measure_in_processes", "summarize", "workload_images"]


if __name__ == "__main__":
    sys.exit(main())

