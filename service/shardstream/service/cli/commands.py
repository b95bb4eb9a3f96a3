"""`shardstream` command line: serve, status, validate."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from shardstream.service.config import ServiceConfig
from shardstream.service.settings import add_flags, from_flags

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
    validate.add_argument("--format", default="", help="parquet, tokens, webdataset, imagefolder, manifest, jsonl "
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
    from shardstream.client.status import show_status

    return show_status(args.address, tls, args.json, args.watch, args.iterations,
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

    try:
        config = ServiceConfig.load(from_flags(args, ServiceConfig))
    except ValueError as exc:  # a setting out of its bounds, or one from the environment that does not parse
        log.error("`shardstream serve`: %s (`shardstream serve --help` lists the settings)", exc)
        return 2
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
