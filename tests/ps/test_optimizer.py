"""Adam beside SGD in clipflow.ps.optimizer: MXNet's formula, torch's Adam, states, and the servers running it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ps_cluster_helpers import _msg

from clipflow.ps.optimizer import Adam, Optimizer, create
from clipflow.ps.store import KeyValueStore
from clipflow.ps.wire import Message, Op

LRS = [0.01, 0.008, 0.005, 0.003, 0.002]


def grads(steps: int, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=n).astype(np.float32) for _ in range(steps)]


def mxnet_adam_float64(w, gs, lrs, beta1, beta2, eps, wd, rescale, wd_mult=1.0):
    """MXNet's Adam written out in float64: grad rescaled plus weight decay, bias correction in the rate."""
    w = w.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, (g, lr) in enumerate(zip(gs, lrs, strict=True), start=1):
        g = g.astype(np.float64) * rescale + wd * wd_mult * w
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w = w - lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) * m / (np.sqrt(v) + eps)
    return w


def test_adam_is_mxnets_formula():
    w0 = np.linspace(-1, 1, 50).astype(np.float32)
    gs = grads(5, 50)
    adam = Adam(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, wd=0.01, rescale_grad=0.5)
    adam.set_wd_mult({7: 0.5})
    w = w0.copy()
    for g, lr in zip(gs, LRS, strict=True):
        adam.update(7, w, g, lr=lr)
    expected = mxnet_adam_float64(w0, gs, LRS, 0.8, 0.99, 1e-6, 0.01, 0.5, wd_mult=0.5)
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-6)
    assert adam.states[7].shape == (2 * 50 + 1,) and adam.states[7][-1] == 5  # m, v and the step count


def test_adam_is_torch_adam_up_to_where_epsilon_sits():
    """torch divides by sqrt(v) / sqrt(1 - beta2^t) + eps; MXNet by sqrt(v) + eps: equal to within eps's share."""
    w0 = np.linspace(-1, 1, 50).astype(np.float32)
    param = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    reference = torch.optim.Adam([param], lr=LRS[0], weight_decay=0.01)
    adam = Adam(learning_rate=LRS[0], wd=0.01)
    w = w0.copy()
    for g, lr in zip(grads(5, 50), LRS, strict=True):
        reference.param_groups[0]["lr"] = lr
        param.grad = torch.from_numpy(g.copy())
        reference.step()
        adam.update(0, w, g, lr=lr)
    np.testing.assert_allclose(w, param.detach().numpy(), rtol=0, atol=1e-6)
    assert not np.allclose(w, w0, atol=1e-3)  # it moved


def test_adam_resumes_from_its_states_to_the_same_bits():
    w0 = np.linspace(-1, 1, 20).astype(np.float32)
    gs = grads(5, 20, seed=1)
    straight, w = Adam(), w0.copy()
    for g in gs:
        straight.update(3, w, g)
    first, resumed_w = Adam(), w0.copy()
    for g in gs[:3]:
        first.update(3, resumed_w, g)
    second = create(**first.config())
    second.set_states(first.get_states())
    for g in gs[3:]:
        second.update(3, resumed_w, g)
    np.testing.assert_array_equal(resumed_w, w)


def test_servers_run_adam_on_the_merged_gradient():
    store = KeyValueStore(server_rank=0, num_worker=2)
    w0 = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
    assert store.handle(b"w0", _msg(Op.INIT, 1, 0, [w0], 1))[0][1].op == Op.OK
    config = Adam(learning_rate=0.1, wd=0.01, rescale_grad=0.5).config()
    set_opt = Message(Op.SET_OPTIMIZER, {"seq": 2, "optimizer": config, "keys": [[1, 2]]})
    assert store.handle(b"w0", set_opt)[0][1].op == Op.OK
    g0, g1 = np.array([0.5, -1, 2, 0], dtype=np.float32), np.ones(4, dtype=np.float32)
    store.handle(b"w1", _msg(Op.PUSH, 1, 1, [g1], 3, sync=True, lr=0.1))
    replies = store.handle(b"w0", _msg(Op.PUSHPULL, 1, 0, [g0], 4, sync=True, lr=0.1))
    expected = mxnet_adam_float64(w0, [g0 + g1], [0.1], 0.9, 0.999, 1e-8, 0.01, 0.5)
    np.testing.assert_allclose(replies[1][1].arrays[0], expected, rtol=0, atol=1e-6)
    states = store.handle(b"w0", Message(Op.GET_STATES, {"seq": 5}))[0][1]
    assert states.arrays[0].shape == (9,) and states.arrays[0][-1] == 1
    switch = Message(Op.SET_OPTIMIZER, {"seq": 6, "optimizer": {"name": "sgd"}, "keys": [[1, 2]]})
    refused = store.handle(b"w0", switch)[0][1]
    assert refused.op == Op.ERROR and "cannot change the optimizer from adam to sgd" in refused["reason"]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"name": "rmsprop"}, "unknown optimizer 'rmsprop'; the parameter server supports sgd, adam"),
        ({"name": "adam", "momentum": 0.9}, "adam does not take momentum"),
        ({"name": "adam", "beta1": 1.0}, "beta1 must be in [0, 1), got 1.0"),
        ({"name": "adam", "beta2": "high"}, "beta2 must be a number, got 'high'"),
        ({"name": "adam", "epsilon": 0}, "epsilon must be a finite number > 0, got 0.0"),
        ({"name": "sgd", "beta1": 0.9}, "sgd does not take beta1"),
    ],
)
def test_bad_optimizer_settings_are_named(config, message):
    with pytest.raises(ValueError) as err:
        Optimizer.from_config(config)
    assert message in str(err.value)
