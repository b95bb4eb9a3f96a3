"""What runs on the decode nodes: the decode actor, its batch server (the data plane), reading rows
(the local copy, the in-memory cache, storage) and turning them into framed batches."""
