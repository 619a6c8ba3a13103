"""The step-time model of clipflow.cluster.step_prediction: its byte counts against each other (aggregation
divides the parameter server's by the workers on a host; with one worker a host, the three exchanges move what a
ring over the hosts moves), one host moving nothing, and bad figures refused."""

from __future__ import annotations

import pytest

from clipflow.cluster.step_prediction import PlanShape, bytes_per_host, predict_step
from clipflow.errors import ClipflowError

G = 138e6  # SlowFast 4x16 R50's gradient, 34.5M float32


@pytest.mark.parametrize("hosts, per_host", [(2, 2), (3, 2), (4, 8)])
def test_aggregation_divides_the_parameter_servers_bytes_by_the_workers_on_a_host(hosts, per_host):
    shape = PlanShape(hosts, per_host)
    assert bytes_per_host("ps", shape, G) == pytest.approx(per_host * bytes_per_host("ps-host", shape, G))
    ring_over_hosts = 2 * (hosts - 1) / hosts * G
    assert bytes_per_host("ps-host", shape, G) == pytest.approx(ring_over_hosts)
    assert bytes_per_host("ddp", shape, G) > ring_over_hosts  # the ring over all P workers moves 2(P-1)/P G


@pytest.mark.parametrize("hosts", [2, 3, 5])
def test_with_one_worker_a_host_every_exchange_moves_a_ring_over_the_hosts(hosts):
    shape = PlanShape(hosts, 1)
    sizes = {b: bytes_per_host(b, shape, G) for b in ("ps", "ps-host", "ddp")}
    assert sizes["ps"] == pytest.approx(sizes["ps-host"]) == pytest.approx(sizes["ddp"])


def test_ranks_taking_turns_over_the_hosts_send_one_ring_edge_per_worker():
    grouped, turns = PlanShape(3, 2), PlanShape(3, 2, grouped=False)
    assert bytes_per_host("ddp", turns, G) == pytest.approx(2 * bytes_per_host("ddp", grouped, G))


def test_one_host_is_the_compute_alone_and_more_hosts_cost_the_bytes_over_the_bandwidth():
    alone = predict_step("ps-host", PlanShape(1, 2), G, 0.6, 25, 0.05)
    assert (alone.step_s, alone.exchange_s, alone.efficiency) == (0.6, 0.0, 1.0)
    three = predict_step("ps-host", PlanShape(3, 2), G, 0.6, 25, 0.05)
    wire = bytes_per_host("ps-host", PlanShape(3, 2), G) * 8 / 25e9
    assert three.exchange_s == pytest.approx(wire + 2 * 0.05e-3)
    assert three.efficiency == pytest.approx(0.6 / (0.6 + three.exchange_s))


@pytest.mark.parametrize(
    "args, named",
    [(("ps", PlanShape(0, 2), G, 0.6, 25, 0.05), "at least one host"),
     (("ps", PlanShape(2, 2), G, 0.6, 0, 0.05), "bandwidth > 0"),
     (("ps", PlanShape(2, 2), G, -1, 25, 0.05), "-1 s"),
     (("allreduce", PlanShape(2, 2), G, 0.6, 25, 0.05), "'allreduce'")],
)  # fmt: skip
def test_bad_figures_are_refused_naming_them(args, named):
    with pytest.raises(ClipflowError, match=named):
        predict_step(*args)


def test_the_cluster_check_reads_only_the_overrides_its_prediction_needs():
    from clipflow.cluster.prediction import shape_overrides

    overrides = {"train": {"epochs": 9, "base_lr": 0.4, "batch_size": 8}, "model": {"width": 16},
                 "data": {"new_length": 32}, "description": "x"}  # fmt: skip
    assert shape_overrides(overrides) == {"model": {"width": 16}, "data": {"new_length": 32},
                                          "train": {"batch_size": 8}}  # fmt: skip
    assert shape_overrides({"train": {"epochs": 2}}) == {}  # epochs alone: the cluster check's params stay
