"""Shared-memory data path between a worker and a server on the same machine.

A worker and a server that run on the same machine (same advertised host and same
kernel boot id) need not push 100 MB through the loopback TCP stack, which copies it
twice in the kernel each way. For every key with parts on such a server (parts of
at least ``CLIPFLOW_PS_SHM_MIN_BYTES``), the worker makes one :class:`Region` the
size of the whole key: a file in ``/dev/shm`` (mode 600) that the worker and those
servers map. Each part lives at its own offset (its ``start``) in it. Then

* a push or pushpull of such a part carries ``shm: true``, its ``start`` and its
  ``size``, and no array frame: the worker wrote the values at that offset, the
  server reads them from there;
* a value reply (pull, pushpull) for such a part carries ``shm: true``: the server
  wrote the value at the part's offset before replying.

The worker may hand the region to its user as the key's tensor
(:meth:`clipflow.ps.kvstore.KVStore.buffer`): pushing from it and pulling into it
then skips the worker's two copies, into the region and out of it.

Messages still go over the zmq sockets, so ordering, PS_RESEND, duplicates and
CURVE authentication are unchanged: a request is never read twice, and a part of a
region is only written by the side whose turn it is (one request per key part is in
flight; a dist_sync server reads a pushed part until its round is answered).

Setting up (``shm_attach``): the worker creates the file, asks each server to map it,
and unlinks it as soon as they answered; from then on only the mappings keep the
memory, so a killed process leaves nothing in ``/dev/shm``. If a server cannot map it
(say a container with its own ``/dev/shm``), the worker logs why and uses TCP for the
servers on its machine.

With the servers placed beside the workers (one server per worker host, the
launcher's default), each worker then sends over the network only the parts held by
servers on other hosts: the same bytes a ring all-reduce moves.

Settings: ``CLIPFLOW_PS_SHM`` = 1 (default) | 0, ``CLIPFLOW_PS_SHM_MIN_BYTES``
(default 65536; smaller parts are not worth a mapping).
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
from functools import lru_cache
from pathlib import Path

import numpy as np

from clipflow.ps.wire import Message, Op, WireError, shown

SHM_DIR = Path("/dev/shm")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
NAME = re.compile(r"^clipflow-ps-[A-Za-z0-9._-]{1,200}$")


@lru_cache(maxsize=1)
def machine_id() -> str:
    """This kernel's boot id ('' where there is none): equal ids mean the same machine."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def available() -> bool:
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK) and bool(machine_id())


class Region:
    """A float32 array in a shared mapping; ``array`` is writable on both sides."""

    def __init__(self, name: str, buf: mmap.mmap, numel: int) -> None:
        self.name = name
        self.array = np.frombuffer(buf, dtype=np.float32, count=numel)
        self._buf = buf

    @classmethod
    def create(cls, label: str, numel: int) -> Region:
        """A new file in /dev/shm (mode 600) of ``numel`` float32, mapped; the caller unlinks it."""
        name = f"clipflow-ps-{re.sub(r'[^A-Za-z0-9._-]', '_', label)[:150]}-{secrets.token_hex(4)}"
        path = SHM_DIR / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, max(1, numel * 4))
            buf = mmap.mmap(fd, max(1, numel * 4))
        except OSError:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, buf, numel)

    @classmethod
    def attach(cls, name: str, numel: int) -> Region:
        """Map the worker's file ``name``; WireError when it is not a clipflow region of that size."""
        if not isinstance(name, str) or not NAME.match(name):
            raise WireError(f"bad shared-memory region name {name!r}")
        try:
            fd = os.open(SHM_DIR / name, os.O_RDWR)
        except OSError as exc:
            raise WireError(f"cannot open shared memory {SHM_DIR / name}: {exc.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size != max(1, numel * 4):
                raise WireError(f"shared memory {name} has {size} bytes, expected {numel * 4}")
            buf = mmap.mmap(fd, size)
        except OSError as exc:
            raise WireError(f"cannot map shared memory {SHM_DIR / name}: {exc.strerror}") from None
        finally:
            os.close(fd)
        return cls(name, buf, numel)

    def unlink(self) -> None:
        try:
            os.unlink(SHM_DIR / self.name)
        except FileNotFoundError:
            pass


class ServerRegions:
    """A server's mapped regions, by (worker socket identity, key); rewrites messages in and out."""

    def __init__(self) -> None:
        self.regions: dict[tuple[bytes, object], Region] = {}

    def attach(self, peer: bytes, msg: Message) -> Message:
        """Handle ``shm_attach`` (idempotent for a repeated request); the reply is OK or raises WireError."""
        key, name, numel = msg.get("key"), msg.get("name"), msg.get("numel")
        if not isinstance(key, int) or not isinstance(numel, int) or numel < 0:
            raise WireError(f"{Op.SHM_ATTACH} needs an integer key and numel, got {shown(key)} and {shown(numel)}")
        known = self.regions.get((peer, key))
        if known is None or known.name != name:
            self.regions[(peer, key)] = Region.attach(name, numel)
        return Message(Op.OK, {"seq": msg.get("seq"), "key": key})

    def inbound(self, peer: bytes, msg: Message) -> Message:
        """A request whose values are in ``peer``'s region, with that part of the region as its array."""
        if not msg.get("shm"):
            return msg
        key, start, size = msg.get("key"), msg.get("start", 0), msg.get("size")
        region = self.regions.get((peer, key)) if isinstance(key, int) else None
        if region is None:
            raise WireError(f"{msg.op} of key {shown(key)} names a shared-memory region that was never attached")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, size)):
            raise WireError(f"{msg.op} of key {key} through shared memory needs an integer start and size")
        if not 0 <= start <= start + size <= region.array.size:
            raise WireError(
                f"{msg.op} of key {key}: elements {start} to {start + size} are outside its shared memory "
                f"of {region.array.size}"
            )
        return Message(msg.op, msg.fields, [region.array[start : start + size]])

    def outbound(self, to: bytes, reply: Message) -> Message:
        """A value reply to a worker with a region for that key: the value goes into the region instead."""
        region = self.regions.get((to, reply.get("key"))) if reply.op == Op.VALUE else None
        start = reply.get("start", 0)
        if region is None or len(reply.arrays) != 1 or start + reply.arrays[0].size > region.array.size:
            return reply
        np.copyto(region.array[start : start + reply.arrays[0].size], reply.arrays[0].reshape(-1))
        return Message(reply.op, {**reply.fields, "shm": True})
