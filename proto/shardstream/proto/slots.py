"""The shared-memory slot contract between a rank and a decoder on its host: where slots live and
what they are called (client/shared_slots.py makes them, service/.../node/shared_slots.py opens
them; nothing else in the directory is ever opened)."""

from __future__ import annotations

import os
import re
import secrets

SHARED_MEMORY_DIR = "/dev/shm"
SLOT_NAME = re.compile(r"shardstream-slot-[0-9]+-[0-9a-f]{32}")


def new_slot_name() -> str:
    """An unguessable name of this process's (matches SLOT_NAME)."""
    return f"shardstream-slot-{os.getpid()}-{secrets.token_hex(16)}"


__all__ = ["SHARED_MEMORY_DIR", "SLOT_NAME", "new_slot_name"]
