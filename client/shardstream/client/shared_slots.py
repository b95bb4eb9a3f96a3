"""A rank's side of shared-memory delivery: slots a decoder on this host writes batches into.

A decoder on the rank's own host (the embedded service, a single machine, a
GPU node that also runs decode actors) need not send a batch through a
socket. With each want the rank offers a slot: a file it made in /dev/shm,
mode 0600. The decoder opens it, removes its name, writes the batch into it
and says so on the stream (service/.../node/shared_slots.py). The rank's
tensors are views of its own mapping of the slot, as DataLoader's workers
hand tensors over in shared memory: the slot is offered again only when
every tensor of the batch in it is gone.

A decoder that cannot open the slot (another host, another container's
/dev/shm, another user) sends the batch on the stream as usual, and the
stream stops offering slots. Offers go only to decoders whose address is
one of this host's, so remote decoders never see them.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import mmap
import os
import socket
import threading
import weakref

import numpy as np

from shardstream.client.channels import host_of
from shardstream.proto.slots import SHARED_MEMORY_DIR, new_slot_name
from shardstream.proto.wire import SharedRef, WireError

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def is_local_address(address: str) -> bool:
    """Whether a decoder's ``host:port`` is on this host: loopback, or an address one of this
    host's interfaces holds (only those can be bound)."""
    host = host_of(address)
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((host, 0))
        return True
    except OSError:
        return False


def shared_memory_available() -> bool:
    return os.path.isdir(SHARED_MEMORY_DIR) and os.access(SHARED_MEMORY_DIR, os.W_OK | os.X_OK)


class SlotPool:
    """The slots of one decoder's stream. ``offer`` names a free slot (a new one when none is);
    ``lease`` maps a written one for a batch's tensors; the slot is free again when they are gone."""

    def __init__(self, directory: str = SHARED_MEMORY_DIR) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._mappings: dict[str, mmap.mmap] = {}
        self._free: list[str] = []
        self._closed = False
        self.offering = True  # False once the decoder answered on the stream: it cannot reach our slots

    def offer(self) -> str:
        """A slot for the next want; "" when no longer offering (also once a slot cannot be made:
        the batches then come on the stream)."""
        with self._lock:
            if not self.offering or self._closed:
                return ""
            if self._free:
                return self._free.pop()
            name = new_slot_name()
            try:
                self._fds[name] = os.open(os.path.join(self._directory, name),
                                          os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                log.warning("cannot make a shared-memory slot in %s (%s): batches come on the stream",
                            self._directory, exc)
                self.offering = False
                return ""
            return name

    def declined(self, name: str) -> None:
        """The decoder sent the want's batch on the stream: stop offering; the slot goes."""
        with self._lock:
            self.offering = False
            self._remove(name)

    def lease(self, where: SharedRef) -> np.ndarray:
        """The batch's bytes in slot `where.slot`, as an array that frees the slot when it dies."""
        with self._lock:
            fd = self._fds.get(where.slot)
            if fd is None:
                raise WireError(f"the decoder wrote slot {where.slot!r}, which this stream did not offer")
            mapping = self._mappings.get(where.slot)
            if mapping is None or len(mapping) < where.size:
                if os.fstat(fd).st_size < where.size:
                    raise WireError(f"slot {where.slot!r} holds {os.fstat(fd).st_size} bytes, the decoder "
                                    f"said {where.size}")
                mapping = self._mappings[where.slot] = mmap.mmap(fd, where.size)
        lease = np.frombuffer(mapping, dtype=np.uint8, count=where.size)
        weakref.finalize(lease, self._release, where.slot)
        return lease

    def _release(self, name: str) -> None:
        with self._lock:
            if not self._closed and name in self._fds:
                self._free.append(name)

    def _remove(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        self._mappings.pop(name, None)  # tensors still viewing it keep it mapped
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(os.path.join(self._directory, name))  # named still when no decoder opened it
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """The stream is over: forget every slot (batches still in use keep their mappings)."""
        with self._lock:
            self._closed = True
            for name in list(self._fds):
                self._remove(name)
            self._free.clear()


__all__ = ["SHARED_MEMORY_DIR", "SlotPool", "is_local_address", "shared_memory_available"]
