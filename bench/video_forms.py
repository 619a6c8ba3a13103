"""What clipflow does with each video form of the test zoo, against ffmpeg: the table of docs/data.md.

    python bench/video_forms.py [--out FOLDER]

The zoo is tests/data/video_zoo.py's (made here with Debian's ffmpeg, about 30 s). For each form: the scan's
frame count and displayed size (PyAV, the default decoder) against ``ffprobe -count_frames``; every frame read by
the PyAV reader and by decord at the displayed size against ffmpeg's own decode (the largest difference in levels,
0 is equal); the re-encode (short side 128, 30 fps) against ffmpeg's ``fps`` filter: its frame count, and whether
each output frame is nearest to the one the filter picked. A form the scan leaves out shows its reason.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data"))
import video_zoo  # noqa: E402  (the tests' zoo: one maker of the forms)

from clipflow.data.reader import PyAVReader, open_with_decord  # noqa: E402
from clipflow.data.reencode import ReencodeSpec, reencode  # noqa: E402
from clipflow.data.scan import probe  # noqa: E402


def largest_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape[1:3]} not {want.shape[1:3]}"
    diff = int(np.abs(got.astype(np.int16) - want.astype(np.int16)).max())
    return "= ffmpeg" if diff == 0 else f"up to {diff} levels"


def reencoded(path: Path, out: Path) -> str:
    result = reencode(path, out, ReencodeSpec(short_side=128, fps=30), threads=1)
    got = video_zoo.ffmpeg_frames(out).astype(np.int16)
    picked = video_zoo.ffmpeg_frames(path, "fps=30", size=(result.width, result.height)).astype(np.int16)
    if len(got) != len(picked):
        return f"{len(got)} frames, the fps filter {len(picked)}"
    nearest = [int(np.argmin(np.abs(picked - frame).mean(axis=(1, 2, 3)))) for frame in got]
    same = all(np.array_equal(picked[j], picked[k]) for k, j in enumerate(nearest))
    return f"{len(got)} frames, {'the' if same else 'not the'} fps filter's, {result.width}x{result.height}"


def row(name: str, path: Path, out: Path) -> str:
    try:
        frames, _, width, height = probe(path, "pyav")
    except ValueError as exc:
        return f"| {name} | left out: {exc} | | | |"
    info = video_zoo.ffprobe(path)
    shown = video_zoo.ffmpeg_frames(path)
    scanned = f"{frames} ({'=' if frames == info['frames'] else '!='} ffprobe), {width}x{height}"
    reader = PyAVReader(path, width, height)
    pyav = largest_difference(reader.get(list(range(frames))), shown)
    reader.close()
    decord_reader, _ = open_with_decord(path, num_threads=1)
    decord = largest_difference(decord_reader.get_batch(list(range(frames))).asnumpy(), shown)
    return f"| {name} | {scanned} | {pyav} | {decord} | {reencoded(path, out / (name + '.mp4'))} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where the zoo and the re-encodes go (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        zoo = video_zoo.make_zoo(root / "zoo")
        (root / "reencoded").mkdir(exist_ok=True)
        print("| form | scanned: frames, size | PyAV reader | decord | re-encoded |")
        print("|---|---|---|---|---|")
        for name, path in zoo.items():
            print(row(name, path, root / "reencoded"), flush=True)


if __name__ == "__main__":
    main()
