"""At exit, streams still open are closed first, then channels; closed ones are left alone."""

from __future__ import annotations

from shardstream.client import shutdown


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def close(self) -> None:
        self.log.append(self.name)


def test_open_streams_then_channels_are_closed() -> None:
    log: list[str] = []
    channel, stream, done = Recorder("channel", log), Recorder("stream", log), Recorder("done", log)
    shutdown.track_channel(channel)
    shutdown.track_stream(stream)
    shutdown.track_stream(done)
    shutdown.untrack_stream(done)  # closed by its owner already
    try:
        shutdown.close_all()
        assert log == ["stream", "channel"]
    finally:
        shutdown.untrack_stream(stream)
        shutdown.untrack_channel(channel)
