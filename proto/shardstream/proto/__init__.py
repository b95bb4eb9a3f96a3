"""The wire contract shared by client and service.

- ``v1``: the generated protobuf and gRPC modules (``make proto``).
- ``errors``: the error hierarchy and its one table of gRPC status codes.
- ``wire``: tensors as raw bytes + dtype + shape.
"""

PROTOCOL_VERSION = 1

__all__ = ["PROTOCOL_VERSION"]
