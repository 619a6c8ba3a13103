"""A tiny Kinetics tree for the data tests (data/test_kinetics_cli, workflow/test_data_kinetics): annotation CSVs
with a non-ASCII label, an unlabelled test row and a video never downloaded, the lists `clipflow data kinetics` must
make of them, and a video folder with both layouts (make_kinetics_tree)."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

HEADER = "label,youtube_id,time_start,time_end,split\n"
TAIJI = "tàijí quán"  # non-ASCII, with a space; its videos sit in a folder with an underscore
TRAIN_CSV = (
    HEADER
    + "abseiling,aaa,0,10,train\n"
    + "baking cookies,ccc,1,11,train\n"
    + f"{TAIJI},ddd,2,12,train\n"
    + "abseiling,bbb,5,15,train\n"
    + f"{TAIJI},eee,3,13,train\n"  # line 6: its video was never downloaded
    + ",fff,4,14,test\n"  # line 7: an unlabelled test row
)
VAL_CSV = HEADER + "baking cookies,vvv,0,10,val\nabseiling,www,0,10,val\n" + f"{TAIJI},xxx,0,10,val\n"
CLASSES = ["abseiling", "baking cookies", TAIJI]
TRAIN_LIST = [
    "abseiling/aaa_000000_000010.mp4 0",
    "baking cookies/ccc_000001_000011.mp4 1",
    "tàijí_quán/ddd_000002_000012.mp4 2",
    "abseiling/bbb_000005_000015.mp4 0",
    "tàijí_quán/eee_000003_000013.mp4 2",  # missing, looked for in its label's folder
]
VAL_LIST = ["baking cookies/vvv_000000_000010.mp4 1", "www_000000_000010.mp4 0", "tàijí_quán/xxx_000000_000010.mp4 2"]
FRAMES, WIDTH, HEIGHT = 20, 64, 48


def write_video(path: Path, frames: int = FRAMES, width: int = WIDTH, height: int = HEIGHT, fps: int = 25) -> None:
    """A small H.264 mp4 made with PyAV: noise whose brightness rises frame by frame."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(path.name))
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for i in range(frames):
            picture = (rng.integers(0, 64, (height, width, 3)) + 8 * i).astype(np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        out.mux(stream.encode())


def make_kinetics_tree(base: Path) -> dict[str, Path]:
    """Annotation CSVs and a video folder with both layouts (label folders with spaces or underscores, flat);
    the video of train.csv line 6 is missing."""
    root = base / "videos"
    for line in TRAIN_LIST[:4] + VAL_LIST:
        write_video(root / line.rsplit(" ", 1)[0])
    (base / "train.csv").write_text(TRAIN_CSV, encoding="utf-8")
    (base / "val.csv").write_text(VAL_CSV, encoding="utf-8")
    return {"train_csv": base / "train.csv", "val_csv": base / "val.csv", "root": root}
