"""Worker programs for tests/ps/test_semantics.py, run as ``python tests/ps/ps_semantics_helpers.py SCENARIO``.

Each reads the DMLC_* environment like a real trainer, prints one JSON line of
facts and writes arrays for the test under PYTEST_CLIPFLOW_DIR.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from clipflow.ps import KVStore
from clipflow.train.ps_sync import PSSync

STEPS = 5
HALF_BATCH = 8  # per worker; the single-process reference uses 2 * HALF_BATCH
MOMENTUM, WD = 0.9, 1e-4
GC_KEYS = (4_000_000, 4_000_001)
GC_SIZES = (100, 37)  # 100 > MXNET_KVSTORE_BIGARRAY_BOUND=50 in the test: split over both servers
GC_ROUNDS = 3
FIT_STEPS, FIT_BATCH, FIT_LR, FIT_MOMENTUM = 40, 16, 0.1, 0.5  # dist_sync against dist_async

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


def lr_at(step: int) -> float:
    return 0.1 * (1.0 - 0.15 * step)  # changes every step: the schedule must reach the servers


def no_decay(name: str, _: torch.nn.Parameter) -> float:
    return 0.0 if name.endswith("bias") else 1.0


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3)
    )


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(STEPS * 2 * HALF_BATCH, 6, generator=gen)
    y = torch.randint(0, 3, (STEPS * 2 * HALF_BATCH,), generator=gen)
    return x, y


def reference(nesterov: bool) -> torch.nn.Module:
    """One process, plain torch, batch 2b."""
    model = make_model(0)
    decay = [p for n, p in model.named_parameters() if no_decay(n, p)]
    rest = [p for n, p in model.named_parameters() if not no_decay(n, p)]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
        lr=lr_at(0),
        momentum=MOMENTUM,
        nesterov=nesterov,
    )
    x, y = data()
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        sl = slice(step * 2 * HALF_BATCH, (step + 1) * 2 * HALF_BATCH)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[sl]), y[sl]).backward()
        opt.step()
    return model


def distributed(kv: KVStore, nesterov: bool, update_on_kvstore: bool, key_base: int) -> tuple[torch.nn.Module, PSSync]:
    """Two workers at batch b through PSSync; each starts from its own init, rank 0's wins."""
    model = make_model(kv.rank)
    optimizer = {
        "learning_rate": lr_at(0),
        "momentum": MOMENTUM,
        "wd": WD,
        "nesterov": nesterov,
        "rescale_grad": 1.0 / kv.num_workers,
    }
    ps = PSSync(
        model,
        kv,
        update_on_kvstore=update_on_kvstore,
        optimizer=optimizer,
        bucket_bytes=256,
        key_base=key_base,
        wd_mult=no_decay,
    )
    x, y = data()
    worker_steps(kv, ps, model, torch.nn.functional.cross_entropy, x, y, HALF_BATCH, STEPS, lr_at)
    return model, ps


def worker_steps(kv, ps, model, loss_fn, x, y, batch: int, steps: int, lr=None) -> None:
    """This worker's half of every global batch of 2 * batch: backward, synchronize, step."""
    for step in range(steps):
        if lr is not None:
            ps.set_learning_rate(lr(step))
        start = step * 2 * batch + kv.rank * batch
        sl = slice(start, start + batch)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x[sl]), y[sl]).backward()
        ps.synchronize()
        ps.step()


def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def fit_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(99)
    x = torch.randn(FIT_STEPS * FIT_BATCH * 2, 8, generator=gen)
    w = torch.randn(8, 1, generator=gen)
    return x, x @ w + 0.1 * torch.randn(x.shape[0], 1, generator=gen)


def fit(kv: KVStore, update_on_kvstore: bool) -> dict:
    """Linear least squares, each worker on its half of every batch of 2 * FIT_BATCH."""
    torch.manual_seed(7)
    model = torch.nn.Linear(8, 1)
    optimizer = {"learning_rate": FIT_LR, "momentum": FIT_MOMENTUM, "rescale_grad": 1.0 / kv.num_workers}
    ps = PSSync(model, kv, update_on_kvstore=update_on_kvstore, optimizer=optimizer, key_base=3_000_000)
    x, y = fit_data()
    with torch.no_grad():
        first = float(torch.nn.functional.mse_loss(model(x), y))
    worker_steps(kv, ps, model, torch.nn.functional.mse_loss, x, y, FIT_BATCH, FIT_STEPS)
    kv.barrier()
    if update_on_kvstore:
        ps.pull_weights()  # dist_async: the weights after everyone's last push
    xb = torch.cat([x, torch.ones(x.shape[0], 1)], dim=1).double()
    best = torch.linalg.lstsq(xb, y.double()).solution
    floor = float(((xb @ best - y.double()) ** 2).mean())
    with torch.no_grad():
        final = float(torch.nn.functional.mse_loss(model(x), y))
    return {"first": first, "final": final, "floor": floor}


def compressed_pushpull(kv: KVStore, out_dir: Path) -> None:
    """Rounds of 2-bit pushpull on a split and a whole key; grads and results go to a file."""
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5}, keys=range(GC_KEYS[0], GC_KEYS[-1] + 1))
    kv.init(list(GC_KEYS), [torch.zeros(n) for n in GC_SIZES])
    rng = np.random.default_rng(1000 + kv.rank)
    saved: dict[str, np.ndarray] = {}
    for round_ in range(GC_ROUNDS):
        grads = [torch.from_numpy(rng.normal(0.0, 0.6, n).astype(np.float32)) for n in GC_SIZES]
        outs = [torch.zeros(n) for n in GC_SIZES]
        kv.pushpull(list(GC_KEYS), grads, outs)
        for k, g, o in zip(GC_KEYS, grads, outs, strict=True):
            saved[f"grad_{k}_{round_}"] = g.numpy()
            saved[f"sum_{k}_{round_}"] = o.numpy()
    np.savez(out_dir / f"gc_rank{kv.rank}.npz", **saved)


CLIP = 0.05  # below the gradients' norms at these steps: every worker's gradients are scaled


def clipped_reference(clip: float | None) -> torch.nn.Module:
    """One process, plain torch: each worker's half-batch gradients clipped to norm ``clip`` on their own
    (GluonCV's --clip-grad before the kvstore; None: not clipped), then averaged; SGD with momentum."""
    model = make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=lr_at(0), momentum=MOMENTUM)
    x, y = data()
    for step in range(STEPS):
        opt.param_groups[0]["lr"] = lr_at(step)
        halves = []
        for rank in range(2):
            start = step * 2 * HALF_BATCH + rank * HALF_BATCH
            model.zero_grad()
            torch.nn.functional.cross_entropy(
                model(x[start : start + HALF_BATCH]), y[start : start + HALF_BATCH]
            ).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip)
            halves.append([p.grad.clone() for p in model.parameters()])
        for p, a, b in zip(model.parameters(), *halves, strict=True):
            p.grad = (a + b) / 2
        opt.step()
    return model


def clipped(kv: KVStore) -> tuple[torch.nn.Module, PSSync]:
    model = make_model(kv.rank)
    optimizer = {"learning_rate": lr_at(0), "momentum": MOMENTUM, "rescale_grad": 1.0 / kv.num_workers}
    ps = PSSync(model, kv, optimizer=optimizer, bucket_bytes=256, key_base=5_000_000, clip_norm=CLIP)
    x, y = data()
    worker_steps(kv, ps, model, torch.nn.functional.cross_entropy, x, y, HALF_BATCH, STEPS, lr_at)
    return model, ps


def scenario_sync(kv: KVStore) -> dict:
    nesterov = os.environ["PYTEST_CLIPFLOW_NESTEROV"] == "1"
    out_dir = Path(os.environ["PYTEST_CLIPFLOW_DIR"])
    ref = reference(nesterov)
    local, local_ps = distributed(kv, nesterov, update_on_kvstore=False, key_base=1_000_000)
    remote, remote_ps = distributed(kv, nesterov, update_on_kvstore=True, key_base=2_000_000)
    facts: dict = {
        "rank": kv.rank,
        "buckets": len(local_ps.keys),
        "pushed_in_backward": local_ps.pushed_in_backward + remote_ps.pushed_in_backward,
        "pushed_in_sync": local_ps.pushed_in_sync + remote_ps.pushed_in_sync,
        "local_vs_ref": max_diff(local, ref),
        "remote_vs_ref": max_diff(remote, ref),
        "remote_vs_local": max_diff(remote, local),
    }
    # the momentum buffers: the servers' (split keys reassembled) against the local optimizer's
    local_states = local_ps.optimizer_states()
    remote_states = remote_ps.optimizer_states()
    facts["state_keys"] = [sorted(local_states), sorted(remote_states)]
    facts["states_diff"] = max(
        float((local_states[k] - remote_states[k + 1_000_000].reshape(-1)).abs().max()) for k in local_states
    )
    # round trip through the servers: load other values, save, compare bit for bit; then restore
    saved = kv.save_optimizer_states()
    kv.barrier()  # everyone has saved before rank 0 loads other values
    other = {k: torch.randn(v.shape, generator=torch.Generator().manual_seed(k)) for k, v in saved.items()}
    kv.load_optimizer_states(other)
    back = kv.save_optimizer_states()
    kv.barrier()  # everyone has read the loaded values before rank 0 restores the saved ones
    facts["roundtrip_keys"] = [sorted(saved), sorted(back)]
    facts["roundtrip_equal"] = all(torch.equal(back[k], other[k]) for k in other)
    kv.load_optimizer_states(saved)
    facts["restored_equal"] = all(torch.equal(v, saved[k]) for k, v in kv.save_optimizer_states().items())
    facts["state_shapes"] = {str(k): list(v.shape) for k, v in saved.items()}
    facts["fit"] = fit(kv, update_on_kvstore=False)
    clip_model, clip_ps = clipped(kv)
    facts["clipped_vs_ref"] = max_diff(clip_model, clipped_reference(CLIP))
    facts["clipped_vs_unclipped_ref"] = max_diff(clip_model, clipped_reference(None))
    facts["clipped_pushed_in_backward"] = clip_ps.pushed_in_backward
    compressed_pushpull(kv, out_dir)
    kv.barrier()
    return facts


def scenario_async(kv: KVStore) -> dict:
    return {"rank": kv.rank, "fit": fit(kv, update_on_kvstore=True)}


SCENARIOS = {"sync": scenario_sync, "async": scenario_async}


def main() -> None:
    kv = KVStore.create(os.environ.get("PYTEST_CLIPFLOW_MODE", "dist_sync"))
    facts = SCENARIOS[sys.argv[1]](kv)
    kv.close()
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
