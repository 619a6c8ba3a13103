"""The embedded default's data: videos whose label can only be read from motion.

Each video shows a textured square moving over a textured, static background,
wrapping around the frame edges. Its class is one of 4 directions times one of 2
speeds; the square's start, textures and the video length are random, so no
single frame tells the class.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from tqdm import tqdm

from clipflow.checksums import sha256_of
from clipflow.environment import read_env
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir, temp_beside
from clipflow.made import Made

# x264's bitstream depends on its thread count, which it takes from the CPUs it may run on: a fixed count makes
# the same set on every machine (3, what it chose on the 2-core machine whose figures the docs give)
ENCODER_THREADS = 3

DIRECTIONS = {"right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1)}
SPEEDS = {"slow": 1.5, "fast": 3.0}  # pixels per frame at short side 128
CLASSES = [f"{d}_{s}" for d in DIRECTIONS for s in SPEEDS]


@dataclass(frozen=True)
class SyntheticSpec:
    num_train: int = 400
    num_val: int = 160
    seed: int = 0
    min_frames: int = 48
    max_frames: int = 120
    short_side: int = 128
    fps: int = 30
    patch_fraction: float = 0.3  # side of the square relative to the short side
    keyframe_interval: int = 16

    def __post_init__(self) -> None:
        if self.min_frames > self.max_frames:
            raise ClipflowError(f"min_frames {self.min_frames} is larger than max_frames {self.max_frames}")

    @property
    def size(self) -> tuple[int, int]:
        """(width, height): 4:3, both even for yuv420p."""
        width = (self.short_side * 4 // 3) // 2 * 2
        return width, self.short_side


def _texture(rng: np.random.Generator, height: int, width: int, contrast: float) -> np.ndarray:
    """Smooth random colour texture in [0, 255]: coarse noise upsampled, plus fine noise."""
    coarse = rng.random((height // 8 + 2, width // 8 + 2, 3))
    smooth = np.kron(coarse, np.ones((8, 8, 1)))[:height, :width]
    fine = rng.random((height, width, 3))
    tex = 0.7 * smooth + 0.3 * fine
    return 128 + contrast * (tex - 0.5) * 255


def render(label: int, num_frames: int, spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    """The frames of one video of class `label`, shape (T, H, W, 3), uint8."""
    width, height = spec.size
    direction = list(DIRECTIONS.values())[label // len(SPEEDS)]
    speed = list(SPEEDS.values())[label % len(SPEEDS)] * spec.short_side / 128
    side = int(spec.short_side * spec.patch_fraction)
    background = _texture(rng, height, width, contrast=0.3)
    patch = _texture(rng, side, side, contrast=1.0)
    x0, y0 = rng.uniform(0, width), rng.uniform(0, height)
    frames = np.empty((num_frames, height, width, 3), dtype=np.uint8)
    rows, cols = np.arange(side), np.arange(side)
    for t in range(num_frames):
        x = int(round(x0 + direction[0] * speed * t)) % width
        y = int(round(y0 + direction[1] * speed * t)) % height
        frame = background.copy()
        frame[np.ix_((y + rows) % height, (x + cols) % width)] = patch
        frames[t] = np.clip(frame, 0, 255)
    return frames


def write_video(path: Path, frames: np.ndarray, fps: int, keyframe_interval: int) -> None:
    """H.264 mp4 with PyAV, written to a temporary name and renamed when complete."""
    tmp = encode_to_tmp(path, frames, fps, keyframe_interval)
    try:
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def encode_to_tmp(path: Path, frames: np.ndarray, fps: int, keyframe_interval: int) -> Path:
    """The video written to a new temporary file beside ``path`` (never one that was there), returned complete
    for the caller to rename onto ``path``; removed again on any failure."""
    with temp_beside(path, ".part.mp4") as tmp:
        _encode(tmp, frames, fps, keyframe_interval)
    return tmp


def _encode(tmp: Path, frames: np.ndarray, fps: int, keyframe_interval: int) -> None:
    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = keyframe_interval
        stream.options = {"crf": "20", "preset": "veryfast", "bf": "0", "threads": str(ENCODER_THREADS)}
        for array in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")))
        container.mux(stream.encode())


def _make_one(args: tuple[Path, str, int, int, int, SyntheticSpec]) -> tuple[str, Path, str] | None:
    """One video rendered to a temporary file: (its name in the set, the file, its sha256); None when the video
    is there already (:meth:`Made.check` found it clipflow's and unchanged)."""
    out, name, label, num_frames, seed, spec = args
    if (out / name).exists():
        return None
    rng = np.random.default_rng(seed)
    tmp = encode_to_tmp(out / name, render(label, num_frames, spec, rng), spec.fps, spec.keyframe_interval)
    return name, tmp, sha256_of(tmp)


ADOPT_EVERY = 32  # finished videos renamed into place (and recorded) together


def generate(out_dir: str | Path, spec: SyntheticSpec, workers: int = 1) -> dict[str, Path]:
    """Writes `videos/{split}/*.mp4`, `{split}_labels.txt` (`path label`) and `classes.txt` under out_dir,
    recorded as clipflow's (:mod:`clipflow.made`); any of these names that is someone else's file is refused
    before anything is written.

    Deterministic in spec.seed; videos already present are kept, so an interrupted
    run continues where it stopped.
    """
    out = check_output_dir(out_dir, "--out-dir")
    made = Made(out, "--out-dir")
    rng = np.random.default_rng(spec.seed)
    jobs, texts = [], {}
    for split, count in (("train", spec.num_train), ("val", spec.num_val)):
        lines = []
        for i in range(count):
            label = i % len(CLASSES)
            num_frames = int(rng.integers(spec.min_frames, spec.max_frames + 1))
            rel = f"videos/{split}/{split}_{i:05d}_{CLASSES[label]}.mp4"
            jobs.append((out, rel, label, num_frames, int(rng.integers(2**31)), spec))
            lines.append(f"{rel} {label}\n")
        texts[f"{split}_labels.txt"] = "".join(lines)
    texts["classes.txt"] = "".join(f"{c}\n" for c in CLASSES)
    made.check([*texts, *(job[1] for job in jobs)])
    for split in ("train", "val"):
        (out / "videos" / split).mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        made.write_text(name, text)
    finished: list[tuple[str, Path, str]] = []
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(_make_one, job) for job in jobs]
        try:
            for future in tqdm(futures, desc="synthetic videos", disable=read_env().no_progress):
                done = future.result()
                finished += [done] if done is not None else []
                if len(finished) >= ADOPT_EVERY:
                    made.adopt(finished)
                    finished = []
            made.adopt(finished)
            finished = []
        finally:  # a failure (a full disk): no video starts after it, and none made is left under a temporary name
            pool.shutdown(wait=True, cancel_futures=True)
            left = [f.result() for f in futures if f.done() and not f.cancelled() and f.exception() is None]
            for _, tmp, _ in [*finished, *(done for done in left if done is not None)]:
                tmp.unlink(missing_ok=True)
    return {split: out / f"{split}_labels.txt" for split in ("train", "val")}
