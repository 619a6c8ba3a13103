"""Kinetics-scale bookkeeping: the work clipflow does besides training as a data set grows, measured at growing
sizes, each step's growth fitted and extrapolated to Kinetics-400's 240,000 training videos.

The steps, each timed in this process with the functions the trainer and the stages call:

* epoch start (rank 0, every epoch and every resume): the epoch's plan for every slot (``normal_lanes``,
  ``EpochPlan`` over every worker's part) and this worker's samples of it as dataset indices (``own_indices``,
  what ``Trainer._lanes_of`` runs); 2 workers, ``N`` videos a worker;
* run start (rank 0): every worker's list read and cut into its parts (``read_list``, ``part_lines``: what
  ``Trainer._every_part`` reads to write a checkpoint's plan);
* resume: the plan of an epoch cut half-way as a checkpoint records it and rank 0 broadcasts it
  (``EpochPlan.record``, ``from_record``, ``encode``, ``decode``), and the size of what is broadcast;
* splits: ``write_splits`` of a list of ``S`` videos for ``W`` workers (8, 64, 512), beyond the import;
* scan: the data stage's cost a video (``scan`` of hardlinks of one small synthetic clip).

Growth: the exponent between the two largest sizes (log of the time ratio over log of the size ratio: 1 is
linear, 2 quadratic), and the time at 240,000 videos (120,000 a worker on 2 workers) extrapolated with it.

    .venv/bin/python bench/scale.py                 # 2,000 / 8,000 / 24,000 videos a worker; splits of 240,000
    .venv/bin/python bench/scale.py --quick         # seconds, for the test: tiny sizes, same code
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

KINETICS = 240_000
WORKERS = 2
BATCH = 8


def timed(work: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    """The least wall time of ``repeat`` runs of ``work`` (seconds) and its last result; Python's cyclic garbage
    collector off while it runs, as timeit has it (its passes over every list of the plan come at the moment the
    allocations happen to cross its threshold: noise of a factor 2 to 10 between sizes, not the steps' growth)."""
    best, out = math.inf, None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            began = time.perf_counter()
            out = work()
            best = min(best, time.perf_counter() - began)
        finally:
            gc.enable()
    return best, out


def growth(sizes: list[int], seconds: list[float], target: int) -> dict:
    """The exponent between the two largest sizes and the time at ``target`` extrapolated with it."""
    (n1, n2), (t1, t2) = sizes[-2:], seconds[-2:]
    exponent = math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1)
    return {"exponent": round(exponent, 2), "extrapolated_s": t2 * (target / n2) ** max(exponent, 1.0)}


def entries_of(count: int, start: int = 0) -> list:
    from clipflow.data.listfile import VideoEntry

    return [VideoEntry(f"videos/train/class_{i % 400:03d}/clip_{i:07d}.mp4", i % 400, 300)
            for i in range(start, start + count)]  # fmt: skip


def epoch_start(per_worker: int) -> float:
    from clipflow.train.slots import EpochPlan, normal_lanes, own_indices, part_lines

    parts = [part_lines(entries_of(per_worker, r * per_worker), 1, per_worker)[0] for r in range(WORKERS)]

    def start() -> list:
        lanes = normal_lanes(WORKERS, per_worker, BATCH, 0, 7)
        plan = EpochPlan(lanes, parts, sum(len(lane) for lane in lanes))
        return own_indices(plan, 0, 1, parts[:1], per_worker)

    seconds, indices = timed(start)
    assert all(i is not None for lane in indices for i in lane)  # every sample its own: the plan is rank 0's own
    return seconds


def run_start(per_worker: int, folder: Path) -> float:
    from clipflow.data.listfile import read_list, write_list
    from clipflow.train.slots import part_lines

    for r in range(WORKERS):
        write_list(folder / f"worker{r}.lst", entries_of(per_worker, r * per_worker))
    return timed(lambda: [part_lines(read_list(folder / f"worker{r}.lst"), 1, per_worker) for r in range(WORKERS)])[0]


def resume(per_worker: int) -> tuple[float, float]:
    """Seconds of a half-done epoch's plan through a checkpoint's record and the broadcast; MiB broadcast."""
    from clipflow.train.slots import EpochPlan, normal_lanes, part_lines

    parts = [part_lines(entries_of(per_worker, r * per_worker), 1, per_worker)[0] for r in range(WORKERS)]
    lanes = normal_lanes(WORKERS, per_worker, BATCH, 0, 7)
    plan = EpochPlan(lanes, parts, sum(len(lane) for lane in lanes))
    done = len(lanes[0]) // BATCH // 2

    def through() -> tuple:
        record = json.loads(json.dumps(plan.record(BATCH * done)))  # as the checkpoint keeps it
        sent = EpochPlan.from_record(record, done).encode()
        return record, sent, EpochPlan.decode(sent)

    seconds, (record, sent, back) = timed(through, repeat=2)
    assert back.lanes == [[tuple(s) for s in lane] for lane in record["lanes"]] and back.sources == parts
    return seconds, sent.numel() * 4 / 2**20


def splits(total: int, workers: int, folder: Path) -> float:
    from clipflow.data.listfile import write_list
    from clipflow.data.splits import write_splits

    listed = folder / "train.lst"
    if not listed.exists():
        write_list(listed, entries_of(total))

    def split() -> object:
        out = folder / f"splits_{workers}"
        shutil.rmtree(out, ignore_errors=True)
        return write_splits(listed, workers, 0, out)

    return timed(split, repeat=2)[0]


def scan_cost(count: int, folder: Path) -> float:
    """Seconds a video of the scan of ``count`` hardlinks of one small synthetic clip."""
    from clipflow.data.listfile import VideoEntry
    from clipflow.data.scan import scan
    from clipflow.data.synthetic import SyntheticSpec, generate

    source = folder / "one"
    if not source.exists():
        generate(source, SyntheticSpec(num_train=1, num_val=0, min_frames=48, max_frames=48, short_side=64))
    clip = next((source / "videos" / "train").glob("*.mp4"))
    links = folder / f"links_{count}"
    links.mkdir(exist_ok=True)
    for i in range(count):
        target = links / f"clip_{i:06d}.mp4"
        if not target.exists():
            os.link(clip, target)
    entries = [VideoEntry(f"clip_{i:06d}.mp4", 0) for i in range(count)]
    seconds, results = timed(lambda: scan(entries, links, workers=1, desc="bench"), repeat=1)
    assert len(results) == count
    return seconds / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 24000], help="videos a worker")
    parser.add_argument("--list-videos", type=int, default=KINETICS, help="the list split for --split-workers")
    parser.add_argument("--split-workers", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--scan-videos", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the test")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.list_videos, args.split_workers, args.scan_videos = [100, 400], 2000, [4, 16], [4, 8]
    os.environ.setdefault("CLIPFLOW_NO_PROGRESS", "1")
    figures: dict = {"bench": "scale", "sizes_per_worker": args.sizes, "workers": WORKERS}
    with tempfile.TemporaryDirectory(prefix="clipflow-scale-") as tmp:
        folder = Path(tmp)
        steps = {
            "epoch_start": [epoch_start(n) for n in args.sizes],
            "run_start": [run_start(n, folder) for n in args.sizes],
        }
        resumed = [resume(n) for n in args.sizes]
        steps["resume"] = [s for s, _ in resumed]
        figures["resume_broadcast_mib"] = [round(mib, 3) for _, mib in resumed]
        per_worker_target = KINETICS // WORKERS
        for name, seconds in steps.items():
            figures[name] = {"seconds": [round(s, 4) for s in seconds],
                             **growth(args.sizes, seconds, per_worker_target)}  # fmt: skip
            g = figures[name]
            print(f"{name}: " + ", ".join(f"{n} a worker {s:.4f} s" for n, s in zip(args.sizes, seconds, strict=True))
                  + f"; growth exponent {g['exponent']}, at {KINETICS} videos on {WORKERS} workers "
                  f"{g['extrapolated_s']:.3f} s")  # fmt: skip
        split_s = [splits(args.list_videos, w, folder) for w in args.split_workers]
        figures["splits"] = {"list_videos": args.list_videos, "workers": args.split_workers,
                             "seconds": [round(s, 3) for s in split_s],
                             "exponent_in_workers": growth(args.split_workers, split_s, 1)["exponent"]}  # fmt: skip
        print(f"splits of {args.list_videos} videos: "
              + ", ".join(f"{w} workers {s:.3f} s" for w, s in zip(args.split_workers, split_s, strict=True))
              + f"; growth exponent in the workers {figures['splits']['exponent_in_workers']}")  # fmt: skip
        per_video = [scan_cost(n, folder) for n in args.scan_videos]
        figures["scan_per_video_ms"] = [round(1000 * s, 2) for s in per_video]
        figures["scan_at_kinetics_h"] = round(per_video[-1] * KINETICS / 3600, 2)
        costs = ", ".join(f"{n} videos {1000 * s:.2f} ms a video" for n, s in zip(args.scan_videos, per_video,
                                                                                   strict=True))  # fmt: skip
        print(f"scan: {costs}; {KINETICS} such videos {figures['scan_at_kinetics_h']} h on one process")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
