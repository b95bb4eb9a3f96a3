"""The direct data plane's channels: one per decoder, kept across epochs, closed when it leaves."""

from __future__ import annotations

import pytest

from shardstream.client.channels import DecoderChannels


def test_one_channel_per_decoder_until_the_job_stops_listing_it() -> None:
    channels = DecoderChannels(None, [])
    first = channels.get("127.0.0.1:1")
    assert channels.get("127.0.0.1:1") is first
    other = channels.get("127.0.0.1:2")
    channels.keep_only(["127.0.0.1:2"])
    with pytest.raises(ValueError, match="closed channel"):
        first.unary_unary("/x/y")(b"", timeout=0.1)
    assert channels.get("127.0.0.1:2") is other
    assert channels.get("127.0.0.1:1") is not first  # listed again: a new one
    channels.close()
    with pytest.raises(ValueError, match="closed channel"):
        other.unary_unary("/x/y")(b"", timeout=0.1)
