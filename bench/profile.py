"""Where shardstream's time goes: py-spy on the service (and its decode actors) and on the consumer.

    python -m bench.profile [--quick] [--seconds 20] [--transport [MB]]

Starts a service, starts a consumer streaming the JPEG workload (or, with
``--transport``, the transport microbenchmark's pre-decoded batches, of MB
megabytes when given: 9.6 by default, from its two decode actors),
then samples both with ``py-spy record --subprocesses`` (Python frames of the
``serve`` process and of every Ray worker under it, i.e. the decode actors)
and prints, per process, the share of samples and the functions that take
them: "self" (the innermost frame, where the CPU is) and "inclusive" (any
frame on the stack); for the JPEG workload, the decode actors' decode threads
by part of the work (bench/decode_parts.py). py-spy counts threads blocked in Ray's or gRPC's C code
as busy and cannot see native threads, so the report ends with each process's
CPU by thread over the same window, from /proc (bench/thread_cpu.py). Needs py-spy (``pip install py-spy``) and permission to
ptrace the processes (root, or CAP_SYS_PTRACE).
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil

from bench.config import CACHE_DIR, RESULTS_DIR, full_config, quick_config
from bench.consumer import child_env
from bench.decode_parts import decode_parts, format_parts
from bench.services import shardstream_service
from bench.spec import ConsumerSpec
from bench.thread_cpu import busiest_threads, format_threads, python_thread_names, thread_times
from bench.workload import jpeg_workload, prime_page_cache, transport_dataset

log = logging.getLogger(__name__)

_PROCESS = re.compile(r'^process (\d+):"(.*)"$')
_LINE_NUMBER = re.compile(r":\d+\)$")
TOP = 12


@dataclass
class ProcessProfile:
    name: str
    samples: int = 0
    self_time: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)


def process_name(command: str) -> str:
    """A short name for a sampled process: Ray's process title, else the module or script run."""
    if command.startswith("ray::"):
        return command.split()[0]
    parts = command.split()
    if "-m" in parts[:-1]:
        return parts[parts.index("-m") + 1]
    scripts = [p for p in parts if p.endswith(".py")]
    if scripts:
        return Path(scripts[0]).name
    return Path(parts[0]).name if parts else command


def aggregate(lines: Iterable[str]) -> dict[str, ProcessProfile]:
    """py-spy ``--format raw`` lines (``frame;frame;... COUNT``) -> per-process profiles."""
    profiles: dict[str, ProcessProfile] = {}
    for line in lines:
        line = line.rstrip("\n")
        if not line or " " not in line:
            continue
        stack_text, count_text = line.rsplit(" ", 1)
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = stack_text.split(";")
        name, functions = "?", []
        for frame in frames:
            match = _PROCESS.match(frame)
            if match:
                name = process_name(match.group(2))
            elif not frame.startswith("thread ("):
                functions.append(_LINE_NUMBER.sub(")", frame))
        profile = profiles.setdefault(name, ProcessProfile(name))
        profile.samples += count
        if functions:
            profile.self_time[functions[-1]] += count
        for function in set(functions):
            profile.inclusive[function] += count
    return profiles


def format_profiles(profiles: dict[str, ProcessProfile], seconds: float, rate: int,
                    top: int = TOP) -> str:
    lines = []
    for profile in sorted(profiles.values(), key=lambda p: -p.samples):
        busy = profile.samples / (seconds * rate)
        lines.append(f"\n== {profile.name}: {profile.samples} samples, ~{busy:.2f} cores busy "
                     "(sum over its threads)")
        for title, counter in (("self", profile.self_time), ("inclusive", profile.inclusive)):
            lines.append(f"  top {title}:")
            for function, count in counter.most_common(top):
                lines.append(f"    {100 * count / profile.samples:5.1f}%  {function}")
    return "\n".join(lines)


def py_spy_path() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def process_tree(pids: Sequence[int]) -> dict[int, str]:
    """pid -> short name, for these processes and all their descendants."""
    names = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                names[process.pid] = process_name(" ".join(process.cmdline()) or process.name())
        except psutil.Error:
            continue
    return names


def record(pids: Sequence[int], seconds: float, rate: int, out_dir: Path) -> list[Path]:
    """One ``py-spy record`` per pid, concurrently; returns the raw output files."""
    py_spy = py_spy_path()
    outputs, procs = [], []
    for pid in pids:
        out = out_dir / f"py-spy-{pid}.txt"
        procs.append(subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
             "--duration", str(int(seconds)), "--rate", str(rate), "--format", "raw",
             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        outputs.append(out)
    for proc in procs:
        _, err = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"py-spy failed: {err.decode(errors='replace').strip()}")
    return outputs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick workload")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to sample")
    parser.add_argument("--rate", type=int, default=50, help="samples per second per process")
    parser.add_argument("--transport", type=float, metavar="MB", nargs="?", const=0.0,
                        help="profile the transport microbenchmark's pre-decoded batches instead of the JPEG "
                             "workload (of MB megabytes; default its own, 9.6)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = quick_config() if args.quick else full_config()
    transport = args.transport is not None
    rows = config.transport.batch_rows[0]
    if args.transport:
        rows = max(1, round(args.transport * 1e6 / config.transport.row_bytes))
    workload = transport_dataset(config.transport) if transport else jpeg_workload(config.workload)
    prime_page_cache(workload)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    work_dir = CACHE_DIR / "runs" / f"profile-{stamp}"
    work_dir.mkdir(parents=True, exist_ok=True)

    decoders = config.transport.decoders if transport else config.cores
    # The decode path, every epoch: the prepared-sample cache (on by default) would skip it after the first.
    with shardstream_service(decoders, work_dir, config={"prepared_cache": "false"}) as service, \
            tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        spec = ConsumerSpec("shardstream", dataset=str(workload),
                            address=f"127.0.0.1:{service.announced}", batch_size=config.batch_size,
                            crop=config.crop, prefetch=config.prefetch, epochs=1000,
                            job_name=f"bench-profile-{stamp}")
        if transport:
            spec.batch_size = rows
            spec.transform, spec.columns, spec.shared_memory = False, ["x"], False
        spec_path = Path(tmp) / "spec.json"
        spec.save(spec_path)
        with open(work_dir / "consumer.log", "wb") as consumer_log:
            consumer = subprocess.Popen(
                [sys.executable, "-m", "bench.consumer", str(spec_path), str(Path(tmp) / "out.json")],
                stdout=consumer_log, stderr=subprocess.STDOUT, env=child_env())
        try:
            time.sleep(8.0)  # past connecting and the first batches
            if consumer.poll() is not None:
                raise RuntimeError(f"the consumer exited early; see {work_dir / 'consumer.log'}")
            processes = process_tree([service.pid, consumer.pid])
            threads_before = thread_times(processes)
            outputs = record([service.pid, consumer.pid], args.seconds, args.rate, Path(tmp))
            threads = busiest_threads(threads_before, thread_times(processes),
                                      {pid: python_thread_names(pid, py_spy_path()) for pid in processes})
            raw_lines = [line for out in outputs for line in out.read_text().splitlines()]
        finally:
            consumer.terminate()
            consumer.wait(timeout=30)
    profiles = aggregate(raw_lines)
    batch_mb = config.transport.batch_bytes(rows) / 1e6
    what = (f"pre-decoded {batch_mb:.1f} MB batches (no transform) from {decoders} decode actors" if transport
            else "the JPEG workload (decode + crop + flip)")
    text = (f"py-spy, {args.seconds:.0f} s at {args.rate} Hz, {stamp}: the shardstream service "
            f"(serve process + decode actors) and a RemoteLoader consumer streaming {what}"
            + format_profiles(profiles, args.seconds, args.rate)
            + ("" if transport else format_parts(decode_parts(raw_lines)))
            + format_threads(threads, processes, args.seconds))
    args.out.mkdir(parents=True, exist_ok=True)
    kind = f"transport{batch_mb:.1f}MB-" if transport else ""
    path = args.out / f"{'quick-' if args.quick else ''}profile-{kind}{stamp}.txt"
    path.write_text(text + "\n")
    print(text)
    print(f"\nprofile: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
