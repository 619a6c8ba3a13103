"""The hosts file and the inline cluster.hosts list: what parses to which Host, and what each error says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host, hosts_from_config, parse_host, parse_hosts, read_hosts_file

GOOD_FILE = """\
# the cluster for the SlowFast runs

node1
alice@node2.example.org:2222 slots=4
   10.0.0.5:2200   # trailing comment
[fe80::1]:2222 slots=2
bob@fe80::2
deploy_user@gpu-03 slots=8
[::1]
"""

GOOD_HOSTS = [
    Host("node1"),
    Host("node2.example.org", user="alice", port=2222, slots=4),
    Host("10.0.0.5", port=2200),
    Host("fe80::1", port=2222, slots=2),
    Host("fe80::2", user="bob"),
    Host("gpu-03", user="deploy_user", slots=8),
    Host("::1"),
]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.txt"
    path.write_text(text)
    return path


def test_good_file_parses_to_exact_hosts(tmp_path):
    assert read_hosts_file(write(tmp_path, GOOD_FILE)) == GOOD_HOSTS


def test_parse_hosts_takes_lines_with_newlines():
    assert parse_hosts(["node1\n", "\n", "# only a comment\n", "node2:23 slots=3\r\n"], "hosts.txt") == [
        Host("node1"),
        Host("node2", port=23, slots=3),
    ]


@pytest.mark.parametrize(
    ("host", "text"),
    [
        (Host("node1"), "node1"),
        (Host("node2.example.org", user="alice", port=2222, slots=4), "alice@node2.example.org:2222 slots=4"),
        (Host("node3", port=22, slots=1), "node3"),
        (Host("fe80::1", port=2222, slots=2), "[fe80::1]:2222 slots=2"),
        (Host("fe80::2", user="bob"), "bob@fe80::2"),
        (Host("10.0.0.5", port=2200), "10.0.0.5:2200"),
    ],
)
def test_str_is_canonical_and_round_trips(host, text):
    assert str(host) == text
    assert parse_host(str(host), "test") == host


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_every_good_host_round_trips(host):
    assert parse_host(str(host), "test") == host


def test_target_is_user_at_host_without_port():
    assert Host("node2", user="alice", port=2222).target == "alice@node2"
    assert Host("node1", port=2222).target == "node1"
    assert Host("fe80::1", user="bob", port=2222).target == "bob@fe80::1"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("user@", "the host name is missing after '@'"),
        ("@host", "the user name is missing before '@'"),
        ("host:", "the port is missing after ':'"),
        ("host:abc", "the port 'abc' is not a number"),
        ("host:70000", "the port 70000 is out of range"),
        ("host:0", "the port 0 is out of range"),
        ("ho st", "unexpected 'st' after the host"),
        ("host slots=0", "slots='0' is not a whole number >= 1"),
        ("host slots=x", "slots='x' is not a whole number >= 1"),
        ("host color=red", "unknown option 'color'"),
        ("[::1", "'[' is not closed by ']'"),
        ("bad_host_name!", "'bad_host_name!' is not a valid host name"),
        ("[node1]:22", "'node1' is not an IPv6 address"),
        ("300.1.1.1", "'300.1.1.1' is not an IPv4 address"),
        ("a@b@c", "more than one '@'"),
        ("host slots=2 slots=3", "option 'slots' given twice"),
    ],
)
def test_bad_line_names_line_number_and_quotes_text(line, problem):
    lines = ["# header", "good-node", line]
    with pytest.raises(ClipflowError, match=re.escape(f"hosts.txt line 3: {line!r}: {problem}; expected ")):
        parse_hosts(lines, "hosts.txt")


def test_bad_line_quotes_the_whole_line_with_its_comment():
    with pytest.raises(ClipflowError, match=re.escape("hosts.txt line 1: 'host:0  # the old port'")):
        parse_hosts(["host:0  # the old port"], "hosts.txt")


def test_port_error_says_what_is_expected():
    with pytest.raises(ClipflowError, match=re.escape("expected a port number from 1 to 65535")):
        parse_host("host:70000", "hosts.txt line 1")


def test_duplicate_host_names_both_lines(tmp_path):
    path = write(tmp_path, "alice@node1:2222\nnode2\n\nalice@NODE1:2222 slots=2\n")
    expected = f"{path} line 4: 'alice@NODE1:2222 slots=2' names the same host as line 1 ('alice@node1:2222')"
    with pytest.raises(ClipflowError, match=re.escape(expected)):
        read_hosts_file(path)


def test_same_host_with_other_port_or_user_is_no_duplicate():
    hosts = parse_hosts(["node1", "node1:2222", "alice@node1"], "hosts.txt")
    assert [(h.user, h.port) for h in hosts] == [(None, 22), (None, 2222), ("alice", 22)]


def test_duplicate_ipv6_compares_by_address():
    with pytest.raises(ClipflowError, match=re.escape("line 2: '[0::1]' names the same host as line 1 ('::1')")):
        parse_hosts(["::1", "[0::1]"], "hosts.txt")


def test_empty_file_is_an_error(tmp_path):
    path = write(tmp_path, "# no hosts yet\n\n   \n")
    with pytest.raises(ClipflowError, match=re.escape(f"{path}: no hosts found")):
        read_hosts_file(path)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "hosts.txt"
    with pytest.raises(ClipflowError, match=re.escape(f"hosts file {path} does not exist")):
        read_hosts_file(path)


def test_inline_config_list_parses():
    assert hosts_from_config(["node1", "alice@node2:2222 slots=4"]) == [
        Host("node1"),
        Host("node2", user="alice", port=2222, slots=4),
    ]


def test_inline_config_error_names_the_index():
    with pytest.raises(ClipflowError, match=re.escape("cluster.hosts[1]: 'node2:abc': the port 'abc' is not a number")):
        hosts_from_config(["node1", "node2:abc"])


def test_inline_config_duplicate_names_both_indexes():
    with pytest.raises(
        ClipflowError, match=re.escape("cluster.hosts[2]: 'node1' names the same host as cluster.hosts[0]")
    ):
        hosts_from_config(["node1", "node2", "node1"])


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "cluster.hosts is empty"),
        ("node1,node2", "cluster.hosts: expected a list of hosts"),
        (["node1", 7], "cluster.hosts[1]: expected a string"),
    ],
)
def test_inline_config_wrong_shape(items, message):
    with pytest.raises(ClipflowError, match=re.escape(message)):
        hosts_from_config(items)
