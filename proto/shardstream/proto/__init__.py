"""The wire contract shared by client and service.

- ``v1``: the generated protobuf and gRPC modules (``make proto``).
- ``errors``: the error hierarchy and its one table of gRPC status codes.
- ``wire``: tensors as raw bytes + dtype + shape.
"""

# 2: bulk sockets. A rank opening a stream with `bulk` waits for the decoder's offer, which a
# decoder of version 1 would never send: versions that differ are refused at once, by name.
# 3: a batch larger than the room a want had comes back as `needs_room` (its size), which a client
# of version 2 would take for an empty batch.
# 4: one job per control call. OpenJob opens or joins only; a rank learns its decoders and window
# from ListDecoders and the manifest from GetManifest. A client of version 3 would find no decoder
# in OpenJob's answer.
# 5: a service refuses a JobSpec field it does not know (ProtocolMismatch), so a job option added
# later is refused by an older service instead of ignored; a service of version 4 would ignore one.
PROTOCOL_VERSION = 5
SERVICE_NAME = "shardstream.v1.Loader"
# Each decode actor's own port (docs/data-plane.md). FetchBatches is served and
# called with hand-framed Batch bytes (see wire.py), so both sides name the
# method themselves instead of using the generated stub.
BATCH_SERVICE_NAME = "shardstream.v1.BatchServer"
FETCH_BATCHES_METHOD = f"/{BATCH_SERVICE_NAME}/FetchBatches"
# A rank asks the service for its job's decoders at least this often (client/fetcher.py), so a
# decoder that joins serves every rank within it: the scaling policy judges a step only after it.
DECODERS_REFRESH_S = 10.0

__all__ = ["BATCH_SERVICE_NAME", "DECODERS_REFRESH_S", "FETCH_BATCHES_METHOD", "PROTOCOL_VERSION", "SERVICE_NAME"]
