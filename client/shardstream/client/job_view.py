"""The job as a rank knows it: what OpenJob answered, and what ListDecoders last listed.

One immutable snapshot. The loader's `job` is replaced whole, in one
assignment, whether by the training loop's thread (opening, reconnecting) or
by the fetcher's refresh thread (a new listing every DECODERS_REFRESH_S); a
reader on any thread sees one job, never the decoders of one listing with the
window of another, or a listing half written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from shardstream.proto.errors import DatasetChanged
from shardstream.proto.v1 import loader_pb2 as pb

# What must not change when a rank opens its job again (reconnecting, the service restarted). Not
# the job id: it is the service's name for the job (the same name and spec), which a service of
# another version may derive differently (a rolling upgrade), and the stream goes on under the new one.
IDENTITY_FIELDS = ("dataset_fingerprint", "num_samples", "batches_per_rank")


@dataclass(frozen=True)
class JobView:
    job_id: str
    spec_fingerprint: str
    dataset_fingerprint: str
    num_samples: int  # rows in the dataset
    samples_per_rank: int  # DistributedSampler.num_samples
    batches_per_rank: int  # len(DataLoader) on every rank
    num_files: int
    batch_servers: tuple[str, ...] = ()  # the decoders to fetch from (host:port), as last listed
    max_window_bytes: int = 0  # the service's bound on this rank's window; 0: none
    sources: tuple[str, ...] = ()  # a mixture's sources, in the spec's order
    source_starts: tuple[int, ...] = ()  # each one's first global index, and the end

    @classmethod
    def of(cls, opened: pb.OpenJobResponse, listing: pb.ListDecodersResponse) -> JobView:
        return cls(job_id=opened.job_id, spec_fingerprint=opened.spec_fingerprint,
                   dataset_fingerprint=opened.dataset_fingerprint, num_samples=opened.num_samples,
                   samples_per_rank=opened.samples_per_rank, batches_per_rank=opened.batches_per_rank,
                   num_files=opened.num_files, sources=tuple(s.name for s in opened.sources),
                   source_starts=tuple([s.first_sample for s in opened.sources]
                                       + [s.first_sample + s.num_samples for s in opened.sources[-1:]]),
                   ).listed(listing)

    def listed(self, listing: pb.ListDecodersResponse) -> JobView:
        """This job with a newer listing of its decoders."""
        return dataclasses.replace(self, batch_servers=tuple(listing.batch_servers),
                                   max_window_bytes=listing.max_window_bytes)

    def check_same(self, reopened: JobView) -> None:
        """DatasetChanged when the job opened again is not this one."""
        for field in IDENTITY_FIELDS:
            if getattr(self, field) != getattr(reopened, field):
                raise DatasetChanged(
                    f"after reconnecting, the job's {field} is {getattr(reopened, field)!r} instead of "
                    f"{getattr(self, field)!r}: the dataset or the service changed under the running job")


__all__ = ["IDENTITY_FIELDS", "JobView"]
