"""Which device a worker trains on: one process per device, as torchrun does it.

A host with ``slots=N`` in the hosts file runs N workers; the launcher gives each its
index on the host (LOCAL_RANK, with both back ends), and worker ``i`` takes GPU ``i``
when the host has GPUs, so a machine with 8 GPUs runs 8 workers, each with its own
device and its own share of every batch (GluonCV's ``--num-gpus 8`` on one worker
computes the same sums: one gradient over 8 x batch clips). Without a GPU every
worker trains on the CPU, sharing the host's cores.

``CLIPFLOW_DEVICE`` = ``auto`` (default: cuda when there is a GPU, else cpu), ``cpu``
or ``cuda``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from clipflow.environment import int_var, read_env
from clipflow.errors import ClipflowError


def worker_device(environ: Mapping[str, str] | None = None) -> torch.device:
    """This worker's device, from CLIPFLOW_DEVICE and LOCAL_RANK."""
    env = os.environ if environ is None else environ
    kind = read_env(env).device
    local_rank = int_var(env, "LOCAL_RANK", "this worker's index on its host, an integer >= 0", low=0, default=0)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "cpu" or (kind == "auto" and gpus == 0):
        return torch.device("cpu")
    if gpus == 0:
        raise ClipflowError("CLIPFLOW_DEVICE is cuda but torch sees no GPU on this host; use auto or cpu")
    if local_rank >= gpus:
        raise ClipflowError(
            f"worker {local_rank} of this host has no GPU of its own: the host has {gpus}; "
            f"give it slots={gpus} or fewer in the hosts file"
        )
    return torch.device("cuda", local_rank)
