"""Which network interface of this host holds an address: gloo and NCCL bind to the interface they are told.

Gloo picks its interface from the host name; where that resolves to a loopback address (a common
/etc/hosts line, and the network-namespace hosts of the tests), every peer is told to connect to
127.0.0.1 and the job fails with "Connection refused". NCCL's own choice (the first interface that is
not loopback or docker, InfiniBand first) can be a management network the other hosts cannot reach,
or one another host names differently. The launcher knows each worker's address (the plan's: an
address, or a node name that resolves on the host), so the worker names the interface holding it,
``GLOO_SOCKET_IFNAME`` or ``NCCL_SOCKET_IFNAME`` by its transport, unless the user set one.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import MutableMapping

from clipflow.environment import read_env

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def interface_with_address(address: str) -> str | None:
    """The name of this host's interface whose IPv4 address is ``address`` (a name is resolved first);
    None when no interface has it (NAT, IPv6) or it cannot be resolved."""
    try:
        wanted = socket.gethostbyname(address)
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(answer[20:24]) == wanted:
                return name
    return None


INTERFACE_VARIABLE = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}


def choose_interface(environ: MutableMapping[str, str], transport: str) -> str | None:
    """Sets the ``transport``'s variable (gloo or nccl: :data:`INTERFACE_VARIABLE`) to the interface of this
    worker's plan address when the user has not set it; returns the interface it will use by name (None: the
    library's own choice)."""
    variable = INTERFACE_VARIABLE[transport]
    if environ.get(variable):
        return environ[variable]
    address = read_env(environ).node_address
    name = interface_with_address(address) if address else None
    if name:
        environ[variable] = name
    return name
