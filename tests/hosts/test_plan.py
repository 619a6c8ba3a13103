"""The plan's bound on the roles one machine can start (clipflow.hosts.plan.check_roles_per_host), counted as
:func:`clipflow.hosts.plan.place` places them without listing them; the plan itself is tested through
`clipflow cluster plan` in tests/cluster/."""

from __future__ import annotations

from collections import Counter

import pytest

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import check_roles_per_host, place, roles_per_host


@pytest.mark.parametrize("placement", ["beside", "cycle"])
def test_the_counts_are_those_of_the_placement(placement):
    hosts = [Host("a", slots=2), Host("b"), Host("c", slots=3)]
    for workers in range(9):
        for servers in range(5):
            placed = Counter((h.host, role) for role, _, h in place(hosts, workers, servers, placement)[1:])
            expected = {h.host: (placed[(h.host, "worker")], placed[(h.host, "server")]) for h in hosts}
            assert roles_per_host(hosts, workers, servers, placement) == expected, (workers, servers)


def test_more_roles_than_a_machine_has_ports_for_are_refused_before_any_plan():
    with pytest.raises(ClipflowError) as err:
        check_roles_per_host([Host("localhost")], 70000, 1, "beside", "ps")
    assert str(err.value) == (
        "config: cluster.num_workers 70000 puts 70000 workers and 1 server on localhost, more than a machine can "
        "start: with train.backend ps each role holds 2 TCP connections to cluster.root_port from a port of its "
        "own, and a machine has 64512 (1024-65535), so at most 32256 on one host; give fewer workers or more hosts"
    )
    with pytest.raises(ClipflowError, match="puts 64513 workers on localhost, .* ddp each worker holds 1 TCP "):
        check_roles_per_host([Host("localhost")], 64513, 1, "beside", "ddp")
    check_roles_per_host([Host("localhost")], 32255, 1, "beside", "ps")  # the most one host takes
    check_roles_per_host([Host("a"), Host("b"), Host("c")], 70000, 3, "beside", "ps")  # spread over three
