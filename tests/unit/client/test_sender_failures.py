"""Which decoder failures a rank retries on its other decoders, and which reach its loop at once.

A decoder that answers with a typed error has said why, and every decoder would repeat it: a
changed file, a bad sample, or a fault of its own (INTERNAL, stamped by the decoder). Only
failures with no typed error (a cut link, a dead process), a decoder that is stopping or one not
yet told of the job are retried; anything else reached the loop only after reconnect_timeout.
"""

from __future__ import annotations

import grpc
import pytest

from shardstream.client.decoder_stream import sender_failure
from shardstream.proto.errors import ERROR_METADATA_KEY


class _Status(grpc.RpcError):
    """What grpc raises for a failed stream: a code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str, error_class: str | None = None) -> None:
        self._code, self._details = code, details
        self._metadata = ((ERROR_METADATA_KEY, error_class),) if error_class else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata


@pytest.mark.parametrize(("code", "error_class"), [
    (grpc.StatusCode.UNAVAILABLE, None),  # the link or the process
    (grpc.StatusCode.CANCELLED, None),
    (grpc.StatusCode.INTERNAL, None),  # grpc's own, e.g. a stream reset mid-frame
    (grpc.StatusCode.UNKNOWN, None),
    (grpc.StatusCode.DEADLINE_EXCEEDED, None),
    (grpc.StatusCode.UNAVAILABLE, "ServiceUnavailable"),  # a decoder stopping
    (grpc.StatusCode.NOT_FOUND, "JobNotFound"),  # a decoder not yet told of the job
])
def test_transport_failures_go_to_the_other_decoders(code: grpc.StatusCode, error_class: str | None) -> None:
    assert sender_failure(_Status(code, "x", error_class))


@pytest.mark.parametrize(("code", "error_class"), [
    (grpc.StatusCode.FAILED_PRECONDITION, "DatasetChanged"),
    (grpc.StatusCode.FAILED_PRECONDITION, "UnreadableShard"),
    (grpc.StatusCode.DATA_LOSS, "CorruptSample"),
    (grpc.StatusCode.INVALID_ARGUMENT, "InvalidJobSpec"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "DeadlineExceeded"),  # decode_timeout_s: any decoder would
    (grpc.StatusCode.INTERNAL, "ShardstreamError"),  # the decoder's own fault, stamped by it
])
def test_a_failure_any_decoder_would_repeat_reaches_the_rank_at_once(code: grpc.StatusCode,
                                                                      error_class: str) -> None:
    assert not sender_failure(_Status(code, "x", error_class))
