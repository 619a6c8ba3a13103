"""Clips/s of clipflow's training loader against the decode limit of the same clips, before and after re-encoding.

Videos: the bench makes its own, with PyAV in a temporary folder: ``--videos`` H.264
(libx264 at its defaults: keyframes up to 250 frames apart, B-frames, yuv420p) videos
of 340x256, ``--frames`` frames at 30 fps, a textured background panning under a
moving square plus noise, so the encoder does real work. "Before" is these files;
"after" is the same tree through clipflow's re-encode stage (reencode_tree) with
GluonCV's settings: 340x256, 30 fps, a keyframe every 16 frames. "matched" is the re-encode
matched to the clips (``data.reencode.match_recipe``: ReencodeSpec.matched): every 2nd frame
kept (15 fps, the fast pathway's stride), a keyframe every 4, the clip mapped onto it
(ClipSpec.on_every: 32 frames in a row, every 8th slow).

Clips: SlowFast 4x16 training clips as GluonCV samples them: a 64-frame window
(new_length 64, new_step 1), every 2nd frame to the fast pathway (32 frames), every
16th to the slow one (4), decoded at 340x256, a multi-scale crop (scale ratios 1.0 and
0.8 of the short side) resized to 224, random flip; SlowFastClips in "train" mode,
batches of ``--batch`` through clipflow.data.loader.make_loader, the list walked by
EpochSampler epoch after epoch (each video listed several times, so an epoch holds
about ``--epoch-clips`` clips).

Figures, all from one run:

* loader clips/s, in this process (``workers`` 0), torch and the decoder on one thread, glibc
  malloc tuned as a training worker's process is (by its parameter-server node);
* the decode limit of exactly the clips that loader run read (its warm-up left out
  of both): per clip, PyAV (one decoder thread, like decord's num_threads=1) seeks to
  the keyframe at or before the clip's first frame and decodes every frame from there
  to its last one; only the seek and the decoding are timed (not opening the file, not
  converting to RGB, not transforms). ratio = loader / limit, target >= 0.8;
* frames the reader decodes per clip (PyAVReader.frames_decoded: what the decoder put out, as the
  loader's read asks for them) against the frames the clip uses (its fast and slow frames, distinct),
  after re-encoding and matched; and the loader's clips per CPU-second of the in-process run
  (1000 / CPU ms per clip: clips/s per core), matched against today's re-encode ("after");
* after re-encoding, also the loader with decord as its decoder (``data.decoder: decord``)
  in place of clipflow's PyAV reader (the default), on ``--clips-before`` clips;
* after re-encoding, also the loader with 2 worker processes;
* CPU milliseconds per clip of the loading processes (from /proc), which says where a
  worker run's time goes: a worker also pays for the shared memory its batches travel in;
* resident memory of the loading processes (this one; the workers in the 2-worker
  run) every ``--rss-every`` clips over ``--clips`` clips: the first sample after the
  warm-up, the one at a quarter of the run, the last, and the least-squares slope from
  that quarter on (measured: the allocator's pools grow once over the first few hundred
  clips, by about 35 MiB in-process, then stay flat: growth is a slope after that);
* the conversion of the re-encoded videos' decoded frames to RGB at the decode size: clipflow's path
  (:func:`clipflow.data.display.display_for`, which checks each frame for a turn, a range and a depth before
  it converts) against its reference, a bare swscale context (PyAV's ``VideoReformatter``, bicubic, as the
  reader converted before frames were shown as ffmpeg shows them), the two interleaved over ``--rgb-rounds``
  rounds in this process, CPU time per frame (medians) and whether every pixel is the same: what showing
  frames as ffmpeg does costs on frames that need none of it;
* decord alone: ``--readers`` VideoReader constructions with one get_batch each (a
  reader per item, as GluonCV's loader and SlowFastClips make them) on a small video,
  resident memory before and after.

    .venv/bin/python bench/loader.py [--videos 16] [--frames 300] [--clips 2000] [--clips-before 400]
    .venv/bin/python bench/loader.py --quick     # seconds, for the test: tiny sizes, same code
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from copy import copy
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import torch

from clipflow.data.dataset import SlowFastClips
from clipflow.data.loader import make_loader
from clipflow.data.reader import FrameTable, PyAVReader
from clipflow.data.reencode import ReencodeSpec, reencode_tree
from clipflow.data.sampling import ClipSpec
from clipflow.data.splits import EpochSampler
from clipflow.data.transforms import TransformSpec
from clipflow.ps.transport import tune_malloc

WIDTH, HEIGHT, FPS = 340, 256, 30
CLIP = ClipSpec(new_length=64, new_step=1, num_segments=1, fast_temporal_stride=2, slow_temporal_stride=16)
TRANSFORM = TransformSpec(input_size=224, scale_ratios=(1.0, 0.8))
GLUONCV_REENCODE = ReencodeSpec(width=WIDTH, height=HEIGHT, fps=FPS, keyframe_interval=16)
MATCHED_REENCODE = GLUONCV_REENCODE.matched(CLIP)  # 15 fps, a keyframe every 4
TARGET = 0.8


# -- videos ----------------------------------------------------------------------------------------


def make_video(path: Path, frames: int, seed: int, width: int = WIDTH, height: int = HEIGHT) -> int:
    """An H.264 mp4 at libx264's defaults (GOP up to 250, scene-cut detection, B-frames); returns its frame count.

    A textured background pans back and forth under a square that bounces around, plus noise: motion
    everywhere and no jump, so no scene cut adds keyframes and windows start far after the last one.
    """
    rng = np.random.default_rng(seed)
    coarse = rng.random((2 * height // 8 + 2, 2 * width // 8 + 2, 3)) * 200 + 28
    background = np.kron(coarse, np.ones((8, 8, 1)))[: 2 * height, : 2 * width].astype(np.int16)
    side = height // 4
    square = (rng.random((side, side, 3)) * 255).astype(np.int16)
    noise = rng.normal(0, 6, (7, height, width, 3)).astype(np.int16)  # 7 noise fields in turn: no frame repeats
    pan, move = rng.uniform(1, 3, 2), rng.uniform(2, 5, 2)  # pixels per frame: background (x, y), square (x, y)

    def bounce(t: int, speed: float, span: int) -> int:
        position = int(t * speed) % (2 * span)
        return position if position < span else 2 * span - position

    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for t in range(frames):
            x, y = bounce(t, pan[0], width), bounce(t, pan[1], height)
            frame = background[y : y + height, x : x + width] + noise[t % len(noise)]
            left, top = bounce(t, move[0], width - side), bounce(t, move[1], height - side)
            frame[top : top + side, left : left + side] = square
            picture = av.VideoFrame.from_ndarray(np.clip(frame, 0, 255).astype(np.uint8), format="rgb24")
            out.mux(stream.encode(picture))
        out.mux(stream.encode())
    return frames


def _make_one(job: tuple[str, int, int]) -> int:
    path, frames, seed = job
    return make_video(Path(path), frames, seed)


def make_sources(folder: Path, videos: int, frames: int, procs: int) -> list[tuple[str, int]]:
    """(relative path, frame count) of ``videos`` new videos under folder."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"v{i:03d}.mp4" for i in range(videos)]
    jobs = [(str(folder / name), frames, i) for i, name in enumerate(names)]
    with ProcessPoolExecutor(max_workers=procs) as pool:
        counts = list(pool.map(_make_one, jobs))
    return list(zip(names, counts, strict=True))


def write_list(path: Path, rows: list[tuple[str, int]], repeat: int) -> None:
    """GluonCV's list (``path num_frames label``), every video ``repeat`` times (each entry draws its own clips)."""
    lines = [f"{name} {frames} {i % 4}\n" for _ in range(repeat) for i, (name, frames) in enumerate(rows)]
    path.write_text("".join(lines))


def keyframe_distance(path: Path) -> int:
    """The largest distance in frames from a keyframe to the next (or to the end) in a video."""
    table = table_of(path)
    bounds = [*table.keys, len(table.pts)]
    return max(b - a for a, b in zip(bounds, bounds[1:], strict=False))


# -- the decode limit ------------------------------------------------------------------------------


def table_of(path: Path) -> FrameTable:
    """A video's frames in display order (clipflow's reader numbers frames by it, as decord does)."""
    with av.open(str(path)) as container:
        return FrameTable.demux(container, container.streams.video[0])


def decode_window(path: Path, table: FrameTable, first: int, last: int) -> tuple[float, int]:
    """(seconds, frames decoded) to seek to the keyframe at or before frame ``first`` and decode up to ``last``,
    on one decoder thread; the file is opened before the clock starts."""
    key = table.key_at_or_before(first)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_count = 1
        began = time.perf_counter()
        container.seek(table.pts[key], stream=stream, backward=True, any_frame=False)
        decoded, start = 0, None
        for frame in container.decode(stream):
            if start is None:
                start = frame.pts
            decoded += 1
            if frame.pts >= table.pts[last]:
                break
        seconds = time.perf_counter() - began
    if start != table.pts[key]:
        raise SystemExit(f"{path}: seeking to frame {key} started decoding at pts {start}, not {table.pts[key]}")
    return seconds, decoded


def reader_frames(dataset: SlowFastClips, clips: list[tuple[int, int]]) -> tuple[float, float]:
    """(frames clipflow's reader decodes, frames the clip uses), means per (epoch, index) clip."""
    decoded = used = 0
    for epoch, index in clips:
        dataset.set_epoch(epoch)
        plan = dataset.plan(index)
        needed = sorted(set(plan.fast + plan.slow))
        reader = PyAVReader(dataset.entries[index].resolve(dataset.root), dataset.new_width, dataset.new_height)
        try:
            reader.get(needed)
        finally:
            reader.close()
        decoded, used = decoded + reader.frames_decoded, used + len(needed)
    return decoded / len(clips), used / len(clips)


def decode_limit(dataset: SlowFastClips, clips: list[tuple[int, int]]) -> tuple[float, float]:
    """(clips/s, mean frames decoded per clip) of decoding exactly what each (epoch, index) clip needs."""
    tables: dict[Path, FrameTable] = {}
    seconds, frames = 0.0, 0
    for epoch, index in clips:
        dataset.set_epoch(epoch)
        plan = dataset.plan(index)
        read = plan.fast + plan.slow
        path = dataset.entries[index].resolve(dataset.root)
        if path not in tables:
            tables[path] = table_of(path)
        s, n = decode_window(path, tables[path], min(read), max(read))
        seconds, frames = seconds + s, frames + n
    return len(clips) / seconds, frames / len(clips)


# -- the loader ------------------------------------------------------------------------------------


def rgb_path(path: Path, rounds: int) -> dict:
    """CPU ms per frame converting ``path``'s decoded frames to RGB at their size: clipflow's display path and
    a bare swscale context (the reference), interleaved round by round (which goes first alternates), and
    whether they gave the same pixels."""
    from av.video.reformatter import VideoReformatter

    from clipflow.data.display import Look, display_for

    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))[:64]
    width, height = frames[0].width, frames[0].height

    def reference() -> list[np.ndarray]:
        context = VideoReformatter()
        return [context.reformat(f, width=width, height=height, format="rgb24", interpolation="BICUBIC")
                .to_ndarray() for f in frames]  # fmt: skip

    def clipflow() -> list[np.ndarray]:
        display = display_for(Look(width, height))
        return [display(f).to_ndarray() for f in frames]

    same = all(np.array_equal(x, y) for x, y in zip(reference(), clipflow(), strict=True))
    times: dict[str, list[float]] = {"reference": [], "clipflow": []}
    for r in range(rounds):
        for name, convert in sorted({"reference": reference, "clipflow": clipflow}.items(), reverse=bool(r % 2)):
            began = time.process_time()
            convert()
            times[name].append((time.process_time() - began) * 1e3 / len(frames))
    ref, ours = (float(np.median(times[name])) for name in ("reference", "clipflow"))
    return {"rgb_frames": len(frames), "rgb_rounds": rounds, "rgb_same_pixels": same,
            "rgb_reference_ms_per_frame": ref, "rgb_clipflow_ms_per_frame": ours,
            "rgb_ratio": ours / ref if ref else float("nan")}  # fmt: skip


def rss_mib(pid: int) -> float:
    """Resident memory of a process, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children()]
    except ImportError:
        tasks = Path(f"/proc/{pid}/task")
        return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot() -> dict[str, float]:
    """CPU seconds of this process ("main") and of its children together ("workers")."""
    return {"main": cpu_seconds(os.getpid()), "workers": sum(cpu_seconds(p) for p in children(os.getpid()))}


@dataclass
class LoaderRun:
    clips: list[tuple[int, int]]  # (epoch, index) of every clip read, in order
    stamps: list[tuple[int, float]]  # (clips read so far, time) after every batch
    rss: dict[str, list[tuple[int, float]]]  # process -> (clips read, MiB)
    cpu: list[tuple[int, dict[str, float]]]  # (clips read, cpu_snapshot) after the warm-up and at the end

    def cpu_ms_per_clip(self) -> dict[str, float]:
        """CPU milliseconds per clip between the two snapshots, per process kind."""
        (start, before), (end, after) = self.cpu
        return {k: 1000 * (after[k] - before[k]) / max(1, end - start) for k in before}

    def clips_per_s(self, warmup: int) -> tuple[float, int]:
        """(clips/s after the first ``warmup`` clips, how many clips that is)."""
        start = next((s for s in self.stamps if s[0] >= warmup), self.stamps[0])
        end = self.stamps[-1]
        return (end[0] - start[0]) / (end[1] - start[1]), start[0]


def run_loader(
    dataset: SlowFastClips, batch: int, workers: int, clips: int, rss_every: int, warmup: int, seed: int
) -> LoaderRun:
    """Iterates make_loader's loader epoch after epoch until ``clips`` clips are read."""
    sampler = EpochSampler(len(dataset), seed, len(dataset) // batch * batch)
    loader = make_loader(dataset, batch, sampler, workers)
    run = LoaderRun([], [], {}, [])
    epoch, began = 0, time.perf_counter()
    run.stamps.append((0, began))
    while len(run.clips) < clips:
        epoch += 1
        dataset.set_epoch(epoch)
        sampler.set_epoch(epoch)
        order, position = list(sampler), 0
        for slow, fast, labels in loader:
            if not run.clips:
                d = (CLIP.new_length, TRANSFORM.input_size)
                expected = [(batch, 3, d[0] // CLIP.slow_temporal_stride, d[1], d[1]),
                            (batch, 3, d[0] // CLIP.fast_temporal_stride, d[1], d[1])]  # fmt: skip
                assert [tuple(slow.shape), tuple(fast.shape)] == expected, (slow.shape, fast.shape)
            done = len(run.clips)
            run.clips += [(epoch, i) for i in order[position : position + len(labels)]]
            position += len(labels)
            run.stamps.append((len(run.clips), time.perf_counter()))
            if not run.cpu and len(run.clips) >= warmup:
                run.cpu.append((len(run.clips), cpu_snapshot()))
            if len(run.clips) // rss_every > done // rss_every:
                pids = {"main": os.getpid()} | {f"worker{k}": p for k, p in enumerate(sorted(children(os.getpid())))}
                for name, pid in pids.items():
                    run.rss.setdefault(name, []).append((len(run.clips), rss_mib(pid)))
            if len(run.clips) >= clips:
                break
    run.cpu.append((len(run.clips), cpu_snapshot()))
    del loader  # stops the workers
    return run


def rss_summary(samples: list[tuple[int, float]], warmup: int) -> dict[str, float]:
    """The first sample at or after ``warmup`` clips, the one at a quarter of the run, the last one, and
    the slope from that quarter on (MiB per 1,000 clips)."""
    kept = [s for s in samples if s[0] >= warmup] or samples
    settled = [s for s in kept if s[0] >= samples[-1][0] / 4] or kept[-1:]
    summary = {"first_mib": kept[0][1], "settled_mib": settled[0][1], "last_mib": kept[-1][1]}
    if len(settled) < 2:
        return summary | {"slope_mib_per_1000": 0.0}
    x = np.array([c for c, _ in settled], dtype=float)
    y = np.array([m for _, m in settled])
    return summary | {"slope_mib_per_1000": float(np.polyfit(x, y, 1)[0] * 1000)}


# -- decord alone ----------------------------------------------------------------------------------


def reader_rss(path: Path, readers: int) -> dict[str, float]:
    """Resident memory over ``readers`` VideoReader constructions, one get_batch each, made and dropped per item."""
    import decord

    samples = []
    frames = len(table_of(path).pts)
    picks = [list(range(start, frames, 2))[:16] for start in range(4)]
    every = max(1, readers // 20)
    for i in range(readers):
        reader = decord.VideoReader(str(path), num_threads=1)  # at the stored size, as clipflow's reader opens it
        frames = reader.get_batch(picks[i % len(picks)]).asnumpy()
        del reader, frames
        if (i + 1) % every == 0:
            samples.append((i + 1, rss_mib(os.getpid())))
    return rss_summary(samples, samples[min(2, len(samples) - 1)][0])


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--frames", type=int, default=300, help="frames per video (30 fps)")
    parser.add_argument("--clips", type=int, default=2000, help="clips per run after re-encoding (RSS over these)")
    parser.add_argument("--clips-before", type=int, default=400, help="clips of the run before re-encoding")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=32, help="clips left out of every timing")
    parser.add_argument("--epoch-clips", type=int, default=512, help="about this many list entries (an epoch)")
    parser.add_argument("--rss-every", type=int, default=100)
    parser.add_argument("--readers", type=int, default=3000, help="decord readers for the memory check")
    parser.add_argument("--rgb-rounds", type=int, default=40, help="interleaved rounds of the RGB-path figure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", default="", help="make the videos in this folder and keep them (default: temporary)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the test")
    a = parser.parse_args()
    if a.quick:
        a.videos, a.frames, a.clips, a.clips_before, a.batch = 2, 80, 16, 8, 4
        a.warmup, a.epoch_clips, a.rss_every, a.readers, a.rgb_rounds = 4, 8, 4, 20, 4
    os.environ.setdefault("CLIPFLOW_NO_PROGRESS", "1")
    torch.set_num_threads(1)  # the in-process figures: one core, like the one-thread decode limit
    if os.environ.get("CLIPFLOW_PS_MALLOC_TUNE", "1") != "0":
        tune_malloc()  # as in a training worker, whose parameter-server node tunes its process's malloc
    with tempfile.TemporaryDirectory(prefix="clipflow-bench-loader-") as tmp:
        figures = bench(a, Path(a.keep) if a.keep else Path(tmp))
    report(a, figures)


def bench(a: argparse.Namespace, folder: Path) -> dict:
    figures: dict = {"bench": "loader", "videos": a.videos, "frames": a.frames, "batch": a.batch}
    procs = min(2, os.cpu_count() or 1)
    began = time.perf_counter()
    rows = make_sources(folder / "before", a.videos, a.frames, procs)
    figures["make_videos_s"] = time.perf_counter() - began
    began = time.perf_counter()
    results = reencode_tree([name for name, _ in rows], folder / "before", folder / "after", GLUONCV_REENCODE, procs)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise SystemExit(f"re-encoding failed: {failed[0].src}: {failed[0].error}")
    figures["reencode_s"] = time.perf_counter() - began
    matched = reencode_tree([name for name, _ in rows], folder / "before", folder / "matched", MATCHED_REENCODE, procs)
    if any(r.status == "failed" for r in matched):
        raise SystemExit(f"re-encoding to the recipe failed: {[r.error for r in matched if r.error][0]}")
    repeat = max(1, round(a.epoch_clips / a.videos))
    datasets = {}
    for stage, stage_rows, clip in (
        ("before", rows, CLIP),
        ("after", [(n, r.frames) for (n, _), r in zip(rows, results, strict=True)], CLIP),
        ("matched", [(n, r.frames) for (n, _), r in zip(rows, matched, strict=True)], CLIP.on_every(CLIP.frame_step)),
    ):
        write_list(folder / f"{stage}.lst", stage_rows, repeat)
        datasets[stage] = SlowFastClips(folder / f"{stage}.lst", folder / stage, clip, TRANSFORM, WIDTH, HEIGHT,
                                        "train", a.seed, 4)  # fmt: skip
        figures[f"{stage}_keyframe_distance"] = max(keyframe_distance(folder / stage / name) for name, _ in rows)

    datasets["after_decord"] = copy(datasets["after"])
    datasets["after_decord"].decoder = "decord"
    runs = {
        "before": ("before", 0, a.clips_before),
        "after": ("after", 0, a.clips),
        "matched": ("matched", 0, a.clips),
        "after_decord": ("after_decord", 0, a.clips_before),
        "after_workers2": ("after", 2, a.clips),
    }
    for name, (stage, workers, clips) in runs.items():
        dataset = datasets[stage]
        run = run_loader(dataset, a.batch, workers, clips, a.rss_every, a.warmup, a.seed)
        cps, warm = run.clips_per_s(a.warmup)
        figures[f"{name}_loader_clips_per_s"] = cps
        figures[f"{name}_clips"] = len(run.clips)
        for process, ms in run.cpu_ms_per_clip().items():
            if workers or process == "main":
                figures[f"{name}_cpu_ms_per_clip_{process}"] = ms
        for process, samples in run.rss.items():
            for key, value in rss_summary(samples, a.warmup).items():
                figures[f"{name}_rss_{process}_{key}"] = value
        if workers == 0:
            limit, frames = decode_limit(dataset, run.clips[warm:])
            figures[f"{name}_limit_clips_per_s"] = limit
            figures[f"{name}_limit_frames_per_clip"] = frames
            figures[f"{name}_ratio"] = cps / limit
        if name in ("after", "matched"):
            decoded, used = reader_frames(dataset, run.clips[warm:])
            figures[f"{name}_reader_frames_per_clip"], figures[f"{name}_frames_used_per_clip"] = decoded, used
            figures[f"{name}_decoded_over_used"] = decoded / used
            figures[f"{name}_clips_per_cpu_s"] = 1000 / figures[f"{name}_cpu_ms_per_clip_main"]
    figures["matched_per_core_speedup"] = figures["matched_clips_per_cpu_s"] / figures["after_clips_per_cpu_s"]
    figures["reencode_speedup"] = figures["after_loader_clips_per_s"] / figures["before_loader_clips_per_s"]
    figures["workers2_speedup"] = figures["after_workers2_loader_clips_per_s"] / figures["after_loader_clips_per_s"]
    figures.update(rgb_path(folder / "after" / rows[0][0], a.rgb_rounds))
    small = folder / "small.mp4"
    make_video(small, 60, 1, WIDTH // 2, HEIGHT // 2)
    for key, value in reader_rss(small, a.readers).items():
        figures[f"decord_readers_rss_{key}"] = value
    figures["decord_readers"] = a.readers
    figures["target_ratio"] = TARGET
    return figures


def report(a: argparse.Namespace, f: dict) -> None:
    print(f"SlowFast 4x16 training clips: 64-frame window of {f['videos']} videos of {WIDTH}x{HEIGHT} H.264, "
          f"{f['frames']} frames each, crop {TRANSFORM.input_size}, batches of {f['batch']}")  # fmt: skip
    print(f"  keyframes up to {f['before_keyframe_distance']} frames apart before re-encoding (x264 defaults), "
          f"{f['after_keyframe_distance']} after (GluonCV's 340x256, 30 fps, keyint 16)")  # fmt: skip
    print(f"  {'clips/s':34s} {'loader':>10s} {'decode limit':>13s} {'ratio':>7s} {'frames/clip':>12s} "
          f"{'loader CPU ms/clip':>19s}")  # fmt: skip
    for name, label in (
        ("before", "before re-encode, in-process"),
        ("after", "after re-encode, in-process"),
        ("matched", "matched re-encode, in-process"),
        ("after_decord", "  the same, decord as the decoder"),
    ):
        print(f"  {label:34s} {f[name + '_loader_clips_per_s']:10.1f} {f[name + '_limit_clips_per_s']:13.1f} "
              f"{f[name + '_ratio']:7.2f} {f[name + '_limit_frames_per_clip']:12.1f} "
              f"{f[name + '_cpu_ms_per_clip_main']:19.1f}")  # fmt: skip
    for name, label in (
        ("after", "after re-encode"),
        ("matched", f"matched ({f['matched_keyframe_distance']}-frame GOP)"),
    ):
        print(f"  {label}: the reader decodes {f[name + '_reader_frames_per_clip']:.1f} frames a clip for the "
              f"{f[name + '_frames_used_per_clip']:.1f} it uses (x{f[name + '_decoded_over_used']:.3f}); "
              f"{f[name + '_clips_per_cpu_s']:.1f} clips per CPU-second")  # fmt: skip
    print(
        f"  matched against today's re-encode: x{f['matched_per_core_speedup']:.2f} clips per CPU-second "
        "(target: frames decoded within 10% of those used)"
    )
    cpu = f"{f['after_workers2_cpu_ms_per_clip_workers']:.1f} + {f['after_workers2_cpu_ms_per_clip_main']:.1f} main"
    label = "after re-encode, 2 loader workers"
    print(f"  {label:34s} {f['after_workers2_loader_clips_per_s']:10.1f} {'':34s} {cpu:>19s}")
    print(f"  clips/s: re-encoding x{f['reencode_speedup']:.2f}, 2 workers x{f['workers2_speedup']:.2f}; "
          f"target ratio >= {TARGET} (limit: seek + decode only, one thread)")  # fmt: skip
    print(f"  to RGB, {f['rgb_frames']} frames x {f['rgb_rounds']} rounds: clipflow's display path "
          f"{f['rgb_clipflow_ms_per_frame']:.3f} ms/frame, a bare swscale context {f['rgb_reference_ms_per_frame']:.3f}"
          f" (ratio {f['rgb_ratio']:.2f}); same pixels: {f['rgb_same_pixels']}")  # fmt: skip
    print(f"  resident memory (MiB), after {a.warmup} clips -> at a quarter of the run -> last, "
          "slope per 1,000 clips from the quarter on:")  # fmt: skip
    for name in ("after", "after_workers2"):
        for key in sorted(k for k in f if k.startswith(f"{name}_rss_") and k.endswith("_first_mib")):
            process = key[len(name) + 5 : -len("_first_mib")]
            base = key[: -len("first_mib")]
            print(f"    {name} {process:8s} over {f[name + '_clips']} clips: {f[base + 'first_mib']:8.1f} -> "
                  f"{f[base + 'settled_mib']:8.1f} -> {f[base + 'last_mib']:8.1f}  "
                  f"({f[base + 'slope_mib_per_1000']:+.2f})")  # fmt: skip
    d = "decord_readers_rss_"
    print(f"    decord, {f['decord_readers']} readers made and dropped: {f[d + 'first_mib']:8.1f} -> "
          f"{f[d + 'settled_mib']:8.1f} -> {f[d + 'last_mib']:8.1f}  ({f[d + 'slope_mib_per_1000']:+.2f})")  # fmt: skip
    print(json.dumps(f))


if __name__ == "__main__":
    sys.exit(main())
