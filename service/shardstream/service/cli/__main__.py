"""`python -m shardstream.service.cli ...`: the `shardstream` command."""

import sys

from shardstream.service.cli.commands import main

sys.exit(main())
