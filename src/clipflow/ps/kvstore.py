"""The worker side of the parameter server, with MXNet kvstore semantics.

::

    kv = KVStore.create("dist_sync")          # reads DMLC_* from the environment
    kv.init(3, weight)                        # rank 0's value is stored; all workers call it
    kv.pushpull([3], [grad], [grad])          # grad becomes the sum over all workers
    kv.close()                                # also runs at exit

A KVStore is used from one thread. Values are float32 on the wire; other
floating dtypes are converted, tensors on other devices are copied through the
CPU. Keys bigger than MXNET_KVSTORE_BIGARRAY_BOUND elements are split over all
servers. ``push`` returns once its data is queued; a later ``pull``/``push`` of
the same key, ``barrier`` and ``close`` wait for it. Parts held by a server on the
same machine travel through shared memory (:mod:`clipflow.ps.shm`); :meth:`KVStore.buffer`
hands out that memory as the key's tensor, which saves copying into it and out of it.

In the ``_device`` modes the workers of one host push through their host group
(:mod:`clipflow.ps.hostgroup`): one push per key part per host, its value shared back.

The KVStore turns calls into requests; :class:`clipflow.ps.customer.Customer` sends them and
collects their replies. Misuse (a bad key, shape or argument, a key not initialised) raises
ClipflowError before anything is sent; a failure of the servers to answer properly (an error
reply, a broken reply, no reply in time) raises CommError.
"""

from __future__ import annotations

import atexit
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import torch
import zmq

from clipflow.errors import FAILURES, ClipflowError, CommError
from clipflow.ps.compression import TwoBitCompression
from clipflow.ps.customer import Customer, Request, Timeout
from clipflow.ps.env import PSConfig
from clipflow.ps.hostgroup import HostGroup
from clipflow.ps.log import Log
from clipflow.ps.node import NodeLink, Welcome
from clipflow.ps.optimizer import KeySet
from clipflow.ps.optimizer import create as create_optimizer
from clipflow.ps.placement import Part, Placement
from clipflow.ps.shm import Region, available, machine_id
from clipflow.ps.transport import Channel, Dropper, connect, drop_seed, make_socket
from clipflow.ps.wire import Message, Op
from clipflow.schemas import config_enum

MODES = config_enum("train", "kvstore")  # config.schema.yaml's list

TensorOrList = torch.Tensor | Sequence[torch.Tensor]


@dataclass(frozen=True)
class _KeyInfo:
    shape: tuple[int, ...]
    numel: int
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class _Shared:
    """A key's region, shared with the servers on this machine, and the parts pushed through it."""

    region: Region
    starts: frozenset[int]

    def view(self, part: Part) -> np.ndarray:
        return self.region.array[part.start : part.stop]


class KVStore:
    """A worker's handle on the parameter servers. Build it with :meth:`create`."""

    def __init__(self, mode: str, cfg: PSConfig, link: NodeLink, welcome: Welcome, log: Log) -> None:
        self._mode = mode
        self._sync = "async" not in mode
        self._cfg = cfg
        self._link = link
        self._welcome = welcome
        self._log = log
        self._placement = Placement(welcome.num_server, cfg.bigarray_bound, cfg.piece)
        self._keys: dict[int, _KeyInfo] = {}
        self._closed = False
        self._failed = False
        self._optimizer: dict | None = None  # set_optimizer's config; its learning rate rides in pushes
        self._optimizer_keys = KeySet(None)
        self._compression: TwoBitCompression | None = None
        self._compression_keys = KeySet(None)
        channels = _connect_servers(cfg, link, welcome, log)
        self._customer = Customer(channels, welcome.rank, cfg.resend, cfg.resend_timeout, link.check_abort, log)
        here = machine_id() if cfg.shm and available() else ""
        # servers on this machine (same advertised host, same boot id): parts go through shared memory
        self._local = {a.rank for a in welcome.servers if here and a.machine == here and a.host == cfg.node_host}
        self._shared: dict[int, _Shared] = {}  # key -> its region, where servers on this machine hold parts
        self._group: HostGroup | None = None
        _live.add(self)
        _install_excepthook()
        atexit.register(self.close)
        self._group = _host_group(mode, cfg, link, welcome, log)  # per-host aggregation (_device modes)

    @classmethod
    def create(cls, mode: str = "dist_sync", cfg: PSConfig | None = None) -> KVStore:
        """Register with the scheduler as a worker and connect to every server."""
        if mode not in MODES:
            raise ClipflowError(f"unknown kvstore mode {mode!r}; use one of {', '.join(MODES)}")
        cfg = PSConfig.from_env() if cfg is None else cfg
        if cfg.role != "worker":
            raise ClipflowError(f"a KVStore runs in a worker: DMLC_ROLE must be 'worker', got {cfg.role!r}")
        log = Log("worker", cfg.verbose)
        link = NodeLink(cfg, "worker", log)
        try:
            welcome = link.register(None)
        except BaseException as exc:
            link.fail(f"{type(exc).__name__}: {exc}")
            link.close()
            raise
        log.who = f"worker {welcome.rank}"
        log.info(f"rank {welcome.rank} of {welcome.num_worker} workers, {welcome.num_server} servers, mode {mode}")
        return cls(mode, cfg, link, welcome, log)

    # -- properties ---------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self._welcome.rank

    @property
    def num_workers(self) -> int:
        return self._welcome.num_worker

    @property
    def num_servers(self) -> int:
        return self._welcome.num_server

    @property
    def type(self) -> str:
        return self._mode

    # -- operations ---------------------------------------------------------------------------

    def init(self, key: int | Sequence[int], value: TensorOrList) -> None:
        """Declare keys with initial values; rank 0's values are stored. Every worker must call it
        with the same keys in the same order. Ends with a barrier, so every worker can pull after."""
        self._check_open()
        keys, values = _as_lists(key, value, "value")
        prepared: list[tuple[int, tuple[int, ...], torch.Tensor]] = []
        for k, v in zip(keys, values, strict=True):
            _check_key(k)
            if k in self._keys or any(k == p[0] for p in prepared):
                raise ClipflowError(f"duplicate init of key {k}")
            t = _check_tensor(k, v)
            prepared.append((k, tuple(t.shape), _flat32(k, t)))
        for k, shape, flat in prepared:
            self._keys[k] = _KeyInfo(shape, flat.numel(), self._placement.place(k, flat.numel()))
        self._send_from_rank0(r for k, _, flat in prepared for r in self._stores(k, flat))
        self._attach([k for k, _, _ in prepared])
        if self._group is not None:
            self._group.attach([(k, flat.numel()) for k, _, flat in prepared])
        self.barrier()

    def push(self, key: int, value: TensorOrList) -> None:
        """Push a value (a list = one per local device, summed first). Returns once queued."""
        self._check_open()
        info = self._info(key)
        self._customer.settle([key])
        flat = _flat32(key, value, info.shape, owned=not self._is_buffer(key, value))
        if self._group is not None:  # the host group's leader pushes its sum; the others hand it their values
            summed = self._group.push(key, flat)
            if summed is None:
                return
            flat = summed
        self._customer.defer(key, [self._send_grad(Op.PUSH, key, info, p, flat) for p in info.parts])

    def pull(self, key: int | Sequence[int], out: TensorOrList | Sequence[TensorOrList]) -> None:
        """Write the stored value of ``key`` into ``out`` (a tensor or a list of them) in place.

        With a list of keys (and one out per key) every request is sent before any reply is awaited.
        """
        self._check_open()
        key_list, out_list = _as_lists(key, out, "outs")
        infos = [self._info(k) for k in key_list]
        targets = [
            _Target(_out_list(k, o, i.shape), i.numel) for k, o, i in zip(key_list, out_list, infos, strict=True)
        ]
        self._customer.settle(key_list)
        group = self._group
        via_group = [i for i, k in enumerate(key_list) if group is not None and group.shares(k)]
        from_leader = set(via_group) if group is not None and not group.is_leader else set()
        seqs = {
            self._customer.request(Request(p.server, Op.PULL, k, fields={"start": p.start})): (target, p)
            for i, (k, info, target) in enumerate(zip(key_list, infos, targets, strict=True))
            if i not in from_leader
            for p in info.parts
        }
        self._fill(Op.PULL, seqs)
        for i in via_group:  # the value a host group's leader pulled after the group's push, shared
            assert group is not None
            if group.is_leader:
                group.share(key_list[i], targets[i].buffer)
            else:
                np.copyto(targets[i].buffer, group.shared(key_list[i], infos[i].numel))
                targets[i].finish()

    def pushpull(
        self,
        keys: int | Sequence[int],
        values: TensorOrList | Sequence[TensorOrList],
        outs: TensorOrList | Sequence[TensorOrList],
    ) -> None:
        """Push every value, then write each key's merged result into its out (which may be the value).

        All requests are sent before any reply is awaited. In dist_sync the results are the sum over
        all workers of this round's pushes.
        """
        self._check_open()
        key_list, value_list = _as_lists(keys, values, "values")
        _, out_list = _as_lists(keys, outs, "outs")
        if len(set(key_list)) != len(key_list):
            raise ClipflowError(f"pushpull keys must be distinct, got {key_list}")
        infos = [self._info(k) for k in key_list]
        flats = [_flat32(k, v, i.shape) for k, v, i in zip(key_list, value_list, infos, strict=True)]
        group = self._group
        if group is not None:  # the host group's leader pushes its sums and shares the values; the others wait
            self._customer.settle(key_list)
            summed = [group.push(k, f) for k, f in zip(key_list, flats, strict=True)]
            if not group.is_leader:
                self.pull(key_list, out_list)
                return
            flats = [s for s in summed if s is not None]
        targets = [
            _Target(_out_list(k, o, i.shape), i.numel) for k, o, i in zip(key_list, out_list, infos, strict=True)
        ]
        self._customer.settle(key_list)
        seqs: dict[int, tuple[_Target, Part]] = {}
        for k, flat, info, target in zip(key_list, flats, infos, targets, strict=True):
            for p in info.parts:
                seqs[self._send_grad(Op.PUSHPULL, k, info, p, flat)] = (target, p)
        self._fill(Op.PUSHPULL, seqs)
        if group is not None:
            for k, target in zip(key_list, targets, strict=True):
                group.share(k, target.buffer)

    def broadcast(self, key: int, value: torch.Tensor, out: TensorOrList) -> None:
        """Rank 0's ``value`` ends up in every worker's ``out`` (initialising ``key`` if needed)."""
        self._check_open()
        if key not in self._keys:
            self.init(key, value)
        else:
            flat = _flat32(key, value, self._info(key).shape)
            self._update_servers(self._stores(key, flat, overwrite=True), settle=[key])
        self.pull(key, out)
        self.barrier()  # nobody may overwrite the key again before everyone has pulled it

    def buffer(self, key: int) -> torch.Tensor:
        """A float32 tensor of ``key``'s shape to push from and pull into without the worker's copies.

        Where servers on this machine hold parts of the key, the tensor is the shared memory those
        parts travel through: every pull and pushpull of the key writes the value into it (besides
        the ``out`` given), every push copies into it unless it is the value pushed. After
        ``push(key, buffer)``, leave the buffer alone until the next call on the key returns: the
        servers read it until then. Elsewhere it is a plain tensor.
        """
        self._check_open()
        info = self._info(key)
        shared = self._shared.get(key)
        if shared is None:
            return torch.zeros(info.shape)
        return torch.from_numpy(shared.region.array).view(info.shape)

    def barrier(self) -> None:
        """Wait until every worker reached a barrier (pushes in flight are answered first)."""
        self._check_open()
        self._customer.settle()
        seq = self._customer.next_seq()
        request = Message(Op.BARRIER, {"group": "worker", "seq": seq})
        self._link.send(request)
        self._link.wait(Op.BARRIER_DONE, seq, request)

    def server_stats(self) -> list[dict[int, int]]:
        """Per server rank: the keys it holds and how many elements of each (for tests and debugging)."""
        return self._stats("keys")

    def server_pushes(self) -> list[dict[int, int]]:
        """Per server rank: the pushes (and pushpulls) it received so far, by sending worker rank (for tests)."""
        return self._stats("pushes")

    def _stats(self, field: str) -> list[dict[int, int]]:
        """Per server rank: the counts under ``field`` of its STATS reply, by integer key."""
        self._check_open()
        seqs = [self._customer.request(r) for r in self._every_server(Op.STATS)]
        replies = self._customer.wait(seqs)
        try:
            return [{int(k): int(n) for k, n in replies[seq][field].items()} for seq in seqs]
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            raise CommError(f"a server sent a bad {Op.STATS} reply: {exc}") from None

    # -- optimizer on the servers (update_on_kvstore) and gradient compression ------------------

    def set_optimizer(
        self, name: str = "sgd", *, keys: range | Sequence[int] | None = None, **hyperparameters: Any
    ) -> None:
        """update_on_kvstore: servers run the optimizer ``name`` (:mod:`clipflow.ps.optimizer`: sgd with
        learning_rate, momentum, wd, nesterov, rescale_grad; adam with learning_rate, beta1, beta2, epsilon,
        wd, rescale_grad) on pushes to ``keys``.

        ``keys`` is every key by default (MXNet), or a range / list of keys; pushes to other keys
        keep summing. For those keys the stored value is the weight: ``push(key, grad)`` then
        ``pull(key, weight)`` (or ``pushpull``) gives the weight after the update, which uses the
        merged gradient times ``rescale_grad``. Every worker calls it, before pushing those keys;
        rank 0 sends it to every server, then all meet at a barrier. Calling it again changes the
        hyperparameters and keys and keeps the optimizer's states. The learning rate can then change
        every step with :meth:`set_learning_rate`.
        """
        self._check_open()
        try:
            config = create_optimizer(name, **hyperparameters).config()
            key_set = KeySet.of(keys)
        except (TypeError, ValueError) as exc:
            raise ClipflowError(f"set_optimizer: {exc}") from None
        self._update_servers(self._every_server(Op.SET_OPTIMIZER, optimizer=config, keys=key_set.to_wire()))
        self._optimizer = config
        self._optimizer_keys = key_set

    @property
    def learning_rate(self) -> float | None:
        """The learning rate this worker's pushes carry (None before set_optimizer)."""
        return None if self._optimizer is None else self._optimizer["learning_rate"]

    def set_learning_rate(self, lr: float) -> None:
        """Use ``lr`` from the next push on; local, no message of its own.

        Every push (and pushpull) of a key the servers optimize carries this worker's current
        learning rate in its header (``lr``). A dist_sync round uses the learning rate of the lowest
        rank that pushed in it, so every worker should follow the same schedule; dist_async uses each
        push's own.
        """
        if self._optimizer is None:
            raise ClipflowError("set_learning_rate needs set_optimizer first")
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not np.isfinite(lr) or lr < 0:
            raise ClipflowError(f"the learning rate must be a finite number >= 0, got {lr!r}")
        self._optimizer["learning_rate"] = float(lr)

    def set_wd_mult(self, mults: Mapping[int, float]) -> None:
        """Per-key weight decay multipliers on the servers (e.g. ``{key: 0.0}`` for biases and BN); collective."""
        self._set_mult("wd_mult", mults)

    def set_lr_mult(self, mults: Mapping[int, float]) -> None:
        """Per-key learning rate multipliers on the servers; collective like :meth:`set_wd_mult`."""
        self._set_mult("lr_mult", mults)

    def save_optimizer_states(self) -> dict[int, torch.Tensor]:
        """Every server's optimizer state: key -> the states of its parts one after the other (a key split
        over servers has one per part; an SGD momentum buffer comes back in the key's shape, any other state
        flat).

        Keys that were never updated (or any key, with SGD at momentum 0) have no state and are left out.
        Any worker may call it; pushes in flight are answered first.
        """
        self._check_open()
        if self._optimizer is None:
            raise ClipflowError("save_optimizer_states needs set_optimizer first")
        self._customer.settle()
        optimizer = create_optimizer(**self._optimizer)
        seqs = [self._customer.request(r) for r in self._every_server(Op.GET_STATES)]
        replies = self._customer.wait(seqs)
        held: list[dict[tuple[int, int], np.ndarray]] = []  # per server: (key, part start) -> buffer
        for server, seq in enumerate(seqs):
            msg = replies[seq]
            keys = msg.get("keys")
            try:
                slots = [(int(k), int(start)) for k, start in keys]  # type: ignore[union-attr]
            except (TypeError, ValueError):
                slots = None
            if msg.op != Op.OK or slots is None or len(slots) != len(msg.arrays):
                raise CommError(f"server {server} sent a bad {msg.op} reply to {Op.GET_STATES}")
            held.append(dict(zip(slots, msg.arrays, strict=True)))
        states: dict[int, torch.Tensor] = {}
        for key, info in self._keys.items():
            pieces = [(p, held[p.server].get((key, p.start))) for p in info.parts]
            if all(a is None for _, a in pieces):
                continue
            chunks = []
            for part, arr in pieces:
                size = optimizer.state_size(part.size)
                if arr is None:
                    arr = np.zeros(size, dtype=np.float32)  # a part never updated has a zero state
                elif arr.size != size:
                    raise CommError(
                        f"server {part.server} answered {Op.GET_STATES} with {arr.size} {optimizer.name} state "
                        f"elements of key {key} (from element {part.start}), not {size}"
                    )
                chunks.append(arr.reshape(-1))
            flat = torch.from_numpy(np.concatenate(chunks))
            states[key] = flat.reshape(info.shape) if flat.numel() == info.numel else flat
        return states

    def load_optimizer_states(self, states: Mapping[int, torch.Tensor]) -> None:
        """Put states from :meth:`save_optimizer_states` back on the servers; collective, rank 0 sends."""
        self._check_open()
        if self._optimizer is None:
            raise ClipflowError("load_optimizer_states needs set_optimizer first")
        optimizer = create_optimizer(**self._optimizer)
        flats = {}
        for k, v in states.items():
            parts = self._info(int(k)).parts
            sizes = [optimizer.state_size(p.size) for p in parts]
            flat = _flat32(int(k), v.reshape(-1), (sum(sizes),))
            flats[int(k)] = (parts, sizes, flat)
        per_server: dict[int, tuple[list[list[int]], list[np.ndarray]]] = {}
        for key, (parts, sizes, flat) in flats.items():
            offset = 0
            for part, size in zip(parts, sizes, strict=True):
                keys, arrays = per_server.setdefault(part.server, ([], []))
                keys.append([key, part.start])
                arrays.append(flat[offset : offset + size].numpy())
                offset += size
        self._update_servers(
            Request(s, Op.SET_STATES, arrays=arrays, fields={"keys": keys}) for s, (keys, arrays) in per_server.items()
        )

    def set_gradient_compression(self, params: Mapping[str, object], keys: range | Sequence[int] | None = None) -> None:
        """Compress pushes to ``keys`` (every key by default), MXNet style: ``{"type": "2bit", "threshold": 0.5}``.

        Worker-side only (the servers see it in each push's header); every worker should call it,
        before its first push. See :mod:`clipflow.ps.compression` for the rule and the bit layout.
        """
        self._check_open()
        if self._mode.endswith("_device"):
            raise ClipflowError(
                f"gradient compression (set_gradient_compression {dict(params)}) cannot be combined with kvstore "
                f"mode {self._mode} (per-host aggregation); use mode {self._mode.removesuffix('_device')} "
                "or no compression"
            )
        try:
            compression = TwoBitCompression.from_params(params)
            key_set = KeySet.of(keys)
        except (TypeError, ValueError) as exc:
            raise ClipflowError(f"set_gradient_compression: {exc}") from None
        self._compression, self._compression_keys = compression, key_set

    def close(self) -> None:
        """Finish: wait for pushes in flight, tell the scheduler DONE, stop the heartbeat. Idempotent."""
        if self._closed:
            return
        if not self._failed:
            try:
                self._customer.settle(timeout=Timeout(self._cfg.heartbeat_timeout, "CLIPFLOW_HEARTBEAT_TIMEOUT"))
            except FAILURES as exc:
                self._log.error(f"while closing: {exc}")
            self._link.done()
        self._closed = True
        _live.discard(self)
        self._customer.close()
        if self._group is not None:
            self._group.close()
        self._link.close()
        atexit.unregister(self.close)

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self._fail(f"{type(exc).__name__}: {exc}")
        else:
            self.close()

    # -- internals ----------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        """Tell the scheduler this worker failed (it then aborts the job), and close."""
        if self._closed:
            return
        self._failed = True
        self._link.stop_heartbeat()  # the scheduler's ABORT echo must not os._exit us mid-traceback
        self._link.fail(reason)
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClipflowError("this KVStore is closed")

    def _info(self, key: int) -> _KeyInfo:
        _check_key(key)
        info = self._keys.get(key)
        if info is None:
            raise ClipflowError(f"key {key} was not initialised: call init({key}, value) first, on every worker")
        return info

    def _stores(self, key: int, flat: torch.Tensor, **fields: object) -> list[Request]:
        """The INIT requests that store ``flat`` as ``key``'s value, one per part."""
        return [
            Request(p.server, Op.INIT, key, [flat[p.start : p.stop].numpy()], {"start": p.start, **fields})
            for p in self._keys[key].parts
        ]

    def _every_server(self, op: str, **fields: object) -> list[Request]:
        """One request ``op`` (about no key) to each server."""
        return [Request(s, op, fields=fields) for s in range(self.num_servers)]

    def _send_from_rank0(self, requests: Iterable[Request]) -> None:
        """Rank 0 sends ``requests`` and waits for their replies; the other workers send nothing."""
        if self.rank == 0:
            self._customer.wait([self._customer.request(r) for r in requests])

    def _update_servers(self, requests: Iterable[Request], settle: Sequence[int] | None = None) -> None:
        """A collective change of what the servers hold for everyone (optimizer, multipliers, states, an
        overwritten value): this worker's pushes in flight (to ``settle``'s keys, or all) are answered first,
        rank 0 sends ``requests``, then every worker meets at a barrier, so none goes on before the change."""
        self._customer.settle(settle)
        self._send_from_rank0(requests)
        self.barrier()

    def _send_grad(self, op: str, key: int, info: _KeyInfo, part: Part, flat: torch.Tensor) -> int:
        """Send one part of a pushed value: 2-bit compressed where asked, with the learning rate where
        the servers optimize the key."""
        fields: dict[str, object] = {"sync": self._sync, "start": part.start}
        if self._optimizer is not None and key in self._optimizer_keys:
            fields["lr"] = self._optimizer["learning_rate"]
        if self._group is not None:
            fields["ranks"] = list(self._group.ranks)  # the leader's push stands for its whole host group
        values = flat[part.start : part.stop].numpy()
        arrays = [values]
        shared = self._shared.get(key)
        if self._compression is not None and key in self._compression_keys:
            words, extra = self._compression.compress(key, info.numel, part.start, values)
            arrays = [words]
            fields.update(extra)
        elif shared is not None and part.start in shared.starts:
            view = shared.view(part)
            if not _same_memory(view, values):  # else pushed from the key's buffer: already there
                np.copyto(view, values)
            arrays, fields["shm"], fields["size"] = [], True, part.size
        return self._customer.request(Request(part.server, op, key, arrays, fields))

    def _is_buffer(self, key: int, value: TensorOrList) -> bool:
        shared = self._shared.get(key)
        return (
            shared is not None
            and isinstance(value, torch.Tensor)
            and value.device.type == "cpu"
            and value.dtype == torch.float32  # anything else is converted on the way, never the buffer itself
            and value.is_contiguous()
            and _same_memory(shared.region.array, value.detach().view(-1).numpy())
        )

    def _attach(self, keys: Sequence[int]) -> None:
        """Share a region the size of the key with the servers on this machine, for each of ``keys``
        with big enough parts on them.

        The files are unlinked once the servers answered (mapped or not); if one cannot map them,
        the servers on this machine are used over TCP from then on. See :mod:`clipflow.ps.shm`.
        """
        made: list[Region] = []
        seqs = []
        try:
            for k in keys:
                info = self._keys[k]
                parts = [p for p in info.parts if p.server in self._local and p.size * 4 >= self._cfg.shm_min_bytes]
                if not parts:
                    continue
                made.append(Region.create(f"{self._link.uid}-k{k}", info.numel))
                self._shared[k] = _Shared(made[-1], frozenset(p.start for p in parts))
                fields = {"name": made[-1].name, "numel": info.numel}
                for server in sorted({p.server for p in parts}):
                    seqs.append(self._customer.request(Request(server, Op.SHM_ATTACH, k, fields=fields)))
            self._customer.wait(seqs)
        except (OSError, CommError) as exc:
            self._log.error(f"shared memory with the servers on this machine failed ({exc}); using TCP instead")
            self._local.clear()
            self._shared.clear()
        finally:
            for region in made:
                region.unlink()

    def _set_mult(self, name: str, mults: Mapping[int, float]) -> None:
        self._check_open()
        if self._optimizer is None:
            raise ClipflowError(f"set_{name} needs set_optimizer first")
        clean: dict[str, float] = {}
        for k, v in mults.items():
            _check_key(k)
            if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
                raise ClipflowError(f"{name} of key {k} must be a finite number >= 0, got {v!r}")
            clean[str(k)] = float(v)
        self._update_servers(self._every_server(Op.SET_MULT, **{name: clean}))

    def _fill(self, op: str, seqs: dict[int, tuple[_Target, Part]]) -> None:
        """Wait for the value replies to the requests ``op`` ``seqs`` and write each part into its target, then
        finish the targets."""
        replies = self._customer.wait(seqs)
        for seq, (target, part) in seqs.items():
            msg = replies[seq]
            key = msg.get("key")
            shared = self._shared.get(key) if msg.get("shm") and isinstance(key, int) else None
            data = shared.view(part) if shared is not None else (msg.arrays[0] if len(msg.arrays) == 1 else None)
            if msg.op != Op.VALUE or data is None or data.size != part.size:
                raise CommError(
                    f"server {part.server} sent a bad {msg.op} reply to {op} (seq {seq}) of elements "
                    f"{part.start} to {part.stop} of key {msg.get('key')}"
                )
            target.write(part, data)
        for target in {id(t): t for t, _ in seqs.values()}.values():
            target.finish()


class _Target:
    """Where pulled parts of one key go: straight into a CPU float32 contiguous out, else a staging buffer."""

    def __init__(self, outs: list[torch.Tensor], numel: int) -> None:
        self.outs = outs
        direct = next((o for o in outs if _directly_writable(o)), None)
        self.direct = direct
        self.buffer = (direct.detach().view(-1) if direct is not None else torch.empty(numel)).numpy()

    def write(self, part: Part, data: np.ndarray) -> None:
        target = self.buffer[part.start : part.stop]
        if not _same_memory(target, data):  # else the out is the key's buffer, where the server wrote
            np.copyto(target, data.reshape(-1))

    def finish(self) -> None:
        source = torch.from_numpy(self.buffer)
        for out in self.outs:
            if out is not self.direct:
                with torch.no_grad():
                    out.copy_(source.view(out.shape))


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are the very same elements (same start, size and type)."""
    same_start = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return same_start and a.size == b.size and a.dtype == b.dtype


def _directly_writable(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()


def _check_key(key: object) -> None:
    if not isinstance(key, int) or isinstance(key, bool) or key < 0:
        raise ClipflowError(f"kvstore keys must be non-negative integers, got {key!r}")


def _check_tensor(key: int, t: object, what: str = "value") -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ClipflowError(f"key {key}: the {what} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise ClipflowError(f"key {key}: the {what} has dtype {t.dtype}; the kvstore holds floating-point tensors only")
    return t


def _flat32(key: int, value: TensorOrList, shape: tuple[int, ...] | None = None, owned: bool = False) -> torch.Tensor:
    """``value`` (or the sum of a list of them) as a contiguous 1-D float32 CPU tensor."""
    tensors = [value] if isinstance(value, torch.Tensor) else list(value)
    if not tensors:
        raise ClipflowError(f"key {key}: empty list of values")
    tensors = [_check_tensor(key, t) for t in tensors]
    expected = tuple(tensors[0].shape) if shape is None else shape
    for t in tensors:
        if tuple(t.shape) != expected:
            raise ClipflowError(f"key {key}: value has shape {tuple(t.shape)}, expected {expected}")
    flat = tensors[0].detach().to("cpu", torch.float32).contiguous().view(-1)
    if len(tensors) > 1 or owned:
        flat = flat.clone() if flat.data_ptr() == tensors[0].data_ptr() else flat
        for t in tensors[1:]:
            flat += t.detach().to("cpu", torch.float32).view(-1)
    return flat


def _out_list(key: int, out: TensorOrList, shape: tuple[int, ...]) -> list[torch.Tensor]:
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    if not outs:
        raise ClipflowError(f"key {key}: empty list of outs")
    for o in outs:
        _check_tensor(key, o, "out")
        if tuple(o.shape) != shape:
            raise ClipflowError(f"key {key}: out has shape {tuple(o.shape)}, expected {shape}")
    return outs


def _as_lists(keys: object, values: object, what: str) -> tuple[list[int], list]:
    if isinstance(keys, int):
        return [keys], [values]
    key_list = list(keys)  # type: ignore[call-overload]
    value_list = list(values)  # type: ignore[call-overload]
    if len(key_list) != len(value_list):
        raise ClipflowError(f"got {len(key_list)} keys but {len(value_list)} {what}")
    return key_list, value_list


def _host_group(mode: str, cfg: PSConfig, link: NodeLink, welcome: Welcome, log: Log) -> HostGroup | None:
    """The worker's host group where ``mode`` aggregates per host and it can; else None, said once in the log."""
    if not mode.endswith("_device"):
        return None
    if not cfg.shm or not available():
        why = "CLIPFLOW_PS_SHM=0" if not cfg.shm else "no shared memory (/dev/shm) here"
    elif len(welcome.my_group()) == 1:
        why = f"worker {welcome.rank} is the only worker on its host"
    else:
        group = HostGroup(cfg, link, welcome, log)
        role = "pushes for" if group.is_leader else "pushes through worker " + str(group.leader) + " with"
        log.note(f"mode {mode}: per-host aggregation, this worker {role} host group {list(group.ranks)}")
        return group
    log.note(f"mode {mode}: no per-host aggregation ({why}); every worker pushes its own values")
    return None


def _connect_servers(cfg: PSConfig, link: NodeLink, welcome: Welcome, log: Log) -> list[Channel]:
    """A DEALER to each server, by rank, with the fault injection CLIPFLOW_PS_DROP_PERCENT asks for."""
    channels = []
    for addr in sorted(welcome.servers, key=lambda s: s.rank):
        sock = make_socket(link.ctx, zmq.DEALER, f"{link.uid}/d{addr.rank}".encode(), link.keys)
        connect(sock, addr.host, addr.port)
        dropper = None
        if cfg.drop_percent:
            dropper = Dropper(cfg.drop_percent, drop_seed(cfg.drop_seed, "worker", welcome.rank * 64 + addr.rank))
        channels.append(Channel(sock, log, f"server {addr.rank}", dropper))
        log.info(f"connected to server {addr.rank} at {addr.host}:{addr.port}")
    return channels


# -- uncaught exceptions end the whole job -------------------------------------------------------

_live: weakref.WeakSet[KVStore] = weakref.WeakSet()
_previous_hook = None


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """Print the traceback, then send FAIL so the scheduler aborts the other nodes at once."""
    stores = list(_live)
    for store in stores:
        store._link.stop_heartbeat()
    (_previous_hook or sys.__excepthook__)(exc_type, exc, tb)
    for store in stores:
        store._fail(f"{exc_type.__name__}: {exc}")


def _install_excepthook() -> None:
    global _previous_hook
    if sys.excepthook is not _excepthook:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
