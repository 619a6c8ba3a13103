"""`python -m clipflow ...`: one subcommand per stage; the workflow's rules call these.

Errors a user can cause end in one line `clipflow: error: ...` and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clipflow.errors import FAILURES, ClipflowError


def _json(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ClipflowError(f"--overrides is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ClipflowError("--overrides must be a JSON object")
    return value


# -- cluster -----------------------------------------------------------------------------------


def _hosts(a: argparse.Namespace) -> list:
    """Hosts from --hosts-file, else --hosts (comma-separated), else the Slurm allocation (slurm launcher)."""
    from clipflow.cluster.hostsfile import hosts_from_config, read_hosts_file

    if a.hosts_file:
        return read_hosts_file(a.hosts_file)
    if a.hosts:
        return hosts_from_config([h.strip() for h in a.hosts.split(",") if h.strip()])
    if getattr(a, "launcher", "") == "local":  # `cluster keys` has no launcher
        return hosts_from_config(["localhost"])
    if getattr(a, "launcher", "") == "slurm":
        from clipflow.cluster.hostsfile import Host
        from clipflow.cluster.slurm import allocation_from_env

        return [Host(node) for node in allocation_from_env(os.environ).nodes]
    raise ClipflowError("no hosts: give --hosts-file FILE or --hosts a,b,c")


def _ssh_settings(a: argparse.Namespace):
    from clipflow.cluster.ssh import SshSettings

    return SshSettings(Path(os.path.expanduser(a.ssh_key)), Path(a.known_hosts), accept_new=not a.refuse_new_host_keys)


def _ssh_plan_fields(a: argparse.Namespace, settings, workdir: str) -> dict[str, str]:
    """The plan's ssh settings (absolute paths: the launcher may run from elsewhere); none for other launchers."""
    if a.launcher != "ssh":
        return {}
    return {
        "ssh_key": str(settings.key.absolute()),
        "known_hosts": str(settings.known_hosts.absolute()),
        "python": a.python or sys.executable,
        "workdir": workdir or os.getcwd(),
    }


def cmd_cluster_plan(a: argparse.Namespace) -> int:
    from clipflow.cluster.plan import check_ports, make_plan

    keys_dir = Path(a.out).parent / "ps_keys"
    ssh = _ssh_plan_fields(a, _ssh_settings(a), a.workdir)
    plan = make_plan(a.launcher, _hosts(a), a.num_workers, a.num_servers, a.root_port, a.heartbeat_timeout,
                     a.security, keys_dir, a.placement, ssh)  # fmt: skip
    check_ports(plan)
    plan.write(a.out)
    for r in plan.roles:
        print(f"{r.role:9} {r.rank:3} on {r.host} ({r.address})")
    print(f"scheduler at {plan.root_uri}:{plan.root_port}; plan written to {a.out}")
    print(f"parameter-server security: {plan.security}" + (f" (keys in {plan.keys_dir})" if plan.keys_dir else ""))
    return 0


def cmd_cluster_keys(a: argparse.Namespace) -> int:
    from clipflow.cluster.keys import authorize, ensure_local_key

    settings = _ssh_settings(a)
    report: dict[str, object] = {"local": ensure_local_key(settings.key, a.key_type), "hosts": {}}
    for change in report["local"]:  # type: ignore[union-attr]
        print(f"clipflow cluster: here: {change}")
    for host in _hosts(a):
        changes = authorize(host, settings)
        report["hosts"][str(host)] = changes  # type: ignore[index]
        print(f"clipflow cluster: {host}: " + ("; ".join(changes) if changes else "nothing to change"))
    report["pinned"] = settings.pinned
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def cmd_cluster_check(a: argparse.Namespace) -> int:
    from clipflow.cluster.checks import check_host, failure_message, format_table, write_checks
    from clipflow.cluster.plan import Plan

    plan = Plan.read(a.plan)
    settings = plan.ssh_settings()
    paths = [str(Path(p).absolute()) for p in a.path]
    checks = []
    for host in plan.host_list():
        ports = [plan.root_port] if plan.runs_scheduler(host) else []
        checks.append(check_host(host, settings, plan.python, paths, ports, plan.workdir, a.min_free_gb))
    print(format_table(checks))
    write_checks(checks, a.out)
    problem = failure_message(checks)
    if problem:
        raise ClipflowError(problem)
    return 0


def cmd_cluster_sync(a: argparse.Namespace) -> int:
    from clipflow.cluster.plan import Plan
    from clipflow.cluster.sync import sync_host

    plan = Plan.read(a.plan)
    settings = plan.ssh_settings()
    for host in plan.host_list():
        sync_host(Path(a.src).absolute(), host, a.dst, settings)
        print(f"clipflow cluster: {host}: {a.src} synced to {a.dst}")
    if a.stamp:
        Path(a.stamp).write_text("\n".join(plan.hosts) + "\n")
    return 0


def _env_pairs(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ClipflowError(f"--env {item!r}: expected NAME=VALUE with NAME a variable name")
        env[name] = value
    return env


def cmd_launch(a: argparse.Namespace) -> int:
    """MXNet launch.py's job: start a scheduler, servers and workers running the command."""
    from clipflow.cluster.plan import check_ports, make_plan
    from clipflow.cluster.sync import sync_host
    from clipflow.train.launcher import Launcher
    from clipflow.train.roles import role_commands

    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        raise ClipflowError("no command to launch: clipflow launch -n 2 -H hosts -- python train.py ...")
    a.launcher = a.launcher or ("ssh" if a.hosts_file else "local")
    settings = _ssh_settings(a)
    ssh = _ssh_plan_fields(a, settings, a.sync_dst_dir)
    hosts = _hosts(a)
    plan = make_plan(a.launcher, hosts, a.num_workers, a.num_servers or a.num_workers, a.port, a.heartbeat_timeout,
                     a.security, Path(a.log_dir) / "ps_keys", a.placement, ssh)  # fmt: skip
    check_ports(plan)
    if a.sync_dst_dir and a.launcher == "ssh":
        for host in hosts:
            sync_host(Path.cwd(), host, a.sync_dst_dir, settings)
    return Launcher(role_commands(plan, command, _env_pairs(a.env)), a.log_dir, grace_s=a.grace).run()


# -- data --------------------------------------------------------------------------------------


def cmd_data_synth(a: argparse.Namespace) -> int:
    from clipflow.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(a.num_train, a.num_val, a.seed, a.min_frames, a.max_frames, a.short_side)
    if spec.min_frames > spec.max_frames:
        raise ClipflowError(f"min_frames {spec.min_frames} is larger than max_frames {spec.max_frames}")
    lists = generate(a.out_dir, spec, workers=a.workers)
    print(f"synthetic set in {a.out_dir}: {spec.num_train} train, {spec.num_val} val")
    print("labels:", ", ".join(map(str, lists.values())))
    return 0


def cmd_data_cifar_synth(a: argparse.Namespace) -> int:
    from clipflow.data.cifar.synthetic import make_synthetic_cifar

    files = make_synthetic_cifar(a.out_dir, a.num_train, a.num_val, a.seed)
    print(f"synthetic CIFAR-10 set in {a.out_dir}: {a.num_train} train, {a.num_val} val images, {len(files)} files")
    return 0


def cmd_data_cifar_index(a: argparse.Namespace) -> int:
    from clipflow.data.cifar.index import index_cifar

    summary = index_cifar(a.root, a.out_dir)
    print(f"CIFAR-10 index in {a.out_dir}: {summary['train']['images']} train, {summary['val']['images']} val images")
    return 0


def cmd_data_scan(a: argparse.Namespace) -> int:
    from clipflow.data.kinetics import read_classes
    from clipflow.data.listfile import read_list
    from clipflow.data.scan import scan, write_index

    classes = read_classes(a.classes) if a.classes else None  # one name a line: Kinetics names hold spaces
    if classes is not None and len(classes) > a.num_classes:
        raise ClipflowError(
            f"{a.classes} lists {len(classes)} classes but the model has num_classes {a.num_classes}; "
            f"set the recipe's model.num_classes to {len(classes)} (e.g. overrides: {{model: {{num_classes: "
            f"{len(classes)}}}}})"
        )
    results = {}
    for split, path in (("train", a.train_list), ("val", a.val_list)):
        Path(a.out_dir).mkdir(parents=True, exist_ok=True)
        journal = Path(a.out_dir) / f"{split}.scan.jsonl"  # an interrupted scan resumes from it
        results[split] = scan(
            read_list(path), a.root, a.num_classes, workers=a.workers, desc=f"scan {split}", journal=journal
        )
    manifest = write_index(results, a.out_dir, classes)
    for split, info in manifest["splits"].items():
        print(f"{split}: {info['videos']} videos kept, {info['failed']} failed")
        if info["videos"] == 0:
            raise ClipflowError(f"no {split} video could be decoded; see the failures in {a.out_dir}/manifest.json")
    for f in manifest["failures"]:
        print(f"left out ({f['split']}): {f['path']} (line {f['line']}): {f['error']}")
    return 0


SHOWN_PER_KIND = 10  # missing or failed videos printed one by one; the rest are counted


def cmd_data_kinetics(a: argparse.Namespace) -> int:
    """Kinetics annotation CSVs -> `path label` lists and the class index, as the scan reads them."""
    from clipflow.data.kinetics import kinetics_lists, write_classes
    from clipflow.data.listfile import write_labels

    made = kinetics_lists(a.train_csv, a.val_csv, a.root, a.classes or None)
    out = Path(a.out_dir)
    for split, made_list in made.lists.items():
        write_labels(out / f"{split}_labels.txt", made_list.entries)
    write_classes(out / "classes.txt", made.classes)
    for split, made_list in made.lists.items():
        notes = [f"{len(made_list.missing)} not found under {a.root} (kept: the scan lists them as failures)"]
        notes += [f"{made_list.unlabelled} unlabelled (test) rows left out"] if made_list.unlabelled else []
        print(
            f"{split}: {len(made_list.entries)} videos from {made_list.csv} in {out / f'{split}_labels.txt'}; "
            + "; ".join(notes)
        )
        for entry in made_list.missing[:SHOWN_PER_KIND]:
            print(f"not found ({split}): {entry.path} ({made_list.csv} line {entry.line})")
        if len(made_list.missing) > SHOWN_PER_KIND:
            print(f"not found ({split}): ... and {len(made_list.missing) - SHOWN_PER_KIND} more")
    print(f"classes: {len(made.classes)} ({made.classes_from}) in {out / 'classes.txt'}")
    return 0


def _size(text: str) -> tuple[int, int]:
    """WIDTHxHEIGHT, e.g. 340x256."""
    width, sep, height = text.lower().partition("x")
    if not (sep and width.isdigit() and height.isdigit()):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 340x256, got {text!r}")
    return int(width), int(height)


def _number(text: str) -> int | float:
    """A frame rate: an int when whole (30), else a float (29.97)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return int(value) if value.is_integer() else value


def cmd_data_reencode(a: argparse.Namespace) -> int:
    """Re-encodes every video of the lists under --out-root; done ones (in its reencode.jsonl) are skipped."""
    from collections import Counter

    from clipflow.data.listfile import VideoEntry, read_list, write_labels
    from clipflow.data.reencode import JOURNAL, ReencodeSpec, reencode_tree

    if a.out_list and len(a.out_list) != len(a.list):
        raise ClipflowError(f"give one --out-list per --list: {len(a.list)} lists, {len(a.out_list)} out lists")
    width, height = a.size if a.size else (None, None)
    spec = ReencodeSpec(a.short_side, width, height, a.fps, a.gop, a.crf, a.preset)
    root, out_root = Path(a.root), Path(a.out_root)
    if not root.is_dir():
        raise ClipflowError(f"video root {root} is not a folder")
    if out_root.resolve() == root.resolve():
        raise ClipflowError(f"--out-root {out_root} is the video root: the outputs would replace their inputs")
    lists = [(path, read_list(path)) for path in a.list]  # every list checked before any video is encoded
    shape = f"{width}x{height}" if width else f"short side {spec.short_side}"
    print(f"re-encoding to {shape}, {spec.fps} fps, a keyframe every {spec.keyframe_interval} frames, no audio")
    nothing_from = []
    for i, (path, entries) in enumerate(lists):
        results = reencode_tree(entries, root, out_root, spec, workers=a.workers)
        count = Counter(r.status for r in results)
        print(
            f"{path}: {count['done']} re-encoded, {count['skipped']} skipped (up to date in "
            f"{out_root / JOURNAL}), {count['failed']} failed, of {len(entries)}"
        )
        failed = [(e, r) for e, r in zip(entries, results, strict=True) if r.status == "failed"]
        for entry, result in failed[:SHOWN_PER_KIND]:
            print(f"failed: {entry.path} ({path} line {entry.line}): {result.error}")
        if len(failed) > SHOWN_PER_KIND:
            print(f"failed: ... and {len(failed) - SHOWN_PER_KIND} more")
        if a.out_list:
            # failed entries stay (but for paths outside the root), so that the scan lists them as failures too
            write_labels(
                a.out_list[i],
                [
                    VideoEntry(Path(r.dst).relative_to(out_root).as_posix(), e.label, None, e.line)
                    for e, r in zip(entries, results, strict=True)
                    if r.dst
                ],
            )
            print(f"{path}: list of the outputs in {a.out_list[i]}")
        if count["failed"] == len(entries):
            nothing_from.append(str(path))
    if nothing_from:
        raise ClipflowError(f"no video of {', '.join(nothing_from)} could be re-encoded; see the failures above")
    return 0


def cmd_data_frames(a: argparse.Namespace) -> int:
    """One JSON line per clip: the frames it reads and its crop; per video, or per view in test mode
    (test_clips x test_crops, clip-major)."""
    import numpy as np

    from clipflow.data.sampling import gluoncv_frame_list
    from clipflow.recipe import load_recipe
    from clipflow.train.trainer import make_dataset

    recipe = load_recipe(a.recipe, json.loads(a.overrides))
    root = Path(a.root) if a.root else Path(a.list).parent
    dataset = make_dataset(recipe, Path(a.list), root, a.mode, a.seed)
    dataset.set_epoch(a.epoch)
    for index, entry in enumerate(dataset.entries):
        for plan in dataset.plans(index):
            record = {
                "path": entry.path,
                "label": entry.label,
                "num_frames": entry.num_frames,
                "offsets": plan.offsets,
                "fast": plan.fast,
                "slow": plan.slow,
                "gluoncv_order": gluoncv_frame_list(
                    np.array(plan.offsets), int(entry.num_frames or 0), dataset.clip, plan.jitter
                ),
                "crop": dict(zip(("top", "left", "height", "width"), plan.box, strict=True)),
                "flip": plan.flip,
            }
            if dataset.mode == "test":
                record["view"] = {"clip": plan.clip_index, "crop": plan.crop_index}
            print(json.dumps(record))
    return 0


def cmd_splits(a: argparse.Namespace) -> int:
    from clipflow.data.listfile import read_list, write_list
    from clipflow.data.splits import split_entries

    parts = split_entries(read_list(a.list), a.num_workers, a.seed, a.fill)
    for rank, part in enumerate(parts):
        write_list(Path(a.out_dir) / f"worker{rank}.lst", part)
    print(f"{len(parts)} worker lists of {len(parts[0])} videos each in {a.out_dir}")
    return 0


# -- train -------------------------------------------------------------------------------------


def _add_worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", required=True)
    p.add_argument("--overrides", default="{}")
    p.add_argument("--splits-dir", required=True)
    p.add_argument("--root", required=True, help="folder the list paths are relative to")
    p.add_argument("--checkpoint-root", required=True)
    p.add_argument("--model-out", required=True)
    p.add_argument("--metrics-out", required=True)
    p.add_argument("--val-list", default="", help="scanned val list: validation while training (train.eval_every)")
    p.add_argument("--tensorboard", default="", help="folder for rank 0's TensorBoard event files (default: none)")
    p.add_argument(
        "--backend",
        default="ps",
        choices=["ps", "ddp"],
        help="ps: clipflow's parameter server; ddp: torch.distributed (gloo)",
    )
    p.add_argument("--kvstore", default="dist_sync")
    p.add_argument("--update-on-kvstore", action="store_true", help="the servers run the optimizer")
    p.add_argument("--compression", default="none", choices=["none", "2bit"], help="gradient compression")
    p.add_argument("--compression-threshold", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)


def _shared_path(path: str) -> str:
    """``path`` as a role on any host of the plan names it: absolute, on the storage the hosts share."""
    return str(Path(path).absolute())


def _worker_argv(a: argparse.Namespace) -> list[str]:
    """The worker's arguments, paths as every host names them."""
    for name in ("recipe", "splits_dir", "root", "checkpoint_root", "model_out", "metrics_out", "val_list",
                 "tensorboard"):  # fmt: skip
        if (name != "recipe" or Path(a.recipe).exists()) and getattr(a, name):  # a recipe may also be a name
            setattr(a, name, _shared_path(getattr(a, name)))
    return [
        "--recipe",
        a.recipe,
        "--overrides",
        a.overrides,
        "--splits-dir",
        a.splits_dir,
        "--root",
        a.root,
        "--checkpoint-root",
        a.checkpoint_root,
        "--model-out",
        a.model_out,
        "--metrics-out",
        a.metrics_out,
        *(["--val-list", a.val_list] if a.val_list else []),
        *(["--tensorboard", a.tensorboard] if a.tensorboard else []),
        "--backend",
        a.backend,
        "--kvstore",
        a.kvstore,
        *(["--update-on-kvstore"] if a.update_on_kvstore else []),
        "--compression",
        a.compression,
        "--compression-threshold",
        str(a.compression_threshold),
        "--seed",
        str(a.seed),
    ]


def _launch_roles(plan, command: list[str], backend: str, log_dir: str, grace: float, host_logs: bool) -> int:
    """Runs `python -m clipflow COMMAND...` on the plan's workers (and, with backend ps, its scheduler and
    servers) until the first failure; the launcher's exit code. ``host_logs``: each role also keeps its log on
    its own host, for collection."""
    from clipflow.cluster.plan import check_ports
    from clipflow.train.launcher import Launcher
    from clipflow.train.roles import role_commands

    check_ports(plan)
    worker = [plan.python or sys.executable, "-m", "clipflow", *command]
    commands = role_commands(plan, worker, backend=backend, log_dir=log_dir if host_logs else "")
    return Launcher(commands, log_dir, grace_s=grace).run()


def cmd_train_launch(a: argparse.Namespace) -> int:
    from clipflow.cluster.plan import Plan
    from clipflow.recipe import load_recipe

    load_recipe(a.recipe, _json(a.overrides))  # fail here, once, rather than in every worker
    _ps_settings(a).check_for(a.backend)
    if a.val_list:
        from clipflow.data.listfile import read_list

        read_list(a.val_list)  # a missing or broken val list, named here
    plan = Plan.read(a.plan)
    code = _launch_roles(plan, ["train", "worker", *_worker_argv(a)], a.backend, a.log_dir, a.grace, host_logs=True)
    if code:
        print(
            f"clipflow: error: training failed (exit {code}); rerun to resume from the last checkpoint", file=sys.stderr
        )
    return code


def cmd_collect(a: argparse.Namespace) -> int:
    """Every role's log and rank 0's final model and checkpoints, from their hosts, checksums verified."""
    from clipflow.cluster.plan import Plan
    from clipflow.collect.gather import MANIFEST, collect

    plan = Plan.read(a.plan)
    model, root = _shared_path(a.model), _shared_path(a.checkpoint_root)  # as train launch gave them
    outcome = collect(plan, a.log_dir, root, model, Path(a.out), a.backend)
    if outcome.problems:
        for problem in outcome.problems:
            print(f"clipflow: error: {problem}", file=sys.stderr)
        raise ClipflowError(
            f"{len(outcome.problems)} problem(s) collecting the run: no {MANIFEST} written; the verified copies "
            f"so far are in {outcome.partial}"
        )
    hosts = len({f.host for f in outcome.files})
    print(f"collected {len(outcome.files)} files from {hosts} host(s), every sha256 verified: {outcome.out / MANIFEST}")
    return 0


def _set_worker_threads() -> None:
    """A worker's torch threads: CLIPFLOW_TORCH_THREADS, else its share of the host's cores."""
    import torch

    from clipflow.ps.env import int_var

    workers_here = int_var(os.environ, "CLIPFLOW_WORKERS_ON_HOST", "an integer >= 1", low=1, default=1)
    threads = int_var(os.environ, "CLIPFLOW_TORCH_THREADS", "an integer >= 1 (torch threads of this worker)", low=1,
                      default=max(1, (os.cpu_count() or 1) // workers_here))  # fmt: skip
    torch.set_num_threads(threads)


def cmd_train_worker(a: argparse.Namespace) -> int:
    from clipflow.recipe import load_recipe
    from clipflow.train.device import worker_device
    from clipflow.train.trainer import WorkerPaths

    _set_worker_threads()
    recipe = load_recipe(a.recipe, _json(a.overrides))
    paths = WorkerPaths(
        Path(a.splits_dir),
        Path(a.root),
        Path(a.checkpoint_root),
        Path(a.model_out),
        Path(a.metrics_out),
        Path(a.val_list) if a.val_list else None,
        Path(a.tensorboard) if a.tensorboard else None,
    )
    ps = _ps_settings(a)
    ps.check_for(a.backend)
    device = worker_device()
    if a.backend == "ddp":
        return _train_ddp(recipe, paths, a.seed, device)
    from clipflow.ps import KVStore
    from clipflow.train.comm import PSComm
    from clipflow.train.trainer import Trainer

    with KVStore.create(ps.mode) as kv:  # an exception tells the scheduler, which stops the other nodes
        Trainer(PSComm(kv, ps), recipe, paths, a.seed, device).run()
    return 0


def _ps_settings(a: argparse.Namespace):
    from clipflow.train.comm import PSSettings

    return PSSettings(a.kvstore, a.update_on_kvstore, a.compression, a.compression_threshold)


def _train_ddp(recipe: dict, paths, seed: int, device) -> int:
    from clipflow.train.trainer import Trainer

    return _ddp_job("ddp", device, lambda comm: Trainer(comm, recipe, paths, seed, device).run())


def _ddp_job(what: str, device, body: Callable[[Any], object]) -> int:
    """Runs ``body(comm)`` in this process's torch.distributed group. When another process dies, gloo
    reports the lost connection here: that is an echo of the failure (exit ABORTED), so the launcher names
    the process that died, not this one."""
    from clipflow.ps.exitcodes import ABORTED
    from clipflow.train.comm import DDPComm, DDPConfig, lost_peer

    config = DDPConfig.from_env()
    try:
        with DDPComm(config, device) as comm:
            body(comm)
    except RuntimeError as exc:
        if not lost_peer(exc):
            raise
        print(f"clipflow: {what} rank {config.rank}: another process left the job ({str(exc).splitlines()[0]})",
              file=sys.stderr)  # fmt: skip
        return ABORTED
    return 0


def cmd_ps_keys(a: argparse.Namespace) -> int:
    from clipflow.ps.security import make_keys

    print(f"CURVE keys in {make_keys(a.dir)}: copy the folder to every node, set CLIPFLOW_PS_KEYS to it")
    return 0


def cmd_ps_role(a: argparse.Namespace) -> int:
    from clipflow.ps import run_role

    return run_role()


# -- evaluate and report -----------------------------------------------------------------------


def _evaluate_args(a: argparse.Namespace) -> None:
    """--model, --list, --root and --out are required by every form of `clipflow evaluate`."""
    missing = [f"--{name}" for name in ("model", "list", "root", "out") if not getattr(a, name)]
    if missing:
        raise ClipflowError(f"clipflow evaluate needs {', '.join(missing)}")


def _print_metrics(metrics: dict | None) -> None:
    if metrics is not None:
        print(
            f"test protocol ({metrics['protocol']}) on {metrics['num_videos']} videos, {metrics['workers']} worker(s): "
            f"video top-1 {metrics['top1']:.4f} top-5 {metrics['top5']:.4f}, "
            f"clip top-1 {metrics['clip']['top1']:.4f} top-5 {metrics['clip']['top5']:.4f}"
        )


def cmd_evaluate(a: argparse.Namespace) -> int:
    """One process, no plan: the same scoring as `evaluate launch` with one worker."""
    from clipflow.evaluate.evaluate import evaluate
    from clipflow.train.device import worker_device

    _evaluate_args(a)
    _print_metrics(evaluate(a.model, a.list, a.root, a.out, a.batch_size, device=worker_device()))
    return 0


def cmd_evaluate_launch(a: argparse.Namespace) -> int:
    from clipflow.cluster.plan import Plan
    from clipflow.evaluate.evaluate import check_inputs

    _evaluate_args(a)
    plan = Plan.read(a.plan)
    if not any(r.role == "worker" for r in plan.roles) or plan.num_workers < 1:
        raise ClipflowError(f"cluster plan {a.plan} has no workers to evaluate on; rerun the cluster stage")
    check_inputs(a.model, a.list, a.root, a.batch_size)  # once here, rather than in every worker
    paths = [_shared_path(p) for p in (a.model, a.list, a.root, a.out)]
    worker = ["evaluate", "worker", *_evaluate_argv(*paths, a.batch_size)]
    code = _launch_roles(plan, worker, "ddp", a.log_dir, a.grace, host_logs=False)
    if code:
        print(f"clipflow: error: evaluation failed (exit {code}); see the workers' logs in {a.log_dir}",
              file=sys.stderr)  # fmt: skip
    return code


def _evaluate_argv(model: str, list_path: str, root: str, out: str, batch_size: int | None) -> list[str]:
    sized = ["--batch-size", str(batch_size)] if batch_size is not None else []
    return ["--model", model, "--list", list_path, "--root", root, "--out", out, *sized]


def cmd_evaluate_worker(a: argparse.Namespace) -> int:
    """One worker of `evaluate launch`: its share of the list, gathered over torch.distributed."""
    from clipflow.evaluate.evaluate import evaluate
    from clipflow.train.device import worker_device

    _evaluate_args(a)
    _set_worker_threads()
    device = worker_device()
    return _ddp_job("evaluate", device, lambda comm: _print_metrics(
        evaluate(a.model, a.list, a.root, a.out, a.batch_size, comm, device)))  # fmt: skip


def cmd_status(a: argparse.Namespace) -> int:
    from clipflow.evaluate.status import run_status

    status = run_status(a.results, a.run)
    print(status.as_json() if a.json else "\n".join(status.lines()))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from clipflow.report.page import ReportInputs, write_report

    optional = {name: Path(value) for name in ("checks", "results", "collected") if (value := getattr(a, name))}
    inputs = ReportInputs(Path(a.metrics), Path(a.history), Path(a.manifest), Path(a.plan), **optional)
    out = write_report(inputs, a.out_dir, run=a.run)
    print(f"report: {out}")
    return 0


def cmd_models(a: argparse.Namespace) -> int:
    from clipflow.models import MODEL_NAMES, model_info

    if a.action == "list":
        print("\n".join(MODEL_NAMES))
        return 0
    if a.name is None:
        raise ClipflowError("models info needs a model name; `clipflow models list` lists them")
    print(json.dumps(model_info(a.name, a.num_classes)))
    return 0


def _host_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", default="", help="comma-separated [user@]host[:port]")
    p.add_argument("--hosts-file", default="", help="one [user@]host[:port] [slots=N] a line")


def _ssh_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ssh-key", default="~/.ssh/id_ed25519", help="the job's ssh key (made when missing)")
    p.add_argument("--known-hosts", default=".clipflow/known_hosts", help="the project's pinned host keys")
    p.add_argument("--refuse-new-host-keys", action="store_true", help="refuse hosts not in --known-hosts yet")


def _add_evaluate_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--model", required=required, help="a model file of the train stage (model_final.pt)")
    p.add_argument("--list", required=required, help="the scanned list to score (val.lst)")
    p.add_argument("--root", required=required, help="folder the list's paths are relative to")
    p.add_argument("--out", required=required, help="metrics.json to write")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="views a forward pass at most; a batch holds whole videos (default: the recipe's eval_batch_size)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clipflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser("cluster", help="cluster preparation").add_subparsers(dest="action", required=True)
    p = cluster.add_parser("plan", help="place roles on hosts and check the ports")
    p.add_argument("--launcher", default="local", choices=["local", "ssh", "slurm"])
    _host_args(p)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--num-servers", type=int, default=1)
    p.add_argument("--root-port", type=int, default=9091)
    p.add_argument("--heartbeat-timeout", type=float, default=30.0)
    p.add_argument("--placement", default="beside", choices=["beside", "cycle"])
    p.add_argument(
        "--security",
        default="auto",
        choices=["auto", "curve", "none"],
        help="CURVE on every PS socket; auto: whenever the scheduler is not on loopback",
    )
    _ssh_args(p)
    p.add_argument("--python", default="", help="ssh: the Python the roles run with on the hosts (default: this one)")
    p.add_argument("--workdir", default="", help="ssh: the roles' working folder on the hosts (default: this one)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_cluster_plan)
    p = cluster.add_parser("keys", help="make the job's ssh key and authorise it on every host")
    _host_args(p)
    _ssh_args(p)
    p.add_argument("--key-type", default="ed25519", choices=["ed25519", "rsa"])
    p.add_argument("--out", default="", help="JSON report of what changed")
    p.set_defaults(func=cmd_cluster_keys)
    p = cluster.add_parser("check", help="check every host of a plan: ssh, versions, paths, ports, disk")
    p.add_argument("--plan", required=True)
    p.add_argument("--path", action="append", default=[], help="a path the run reads (repeat)")
    p.add_argument("--min-free-gb", type=float, default=1.0)
    p.add_argument("--out", required=True, help="the checks as JSON")
    p.set_defaults(func=cmd_cluster_check)
    p = cluster.add_parser("sync", help="rsync the working folder to every host of a plan")
    p.add_argument("--plan", required=True)
    p.add_argument("--src", default=".")
    p.add_argument("--dst", required=True)
    p.add_argument("--stamp", default="", help="file written when every host is synced")
    p.set_defaults(func=cmd_cluster_sync)

    p = sub.add_parser("launch", help="MXNet launch.py's flags: scheduler, servers and workers running a command")
    p.add_argument("-n", "--num-workers", type=int, required=True)
    p.add_argument("-s", "--num-servers", type=int, default=0, help="default: as many as workers")
    p.add_argument("-H", "--hostfile", dest="hosts_file", default="", help="[user@]host[:port] [slots=N] a line")
    p.add_argument("--launcher", choices=["local", "ssh", "slurm"], default="", help="default: ssh with -H, else local")
    p.add_argument("--sync-dst-dir", default="", help="ssh: rsync this folder there first and run there")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for every role (repeat)")
    p.add_argument("--placement", default="beside", choices=["beside", "cycle"])
    p.add_argument("--port", type=int, default=9091, help="the scheduler's port")
    p.add_argument("--heartbeat-timeout", type=float, default=30.0)
    p.add_argument("--security", default="auto", choices=["auto", "curve", "none"])
    p.add_argument("--python", default="", help="ssh: the Python on the hosts (default: this one)")
    p.add_argument("--log-dir", default="logs/launch")
    p.add_argument("--grace", type=float, default=10.0)
    _ssh_args(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the workers' command")
    p.set_defaults(func=cmd_launch, hosts="")

    data = sub.add_parser("data", help="data sets").add_subparsers(dest="action", required=True)
    p = data.add_parser("synth", help="generate the synthetic motion set")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--num-train", type=int, default=400)
    p.add_argument("--num-val", type=int, default=160)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-frames", type=int, default=48)
    p.add_argument("--max-frames", type=int, default=120)
    p.add_argument("--short-side", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=cmd_data_synth)
    p = data.add_parser("cifar-synth", help="generate a small learnable set in CIFAR-10's python format")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--num-train", type=int, default=500)
    p.add_argument("--num-val", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_data_cifar_synth)
    p = data.add_parser("cifar-index", help="list files and a manifest of a cifar-10-batches-py folder")
    p.add_argument("--root", required=True, help="the extracted cifar-10-batches-py folder")
    p.add_argument("--out-dir", required=True, help="train.lst, val.lst, classes.txt and manifest.json go here")
    p.set_defaults(func=cmd_data_cifar_index)
    p = data.add_parser("scan", help="decode every video once; write list files and a manifest")
    p.add_argument("--train-list", required=True)
    p.add_argument("--val-list", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--num-classes", type=int, required=True, help="labels must be in [0, num_classes)")
    p.add_argument("--classes", default="", help="the class index, one name a line (line number - 1 = label)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=cmd_data_scan)
    p = data.add_parser("kinetics", help="Kinetics annotation CSVs to the scan's 'path label' lists and classes.txt")
    p.add_argument("--train-csv", required=True, help="label,youtube_id,time_start,time_end,split")
    p.add_argument("--val-csv", required=True)
    p.add_argument("--root", required=True, help="the video folder: <label>/<id>_<start>_<end>.mp4 or flat")
    p.add_argument(
        "--classes",
        default="",
        help="an existing class index, one name a line, holding every label of both CSVs "
        "(default: the train CSV's labels sorted by name)",
    )
    p.add_argument("--out-dir", required=True, help="train_labels.txt, val_labels.txt and classes.txt go here")
    p.set_defaults(func=cmd_data_kinetics)
    p = data.add_parser("reencode", help="re-encode the videos of lists: one size, constant fps, fixed keyframes")
    p.add_argument("--list", action="append", required=True, help="a list file (repeat for several)")
    p.add_argument("--root", required=True, help="the folder the list paths are relative to")
    p.add_argument("--out-root", required=True, help="outputs go to the same relative paths here, as .mp4")
    p.add_argument("--out-list", action="append", default=[], help="per --list: a 'path label' list of the outputs")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--short-side", type=int, default=256, help="scale the short side to this, keeping the aspect")
    shape.add_argument("--size", type=_size, default=None, help="WIDTHxHEIGHT for every output, e.g. 340x256")
    p.add_argument("--fps", type=_number, default=30)
    p.add_argument("--gop", type=int, default=16, help="a keyframe every this many frames")
    p.add_argument("--crf", type=int, default=23, help="x264 quality: 0 lossless to 51")
    p.add_argument("--preset", default="veryfast", help="x264 preset")
    p.add_argument("--workers", type=int, default=2, help="videos encoded in parallel")
    p.set_defaults(func=cmd_data_reencode)
    p = data.add_parser("frames", help="print the frames and crop each clip of a recipe reads, a JSON line per video")
    p.add_argument("list", help="a scanned list file (path num_frames label)")
    p.add_argument("--recipe", required=True)
    p.add_argument("--overrides", default="{}", help="recipe overrides as JSON")
    p.add_argument("--mode", choices=["train", "val", "test"], default="train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch", type=int, default=1, help="training epoch (1-based, as the trainer counts)")
    p.add_argument("--root", default="", help="folder the list's paths are relative to (default: the list's)")
    p.set_defaults(func=cmd_data_frames)

    p = sub.add_parser("splits", help="one list per worker, all of the same length")
    p.add_argument("--list", required=True)
    p.add_argument("--num-workers", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--fill", choices=["wrap", "drop"], default="wrap", help="when the list does not divide")
    p.set_defaults(func=cmd_splits)

    train = sub.add_parser("train", help="training").add_subparsers(dest="action", required=True)
    p = train.add_parser("launch", help="start scheduler, servers and workers of a plan")
    p.add_argument("--plan", required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL at teardown")
    _add_worker_args(p)
    p.set_defaults(func=cmd_train_launch)
    p = train.add_parser("worker", help="one worker (started by the launcher, with DMLC_* set)")
    _add_worker_args(p)
    p.set_defaults(func=cmd_train_worker)

    p = sub.add_parser("collect", help="bring a run's logs, model and checkpoints home, checksums verified")
    p.add_argument("--plan", required=True)
    p.add_argument("--log-dir", required=True, help="train launch's --log-dir (the roles' own logs are under it)")
    p.add_argument("--checkpoint-root", required=True, help="train launch's --checkpoint-root")
    p.add_argument("--model", required=True, help="train launch's --model-out")
    p.add_argument("--backend", default="ps", choices=["ps", "ddp"],
                   help="train launch's --backend (one the run did not train with is named)")  # fmt: skip
    p.add_argument("--out", required=True, help="the collection folder; manifest.json in it when all verified")
    p.set_defaults(func=cmd_collect)

    ps = sub.add_parser("ps", help="parameter server").add_subparsers(dest="action", required=True)
    p = ps.add_parser("role", help="run the scheduler or a server, as DMLC_ROLE says")
    p.set_defaults(func=cmd_ps_role)
    p = ps.add_parser("keys", help="make the CURVE key folder of a job")
    p.add_argument("dir")
    p.set_defaults(func=cmd_ps_keys)

    evaluate = sub.add_parser(
        "evaluate",
        help="top-1/top-5 of a trained model on a list with the recipe's test protocol",
        description="Scores every view of the recipe's test protocol (data.test_clips x data.test_crops for videos, "
        "one view for images) and writes metrics.json. Two forms: `clipflow evaluate --model M --list L --root R "
        "--out OUT` in this one process, or `clipflow evaluate launch --plan P --log-dir D --model M ...` on every "
        "worker of a cluster plan, the videos split over them and the results gathered with torch.distributed "
        "(whatever back end trained the model). `evaluate worker` is what the launcher starts.",
    )
    _add_evaluate_args(evaluate, required=False)
    evaluate.set_defaults(func=cmd_evaluate)
    forms = evaluate.add_subparsers(dest="action", required=False, metavar="{launch,worker}")
    p = forms.add_parser("launch", help="evaluate on every worker of a plan (torch.distributed), rank 0 writes --out")
    p.add_argument("--plan", required=True, help="the cluster plan (clipflow cluster plan); its workers run")
    p.add_argument("--log-dir", required=True, help="one log a worker")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL at teardown")
    _add_evaluate_args(p, required=True)
    p.set_defaults(func=cmd_evaluate_launch)
    p = forms.add_parser("worker", help="one worker (started by `evaluate launch`, with RANK, WORLD_SIZE, MASTER_*)")
    _add_evaluate_args(p, required=True)
    p.set_defaults(func=cmd_evaluate_worker)

    p = sub.add_parser("status", help="where a run stands: epoch, last checkpoint, throughput, ETA")
    p.add_argument("run", help="the run's name (config run:), a folder of --results")
    p.add_argument("--results", default="results", help="the folder holding the runs (default: results)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("report", help="curves and tables of a run, as HTML")
    p.add_argument("--metrics", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--checks", default="", help="the host checks (cluster/checks.json), when the run had them")
    p.add_argument("--results", default="", help="the folder of all runs: a scaling figure from those of this recipe")
    p.add_argument("--collected", default="", help="collect's manifest.json: the files brought home")
    p.add_argument("--run", default="", help="the run's name, for the title")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("models", help="model names and sizes")
    p.add_argument("action", choices=["list", "info"])
    p.add_argument("name", nargs="?", help="a name from `models list` (info)")
    p.add_argument("--num-classes", type=int, default=400)
    p.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    from clipflow.host_log import start_from_env

    start_from_env()  # a role started by the launcher keeps its own log on its host
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FAILURES as exc:
        print(f"clipflow: {exc.label}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_status
    except KeyboardInterrupt:
        print("clipflow: interrupted", file=sys.stderr)
        return 130
