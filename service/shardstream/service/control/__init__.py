"""The control process (`shardstream serve`, one per service): jobs, the decode pool, health, the
coordinator's gRPC port and its metrics. It plans nothing per step and never touches batch bytes."""
