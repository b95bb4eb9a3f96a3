"""RemoteLoader: what a torchrun rank iterates instead of DataLoader + DistributedSampler.

    loader = RemoteLoader("loader-host:50051", dataset="gs://bucket/train/", batch_size=256,
                          shuffle=True, seed=0, drop_last=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # Batch
            ...

Rank k of epoch e receives exactly the batches DataLoader(ds, batch_size=B,
drop_last=d, sampler=DistributedSampler(ds, W, rank, shuffle, seed, d)) would
give after set_epoch(e). Ranks never wait for each other: each opens (or
joins) the job and streams its own batches.

`loader.job` (job_view.py) is one immutable snapshot of the job and its
decoders, replaced whole in one assignment: by the loop's thread when it joins
or reconnects, and by the fetcher's refresh thread when ListDecoders lists the
decoders again. Readers take `self.job` once and use that snapshot.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from shardstream.client.auth import Token
from shardstream.client.channels import DecoderChannels
from shardstream.client.connection import CHANNEL_OPTIONS, NoProgress, ServiceConnection
from shardstream.client.decoder_stream import FetchTarget
from shardstream.client.distributed import default_job_name, resolve_rank_world
from shardstream.client.fetcher import DirectPrefetcher, ListingClock
from shardstream.client.job_view import JobView
from shardstream.client.loader_options import LoaderSettings, docstring, signature, split
from shardstream.client.profiling import NamedWaits
from shardstream.client.receive_buffers import ReceiveBuffers
from shardstream.client.stall import LoopWaits
from shardstream.client.state import LoaderState
from shardstream.client.stats import LoaderStats
from shardstream.client.tensors import Batch, batch_to_tensors, pin_available
from shardstream.client.tls import TLS
from shardstream.proto import PROTOCOL_VERSION
from shardstream.proto.errors import (
    JobNotFound,
    ServiceUnavailable,
    ShardstreamError,
    StreamProtocolError,
)
from shardstream.proto.job_options import JobOptions, fingerprint
from shardstream.proto.mixture import Mixture
from shardstream.proto.v1 import loader_pb2 as pb

log = logging.getLogger(__name__)

# The window in bytes when prefetch_bytes is not given: batches received or in flight and not yet
# consumed, across all of the rank's decoders.
DEFAULT_WINDOW_BYTES = 512 * 2**20
_LOADERS_CREATED = itertools.count()  # this process's loaders, in creation order (default_job_name)


class RemoteLoader:
    def __init__(self, address: str, dataset: str | Sequence[str] | Mixture, batch_size: int, *,
                 order: Any = None, format_options: Any = None, delivery: Any = None, security: Any = None,
                 **options: Any) -> None:
        job_options, loader_settings = split(
            {"order": order, "format_options": format_options, "delivery": delivery, "security": security}, options)
        settings = LoaderSettings(**loader_settings)
        self.address = address
        self.rank, self.world_size = resolve_rank_world(settings.rank, job_options.pop("world_size", None))
        self.options = JobOptions.given(dataset=dataset, batch_size=batch_size, world_size=self.world_size,
                                        **job_options)
        self.spec = self.options.to_proto()
        self.prefetch = settings.prefetch
        self.prefetch_bytes = settings.prefetch_bytes or 0
        self.priority = settings.priority or ""
        self.timeout = timeout = settings.timeout
        self.pin_memory = self._resolve_pin(settings.pin_memory)
        self.shared_memory = settings.shared_memory
        self.bulk_socket = settings.bulk_socket
        self.epoch: int | None = None  # the epoch of the current or last iteration
        self._next_epoch: int | None = None
        self.samples_replaced = 0  # corrupt samples replaced under on_corrupt="skip", all epochs
        self.stats = LoaderStats()  # batches, samples, bytes delivered; time the loop waited
        self._waits = LoopWaits(self.stats)  # time in next(): stats.wait_seconds and the stall sent with wants
        self.job_name = (settings.job_name if settings.job_name is not None
                         else default_job_name(next(_LOADERS_CREATED), self.world_size))
        self.reconnect_timeout = timeout if settings.reconnect_timeout is None else settings.reconnect_timeout
        self._steps_done = 0  # batches of the current epoch handed to the loop
        self._resume: tuple[int, int] | None = None  # (epoch, step) from load_state_dict
        self._manifest: dict[str, Any] | None = None
        credentials = Token.resolve(settings.token, settings.token_file)
        self._connection = ServiceConnection(address, settings.connect_timeout, settings.tls or TLS.from_env(),
                                             credentials)
        decoder_tls = self._connection.tls.for_decoders(address) if self._connection.tls else None
        self._decoder_channels = DecoderChannels(decoder_tls, CHANNEL_OPTIONS, credentials)  # the direct data plane's
        # What bulk sockets receive batches into, for every decoder and epoch: the window's batches,
        # and the one a training loop's variable holds while it asks for the next.
        self._receive_buffers = ReceiveBuffers(keep=self.prefetch + 1)
        try:
            self.job: JobView = self._connection.join(self._open_request(), self.timeout)
            self._listing = ListingClock()  # when the job's decoders were last asked for
        except ShardstreamError:
            self._connection.close()
            raise
        log.info("rank %d/%d joined job %s: %d batches per epoch", self.rank, self.world_size,
                 self.job.job_id, self.job.batches_per_rank)

    def _open_request(self) -> pb.OpenJobRequest:
        return pb.OpenJobRequest(protocol_version=PROTOCOL_VERSION, job_name=self.job_name, spec=self.spec,
                                 rank=self.rank, priority=self.priority)

    @staticmethod
    def _resolve_pin(pin_memory: bool | str) -> bool:
        if pin_memory == "auto":
            return pin_available()
        if pin_memory and not pin_available():
            warnings.warn("pin_memory=True but no accelerator is available: not pinning", stacklevel=3)
            return False
        return bool(pin_memory)

    def __len__(self) -> int:
        return int(self.job.batches_per_rank)

    @property
    def num_samples(self) -> int:
        """Rows in the dataset (len(dataset))."""
        return int(self.job.num_samples)

    @property
    def data_stall(self) -> float | None:
        """The share (0..1) of the training loop's last ~10 s it spent waiting in ``next()`` for
        data, as this rank reports it to the service with its wants (``shardstream status``, the
        ``shardstream_rank_data_stall_ratio`` metric); None before the first ``next()``."""
        return self._waits.meter.ratio(time.perf_counter())

    def set_epoch(self, epoch: int) -> None:
        """Like DistributedSampler.set_epoch: the next iteration runs this epoch."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._next_epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        start_step = 0
        if self._next_epoch is not None:
            epoch = self._next_epoch
        else:  # a forgotten set_epoch advances the epoch instead of silently repeating its order
            epoch = 0 if self.epoch is None else self.epoch + 1
        if self._resume is not None:
            resume_epoch, resume_step = self._resume
            if self._next_epoch is None or self._next_epoch == resume_epoch:
                epoch, start_step = resume_epoch, resume_step
            else:
                log.warning("set_epoch(%d) after load_state_dict of epoch %d: starting epoch %d afresh",
                            self._next_epoch, resume_epoch, self._next_epoch)
        self._next_epoch = self._resume = None
        self.epoch = epoch
        self._steps_done = start_step
        return NamedWaits(self._iterate(epoch, start_step))  # waits show as "shardstream.next" in traces

    def _iterate(self, epoch: int, start_step: int) -> Iterator[Batch]:
        """Batches start_step.. of `epoch`. An iteration that fails before its first batch does not
        count as starting the epoch: iterating again (without set_epoch) retries the same one."""
        try:
            yield from self._batches(epoch, start_step)
        except BaseException:
            if self._steps_done == start_step and self._next_epoch is None:
                self._next_epoch = epoch
                self._resume = (epoch, start_step) if start_step else None
            raise
        finally:
            self._waits.ended(time.perf_counter())  # a wait that raised (else a no-op)

    def _batches(self, epoch: int, start_step: int) -> Iterator[Batch]:
        """Batches start_step.. of `epoch`, reconnecting and resuming at the next batch if the link breaks."""
        step = start_step
        self._waits.started(time.perf_counter())  # the loop is blocked in next() from here until the yield
        stuck = NoProgress(self.reconnect_timeout)
        while step < len(self):
            prefetcher: DirectPrefetcher | None = None
            try:
                # No decoder listed (decode nodes starting, the last one replaced) is retried as a
                # failed link is: the job is reopened until one is, within reconnect_timeout.
                prefetcher = self._open_stream(epoch, step)
                received = iter(prefetcher)
                while True:
                    item = next(received, None)  # returns the last batch's room in the window
                    if item is None:
                        break
                    message, tensors = item
                    del item
                    if message.step != step or message.epoch != epoch:
                        raise StreamProtocolError(f"job {self.job.job_id} rank {self.rank}: expected epoch "
                                                  f"{epoch} batch {step}, received epoch {message.epoch} "
                                                  f"batch {message.step}")
                    step += 1
                    self._steps_done = step
                    self.samples_replaced += message.replaced_samples
                    self.stats.add_batch(tensors)
                    if self.job.sources:
                        self.stats.add_sources(self.job.sources, self.job.source_starts, message.sample_indices,
                                               tensors)
                    self._waits.ended(time.perf_counter())
                    yield tensors
                    del tensors  # dropped before its room in the window goes back with the next request
                    self._waits.started(time.perf_counter())
            except (ServiceUnavailable, JobNotFound) as exc:
                if isinstance(exc, ServiceUnavailable) and exc.from_service:
                    raise  # the service is up and says it cannot serve (no decoders): not a link failure
                stuck.check(step, exc)  # the service answers, yet no decoder serves: give up in time
                self.job = self._connection.reopen_job(self._open_request(), self.job, exc,
                                                       self.reconnect_timeout)
                continue
            finally:
                if prefetcher is not None:
                    prefetcher.close()
            if step != len(self):
                raise StreamProtocolError(f"job {self.job.job_id} rank {self.rank} epoch {epoch}: the stream "
                                          f"ended after {step} of {len(self)} batches")
        self._waits.ended(time.perf_counter())  # the stream's end, too

    def _open_stream(self, epoch: int, start_step: int) -> DirectPrefetcher:
        """Fetch this epoch's batches from the decoders themselves (docs/data-plane.md)."""
        job = self.job  # one snapshot: the refresh thread may replace self.job meanwhile
        describe = f"job {job.job_id} epoch {epoch} rank {self.rank}"
        convert = lambda m: batch_to_tensors(m, self.pin_memory)  # noqa: E731
        target = FetchTarget(job.job_id, epoch, self.rank, start_step, job.batches_per_rank,
                             placement=f"{self.world_size}/{self.spec.batch_size}/{self.rank}")
        self._decoder_channels.keep_only(job.batch_servers)
        return DirectPrefetcher(list(job.batch_servers), target, self.prefetch, self._window_of(job), convert,
                                self.timeout, describe,
                                self._decoder_channels, self.stats, self._list_decoders, self.shared_memory,
                                self.bulk_socket, data_stall=lambda: self.data_stall, listing=self._listing,
                                receive_buffers=self._receive_buffers)

    @property
    def window_bytes(self) -> int:
        """The most batch bytes this rank holds received or in flight: prefetch_bytes, within the
        service's per-job limit (job_max_in_flight_bytes)."""
        return self._window_of(self.job)

    def _window_of(self, job: JobView) -> int:
        window = self.prefetch_bytes or DEFAULT_WINDOW_BYTES
        return min(window, job.max_window_bytes) if job.max_window_bytes else window

    def _list_decoders(self) -> list[str]:
        """The job's decoders now (ListDecoders), on the fetcher's refresh thread: it draws on ones
        that joined, and the next epoch starts with this list, not the one the job was opened with
        (no stream to an actor that has since gone). The new listing replaces `self.job` as one
        snapshot (job_view.py)."""
        timeout_s = min(self.timeout, 10.0)
        job = self.job
        try:
            fresh = job.listed(self._connection.list_decoders(job.job_id, timeout_s))
        except JobNotFound:
            fresh = self._rejoined(job, timeout_s)
        self.job = fresh
        return list(fresh.batch_servers)

    def _rejoined(self, known: JobView, timeout_s: float) -> JobView:
        """The job joined again when the service no longer holds it (restarted, or the job sat idle
        past its job_idle_ttl_s): OpenJob rebuilds the same job, as reconnecting does."""
        job = self._connection.join(self._open_request(), timeout_s)
        known.check_same(job)
        return job

    def state_dict(self) -> dict[str, Any]:
        """Where this job is: the same on every rank (in DDP lockstep), small and picklable."""
        if self._resume is not None:
            epoch, step = self._resume
        elif self.epoch is None:
            epoch, step = (self._next_epoch or 0), 0
        else:
            epoch, step = self.epoch, self._steps_done
        global_batch = self.world_size * self.spec.batch_size
        return LoaderState(epoch=epoch, global_cursor=step * global_batch, seed=self.spec.seed,
                           spec_fingerprint=fingerprint(self.spec), global_batch_size=global_batch,
                           dataset_fingerprint=self.job.dataset_fingerprint, manifest=self.manifest()).to_dict()

    def manifest(self) -> dict[str, Any]:
        """The job's reproducibility manifest: the dataset's identity (files with sizes and
        versions), the format, the pipeline (transform, collate, their code's hashes) and its hash,
        the order contract's parameters, and the service's package versions. Asked of the service
        once (GetManifest), then kept."""
        if self._manifest is None:
            job = self.job
            try:
                reply = self._connection.get_manifest(job.job_id, self.timeout)
            except JobNotFound:
                self.job = self._rejoined(job, self.timeout)
                reply = self._connection.get_manifest(job.job_id, self.timeout)
            self._manifest = json.loads(reply.manifest_json or "{}")
        return self._manifest

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where `state` was taken: the next iteration yields exactly the batches an
        uninterrupted run would have yielded next (on any rank, and on a new world size when
        world_size x batch_size is unchanged). A state taken at the end of an epoch starts the
        next epoch."""
        loaded = LoaderState.from_dict(state)
        if loaded.manifest:
            loaded.check_manifest(self.manifest())
        step = loaded.resume_step(self.spec, self.job.dataset_fingerprint)
        self._next_epoch = None
        if step >= len(self):
            self.epoch, self._resume = loaded.epoch, None
        else:
            self.epoch, self._resume = None, (loaded.epoch, step)

    def close(self) -> None:
        self._connection.close()
        self._decoder_channels.close()
        self._receive_buffers.close()

    def __enter__(self) -> RemoteLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RemoteLoader.__doc__ = docstring(
    "An iterable of batches (Batch) streamed from a shardstream service.\n\n"
    "DataLoader's keywords are flat; the other options come in four groups (OrderOptions, FormatOptions,\n"
    "DeliveryOptions, SecurityOptions), and each of them is also taken as a flat keyword. Every option\n"
    "is declared once: the job's in shardstream.proto.job_options, the loader's in client/loader_options.py.")
RemoteLoader.__init__.__signature__ = signature()  # type: ignore[attr-defined]


__all__ = ["RemoteLoader"]
