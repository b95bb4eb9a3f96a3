"""The `shardstream` command line: serve, status, validate (commands.py).

`main` is the console script's entry point; `python -m shardstream.service.cli` runs it too
(__main__.py). Importing this package imports no service dependency: a training-side install
(the client only) runs `shardstream status`.
"""

from shardstream.service.cli.commands import main

__all__ = ["main"]
