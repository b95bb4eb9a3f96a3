"""One benchmark run: the workload, rounds of every system, the transport microbenchmark, the verdict.

A run is ``repetitions`` rounds; each round measures every system once, one
after another, then the transport microbenchmark. Systems never run side by
side, and each system's servers are started for its measurement and stopped
before the next system starts, so every system has the whole machine (the
same cores) to itself. Interleaving the rounds spreads any slow drift of the
machine (another workload starting, thermal limits) over all systems alike,
instead of penalising whichever system ran last. Every measurement is a fresh
consumer process running a warm-up epoch and a measured epoch; shardstream's
first-epoch rows measure the rest of a first epoch after its first batches,
on a service whose prepared-sample cache starts empty (at the defaults it
is on, so a second epoch would not decode).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from bench.cache_seconds import KEEP_METRIC, REPORT_WAIT_S, VERIFY_METRIC, free_port, seconds_total
from bench.config import CACHE_DIR, BenchConfig
from bench.consumer import ConsumerFailed, background_consumer, run_consumer
from bench.decode_limit import measure_in_processes as measure_decode_limit
from bench.decode_limit import summarize as summarize_decode_limit
from bench.machine import load_average, machine_info
from bench.results import SCHEMA
from bench.services import (
    ServerFailed,
    ServerProcess,
    raw_server,
    shardstream_service,
    tfdata_service,
)
from bench.spec import ConsumerSpec
from bench.stats import foreign_load_cores, summarize
from bench.systems.spdl_pipeline import spdl_available
from bench.systems.tfrecords import tfrecord_dir
from bench.targets import all_passed, evaluate
from bench.workload import describe, jpeg_workload, prime_page_cache, transport_dataset

log = logging.getLogger(__name__)

WARMUP_JOB_BATCHES = 8  # the job that warms a fresh service (and times its cold first batch)
WARMUP_CROP_LESS = 16  # its crop is this much smaller: another prepare spec (_warm_up)
# A first epoch's batches not measured: its start-up (as many as before the warm-up job's crop changed).
COLD_WARMUP_BATCHES = 2 * WARMUP_JOB_BATCHES
PREPARED_CACHE_ROOT = "/dev/shm"  # each service's memory tier of prepared samples, removed after it
RAW_KINDS = ("grpc", "tcp")

NOTES = {
    "shardstream": "`shardstream serve` at its defaults (embedded Ray, {cores} decode actors, the "
                   "prepared-sample cache on and empty) + RemoteLoader(prefetch={prefetch}) in the consumer; "
                   "a first epoch, every sample decoded; the service was started and warmed with another "
                   "job first",
    "dataloader": "map-style Dataset over the Parquet row groups, Pillow decode, numpy crop/flip; "
                  "num_workers={cores}, persistent_workers=True, pin_memory={cuda}",
    "raydata": "local Ray (num_cpus={cores}) in the consumer; read_parquet -> map_batches(batch_size="
               "{batch}, numpy) -> iter_torch_batches(batch_size={batch})",
    "tfdata": "1 dispatcher + 1 worker on localhost; TFRecordDataset -> map(decode_jpeg, random_crop, "
              "random_flip_left_right, transpose) -> batch({batch}) -> distribute(parallel_epochs); "
              "data: TFRecord files exported from the same Parquet rows (from_generator cannot run on "
              "tf.data service workers)",
    "spdl": "SPDL's image pipeline in the consumer: PipelineBuilder, demux_image + decode_packets (FFmpeg) with "
            "the crop and flip in the filter graph, concurrency={cores}, aggregate({batch}), convert_frames, "
            "build(num_threads={cores})",
}


def transport_consumer(config: BenchConfig, dataset: Path, address: str, rows: int, job_name: str,
                       tls_ca: str = "", epochs: int | None = None, shared_memory: bool = False,
                       bulk_socket: bool = True) -> ConsumerSpec:
    """A RemoteLoader consumer of the transport dataset in batches of `rows` rows: a warm-up epoch,
    then the measured ones (`epochs` in all: by default one and the spec's measured epochs). The
    network path unless asked: the transport is what a rank on another host than its decoders pays."""
    spec = config.transport
    return ConsumerSpec(system="shardstream", dataset=str(dataset), address=address, batch_size=rows,
                        transform=False, columns=["x"], prefetch=config.prefetch,
                        epochs=epochs or 1 + spec.shardstream_epochs,
                        warmup_batches=math.ceil(spec.num_rows / rows), job_name=job_name, tls_ca=tls_ca,
                        shared_memory=shared_memory, bulk_socket=bulk_socket)


class Runner:
    def __init__(self, config: BenchConfig, command: str) -> None:
        self.config = config
        self.command = command
        now = datetime.now(timezone.utc)
        self.date = now.isoformat(timespec="seconds")
        self.run_id = now.strftime("%Y%m%d-%H%M%S")
        self.work_dir = CACHE_DIR / "runs" / self.run_id
        self._bar: tqdm[Any] | None = None

    # -- the run --------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.config
        self.work_dir.mkdir(parents=True, exist_ok=True)
        machine = machine_info()  # before building the workload, whose CPU would count as load
        workload_dir = jpeg_workload(cfg.workload)
        prime_page_cache(workload_dir)
        transport_dir = None
        if cfg.run_transport:
            transport_dir = transport_dataset(cfg.transport)
            prime_page_cache(transport_dir)
        if machine["load_average_1m_at_start"] > 0.5:
            log.warning("load average %.2f at start: other processes are busy; numbers will be "
                        "noisy", machine["load_average_1m_at_start"])
        systems = {name: self._new_entry(name) for name in cfg.systems}
        transport = self._new_transport() if transport_dir is not None else {
            "status": "skipped", "reason": "not requested (--no-transport)"}
        decode_limits: list[dict[str, float]] = []
        with tqdm(total=self._planned_runs(), desc="benchmark", unit="run", file=sys.stderr,
                  dynamic_ncols=True) as self._bar:
            for rep in range(cfg.repetitions):
                if "shardstream" in systems:  # the floor under its decode actors, on this round's machine
                    decode_limits.append(measure_decode_limit(workload_dir, cfg.crop))
                for name, entry in systems.items():
                    self._guarded(entry, name, self._runs_per_round(name),
                                  lambda n=name, e=entry, r=rep: self._round(n, e, workload_dir, r))
                if transport_dir is not None:
                    self._guarded(transport, "transport", self._runs_per_round("transport"),
                                  lambda r=rep, d=transport_dir: self._transport_round(d, r, transport))
        self._bar = None
        machine["load_average_1m_at_end"] = load_average()
        for entry in systems.values():
            self._finish(entry)
        if transport.get("status") == "ok":
            for per_size in transport["results"].values():
                for entry in per_size.values():
                    entry["median"] = summarize(entry["runs"])
        results: dict[str, Any] = {
            "schema": SCHEMA,
            "date": self.date,
            "command": self.command,
            "quick": cfg.quick,
            "config": cfg.to_json(),
            "machine": machine,
            "workload": describe(workload_dir, cfg.workload),
            "systems": systems,
            "transport": transport,
        }
        if decode_limits:
            results["decode_limit"] = summarize_decode_limit(decode_limits)
        targets = evaluate(results)
        results["targets"] = [t.to_json() for t in targets]
        results["all_passed"] = all_passed(targets)
        return results

    def _runs_per_round(self, what: str) -> int:
        """Consumer processes one round of a system (or of the transport benchmark) runs."""
        if what == "transport":  # the job that fills the decode node's copy, then each batch size
            return 1 + len(self.config.transport.batch_rows) * (3 + len(RAW_KINDS))
        # shardstream: the warm-up job, the measured one, the same two on the network path, then the
        # job that fills the prepared-sample cache, the one measured with it warm, and a new job's
        # first and warm epochs while another job runs
        return {"shardstream": 8, "tfdata": 2}.get(what, 1)  # tf.data: plain, then .cache() after decode

    def _planned_runs(self) -> int:
        cfg = self.config
        kinds = [*cfg.systems, *(["transport"] if cfg.run_transport else [])]
        return cfg.repetitions * sum(self._runs_per_round(k) for k in kinds)

    def _guarded(self, entry: dict[str, Any], what: str, runs: int,
                 measure: Callable[[], None]) -> None:
        """Run one round of `what` unless it already failed or was skipped; record a failure."""
        done = self._bar.n if self._bar is not None else 0
        if entry["status"] == "ok":
            try:
                measure()
            except (ConsumerFailed, ServerFailed) as exc:
                log.error("%s failed: %s", what, exc)
                entry["status"], entry["reason"] = "failed", str(exc)
        if self._bar is not None:  # keep the bar's total honest when runs were skipped
            self._bar.update(max(0, runs - (self._bar.n - done)))

    def _consume(self, spec: ConsumerSpec, label: str) -> dict[str, Any]:
        if self._bar is not None:
            self._bar.set_postfix_str(label)
        try:
            return run_consumer(spec, self.config.consumer_timeout_s, self.work_dir / f"{label}.log")
        finally:
            if self._bar is not None:
                self._bar.update(1)

    def _measure(self, spec: ConsumerSpec, label: str, server_pid: int | None = None,
                 metrics_port: int | None = None) -> dict[str, Any]:
        """A measured consumer run, repeated while other work on the machine disturbed it."""
        cfg = self.config
        best: dict[str, Any] | None = None
        for attempt in range(1 + cfg.retries):
            result = (self._consume(spec, label) if server_pid is None
                      else self._consume_served(spec, label, server_pid, metrics_port))
            result["foreign_load_cores"] = foreign_load_cores(result)
            result["attempt"] = attempt + 1
            if best is None or result["foreign_load_cores"] < best["foreign_load_cores"]:
                best = result
            if not result["foreign_load_cores"] > cfg.max_foreign_load_cores:
                break
            if attempt < cfg.retries:
                log.warning("%s: other processes used %.2f cores during the measurement: repeating it",
                            label, result["foreign_load_cores"])
                if self._bar is not None:
                    self._bar.total += 1
                    self._bar.refresh()
        assert best is not None
        return best

    def _consume_served(self, spec: ConsumerSpec, label: str, server_pid: int,
                        metrics_port: int | None = None) -> dict[str, Any]:
        """A consumer run, plus the CPU its server's process tree spent meanwhile, per 1000 samples:
        from the loader's construction to its last batch (warm-up and measured epochs), as the
        consumer measures it (meter.py); given the service's metrics port, the part of it the
        decoders spent keeping prepared samples (cache_seconds.py)."""
        spec = dataclasses.replace(spec, server_pid=server_pid)
        kept = seconds_total(metrics_port, KEEP_METRIC) if metrics_port else 0.0
        result = self._consume(spec, label)
        cpu = result.pop("server_cpu_s")
        per_1k = 1000 / max(1, result["samples"])
        result["server_cpu_per_1k"] = sum(cpu.values()) * per_1k
        for role, seconds in cpu.items():
            result[f"server_{role}_cpu_per_1k"] = seconds * per_1k
        if metrics_port:
            time.sleep(REPORT_WAIT_S)  # the decoders' last report reaches the head
            result["cache_keep_cpu_per_1k"] = (seconds_total(metrics_port, KEEP_METRIC) - kept) * per_1k
        return result

    # -- the JPEG workload ------------------------------------------------------------------

    def _new_entry(self, system: str) -> dict[str, Any]:
        cfg = self.config
        notes = NOTES[system].format(cores=cfg.cores, prefetch=cfg.prefetch, batch=cfg.batch_size,
                                     cuda=torch.cuda.is_available())
        entry: dict[str, Any] = {"status": "ok", "reason": "", "notes": notes, "runs": []}
        if system == "tfdata" and importlib.util.find_spec("tensorflow") is None:
            entry["status"] = "skipped"
            entry["reason"] = "TensorFlow is not installed (pip install tensorflow-cpu)"
            log.warning("tf.data service skipped: %s", entry["reason"])
        if system == "spdl" and entry["status"] == "ok" and (missing := spdl_available()):
            entry["status"], entry["reason"] = "skipped", missing
            log.warning("SPDL skipped: %s", missing)
        if system == "tfdata":
            entry["cache_decoded"] = {"runs": []}
        if system == "shardstream":
            entry["service_rounds"] = []
            entry["network_path"] = {"runs": []}
            entry["prepared_cache"] = {"runs": []}
            entry["second_job_first"] = {"runs": []}
            entry["second_job_warm"] = {"runs": []}
        return entry

    @staticmethod
    def _finish(entry: dict[str, Any]) -> None:
        """Medians of a system that ran every round (a failed one keeps its runs, for the record)."""
        if entry["status"] != "ok":
            return
        entry["median"] = summarize(entry["runs"])
        for variant in ("network_path", "prepared_cache", "second_job_first", "second_job_warm",
                        "cache_decoded"):
            if entry.get(variant, {}).get("runs"):
                entry[variant]["median"] = summarize(entry[variant]["runs"])
        if "service_rounds" in entry:
            entry["service"] = summarize(entry.pop("service_rounds"))

    def _workload_spec(self, system: str, dataset: Path, address: str = "", job: str = "",
                       ) -> ConsumerSpec:
        cfg = self.config
        batches_per_epoch = math.ceil(cfg.workload.num_samples / cfg.batch_size)
        return ConsumerSpec(system=system, dataset=str(dataset), address=address,
                            batch_size=cfg.batch_size, crop=cfg.crop, workers=cfg.cores,
                            prefetch=cfg.prefetch, epochs=2, warmup_batches=batches_per_epoch,
                            job_name=job, step_ms=cfg.step_ms, shuffle=cfg.shuffle)

    def _round(self, system: str, entry: dict[str, Any], workload_dir: Path, rep: int) -> None:
        label = f"{system}-rep{rep}"
        if system == "shardstream":
            self._shardstream_round(entry, workload_dir, rep)
        elif system == "tfdata":
            with tfdata_service(workload_dir, self.work_dir) as service:
                entry["runs"].append(self._measure(self._workload_spec(
                    "tfdata", tfrecord_dir(workload_dir), service.announced), label, service.pid))
                # Its own answer to decoding once: .cache() after the decode (warm-up epoch fills it).
                cached = self._workload_spec("tfdata", tfrecord_dir(workload_dir), service.announced)
                cached.cache_decoded = True
                entry["cache_decoded"]["runs"].append(self._measure(cached, f"{label}-cached", service.pid))
        else:
            entry["runs"].append(self._measure(self._workload_spec(system, workload_dir), label))

    @contextlib.contextmanager
    def _service(self, rep: int, purpose: str, **settings: str) -> Iterator[ServerProcess]:
        """`shardstream serve` at its defaults, the prepared-sample cache included (on, each tier sized
        by the node), its two tiers in directories of their own that start empty and are removed after."""
        memory = Path(PREPARED_CACHE_ROOT) / f"shardstream-bench-{self.run_id}-{purpose}{rep}"
        disk = self.work_dir / f"prepared-{purpose}{rep}"
        settings = {"prepared_cache_memory_dir": str(memory), "prepared_cache_disk_dir": str(disk), **settings}
        try:
            with shardstream_service(self.config.cores, self.work_dir, log_name=f"service-{purpose}.log",
                                     config=settings) as service:
                yield service
        finally:
            shutil.rmtree(memory, ignore_errors=True)
            shutil.rmtree(disk, ignore_errors=True)

    def _warm_up(self, workload_dir: Path, address: str, job: str, label: str) -> dict[str, Any]:
        """A short job that warms a fresh service (its first batch is the service's cold one). Its
        crop is another size, so the samples it prepares are another prepare spec's: with the same
        spec, the measured job's first batches found them prepared, and the hit rate that gave its
        write budget a larger share (write_budget.py) made the "first epoch" keep 14% of the actors'
        time, not 5%."""
        warm = self._workload_spec("shardstream", workload_dir, address, f"bench-{self.run_id}-{job}")
        warm.epochs, warm.warmup_batches, warm.max_batches = 1, 1, WARMUP_JOB_BATCHES
        warm.crop = self.config.crop - WARMUP_CROP_LESS
        return self._consume(warm, label)

    def _cold_epoch(self, workload_dir: Path, address: str, job: str) -> ConsumerSpec:
        """A job's first epoch, every sample read and decoded (and kept in the prepared-sample cache,
        as the defaults do): measured after the batches the service's warm-up job already prepared."""
        spec = self._workload_spec("shardstream", workload_dir, address, job)
        spec.epochs, spec.warmup_batches = 1, COLD_WARMUP_BATCHES
        return spec

    def _shardstream_round(self, entry: dict[str, Any], workload_dir: Path, rep: int) -> None:
        """First epochs, each on a fresh service with an empty cache: through shared memory (the
        main row), then on the network path."""
        metrics_port = free_port()  # the decoders' time keeping samples, scraped around the measured run
        with self._service(rep, "cold", metrics_port=str(metrics_port)) as service:
            address = f"127.0.0.1:{service.announced}"
            cold = self._warm_up(workload_dir, address, f"warmup{rep}", f"shardstream-warmup-rep{rep}")
            entry["runs"].append(self._measure(self._cold_epoch(
                workload_dir, address, f"bench-{self.run_id}-rep{rep}"), f"shardstream-rep{rep}", service.pid,
                metrics_port))
        entry["service_rounds"].append({"start_s": service.start_s, "ttfb_cold_s": cold["ttfb_s"],
                                        "num_decoders": self.config.cores})
        # The same on the network path: what the consumer and decoders pay when they are on
        # different hosts.
        with self._service(rep, "network") as service:
            address = f"127.0.0.1:{service.announced}"
            self._warm_up(workload_dir, address, f"netwarmup{rep}", f"shardstream-network-warmup-rep{rep}")
            network = self._cold_epoch(workload_dir, address, f"bench-{self.run_id}-net{rep}")
            network.shared_memory = False
            entry["network_path"]["runs"].append(self._measure(network, f"shardstream-network-rep{rep}",
                                                               service.pid))
        self._prepared_cache_round(entry, workload_dir, rep)

    def _prepared_cache_round(self, entry: dict[str, Any], workload_dir: Path, rep: int) -> None:
        """Epochs after the first, at the defaults: one epoch of another job fills the prepared-sample
        cache, then the measured job (its warm-up epoch and measured epoch both warm)."""
        metrics_port = free_port()  # the decoders' verify time, scraped around the measured run
        with self._service(rep, "prepared", metrics_port=str(metrics_port)) as service:
            address = f"127.0.0.1:{service.announced}"
            fill = self._workload_spec("shardstream", workload_dir, address, f"bench-{self.run_id}-fill{rep}")
            fill.epochs, fill.warmup_batches = 1, 1
            self._consume(fill, f"shardstream-prepared-fill-rep{rep}")
            verified = seconds_total(metrics_port, VERIFY_METRIC)
            run = self._measure(self._workload_spec(
                "shardstream", workload_dir, address, f"bench-{self.run_id}-prepared{rep}"),
                f"shardstream-prepared-rep{rep}", service.pid)
            # Reports reach the head once a reconcile interval: wait for the last one.
            time.sleep(REPORT_WAIT_S)
            run["cache_verify_cpu_per_1k"] = ((seconds_total(metrics_port, VERIFY_METRIC) - verified) * 1000
                                              / max(1, run["samples"]))
            entry["prepared_cache"]["runs"].append(run)
            self._second_job(entry, workload_dir, address, rep)

    def _second_job(self, entry: dict[str, Any], workload_dir: Path, address: str, rep: int) -> None:
        """A sweep's next job: a new job with the same dataset and prepare spec starts while another
        runs. Its first epoch, then (another new job) a warm epoch, both beside the running job, so
        the two share the decoders alike and differ only in what the cache did for the first epoch.
        Not repeated for other load on the machine: the running job is that load."""
        running = self._workload_spec("shardstream", workload_dir, address, f"bench-{self.run_id}-running{rep}")
        running.epochs, running.warmup_batches = 1000, 1  # stopped when the two are measured
        with background_consumer(running, self.work_dir / f"shardstream-running-rep{rep}.log"):
            first = self._workload_spec("shardstream", workload_dir, address, f"bench-{self.run_id}-first{rep}")
            first.epochs, first.warmup_batches = 1, 1
            entry["second_job_first"]["runs"].append(self._consume(first, f"shardstream-second-first-rep{rep}"))
            entry["second_job_warm"]["runs"].append(self._consume(self._workload_spec(
                "shardstream", workload_dir, address, f"bench-{self.run_id}-second-warm{rep}"),
                f"shardstream-second-warm-rep{rep}"))

    # -- the transport microbenchmark ---------------------------------------------------------

    def _new_transport(self) -> dict[str, Any]:
        spec = self.config.transport
        kinds = ["shardstream", "shardstream_grpc", "shardstream_shm", *(f"{k}_raw" for k in RAW_KINDS)]
        return {
            "status": "ok",
            "reason": "",
            "batch_rows": list(spec.batch_rows),
            "decoders": spec.decoders,
            "dataset": {"name": spec.name, "rows": spec.num_rows, "row_bytes": spec.row_bytes,
                        "bytes": spec.num_rows * spec.row_bytes},
            "notes": (f"shardstream: Parquet fixed_size_list<uint8> rows, no transform (read + frame), "
                      f"served by {spec.decoders} decode actors to one rank; a job reads the dataset into "
                      f"the decode node's copy first, then the measured job runs one warm-up epoch and "
                      f"{spec.shardstream_epochs} measured epochs into RemoteLoader tensors (sender CPU: "
                      "the service's processes over that job), on the network path (loopback: bytes on bulk "
                      "sockets, and on the gRPC stream as shardstream_grpc) and through shared memory "
                      "(shardstream_shm); raw gRPC: bytes messages, no protobuf, no "
                      "copy; raw TCP: sendall -> recv_into a reused buffer; each in its own server and "
                      "consumer process on loopback; GB/s = 1e9 bytes/s"),
            "results": {kind: {str(rows): {"runs": []} for rows in spec.batch_rows} for kind in kinds},
        }

    def _transport_round(self, dataset: Path, rep: int, transport: dict[str, Any]) -> None:
        cfg, spec = self.config, self.config.transport
        results = transport["results"]
        with shardstream_service(spec.decoders, self.work_dir, log_name="service-transport.log") as service:
            address = f"127.0.0.1:{service.announced}"
            # Storage is read once per node (the local copy): a job of its own pays for that, so the
            # measured job's sender CPU is serving alone, as in any epoch after a dataset's first.
            self._consume(transport_consumer(cfg, dataset, address, spec.batch_rows[0],
                                             f"bench-{self.run_id}-transport-fill-{rep}", epochs=1),
                          f"transport-fill-rep{rep}")
            for rows in spec.batch_rows:
                results["shardstream"][str(rows)]["runs"].append(self._measure(transport_consumer(
                    cfg, dataset, address, rows, f"bench-{self.run_id}-transport-{rows}-{rep}"),
                    f"transport-shardstream-{rows}rows-rep{rep}", service.pid))
                results["shardstream_grpc"][str(rows)]["runs"].append(self._measure(transport_consumer(
                    cfg, dataset, address, rows, f"bench-{self.run_id}-transport-grpc-{rows}-{rep}",
                    bulk_socket=False), f"transport-shardstream-grpc-{rows}rows-rep{rep}", service.pid))
                results["shardstream_shm"][str(rows)]["runs"].append(self._measure(transport_consumer(
                    cfg, dataset, address, rows, f"bench-{self.run_id}-transport-shm-{rows}-{rep}",
                    shared_memory=True), f"transport-shardstream-shm-{rows}rows-rep{rep}", service.pid))
        for kind in RAW_KINDS:
            with raw_server(kind, self.work_dir) as server:
                for rows in spec.batch_rows:
                    size = spec.batch_bytes(rows)
                    results[f"{kind}_raw"][str(rows)]["runs"].append(self._measure(ConsumerSpec(
                        system=f"{kind}_raw", address=server.announced, batch_size=rows, message_bytes=size,
                        message_count=max(2, spec.raw_bytes // size), row_bytes=spec.row_bytes),
                        f"transport-{kind}-{rows}rows-rep{rep}", server.pid))


__all__ = ["Runner"]
