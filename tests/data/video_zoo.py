"""A zoo of videos in the forms real collections hold, made with Debian's ``ffmpeg`` (the oracle), and ffmpeg's own
view of them: the frames it shows (rotation applied, its colour conversion) and the frames its ``fps`` filter picks.

Every video shows the same picture, made here in RGB and piped to ffmpeg: its frame number as 8 black or white bars
in the top half (as :mod:`video_helpers`), and below them a grey patch at 191, a full-range ramp and red, green and
blue patches. The picture has no symmetry, so a rotation or mirror shows, and the ramp and the grey patch show a
colour range or matrix read wrong.

A form is an entry of :data:`FORMS`: a file name and ffmpeg's output arguments. :func:`make_zoo` writes them all
(about 20 s of CPU on one core); the broken ones are made from good ones (cut short, a webm named .mp4).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BITS = 8
GREY = 191


def picture(number: int, width: int, height: int) -> np.ndarray:
    """Frame ``number``'s RGB picture at width x height (see the module)."""
    frame = np.zeros((height, width, 3), np.uint8)
    bar = width // BITS
    for b in range(BITS):
        if number >> b & 1:
            frame[: height // 2, b * bar : (b + 1) * bar] = 255
    low, third = height // 2, width // 3
    frame[low:, :third] = GREY
    frame[low:, third : 2 * third] = np.linspace(0, 255, 2 * third - third).astype(np.uint8)[None, :, None]
    frame[low:, 2 * third :] = (200, 40, 40)
    frame[low + (height - low) // 2 :, 2 * third :] = (40, 40, 200)
    frame[low + (height - low) // 2 :, 2 * third + (width - 2 * third) // 2 :] = (40, 200, 40)
    return frame


@dataclass(frozen=True)
class Form:
    """One form: ``name`` (a word), the file it is written to, its coded picture, and ffmpeg's arguments."""

    name: str
    file: str
    args: tuple[str, ...]
    width: int = 320
    height: int = 240
    frames: int = 90
    fps: str = "30"
    scale: str = "out_range=tv"  # the RGB input's conversion to YUV (ffmpeg's scale filter options)
    filters: tuple[str, ...] = ()  # ffmpeg filters after it, before encoding
    audio: bool = False
    rotate: str = ""  # a display matrix written by remuxing with ffmpeg's ``rotate`` tag (the encoder drops it)


H264 = ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p")
HEVC = ("-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-x265-params", "log-level=error", "-tag:v",
        "hvc1")  # fmt: skip
VP9 = ("-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "400k")
LONG_GOP = ("-c:v", "libx264", "-preset", "fast", "-pix_fmt", "yuv420p", "-bf", "3", "-g", "300", "-sc_threshold", "0")
AOM = ("-c:v", "libaom-av1", "-pix_fmt", "yuv420p", "-cpu-used", "8", "-crf", "40", "-row-mt", "1")
FORMS = (
    Form("h264-mp4", "h264.mp4", H264),
    Form("h264-mkv-1ms", "h264.mkv", H264),
    Form("vp9-webm-1ms", "vp9.webm", VP9),
    Form("mpeg4-avi", "mpeg4.avi", ("-c:v", "mpeg4", "-q:v", "3")),
    Form("hevc-mp4", "hevc.mp4", HEVC),
    Form("av1-svt-mp4", "av1_svt.mp4", ("-c:v", "libsvtav1", "-pix_fmt", "yuv420p", "-preset", "12", "-crf", "40")),
    Form("av1-aom-mkv", "av1_aom.mkv", AOM, frames=60),
    Form("mjpeg-mov", "mjpeg.mov", ("-c:v", "mjpeg", "-q:v", "3", "-pix_fmt", "yuvj422p"), scale="out_range=full"),
    Form("audio-track", "with_audio.mp4", (*H264, "-c:a", "aac", "-shortest"), audio=True),
    Form("rotated-90", "phone_rotated.mp4", H264, width=320, height=180, rotate="90"),
    Form("rotated-270-mov", "phone_rotated.mov", H264, width=320, height=180, rotate="270"),
    Form("vfr-mkv", "vfr.mkv", (*H264, "-vsync", "vfr"), filters=("setpts='(N+floor(N/3)*0.5)/30/TB'",)),
    Form("322x178", "odd_size.mp4", H264, width=322, height=178),
    Form("64x48", "tiny.mp4", H264, width=64, height=48),
    Form("1920x1080", "full_hd.mp4", H264, width=1920, height=1080, frames=20),
    Form("yuv444p", "yuv444.mp4", ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv444p")),
    Form("10-bit", "ten_bit.mp4", (*HEVC[:4], "-pix_fmt", "yuv420p10le", *HEVC[6:])),
    Form("interlaced", "interlaced.mp4", (*H264, "-flags", "+ildct+ilme", "-x264opts", "tff=1"),
         filters=("tinterlace=interleave_top",), fps="60", frames=180),  # 60 fields a second in 30 frames
    Form("1-frame", "one_frame.mp4", H264, frames=1),
    Form("0.2-s", "short.mp4", H264, frames=6),
    Form("60-fps", "sixty.mp4", H264, fps="60", frames=120),
    Form("b-frames-gop-300", "long_gop.mp4", LONG_GOP, frames=240),
    Form("full-range", "full_range.mp4", (*H264[:4], "-pix_fmt", "yuvj420p"), scale="out_range=full"),
    Form("bt709", "bt709.mp4", (*H264, "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709"),
         scale="out_color_matrix=bt709:out_range=tv"),
    Form("25-fps-mkv", "pal.mkv", H264, fps="25", frames=75),
    Form("spaces-unicode", "clip ünï 動画 (1).mp4", H264),
)  # fmt: skip
BROKEN = {  # made from a good form's file: (the form it is made from, how)
    "webm-named-mp4": ("vp9-webm-1ms", "renamed", "webm_really.mp4"),
    "cut-in-half": ("h264-mp4", "cut", "cut_half.mp4"),
    "cut-mkv": ("h264-mkv-1ms", "cut", "cut.mkv"),
}
FULL_RANGE = ("full-range", "mjpeg-mov")


def _encode(form: Form, dst: Path) -> None:
    filters = [f"scale={form.scale}", *form.filters]
    command = [
        "ffmpeg",
        "-nostdin",
        "-v",
        "error",
        "-y",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-s",
        f"{form.width}x{form.height}",
        "-r",
        form.fps,
        "-i",
        "-",
    ]
    if form.audio:
        command += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]
    encoded = dst.with_name(f"encoded.{dst.name}") if form.rotate else dst
    command += ["-vf", ",".join(filters), *form.args, str(encoded)]
    frames = b"".join(picture(i, form.width, form.height).tobytes() for i in range(form.frames))
    _ffmpeg(command, frames)
    if form.rotate:
        _ffmpeg(
            [
                "ffmpeg",
                "-nostdin",
                "-v",
                "error",
                "-y",
                "-i",
                str(encoded),
                "-c",
                "copy",
                "-metadata:s:v:0",
                f"rotate={form.rotate}",
                str(dst),
            ]
        )
        encoded.unlink()


def _ffmpeg(command: list[str], stdin: bytes | None = None) -> None:
    """Runs ffmpeg; its stderr (SVT-AV1 logs there) is shown only when it fails."""
    done = subprocess.run(command, input=stdin, capture_output=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.decode(errors='replace')[-2000:]}")


def make_zoo(root: Path) -> dict[str, Path]:
    """Every form of :data:`FORMS` and :data:`BROKEN` written under ``root``: {name: path}."""
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for form in FORMS:
        paths[form.name] = root / form.file
        _encode(form, paths[form.name])
    for name, (source, how, file) in BROKEN.items():
        paths[name] = root / file
        if how == "renamed":
            shutil.copyfile(paths[source], paths[name])
        else:
            data = paths[source].read_bytes()
            paths[name].write_bytes(data[: len(data) // 2])
    return paths


def form(name: str) -> Form:
    return next(f for f in FORMS if f.name == name)


def ffprobe(path: Path) -> dict:
    """ffprobe's view of the first video stream: frames counted by decoding, size, rotation, range and matrix."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_streams",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stream = json.loads(out)["streams"][0]
    rotation = 0
    for side in stream.get("side_data_list", []):
        rotation = int(side.get("rotation", rotation))
    return {
        "frames": int(stream["nb_read_frames"]),
        "width": stream["width"],
        "height": stream["height"],
        "rotation": rotation,
        "range": stream.get("color_range"),
        "matrix": stream.get("color_space"),
        "fps": stream.get("r_frame_rate"),
    }


def displayed_size(path: Path) -> tuple[int, int]:
    """(width, height) as ffmpeg shows the video: swapped by a 90 or 270 degree rotation."""
    info = ffprobe(path)
    swap = info["rotation"] % 180 != 0
    return (info["height"], info["width"]) if swap else (info["width"], info["height"])


def ffmpeg_frames(path: Path, filters: str = "", size: tuple[int, int] | None = None) -> np.ndarray:
    """(N, H, W, 3) uint8: ffmpeg's own decode (rotation applied, its colour conversion), every frame passed on as
    decoded (``-vsync passthrough``), after ``filters`` (e.g. ``fps=30``)."""
    width, height = size or displayed_size(path)
    chain = ",".join(f for f in (filters, f"scale={width}:{height}", "format=rgb24") if f)
    out = subprocess.run(
        [
            "ffmpeg",
            "-nostdin",
            "-v",
            "error",
            "-i",
            str(path),
            "-map",
            "0:v:0",
            "-vsync",
            "passthrough",
            "-vf",
            chain,
            "-f",
            "rawvideo",
            "-",
        ],
        capture_output=True,
        check=True,
    ).stdout
    return np.frombuffer(out, np.uint8).reshape(-1, height, width, 3)
