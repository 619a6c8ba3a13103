"""Data-parallel gradients over the parameter server, overlapped with backward (DDP-style buckets).

::

    ps = PSSync(model, kv, optimizer={"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4,
                                      "rescale_grad": 1 / kv.num_workers})
    for x, y in batches:
        ps.set_learning_rate(schedule(step))
        loss_fn(model(x), y).backward()   # each full bucket is pushed while backward goes on
        ps.synchronize()                  # wait for the merged result
        ps.step()                         # update_on_kvstore=False: the local optimizer's update
        model.zero_grad(set_to_none=True)

Parameters are grouped into buckets of about ``bucket_bytes`` (float32) in reverse
registration order, the order backward usually produces their gradients; each
bucket is one kvstore key (``key_base``, ``key_base + 1``, ...; the default base,
1_000_000, is above the trainer's own keys) holding the bucket's parameters
flattened. A hook on every parameter (``register_post_accumulate_grad_hook``)
pushes a bucket as soon as all its gradients exist; ``push`` returns once the data
is queued, so communication overlaps the rest of backward. :meth:`PSSync.synchronize`
pushes any bucket still missing (parameters without a gradient count as zeros)
and pulls every bucket:

* ``update_on_kvstore=False``: the servers sum; the pulled sums are written into
  ``p.grad`` (the plain sum over workers: the optimizer's ``rescale_grad`` makes it
  a mean), and :meth:`PSSync.step` runs the optimizer (:mod:`clipflow.ps.optimizer`) locally,
  the same code the servers would run. Without an ``optimizer`` the caller updates
  the weights itself from ``p.grad``.
* ``update_on_kvstore=True``: the servers run the optimizer (``kv.set_optimizer``
  limited to this wrapper's keys); the pulled values are the new weights and are
  copied into the parameters; :meth:`PSSync.step` does nothing.

At construction every worker gets rank 0's weights (the keys are initialised with
them, then pulled). Parameters whose weight decay multiplier differs (``wd_mult``,
e.g. 0 for biases and BN) go to different buckets, so a multiplier is per key.
With ``clip_norm`` > 0 each worker scales its own gradients to that global L2 norm at
most before pushing (GluonCV's ``--clip-grad``: ``clip_global_norm`` of the local
gradients before the kvstore), so there are no hooks and :meth:`synchronize` pushes
every bucket after the norm is known: no overlap.
One backward per :meth:`synchronize`, or several with gradient accumulation: the backward passes inside
:meth:`PSSync.no_sync` only add into ``p.grad`` (the hooks push nothing), and the last one, outside it, pushes
the summed gradients once. The KVStore is used from one thread at a
time: hooks run in the thread running backward (for CPU tensors the caller's; for
CUDA ones an autograd device thread, while the caller waits in ``backward``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from clipflow.errors import ClipflowError
from clipflow.ps.kvstore import KVStore
from clipflow.ps.optimizer import Optimizer
from clipflow.ps.optimizer import create as create_optimizer
from clipflow.train.buckets import (
    DEFAULT_BUCKET_BYTES,
    KEY_BASE,
    Bucket,
    WdMult,
    make_buckets,
    optimizer_step,
    trainable,
)


class PSSync:
    """Pushes gradient buckets from backward hooks; :meth:`synchronize` brings the merged result back."""

    def __init__(
        self,
        model: torch.nn.Module | Iterable[torch.nn.Parameter],
        kv: KVStore,
        *,
        update_on_kvstore: bool = False,
        optimizer: Mapping[str, Any] | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        key_base: int = KEY_BASE,
        wd_mult: WdMult = None,
        clip_norm: float = 0.0,
    ) -> None:
        if not clip_norm >= 0:
            raise ClipflowError(f"clip_norm must be >= 0 (0: no clipping), got {clip_norm}")
        self.clip_norm = float(clip_norm)
        if update_on_kvstore and optimizer is None:
            raise ClipflowError("update_on_kvstore=True needs an optimizer for the servers to run")
        self.kv = kv
        self.update_on_kvstore = update_on_kvstore
        self.module = model  # what the trainer calls (the same for both back ends' syncs)
        self.buckets = make_buckets(trainable(model, "PSSync"), wd_mult, bucket_bytes, key_base)
        self._ready: dict[int, set[int]] = {b.key: set() for b in self.buckets}  # per bucket: params with a grad
        self._pushed: set[int] = set()  # keys pushed since the last synchronize()
        self.keys = [b.key for b in self.buckets]
        self.pushed_in_backward = 0  # buckets pushed by hooks (the overlap), for tests and logs
        self.pushed_in_sync = 0  # buckets synchronize() had to push itself
        self._holding = False  # inside no_sync(): backward only accumulates

        initial = [torch.cat([p.detach().reshape(-1).float().cpu() for p in b.params]) for b in self.buckets]
        kv.init(self.keys, initial)
        for b in self.buckets:
            b.buffer = kv.buffer(b.key)  # shared with the servers on this machine: no copies in and out
        kv.pull(self.keys, [b.buffer for b in self.buckets])
        self._write_weights()

        mults = {b.key: b.wd_mult for b in self.buckets if b.wd_mult != 1.0}
        self.local: Optimizer | None = None
        if update_on_kvstore:
            assert optimizer is not None
            kv.set_optimizer(**dict(optimizer), keys=range(self.keys[0], self.keys[-1] + 1))
            if mults:
                kv.set_wd_mult(mults)
        elif optimizer is not None:
            try:
                self.local = create_optimizer(**dict(optimizer))
            except (TypeError, ValueError) as exc:
                raise ClipflowError(f"optimizer: {exc}") from None
            self.local.set_wd_mult(mults)

        self._handles = []
        if not self.clip_norm:  # clipping needs every gradient first: synchronize() pushes them all
            for b in self.buckets:
                for i, p in enumerate(b.params):
                    self._handles.append(p.register_post_accumulate_grad_hook(self._hook(b, i)))

    # -- the step -------------------------------------------------------------------------------

    def set_learning_rate(self, lr: float) -> None:
        """The learning rate of the next update (sent with the pushes when the servers optimize)."""
        if self.update_on_kvstore:
            self.kv.set_learning_rate(lr)
        elif self.local is not None:
            self.local.learning_rate = float(lr)
        else:
            raise ClipflowError("set_learning_rate: this PSSync has no optimizer")

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside only add into ``p.grad``; the next one outside pushes the sums (as DDP's)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def synchronize(self) -> None:
        """Push what backward left unpushed, wait for the merged buckets, write grads or weights."""
        if self.clip_norm > 0:
            grads = [p for b in self.buckets for p in b.params if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(grads, self.clip_norm)
        for b in self.buckets:
            if b.key not in self._pushed:
                self._push(b)
                self.pushed_in_sync += 1
        self.kv.pull(self.keys, [b.buffer for b in self.buckets])
        for ready in self._ready.values():
            ready.clear()
        self._pushed.clear()
        if self.update_on_kvstore:
            self._write_weights()
            return
        for b in self.buckets:
            b.scatter_grads()

    def step(self) -> None:
        """update_on_kvstore=False: the local optimizer's update from ``p.grad``; otherwise nothing to do."""
        if self.update_on_kvstore:
            return
        if self.local is None:
            raise ClipflowError("step: this PSSync has no optimizer; update the weights from p.grad yourself")
        optimizer_step(self.local, self.buckets)

    def optimizer_states(self) -> dict[int, torch.Tensor]:
        """The optimizer's state per bucket key: from the servers or from the local optimizer."""
        if self.update_on_kvstore:
            states = self.kv.save_optimizer_states()
            return {k: v for k, v in states.items() if k in set(self.keys)}
        if self.local is None:
            return {}
        return {k: torch.from_numpy(v) for k, v in self.local.get_states().items()}

    def load_optimizer_states(self, states: Mapping[int, torch.Tensor]) -> None:
        """Inverse of :meth:`optimizer_states` (collective when the servers optimize)."""
        if self.update_on_kvstore:
            self.kv.load_optimizer_states(states)
        elif self.local is not None:
            self.local.set_states({k: v.detach().cpu().numpy() for k, v in states.items()})

    def pull_weights(self) -> None:
        """update_on_kvstore=True: copy the servers' current weights into the parameters (e.g. after
        a final barrier in dist_async, so every worker ends with the same model)."""
        if not self.update_on_kvstore:
            raise ClipflowError("pull_weights: with update_on_kvstore=False the servers hold gradient sums")
        self.kv.pull(self.keys, [b.buffer for b in self.buckets])
        self._write_weights()

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    # -- internals ------------------------------------------------------------------------------

    def _hook(self, bucket: Bucket, index: int) -> Callable[[torch.Tensor], None]:
        ready = self._ready[bucket.key]

        def hook(_: torch.Tensor) -> None:
            if self._holding:
                return
            ready.add(index)
            if len(ready) == len(bucket.params) and bucket.key not in self._pushed:
                self._push(bucket)
                self.pushed_in_backward += 1

        return hook

    def _push(self, bucket: Bucket) -> None:
        bucket.gather_grads()
        self.kv.push(bucket.key, bucket.buffer)  # the servers may read the buffer until the pull in synchronize()
        self._pushed.add(bucket.key)

    def _write_weights(self) -> None:
        for b in self.buckets:
            b.scatter_weights()
