"""The transport microbenchmark: pre-decoded batches through shardstream, raw gRPC and raw TCP.

All three move batches of the same size from a server process to a consumer
process over loopback. shardstream serves a Parquet dataset of
``fixed_size_list<uint8>`` rows with no transform (read + frame only) into
RemoteLoader tensors; raw gRPC streams ``bytes`` messages from a minimal
server; raw TCP ``sendall``s the bytes into ``recv_into`` a reused buffer.
"""
