"""What a step should cost on a plan's links: the bytes each host must move and the time that takes.

A data-parallel step is a worker's compute (forward and backward of its batch) followed by the exchange of the
gradient, ``G`` bytes (float32). The model here counts the bytes that leave each host's link per step, which is
what bounds the exchange when the links are the slow part, and adds it to the compute (no overlap assumed: a
bound, met where the exchange starts after the backward, as in ``bench/cluster_scaling.py``).

With ``N`` hosts of ``w`` workers each (``P = N w`` workers), one server per host holding ``1/N`` of every key:

* ``ps`` (each worker pushes and pulls its own copy): a host sends its ``w`` workers' pushes of the ``(N-1)/N``
  held elsewhere, and its server's replies to the ``(N-1) w`` workers elsewhere: ``2 w (N-1)/N G``.
* ``ps`` with per-host aggregation (``dist_sync_device``: the host's workers sum first, one push per host):
  ``2 (N-1)/N G``, what a ring all-reduce over the hosts moves.
* ``ddp`` (gloo's ring over the ``P`` workers in rank order): each ring edge carries ``2 (P-1)/P G``; a host
  sends over as many edges as it has workers whose next rank is on another host: one when ranks are grouped by
  host, ``w`` when they take turns over the hosts (the ``beside`` placement's order).

Links are full duplex and each host sends as much as it receives, so the exchange takes the bytes sent over the
host's bandwidth, plus a latency for each of its rounds: 2 for the parameter server (push, then the reply),
``2 (P-1)`` for the ring. On one host nothing crosses a link and the step is the compute alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from clipflow.errors import ClipflowError

BACKENDS = ("ps", "ps-host", "ddp")  # ps-host: the parameter server with per-host aggregation


@dataclass(frozen=True)
class PlanShape:
    hosts: int
    workers_per_host: int
    grouped: bool = True  # worker ranks grouped by host (else they take turns over the hosts)

    @property
    def workers(self) -> int:
        return self.hosts * self.workers_per_host

    def ring_edges_out(self) -> int:
        """Ring edges (rank r to r+1, the last to 0) that leave one host."""
        return 1 if self.grouped or self.workers_per_host == 1 else self.workers_per_host


@dataclass(frozen=True)
class StepPrediction:
    backend: str
    step_s: float  # compute + exchange
    exchange_s: float
    bytes_per_host: float  # sent by each host over its link per step
    efficiency: float  # the one-host step time over this one: throughput per worker against one host's


def bytes_per_host(backend: str, shape: PlanShape, grad_bytes: float) -> float:
    """The bytes each host sends over its link per step (as many arrive), by the formulas above."""
    n, w, p = shape.hosts, shape.workers_per_host, shape.workers
    if n == 1:
        return 0.0
    if backend == "ps":
        return 2 * w * (n - 1) / n * grad_bytes
    if backend == "ps-host":
        return 2 * (n - 1) / n * grad_bytes
    if backend == "ddp":
        return shape.ring_edges_out() * 2 * (p - 1) / p * grad_bytes
    raise ClipflowError(f"no step prediction for back end {backend!r}; known: {', '.join(BACKENDS)}")


def rounds(backend: str, shape: PlanShape) -> int:
    """Latencies a step waits for: request and reply for the parameter server, 2 (P-1) hops for a ring."""
    if shape.hosts == 1:
        return 0
    return 2 * (shape.workers - 1) if backend == "ddp" else 2


def predict_step(backend: str, shape: PlanShape, grad_bytes: float, compute_s: float, gbit_s: float,
                 latency_ms: float) -> StepPrediction:  # fmt: skip
    """The step time of ``shape`` on links of ``gbit_s`` (each host's, both ways) and ``latency_ms`` (one way),
    for a model of ``grad_bytes`` whose forward and backward take ``compute_s`` on a worker."""
    if shape.hosts < 1 or shape.workers_per_host < 1:
        raise ClipflowError(f"a plan needs at least one host and one worker on each, got {shape}")
    if gbit_s <= 0 or latency_ms < 0 or compute_s < 0 or grad_bytes < 0:
        raise ClipflowError(
            f"a step prediction needs a bandwidth > 0 and a latency, compute time and size >= 0; got {gbit_s} "
            f"Gbit/s, {latency_ms} ms, {compute_s} s, {grad_bytes} bytes"
        )
    sent = bytes_per_host(backend, shape, grad_bytes)
    exchange = sent * 8 / (gbit_s * 1e9) + rounds(backend, shape) * latency_ms / 1e3
    step = compute_s + exchange
    return StepPrediction(backend, step, exchange, sent, compute_s / step if step > 0 else 1.0)
