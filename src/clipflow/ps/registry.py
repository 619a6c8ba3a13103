"""The scheduler's table of nodes: registration, rank assignment, liveness."""

from __future__ import annotations

from dataclasses import dataclass

GROUPS = ("worker", "server", "all")


class RegistryError(Exception):
    """A registration that cannot be accepted (the message says which node and why)."""


@dataclass
class Node:
    """One registered server or worker."""

    uid: str
    role: str
    host: str
    port: int | None
    requested: int | None
    last_seen: float
    rank: int | None = None
    done: bool = False
    machine: str = ""

    def describe(self) -> str:
        if self.rank is not None:
            return f"{self.role} {self.rank} on {self.host}"
        if self.requested is not None:
            return f"{self.role} {self.requested} on {self.host}"
        return f"{self.role} (rank not yet assigned) on {self.host}"


class Registry:
    """Nodes in registration order; ranks are 0..N-1 per role once :meth:`assign_ranks` ran."""

    def __init__(self, num_server: int, num_worker: int) -> None:
        self.expected = {"server": num_server, "worker": num_worker}
        self._nodes: dict[str, Node] = {}
        self.ranked = False

    def add(
        self, uid: str, role: str, host: str, port: int | None, requested: int | None, now: float, machine: str = ""
    ) -> Node:
        """Register a node (idempotent per uid); RegistryError for a bad or surplus one."""
        known = self._nodes.get(uid)
        if known is not None:
            return known
        if role not in self.expected:
            raise RegistryError(f"a node on {host} registered with unknown role {role!r}")
        count = self.expected[role]
        var = "DMLC_NUM_WORKER" if role == "worker" else "DMLC_NUM_SERVER"
        same = self.nodes(role)
        if len(same) >= count:
            raise RegistryError(f"one {role} too many: a {role} on {host} registered but {var}={count}")
        if role == "server" and not port:
            raise RegistryError(f"server on {host} registered without a port")
        if requested is not None:
            if not 0 <= requested < count:
                raise RegistryError(
                    f"{role} on {host} requested DMLC_RANK={requested}, outside 0..{count - 1} ({var}={count})"
                )
            for other in same:
                if other.requested == requested:
                    raise RegistryError(
                        f"two {role}s requested DMLC_RANK={requested} (on {other.host} and {host}); "
                        f"each {role} needs its own rank in 0..{count - 1}"
                    )
        node = Node(uid, role, host, port, requested, now, machine=machine)
        self._nodes[uid] = node
        return node

    def get(self, uid: str | None) -> Node | None:
        return None if uid is None else self._nodes.get(uid)

    def nodes(self, role: str | None = None) -> list[Node]:
        return [n for n in self._nodes.values() if role is None or n.role == role]

    def counts(self) -> dict[str, int]:
        return {role: len(self.nodes(role)) for role in self.expected}

    @property
    def complete(self) -> bool:
        return self.counts() == self.expected

    def assign_ranks(self) -> None:
        """Honour requested ranks; give the free ones out in registration order."""
        for role in self.expected:
            same = self.nodes(role)
            free = sorted(set(range(self.expected[role])) - {n.requested for n in same})
            for node in same:
                node.rank = node.requested if node.requested is not None else free.pop(0)
        self.ranked = True

    def servers(self) -> list[Node]:
        """Servers sorted by rank."""
        return sorted(self.nodes("server"), key=lambda n: n.rank if n.rank is not None else -1)

    def group(self, name: str) -> list[Node]:
        """Live members of a barrier group: 'worker', 'server' or 'all'."""
        if name not in GROUPS:
            raise RegistryError(f"unknown barrier group {name!r}; use one of {', '.join(GROUPS)}")
        return [n for n in self._nodes.values() if not n.done and name in ("all", n.role)]

    def stale(self, now: float, timeout: float) -> Node | None:
        """A node that is not done and has been silent longer than ``timeout``, if any."""
        for node in self._nodes.values():
            if not node.done and now - node.last_seen > timeout:
                return node
        return None

    @property
    def workers_done(self) -> bool:
        workers = self.nodes("worker")
        return len(workers) == self.expected["worker"] and all(n.done for n in workers)
