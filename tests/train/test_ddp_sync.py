"""The ddp back end on real processes: torch.distributed with gloo over loopback, started by `train launch`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import free_port, python_env
from job_helpers import tiny_job
from launch_helpers import TINY, launch, two_splits

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import make_plan
from clipflow.launch.roles import role_commands
from clipflow.train.comm import DDPConfig, lost_peer, timed_out
from clipflow.train.device import worker_device
from clipflow.train.interface import choose_interface, interface_with_address

pytestmark = pytest.mark.long  # a minute or more: started early under xdist (conftest's order)


def weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=False)["model"]


@pytest.mark.parametrize(
    "train",
    [{}, {"no_wd": True, "clip_grad": 0.05, "nesterov": True}],
    ids=["plain", "clipped-no-wd-nesterov"],
)
def test_ps_and_ddp_end_with_the_same_weights_from_the_same_start(tmp_path, tiny_videos, train):
    """Two workers, two epochs, the same seed: the parameter server sums each bucket as gloo's all-reduce does
    (two addends: the same float sum either way) and both run the same SGD, so every tensor is equal."""
    splits = two_splits(tmp_path, tiny_videos)
    recipe = {**TINY, "train": {**TINY["train"], "epochs": 2, **train}}
    runs = {}
    for backend, transport in (("ps", "zmq"), ("ddp", "gloo")):
        done = launch(tmp_path / backend, tiny_videos, splits, "--backend", backend, overrides=recipe)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"back end {backend}: gradients summed over 2 workers ({transport}, rank 0 on cpu)" in done.stdout
        if train:
            assert "gradients clipped to L2 norm 0.05 per worker before the sum" in done.stdout
        runs[backend] = done
    ps, ddp = weights(tmp_path / "ps" / "model.pt"), weights(tmp_path / "ddp" / "model.pt")
    assert ps.keys() == ddp.keys()
    for name in ps:
        assert torch.equal(ps[name], ddp[name]), name
    history = {b: [json.loads(x) for x in (tmp_path / b / "metrics.jsonl").read_text().splitlines()] for b in runs}
    assert [h["loss"] for h in history["ps"]] == [h["loss"] for h in history["ddp"]]
    assert history["ddp"][1]["loss"] < history["ddp"][0]["loss"]  # it trained
    assert "MASTER_ADDR" not in runs["ps"].stdout and not (tmp_path / "ddp" / "logs" / "scheduler-0.log").exists()


def test_a_ddp_run_killed_inside_an_epoch_falls_back_from_a_damaged_checkpoint_and_ends_with_the_same_weights(
    tmp_path, tiny_videos
):
    """Adam (its states broadcast from rank 0's checkpoint) and dropout 0.5 (drawn per worker and step); a
    checkpoint every iteration; worker 1 killed at epoch 2 iteration 3; the newest checkpoint (epoch 2, iteration 3)
    is then cut short. The rerun says so, resumes at epoch 2 iteration 2, and ends with the weights of an
    uninterrupted run."""
    splits = two_splits(tmp_path, tiny_videos, 8)
    recipe = {**TINY, "model": {"dropout": 0.5},
              "train": {**TINY["train"], "epochs": 2, "save_every_iters": 1, "keep_checkpoints": 10,
                        "optimizer": "adam", "wd": 0.0}}  # fmt: skip
    whole = launch(tmp_path / "whole", tiny_videos, splits, "--backend", "ddp", overrides=recipe)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    broken = tmp_path / "broken"
    failed = launch(broken, tiny_videos, splits, "--backend", "ddp", overrides=recipe,
                    env_extra={"CLIPFLOW_FAULT_KILL": "1:2:3"})  # fmt: skip
    assert failed.returncode != 0 and "worker 1 on localhost failed (killed by signal SIGKILL)" in failed.stdout
    folder = broken / "ckpt"
    newest = folder / "epoch_0002_iter_000003.pt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    resumed = launch(broken, tiny_videos, splits, "--backend", "ddp", overrides=recipe)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"checkpoint {newest} cannot be loaded" in resumed.stdout
    assert "epoch_0002_iter_000002.pt (epoch 2, iteration 2, step 6)" in resumed.stdout
    a, b = weights(tmp_path / "whole" / "model.pt"), weights(broken / "model.pt")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--update-on-kvstore"], "--update-on-kvstore needs the parameter server; drop it or use --backend ps"),
        (["--compression", "2bit"], "--compression 2bit needs the parameter server"),
        (["--kvstore", "dist_async"], "kvstore dist_async is a parameter-server mode; the ddp back end is synchronous"),
    ],
)
def test_ddp_refuses_parameter_server_settings_before_anything_starts(tmp_path, tiny_videos, flags, message, capsys):
    splits = two_splits(tmp_path, tiny_videos)
    done = launch(tmp_path, tiny_videos, splits, "--backend", "ddp", *flags, here=capsys)
    assert done.returncode == 2 and message in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "logs").exists()


GOOD = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(
    "env, message",
    [
        ({**GOOD, "WORLD_SIZE": ""}, "WORLD_SIZE is not set: it must be the number of training processes"),
        ({**GOOD, "RANK": "2"}, "RANK must be this process's rank, an integer 0..1 (WORLD_SIZE=2); got '2'"),
        ({**GOOD, "MASTER_ADDR": " "}, "MASTER_ADDR is not set: it must be the address of the rank 0 process"),
        ({**GOOD, "MASTER_PORT": "http"}, "MASTER_PORT must be the rank 0 process's port, 1..65535; got 'http'"),
        ({**GOOD, "MASTER_PORT": "70000"}, "got '70000'"),
        ({**GOOD, "CLIPFLOW_DDP_TIMEOUT": "-1"}, "CLIPFLOW_DDP_TIMEOUT must be seconds, a number > 0; got '-1'"),
    ],
)
def test_broken_ddp_variables_are_named(env, message):
    with pytest.raises(ClipflowError) as err:
        DDPConfig.from_env(env)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "env_extra, message",
    [
        ({}, "WORLD_SIZE is not set"),
        ({"CLIPFLOW_TORCH_THREADS": "many"},
         "CLIPFLOW_TORCH_THREADS must be an integer >= 1 (torch threads of this worker); got 'many'"),
        ({"CLIPFLOW_WORKERS_ON_HOST": "0"}, "CLIPFLOW_WORKERS_ON_HOST must be an integer >= 1; got '0'"),
    ],
)  # fmt: skip
def test_a_ddp_worker_with_a_missing_or_bad_variable_says_which(tmp_path, env_extra, message):
    env = {k: v for k, v in python_env().items() if k not in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(env_extra)
    job = tiny_job(tmp_path, "ddp").write()
    done = subprocess.run(
        [sys.executable, "-m", "clipflow", "train", "worker", "--job", str(job), "--rank", "0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize(("transport", "variable"), [("gloo", "GLOO_SOCKET_IFNAME"), ("nccl", "NCCL_SOCKET_IFNAME")])
def test_gloo_and_nccl_are_told_the_interface_of_the_worker_address_unless_the_user_chose_one(transport, variable):
    """Gloo otherwise binds where the host name resolves, loopback on many hosts (and on the network-namespace
    hosts, where evaluation across hosts failed with 'Connection refused' before this); NCCL takes the first
    interface that is not loopback, maybe one the other hosts cannot reach. The same choice names each one's
    variable."""
    assert interface_with_address("127.0.0.1") == "lo" and interface_with_address("localhost") == "lo"
    assert interface_with_address("192.0.2.77") is None  # TEST-NET-1: on no interface here
    assert interface_with_address("no-such-host.invalid") is None
    env = {"CLIPFLOW_NODE_ADDRESS": "127.0.0.1"}
    assert choose_interface(env, transport) == "lo" and env == {"CLIPFLOW_NODE_ADDRESS": "127.0.0.1", variable: "lo"}
    mine = {"CLIPFLOW_NODE_ADDRESS": "127.0.0.1", variable: "eth7"}
    assert choose_interface(mine, transport) == "eth7" and mine[variable] == "eth7"
    unknown = {"CLIPFLOW_NODE_ADDRESS": "192.0.2.77"}
    assert choose_interface(unknown, transport) is None and variable not in unknown


def test_a_collective_or_rendezvous_past_its_timeout_is_a_communication_failure():
    gloo = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 600000ms for recv operation"
    store = "The client socket has timed out after 600000ms while trying to connect to (10.0.0.1, 9091)."
    assert timed_out(RuntimeError(gloo)) and timed_out(RuntimeError(store))
    assert not timed_out(RuntimeError("Connection closed by peer")) and not timed_out(ValueError("bad value"))


def test_a_rank_that_waits_past_the_ddp_timeout_exits_76_naming_the_timeout(tmp_path):
    """One worker of two, alone: the rendezvous waits for the other past CLIPFLOW_DDP_TIMEOUT (2 s)."""
    env = {**python_env(), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "CLIPFLOW_DDP_TIMEOUT": "2"}  # fmt: skip
    job = tiny_job(tmp_path, "ddp").write()
    done = subprocess.run([sys.executable, "-m", "clipflow", "train", "worker", "--job", str(job), "--rank", "0"],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 76, done.stdout + done.stderr
    assert "clipflow: communication failure: ddp rank 0: torch.distributed waited longer than 2 s" in done.stderr
    assert "(CLIPFLOW_DDP_TIMEOUT)" in done.stderr and "Traceback" not in done.stderr


def test_only_a_lost_connection_counts_as_another_process_leaving():
    gloo = "[../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:35030"
    assert lost_peer(RuntimeError(gloo)) and lost_peer(RuntimeError("Connection reset by peer"))
    assert not lost_peer(RuntimeError("CUDA out of memory")) and not lost_peer(ValueError("bad value"))


def test_ddp_roles_are_the_workers_with_torchrun_variables():
    """No Slurm controller here (node names need not resolve): the commands and environments the launcher would run,
    3 workers over 2 nodes, the first taking 2 (workers 0 and 1)."""
    plan = make_plan("slurm", [Host("gpu01", slots=2), Host("gpu02")], 3, 2, 9100, 30, "none")
    commands = role_commands(plan, ["python", "train.py"], {"EXTRA": "1"}, backend="ddp")
    assert [(c.role.role, c.role.rank, c.role.host) for c in commands] == [
        ("worker", 0, "gpu01"), ("worker", 1, "gpu01"), ("worker", 2, "gpu02"),
    ]  # fmt: skip
    env = [c.env for c in commands]
    assert {e["MASTER_ADDR"] for e in env} == {"gpu01"} and {e["MASTER_PORT"] for e in env} == {"9100"}
    assert [e["CLIPFLOW_NODE_ADDRESS"] for e in env] == ["gpu01", "gpu01", "gpu02"]  # each worker's own
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in env] == [
        ("0", "3", "0", "2"), ("1", "3", "1", "2"), ("2", "3", "0", "1"),
    ]  # fmt: skip
    assert all(e["EXTRA"] == "1" and not any(k.startswith("DMLC_") for k in e) for e in env)
    ps = [c for c in role_commands(plan, ["python", "train.py"], backend="ps") if c.role.role == "worker"]
    assert [(c.env["DMLC_RANK"], c.env["LOCAL_RANK"]) for c in ps] == [("0", "0"), ("1", "1"), ("2", "0")]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"CLIPFLOW_DEVICE": "tpu"}, "CLIPFLOW_DEVICE must be one of auto, cpu, cuda; got 'tpu'"),
        ({"LOCAL_RANK": "first"}, "LOCAL_RANK must be this worker's index on its host, an integer >= 0; got 'first'"),
        ({"CLIPFLOW_DEVICE": "cuda"}, "CLIPFLOW_DEVICE is cuda but torch sees no GPU on this host; use auto or cpu"),
    ],
)
def test_a_bad_device_setting_is_named(env, message):
    if env.get("CLIPFLOW_DEVICE") == "cuda" and torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    with pytest.raises(ClipflowError) as err:
        worker_device(env)
    assert message in str(err.value)


def test_without_a_gpu_every_worker_trains_on_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert worker_device({"LOCAL_RANK": "3"}) == torch.device("cpu")
    assert worker_device({"CLIPFLOW_DEVICE": "cpu", "LOCAL_RANK": "0"}) == torch.device("cpu")
