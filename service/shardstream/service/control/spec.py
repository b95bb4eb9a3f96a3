"""A job's spec as the service reads it from a request: the shared declarations
(shardstream.proto.job_options.JobOptions), within this service's limits.

Everything that decides which samples a rank sees and how they look is a JobOptions field; the
service adds only its request limits (spec_limits.py), checked before anything is parsed.
"""

from __future__ import annotations

from google.protobuf import unknown_fields

from shardstream.proto.errors import ProtocolMismatch
from shardstream.proto.job_options import JobOptions
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.spec_limits import check_job_message
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits


def read_spec(msg: pb.JobSpec, limits: RequestLimits = DEFAULT_LIMITS) -> JobOptions:
    """The job's options, or InvalidJobSpec naming the first one past a limit or out of bounds."""
    refuse_unknown_options(msg)
    check_job_message(msg, limits)  # the service's bounds, before anything is parsed (spec_limits.py)
    return JobOptions.from_proto(msg)


def refuse_unknown_options(msg: pb.JobSpec) -> None:
    """ProtocolMismatch for a JobSpec field this service does not know: an option of a newer
    client, which this service would otherwise ignore and serve other samples than asked for."""
    numbers = sorted({f.field_number for part in (msg, msg.transform) for f in unknown_fields.UnknownFieldSet(part)})
    if numbers:
        raise ProtocolMismatch(f"the job spec holds option field {', '.join(map(str, numbers))}, which this service "
                               "does not know: the client is newer than the service. Upgrade the service, or leave "
                               "the new option out")


__all__ = ["read_spec"]
