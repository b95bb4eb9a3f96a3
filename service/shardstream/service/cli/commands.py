"""`shardstream` command line: serve, status, validate."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from shardstream.service.config import ServiceConfig
from shardstream.service.settings import add_flags, from_flags

if TYPE_CHECKING:
    from shardstream.client.auth import Token
    from shardstream.client.tls import TLS

log = logging.getLogger("shardstream")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardstream", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=("text", "json"),
                        help="text, or one JSON object per line (default: $SHARDSTREAM_LOG_FORMAT, else text)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the service (embedded local Ray unless --ray-address)")
    add_flags(serve, ServiceConfig)  # one flag per setting (settings.py)
    serve.add_argument("--port-file", help="write the bound port here once serving")

    status = commands.add_parser("status", help="show decoders and jobs of a running service")
    status.add_argument("address", help="host:port of the service")
    status.add_argument("--tls", action="store_true", help="the service speaks TLS (system roots unless --tls-ca)")
    status.add_argument("--tls-ca", metavar="PEM", help="CA that signed the service's certificate (implies --tls)")
    status.add_argument("--tls-cert", metavar="PEM", help="this client's certificate, for mutual TLS")
    status.add_argument("--tls-key", metavar="PEM", help="this client's key, for mutual TLS")
    status.add_argument("--tls-server-name", metavar="NAME",
                        help="the name on the service's certificate, if the address names it otherwise")
    status.add_argument("--token-file", metavar="FILE",
                        help="a file holding the token for a service that asks for one (read at each call; "
                        "default: $SHARDSTREAM_TOKEN, else the file $SHARDSTREAM_TOKEN_FILE names). With a "
                        "token, the service lists its identity's jobs (an admin identity's: all)")
    status.add_argument("--json", action="store_true", help="print GetStatus as JSON (one object per line)")
    status.add_argument("--watch", type=float, metavar="SECONDS",
                        help="refresh the status (with each job's ranks: position, rate, data stall, lag) "
                        "every SECONDS until interrupted, in place on a terminal")
    status.add_argument("--iterations", type=int, help="with --watch: stop after this many")

    validate = commands.add_parser("validate", help="check a dataset opens and decodes, in this process, "
                                   "before a job (no service)")
    validate.add_argument("dataset", nargs="+", help="files, directories or globs (any fsspec URL)")
    validate.add_argument("--format", default="", help="parquet, tokens, webdataset, imagefolder, manifest "
                          "(default: from the names)")
    validate.add_argument("--format-arg", action="append", default=[], metavar="KEY=VALUE",
                          help="a format option, VALUE as JSON or else a string: seq_len=1024 (repeatable)")
    validate.add_argument("--transform", default="", help="image, or package.module:factory")
    validate.add_argument("--transform-arg", action="append", default=[], metavar="KEY=JSON",
                          help="a transform argument: size=224, flip=false (repeatable)")
    validate.add_argument("--columns", default="", metavar="A,B", help="the columns a job would select")
    validate.add_argument("--collate", default="", help="pad, or package.module:function (as the job's collate=)")
    validate.add_argument("--pad-value", type=float, default=0.0, help="what --collate pad fills with")
    validate.add_argument("--nulls", default="", choices=("", "refuse", "mask"),
                          help="as the job's nulls=: refuse (default) or mask (docs/formats.md)")
    how_many = validate.add_mutually_exclusive_group()
    how_many.add_argument("--sample", type=int, default=64, metavar="K",
                          help="decode K samples spread over the dataset (default 64)")
    how_many.add_argument("--full", action="store_true", help="read every unit, decode every sample")
    validate.add_argument("--workers", type=int, metavar="N", help="decoding threads (default: one per core)")
    validate.add_argument("--json", action="store_true", help="print one JSON object")

    args = parser.parse_args(argv)
    from shardstream.service.logs import configure_logging, log_format

    try:
        json_logs = log_format(args.log_format) == "json"
    except ValueError as exc:  # SHARDSTREAM_LOG_FORMAT (the flag's choices are checked already)
        parser.error(str(exc))
    configure_logging(args.log_level, json_logs)
    if args.command == "serve":
        return _serve(args)
    if args.command == "validate":
        return _validate(args, validate)
    tls = None
    if args.tls or args.tls_ca or args.tls_cert or args.tls_server_name:
        from shardstream.client.tls import TLS

        tls = TLS(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key,
                  server_name=args.tls_server_name)
    from shardstream.client.auth import Token

    return _status(args.address, tls, args.json, args.watch, args.iterations,
                   Token.resolve(token_file=args.token_file))


def _serve(args: argparse.Namespace) -> int:
    try:
        from shardstream.service.control.ray_auth import RayJoinError
        from shardstream.service.control.ray_runtime import connect_ray
        from shardstream.service.control.server import create_server
    except ModuleNotFoundError as exc:  # a training-side install: the client only
        log.error("`shardstream serve` needs the service's packages (%s is missing): "
                  "pip install 'shardstream[service]'", exc.name)
        return 2

    config = ServiceConfig.load(from_flags(args, ServiceConfig))
    try:
        connect_ray(config)
    except RayJoinError as exc:
        log.error("%s", exc)
        return 1
    service, port = create_server(config)
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(f"{port}\n")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down")
    service.stop(grace=5.0)
    return 0


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`shardstream validate`: 0 when the dataset is fine, 1 when anything is wrong (validate.py)."""
    import os

    try:
        from shardstream.service.cli import validate
    except ModuleNotFoundError as exc:  # a training-side install: the client only
        log.error("`shardstream validate` needs the service's packages (%s is missing): "
                  "pip install 'shardstream[service]'", exc.name)
        return 2
    try:
        format_args = dict(validate.parse_option(text) for text in args.format_arg)
        transform_args = dict(validate.parse_option(text) for text in args.transform_arg)
    except ValueError as exc:
        parser.error(str(exc))
    for name in ("sample", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if os.getcwd() not in sys.path:  # the user's own transform module, run from their project
        sys.path.append(os.getcwd())
    try:
        report = validate.validate(
            tuple(args.dataset), format=args.format, format_args=format_args, transform=args.transform,
            transform_args=transform_args, columns=tuple(c.strip() for c in args.columns.split(",") if c.strip()),
            collate=args.collate, pad_value=args.pad_value, nulls="" if args.nulls == "refuse" else args.nulls,
            sample=None if args.full else args.sample, workers=args.workers)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    sys.stdout.write(validate.report_json(report) + "\n" if args.json else validate.report_text(report))
    return 0 if report.ok else 1


def _status(address: str, tls: TLS | None, as_json: bool = False, watch_s: float | None = None,
            iterations: int | None = None, token: Token | None = None) -> int:
    """Print the service's status once, or every `watch_s` seconds (a screen a person reads; with
    --json, one JSON object per line for scripts)."""
    import time

    from google.protobuf.json_format import MessageToJson

    from shardstream.client.auth import call_metadata
    from shardstream.client.tls import open_channel
    from shardstream.proto.errors import ShardstreamError, from_rpc_error
    from shardstream.proto.v1 import loader_pb2 as pb
    from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc

    shown = 0
    with open_channel(address, tls) as channel:
        stub = pb_grpc.LoaderStub(channel)
        while True:
            try:
                status = stub.GetStatus(pb.GetStatusRequest(), timeout=10, metadata=call_metadata(token))
            except grpc.RpcError as exc:
                log.error("%s: %s", address, from_rpc_error(exc))
                return 1
            except ShardstreamError as exc:  # an unreadable token file
                log.error("%s: %s", address, exc)
                return 1
            if as_json:
                # every field, zeros too (rank 0, epoch 0), so a script need not know proto3's defaults
                text = MessageToJson(status, preserving_proto_field_name=True, indent=None,
                                     always_print_fields_with_no_presence=True) + "\n"
            else:
                text = _status_text(address, status)
                if watch_s is not None and sys.stdout.isatty():
                    text = _repainted(time.strftime("%H:%M:%S ") + text, first=shown == 0)
            sys.stdout.write(text)
            sys.stdout.flush()
            shown += 1
            if watch_s is None or (iterations is not None and shown >= iterations):
                return 0
            try:
                time.sleep(watch_s)
            except KeyboardInterrupt:
                return 0


def _repainted(text: str, first: bool) -> str:
    """`text` drawn over the last screen from its top-left corner: a cleared screen the first time,
    then each line overwritten and cleared to its end and the rest below cleared, so a watched
    table changes in place without flicker."""
    return ("\x1b[H\x1b[2J" if first else "\x1b[H") + text.replace("\n", "\x1b[K\n") + "\x1b[J"


def _status_text(address: str, status: Any) -> str:
    nodes = {d.node_id for d in status.decoder_status}
    lines = [f"service {address}: protocol v{status.protocol_version}, {status.decoders} decoder(s) "
             f"on {len(nodes)} node(s), up {status.uptime_seconds:.0f} s, {len(status.jobs)} job(s)"]
    lines.extend(_scaling_lines(status.scaling))
    reads = {r.node_id: r for r in status.node_reads}
    for node in sorted(nodes | set(reads)):
        here = [d for d in status.decoder_status if d.node_id == node]
        lines.append(f"  node {node[:12]}: {len(here)} decoder(s), {sum(d.in_flight for d in here)} "
                     f"step(s) queued, {sum(d.decoded for d in here)} sent")
        if node in reads:
            lines.append("    " + _reads_line(reads[node]))
            lines.extend(_cache_sizing_lines(reads[node]))
    for job in status.jobs:
        lines.append(
            f"  job {job.job_id} {job.job_name!r}{f' (identity {job.owner})' if job.owner else ''}: "
            f"{job.num_samples} samples, world {job.world_size}, "
            f"{job.batches_per_rank} batches/rank; {job.samples_per_second:.0f} samples/s now; "
            f"served {job.batches_served} batches, "
            f"{job.bytes_served / 1e6:.1f} MB, {job.samples_replaced} replaced; "
            f"{job.active_streams} active stream(s)"
        )
        if job.dataset_fingerprint:
            lines.append(f"    {job.format or 'parquet'} dataset {job.dataset_fingerprint}, pipeline {job.pipeline_hash}")
        lines.extend(_status_ranks(job))
    return "\n".join(lines) + "\n"


def _scaling_lines(scaling: Any) -> list[str]:
    """The decode scaling policy's last decision and why (docs/decode-scaling.md)."""
    if not scaling.enabled:
        return []
    lines = [f"  decode scaling ({scaling.min_decoders}-{scaling.max_decoders}): wants {scaling.wanted}, "
             f"{scaling.ready} ready, {scaling.draining} draining; decoders busy {scaling.busy_ratio:.0%}; "
             f"{scaling.decisions_up} up, {scaling.decisions_down} down so far",
             f"    now: {scaling.decision}: {scaling.reason}"]
    if scaling.last_change:
        lines.append(f"    last change, {scaling.last_change_seconds_ago:.0f} s ago: {scaling.last_change}")
    return lines


def _status_ranks(job: Any) -> list[str]:
    """A job's ranks, a row each: the latest step sent, batches/s, data stall and lag
    (docs/observability.md), under a line naming the worst stall: a synchronous job runs at that rank's pace."""
    if not job.ranks:
        return []
    stalls = [(r.data_stall, r.rank) for r in job.ranks if r.HasField("data_stall")]
    lines = []
    if stalls:
        worst, rank = max(stalls)
        lines.append(f"    data stall: worst {worst:.1%} (rank {rank}), mean {sum(s for s, _ in stalls) / len(stalls):.1%} "
                     f"over {len(stalls)} rank(s)")
    lines.append(f"    {'rank':>6} {'epoch/step':>12} {'batches/s':>10} {'stall':>7} {'lag':>6}")
    for r in job.ranks:
        where = f"{r.epoch}/{r.step}" if r.position_batches else "-"
        stall = f"{r.data_stall:.1%}" if r.HasField("data_stall") else "-"
        lines.append(f"    {r.rank:>6} {where:>12} {r.batches_per_second:>10.1f} {stall:>7} {r.lag_batches:>6}")
    return lines


def _reads_line(r: Any) -> str:
    """One node's storage reads and cache tiers, for `shardstream status`."""
    def rate(hits: int, misses: int) -> str:
        return f"{hits / (hits + misses):.1%}" if hits + misses else "-"

    return (f"read {r.storage_bytes_read / 1e6:,.1f} MB from storage ({r.storage_row_groups_read} row "
            f"group(s)); hits: memory {rate(r.memory_hits, r.memory_misses)} of "
            f"{r.memory_hits + r.memory_misses}, local disk {rate(r.disk_hits, r.disk_misses)} of "
            f"{r.disk_hits + r.disk_misses}; local copy {r.disk_bytes / 1e6:,.1f} MB" + _prepared_text(r))


def _cache_sizing_lines(r: Any) -> list[str]:
    """The bounds the node's prepared-sample cache got, and why (node/cache_sizing.py)."""
    if not (r.prepared_memory_sizing or r.prepared_disk_sizing):
        return []
    return [f"    prepared-sample cache, {tier} tier: " + (f"{bound / 1e9:,.2f} GB ({why})" if bound else why)
            for tier, bound, why in (("memory", r.prepared_memory_bound, r.prepared_memory_sizing),
                                     ("disk", r.prepared_disk_bound, r.prepared_disk_sizing))]


def _prepared_text(r: Any) -> str:
    """The node's prepared-sample cache, when it was asked for samples."""
    found = r.prepared_memory_hits + r.prepared_disk_hits + r.prepared_peer_hits
    looked = found + r.prepared_misses
    if not looked and not (r.prepared_memory_bytes or r.prepared_disk_bytes):
        return ""
    hit = found / looked if looked else 0.0
    return (f"; prepared samples: {hit:.1%} of {looked} found (memory {r.prepared_memory_hits}, disk "
            f"{r.prepared_disk_hits}, other nodes {r.prepared_peer_hits}), "
            f"{r.prepared_deferred} kept later (write budget), "
            f"{r.prepared_memory_bytes / 1e6:,.1f} MB in memory, "
            f"{r.prepared_disk_bytes / 1e6:,.1f} MB on disk")

