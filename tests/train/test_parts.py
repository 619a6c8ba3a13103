"""Training parts that need no cluster: schedules, the scaling rule, checkpoints, fault settings."""

import json
import math

import pytest
import torch

from clipflow.checksums import parse_checksum, sha256_of
from clipflow.environment import ClipflowEnv
from clipflow.errors import ClipflowError
from clipflow.made import RECORD
from clipflow.train.checkpoint import CheckpointStore, atomic_save
from clipflow.train.faults import FaultInjector
from clipflow.train.schedule import Schedule, scaled_lr


def test_linear_scaling_rule_matches_the_gluoncv_tutorial():
    # base 0.1 for one machine of 8 GPUs x 8 clips; 4 machines -> 0.4
    assert scaled_lr(0.1, 64, 4 * 8 * 8) == pytest.approx(0.4)


def test_warmup_then_cosine():
    s = Schedule(lr=0.4, epochs=196, iters_per_epoch=100, mode="cosine", warmup_epochs=34, warmup_lr=0.01)
    assert s(0) == pytest.approx(0.01)
    assert s(1700) == pytest.approx(0.01 + (0.4 - 0.01) * 1700 / 3400)
    assert s(3400) == pytest.approx(0.4)
    mid = 3400 + (19600 - 3400) // 2
    assert s(mid) == pytest.approx(0.2)
    assert s(19600) == pytest.approx(0.0, abs=1e-12)


def test_step_and_poly():
    step = Schedule(lr=0.1, epochs=30, iters_per_epoch=10, mode="step", lr_decay_epoch=(10, 20))
    assert [step(0), step(100), step(250)] == pytest.approx([0.1, 0.01, 0.001])
    poly = Schedule(lr=0.1, epochs=10, iters_per_epoch=10, mode="poly")
    assert poly(50) == pytest.approx(0.1 * 0.5**2)
    with pytest.raises(ValueError, match="lr_mode"):
        Schedule(lr=0.1, epochs=1, iters_per_epoch=1, mode="exp")
    assert not math.isnan(Schedule(lr=0.1, epochs=1, iters_per_epoch=1, warmup_epochs=1)(1))


def test_checkpoints_keep_the_newest_and_fall_back_from_a_damaged_one(tmp_path):
    said = []
    store = CheckpointStore(tmp_path, keep=2, log=said.append)
    for epoch in (1, 2, 3):
        store.save({"model": {"w": torch.full((3,), float(epoch))}, "epoch": epoch}, epoch)
    assert store.epochs() == [2, 3]
    state, path = store.load_newest()
    assert state["epoch"] == 3 and path.name == "epoch_0003.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    state, path = store.load_newest()
    assert state["epoch"] == 2
    assert "epoch_0003.pt cannot be loaded" in said[0]
    assert (tmp_path / "epoch_0003.pt").exists(), "a damaged checkpoint is kept for the user to look at"
    assert not list(tmp_path.glob(".*.tmp"))


def test_atomic_save_leaves_the_old_file_when_saving_fails(tmp_path):
    target = tmp_path / "model.pt"
    atomic_save({"a": 1}, target)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_save({"a": Unpicklable()}, target)
    assert torch.load(target, weights_only=False) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "model.pt.sha256"]
    assert (tmp_path / "model.pt.sha256").read_text() == f"{sha256_of(target)}  model.pt\n"  # the old file's


def test_pruned_checkpoints_take_their_checksums_along(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for epoch in (1, 2, 3):
        store.save({"model": {}}, epoch)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != RECORD) == [  # RECORD: which are the run's
        "epoch_0002.pt", "epoch_0002.pt.sha256", "epoch_0003.pt", "epoch_0003.pt.sha256",
    ]  # fmt: skip
    assert parse_checksum((tmp_path / "epoch_0003.pt.sha256").read_text(), "epoch_0003.pt") == sha256_of(
        tmp_path / "epoch_0003.pt"
    )


def test_fault_setting():
    def parse(value: str):
        return ClipflowEnv.from_env({"CLIPFLOW_FAULT_KILL": value}).fault_kill

    assert parse("1:2") == (1, 2, 0) and parse("0:3:5") == (0, 3, 5) and parse("") is None
    with pytest.raises(ClipflowError, match="CLIPFLOW_FAULT_KILL"):
        parse("worker1")
    assert FaultInjector(0, {"CLIPFLOW_FAULT_KILL": "1:2"}).at is None
    assert FaultInjector(1, {"CLIPFLOW_FAULT_KILL": "1:2"}).at == (2, 0)
    assert FaultInjector(1, {"CLIPFLOW_FAULT_STEP_S": "0.25"}).step_s == 0.25
    assert FaultInjector(1, {}).step_s == 0.0


def test_no_wd_spares_biases_and_batchnorm_and_decays_the_rest():
    from clipflow.models.builder import build_model
    from clipflow.recipe import load_recipe
    from clipflow.train.trainer import no_decay_mults

    model = build_model(load_recipe("slowfast_tiny_synthetic")["model"])
    mults = no_decay_mults(model)
    assert set(mults) == {name for name, _ in model.named_parameters()}
    bn = {f"{m}.{n}" for m, mod in model.named_modules() if isinstance(mod, torch.nn.BatchNorm3d)
          for n, _ in mod.named_parameters(recurse=False)}  # fmt: skip
    assert bn and all(mults[name] == 0.0 for name in bn)
    assert all(mults[name] == 0.0 for name in mults if name.endswith(".bias"))
    decayed = [name for name, m in mults.items() if m == 1.0]
    assert decayed and all(name.endswith("weight") and name not in bn for name in decayed)
    assert any(".conv" in name or "fuse" in name for name in decayed) and "head.weight" in " ".join(decayed)


def test_recipe_gradient_clipping_and_no_wd_are_checked():
    from clipflow.recipe import load_recipe

    recipe = load_recipe("slowfast_tiny_synthetic")
    assert recipe["train"]["clip_grad"] == 0 and recipe["train"]["no_wd"] is False
    with pytest.raises(ClipflowError, match=r"train.clip_grad: -1 is less than the minimum of 0"):
        load_recipe("slowfast_tiny_synthetic", {"train": {"clip_grad": -1}})
    with pytest.raises(ClipflowError, match=r"train.no_wd: 'yes' is not of type 'boolean'"):
        load_recipe("slowfast_tiny_synthetic", {"train": {"no_wd": "yes"}})


def test_a_workers_samples_of_a_plan_are_its_own_only_where_the_plan_names_its_very_parts():
    from clipflow.train.slots import EpochPlan, own_indices

    parts = [[f"videos/w{r}/p{m}/{i}.mp4 {i} 30" for i in range(3)] for r in range(2) for m in range(2)]
    lanes = [[(s, 2), (s, 0)] for s in range(4)] + [[(3, 1)]]  # 2 workers x 2 slots; a 5th lane no worker's
    plan = EpochPlan(lanes[:4], parts, 8)
    assert own_indices(plan, 1, 2, parts[2:], 3) == [[2, 0], [5, 3]]  # part m's key at m x 3 + key
    assert own_indices(plan, 0, 2, parts[:2], 3) == [[2, 0], [5, 3]]
    moved = EpochPlan([[(2, 1), (3, 0)], *lanes[1:4]], parts, 8)  # worker 0's first slot drew worker 1's samples
    assert own_indices(moved, 0, 2, parts[:2], 3) == [[None, None], [5, 3]]
    other = [list(p) for p in parts]
    other[3] = ["videos/elsewhere.mp4 0 30"] * 3  # the checkpoint's part 3 is not this worker's list
    assert own_indices(EpochPlan(lanes[:4], other, 8), 1, 2, parts[2:], 3) == [[2, 0], [None, None]]
    assert own_indices(EpochPlan([[(0, 3)], *lanes[1:4]], None, 8), 0, 2, parts[:2], 3)[0] == [None]  # past the part
    assert own_indices(EpochPlan(lanes[:4], None, 8), 1, 2, parts[2:], 3) == [[2, 0], [5, 3]]  # no sources: its own
    assert own_indices(EpochPlan(lanes[:4], parts[:3], 8), 1, 2, parts[2:], 3)[1] == [None, None]  # a plan short


def test_a_plan_travels_deflated_three_bytes_a_float_and_comes_back_whole():
    from clipflow.train.slots import EpochPlan

    sources = [[f"videos/train/classé {i % 7}/clip {i:06d}.mp4 {i % 7} 300" for i in range(3000)] for _ in range(2)]
    plan = EpochPlan([[(0, i) for i in range(2999, -1, -1)], [(1, 2**20 + 1)]], sources, 6000, first=17)
    sent = plan.encode()
    assert sent.dtype == torch.float32 and float(sent.max()) < 2**24  # exact in float32 on every back end
    text = len(json.dumps({"lanes": plan.lanes, "sources": sources}).encode())
    assert sent.numel() * 4 < text / 4  # as bytes a float each it was 4 x the text
    back = EpochPlan.decode(sent)
    assert (back.lanes, back.sources, back.total, back.first) == (plan.lanes, sources, 6000, 17)
