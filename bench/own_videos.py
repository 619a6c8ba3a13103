"""The README's path for a folder of one's own videos, timed: class folders -> a trained model -> its report and
``clipflow predict``, on this machine.

    python bench/own_videos.py [--classes 4] [--per-class 25] [--frames 90] [--short-side 240] [--out FOLDER]

It writes ``--classes`` folders of ``--per-class`` videos each (clipflow's synthetic motion clips, one motion a
folder: 3 s at 30 fps, 426x240 by default, as a phone's clip scaled down), then runs, in a copy of the workflow, the
README's config (``recipe: slowfast_small_own``, ``data: {source: folder, root: videos}``) with
``snakemake --cores 1 train_slowfast``, and ``clipflow predict`` on the validation videos. It prints the wall time
of the whole run and of each stage (Snakemake's benchmark files and the logs' times), the video top-1 against the
chance of a guess (the reference a data set without a published result has), and how many of predict's answers are
the evaluation's; the last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from folder_helpers import MOTIONS, write_motion_video  # noqa: E402
from helpers import benchmark_seconds, copy_workflow, python_env  # noqa: E402

CONFIG = "run: mine\nrecipe: slowfast_small_own\ndata: {source: folder, root: videos}\n"  # the README's
FOLDERS = ["waving", "clapping", "jumping", "running"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=4, choices=range(2, 5))
    parser.add_argument("--per-class", type=int, default=25)
    parser.add_argument("--frames", type=int, default=90)
    parser.add_argument("--short-side", type=int, default=240)
    parser.add_argument("--out", default="", help="keep the workflow copy here (default: a temporary folder)")
    a = parser.parse_args()
    work = Path(a.out or tempfile.mkdtemp(prefix="own-videos-"))
    work.mkdir(parents=True, exist_ok=True)
    copy_workflow(work)
    began = time.perf_counter()
    for folder, motion in zip(FOLDERS[: a.classes], MOTIONS, strict=False):
        for i in range(a.per_class):
            write_motion_video(work / "videos" / folder / f"VID_{i:04d}.mp4", motion, i, a.frames, a.short_side)
    made_s = time.perf_counter() - began
    (work / "mine.yaml").write_text(CONFIG)
    env = python_env()
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "train_slowfast", "--configfile",
                           "mine.yaml"], cwd=work, env=env, capture_output=True, text=True)  # fmt: skip
    run_s = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"the run failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    metrics = json.loads((work / "results/mine/metrics.json").read_text())
    index = next((work / "results/data").glob("folder-videos-*/index"))
    manifest = json.loads((index / "manifest.json").read_text())
    val = [line.rsplit(" ", 2)[0] for line in (index / "val.lst").read_text().splitlines()]
    began = time.perf_counter()
    command = [sys.executable, "-m", "clipflow", "predict", "--run", "mine", "--json", *(f"videos/{v}" for v in val)]
    asked = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    predict_s = time.perf_counter() - began
    answers = [json.loads(line)["top"][0]["label"] for line in asked.stdout.splitlines()]
    scored = {v["path"]: v["predicted"] for v in metrics["videos"]}
    same = sum(answer == scored[path] for path, answer in zip(val, answers, strict=True))
    figures = {
        "videos": a.classes * a.per_class,
        "train_videos": manifest["splits"]["train"]["videos"],
        "val_videos": manifest["splits"]["val"]["videos"],
        "frames": a.frames,
        "size": manifest["splits"]["train"]["sizes"],
        "make_videos_s": round(made_s, 1),
        "run_s": round(run_s, 1),
        "train_s": round(benchmark_seconds(work / "benchmarks/mine/train.tsv"), 1),
        "evaluate_s": round(benchmark_seconds(work / "benchmarks/mine/evaluate.tsv"), 1),
        "top1": metrics["top1"],
        "chance": 1 / manifest["num_classes"],
        "top1_over_chance": round(metrics["top1"] * manifest["num_classes"], 2),
        "predict_s": round(predict_s, 1),
        "predict_same_as_evaluation": f"{same}/{len(val)}",
        "cpus": os.cpu_count(),
    }
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
