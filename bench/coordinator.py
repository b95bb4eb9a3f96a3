"""What the coordinator (`shardstream serve`) spends per rank on the direct data plane.

It carries no batches: a rank's only calls are OpenJob and ListDecoders when
it starts or reconnects and, every DECODERS_REFRESH_S while it iterates,
ListDecoders again to learn of decoders that joined. This starts a service,
opens one job, and has simulated ranks (threads, each with its own channel)
call ListDecoders back to back for a while, measuring the `serve` process's own CPU (psutil: its threads only,
not the decode actors or Ray's daemons). From that: the CPU per call, and how
many ranks one core of the coordinator keeps refreshed.

Per step the coordinator does nothing: each decode actor reports, once a
second, what it sent (batches, bytes, each rank's furthest step), and the
coordinator books the report. Two costs of that are measured: the whole of it
per actor (the `serve` process's CPU with 1 and with 8 idle decode actors,
over the same time: Ray's call to the actor, the wait and the get included),
and booking a report in this process on the same code
(`JobRegistry.record_served`) for reports naming 1, 100 and 1,000 ranks.

    .venv/bin/python -m bench.coordinator [--ranks 64] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from bench.services import shardstream_service
from shardstream.client.distributed import default_job_name
from shardstream.proto import DECODERS_REFRESH_S, PROTOCOL_VERSION
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.control.spec import read_spec
from shardstream.service.node_messages import JobServed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoordinatorCost:
    ranks: int
    seconds: float
    calls: int
    serve_cpu_s: float

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.serve_cpu_s / max(1, self.calls)

    @property
    def ranks_per_core(self) -> float:
        """Ranks refreshing every DECODERS_REFRESH_S that one core of the coordinator serves."""
        return DECODERS_REFRESH_S / (self.cpu_ms_per_call / 1000) if self.calls else 0.0


def measure(address: str, serve_pid: int, dataset: str, ranks: int, seconds: float) -> CoordinatorCost:
    world = max(ranks, 1)
    spec = pb.JobSpec(dataset=[dataset], batch_size=4, shuffle=True, world_size=world,
                      transform=pb.TransformSpec(args_json="{}"))
    name = default_job_name(0, world)

    def request(rank: int) -> pb.OpenJobRequest:
        return pb.OpenJobRequest(protocol_version=PROTOCOL_VERSION, job_name=name, spec=spec, rank=rank)

    with grpc.insecure_channel(address) as channel:  # the job exists before the clock starts
        job_id = pb_grpc.LoaderStub(channel).OpenJob(request(0), timeout=60).job_id
    listing = pb.ListDecodersRequest(protocol_version=PROTOCOL_VERSION, job_id=job_id)
    counts = [0] * ranks
    stop = threading.Event()

    def rank_loop(rank: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.LoaderStub(channel)
            stub.OpenJob(request(rank), timeout=60)  # each rank joins, then refreshes
            while not stop.is_set():
                stub.ListDecoders(listing, timeout=60)
                counts[rank] += 1

    serve = psutil.Process(serve_pid)
    threads = [threading.Thread(target=rank_loop, args=(r,), daemon=True) for r in range(ranks)]
    before = sum(serve.cpu_times()[:2])
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    elapsed = time.monotonic() - started
    return CoordinatorCost(ranks, elapsed, sum(counts), sum(serve.cpu_times()[:2]) - before)


def report_cost_us(dataset: str, ranks: int, repeats: int = 2000) -> float:
    """CPU microseconds to book one decode actor's report naming `ranks` ranks' positions."""
    spec = read_spec(pb.JobSpec(dataset=[dataset], batch_size=4, world_size=max(ranks, 1),
                                         transform=pb.TransformSpec(args_json="{}")))
    registry = JobRegistry(())
    job = registry.open("reports", spec, 0)
    started = time.process_time()
    for i in range(repeats):
        served = JobServed(batches=ranks, samples=4 * ranks, nbytes=ranks << 20,
                           positions={r: (0, i) for r in range(ranks)})
        registry.record_served(job.job_id, served)
    return 1e6 * (time.process_time() - started) / repeats


def serve_cpu_over(pid: int, seconds: float) -> float:
    serve = psutil.Process(pid)
    before = sum(serve.cpu_times()[:2])
    time.sleep(seconds)
    return sum(serve.cpu_times()[:2]) - before


def report_cost_ms(work: Path, seconds: float, actors: tuple[int, int] = (1, 8)) -> float:
    """CPU-ms of the `serve` process per actor report, from its idle CPU with few and many actors."""
    cpu = []
    for count in actors:
        with shardstream_service(count, work, log_name=f"service-{count}.log",
                                 config={"decoder_cpus": "0.1"}) as service:
            time.sleep(5.0)  # past start-up: the actors are listed and reporting
            cpu.append(serve_cpu_over(service.pid, seconds))
    reports = (actors[1] - actors[0]) * seconds  # one report per actor per second
    return 1000 * max(cpu[1] - cpu[0], 0.0) / reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coordinator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64, help="simulated ranks calling ListDecoders")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default="bench/results", help="directory for the JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="shardstream-coordinator-") as work:
        data = Path(work) / "data"  # small: indexing it is not what is measured
        data.mkdir()
        pq.write_table(pa.table({"idx": pa.array(range(1024), pa.int64())}), data / "part-00000.parquet")
        with shardstream_service(1, Path(work), config={"decoder_cpus": "0.5"}) as service:
            cost = measure(f"127.0.0.1:{service.announced}", service.pid, str(data), args.ranks, args.seconds)
        reports = {ranks: report_cost_us(str(data), ranks) for ranks in (1, 100, 1000)}
        per_actor_ms = report_cost_ms(Path(work), args.seconds)
    figures = {**asdict(cost), "cpu_ms_per_call": cost.cpu_ms_per_call, "ranks_per_core": cost.ranks_per_core,
               "refresh_s": DECODERS_REFRESH_S, "report_cpu_us_by_ranks": reports,
               "serve_cpu_ms_per_actor_report": per_actor_ms}
    sys.stdout.write(
        f"{cost.ranks} simulated ranks, {cost.calls:,} ListDecoders calls in {cost.seconds:.1f} s: "
        f"`serve` spent {cost.serve_cpu_s:.2f} CPU-s, {cost.cpu_ms_per_call:.3f} CPU-ms per call; "
        f"one core keeps {cost.ranks_per_core:,.0f} ranks refreshed every {DECODERS_REFRESH_S:.0f} s\n")
    sys.stdout.write("booking a decode actor's once-a-second report: " + ", ".join(
        f"{us:,.0f} CPU-us naming {ranks:,} rank(s)" for ranks, us in reports.items()) + "\n")
    sys.stdout.write(f"`serve` per decode actor (its once-a-second report, Ray's call included): "
                     f"{per_actor_ms:.2f} CPU-ms per report; one core keeps "
                     f"{1000 / max(per_actor_ms, 1e-9):,.0f} actors reporting\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"coordinator-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    sys.stdout.write(f"results: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
