"""The shardstream service: coordinator, planner, decode actors, gRPC server.

See README.md in this folder for a map of the modules.
"""
