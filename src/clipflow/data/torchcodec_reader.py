"""Read chosen frames of a video with torchcodec: ``data.decoder: torchcodec`` (on the CPU) or ``nvdec`` (on the GPU).

What it decodes. torchcodec 0.17's ``VideoDecoder`` (FFmpeg's decoders through the FFmpeg shared libraries it finds:
Debian's 5.1 here, ``apt-get install ffmpeg``; PyAV brings its own FFmpeg 7) reads the frames by index
(``get_frames_at``) as RGB, one FFmpeg thread, the picture turned upright by the display matrix as ffmpeg turns it;
clipflow gives them back as (N, height, width, 3) uint8 in the order of the indices asked for (repeats allowed), as
the other readers do. The video's first video stream is read (the one the PyAV reader reads).

Numbering. torchcodec's exact seek mode scans the packets when it opens a video and numbers the frames by their
timestamps sorted: frame ``i`` is clipflow's frame ``i`` (the i-th in display order, as the scan and the PyAV reader
count). Measured on every readable form of the test zoo (tests/data/video_zoo.py: H.264 with 3 B-frames and a
300-frame GOP, variable frame rate, 1 ms mkv timestamps, VP9, AV1, HEVC, MPEG-4, MJPEG, cut-off mkv, ...): the same
frame count and the same frame at every index.

Size. At the video's displayed size the frames are the decoder's own. At another size they are resized afterwards
in RGB by :func:`clipflow.data.reader.resize_rgb` (swscale bicubic, bit-exact), as the decord path is: torchcodec
0.17's own ``Resize`` is bilinear only (measured farther from the PyAV reader: mean 1.32 against 1.00 levels on
H.264 at 224x168, and up to 29 against 2 on 4:4:4).

Tolerance against the PyAV reader (measured on this machine, every frame of the 27 readable forms of the zoo):

- at the displayed size, identical (no value differs) on every form: H.264 (mp4, mkv, with audio, B-frames with a
  long GOP, 60 and 25 fps, variable frame rate, odd and tiny sizes, 1920x1080, 4:4:4, full range, BT.709,
  interlaced), HEVC (8- and 10-bit), VP9 (also named .mp4), AV1 (SVT and AOM), MPEG-4, MJPEG, and both turned
  phone videos (90 and 270 degrees);
- at another size, the decord path's frames (identical to them on every form), not the PyAV reader's: that one
  resizes in YUV (chroma at its stored half size), this one in RGB, so at sharp colour edges single values differ
  by up to 36 to 94 levels at 224x168, 64 to 167 at 160x120, 56 to 180 at 400x300 (4:2:0 and 4:2:2 forms; 4:4:4
  at most 2, 16 and 4); over a form's frames the mean difference is 0.25 to 1.75 levels (4:4:4: 0.03 to 0.09),
  1.93 at most for one frame (at 96x72, 72x96 and 224x168). Fine noise differs more: on 16 of clipflow's
  synthetic videos (``data synth``) from 170x128 to 224x168, a clip's mean was up to 2.71, its largest 158.

Speed. With one torch thread, as the loader's worker processes run, a SlowFast clip (32 of 64 frames of a 340x256
H.264 video) took about as long as with the PyAV reader here (150 to 190 ms each, the 2-core machine busy with other
work); with torch's default 2 threads torchcodec's batch call took 3 to 4 times as long (its frame copies run on
torch's thread pool).

bench/gpu_checks.sh prints the same figures for ``nvdec`` on a GPU machine.

A display matrix that turns the picture by other than a quarter turn is refused with the PyAV reader's words
(:class:`clipflow.data.display.TurnError`): torchcodec would round it to the nearest quarter turn and show a
45-degree video turned by 90.

``nvdec`` is the same through torchcodec's NVDEC decoder on the current CUDA device (``device="cuda"``): decoded and
converted to RGB on the GPU, copied back to the CPU, resized as above. It was not run here (no GPU lent); its
tolerance against the PyAV reader is what bench/gpu_checks.sh measures (NVDEC's colour conversion is its own, not
swscale's). A video NVDEC cannot decode is decoded by torchcodec on the CPU instead (its ``cpu_fallback``). Where
it cannot run it is refused by name when the dataset is built (:func:`prepare`), so a training job fails at its
start: on a machine where ``torch.cuda.is_available()`` is false, or with a torchcodec built without CUDA. CUDA
does not survive a fork: in a loader process forked from a process that has used CUDA (``train.loader_workers``
above 0 in GPU training) a read is refused with a message saying so; there ``nvdec`` needs ``loader_workers: 0``.

A file it cannot read is named as the other readers name it (:func:`clipflow.data.reader.open_video` opens it first,
so a folder, an audio-only or a text file get the same reason, never torchcodec's own check text); a failure past
the opening is "damaged or cut short". That first opening also finds the first video stream; a process does it once
a file (:func:`video_stream`, kept while the file's size and time of change stay), not at every clip.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from clipflow.data.display import TurnError
from clipflow.data.reader import NOT_A_CONTAINER, VideoFileError, open_video, resize_rgb
from clipflow.errors import ClipflowError

INSTEAD = "use data.decoder pyav (or torchcodec) here"


def prepare(decoder: str) -> None:
    """Imports torchcodec (before a DataLoader forks its workers, so they share it) and refuses ``decoder``
    with a ClipflowError naming it where it cannot run: torchcodec not importable, no FFmpeg shared libraries for
    it, and for ``nvdec`` no CUDA device or a torchcodec without CUDA."""
    torchcodec = _torchcodec(decoder)
    if decoder == "nvdec":
        _check_cuda(torchcodec)


def _torchcodec(decoder: str):
    try:
        import torchcodec
        import torchcodec.decoders  # noqa: F401
    except Exception as exc:  # an ImportError, or torchcodec's own when its libraries do not load
        raise ClipflowError(
            f"data.decoder {decoder} needs torchcodec (pip install torchcodec==0.17.0, with clipflow's torch), which "
            f"cannot be imported here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if torchcodec.ffmpeg_major_version is None:
        raise ClipflowError(
            f"data.decoder {decoder} decodes with torchcodec, which found no FFmpeg shared libraries it can load "
            "(versions 4 to 9; Debian: apt-get install ffmpeg); use data.decoder pyav here"
        )
    return torchcodec


def _check_cuda(torchcodec) -> None:
    import torch

    what = "data.decoder nvdec decodes on a GPU (torchcodec's NVDEC)"
    if not torch.cuda.is_available():
        raise ClipflowError(f"{what}: this machine has no CUDA device (torch.cuda.is_available() is false); {INSTEAD}")
    local = torchcodec.__version__.partition("+")[2]
    if local and not local.startswith("cu"):
        raise ClipflowError(
            f"{what}: the torchcodec installed here ({torchcodec.__version__}) was built without CUDA; install a "
            f"CUDA build of torchcodec or {INSTEAD}"
        )


@cache
def _checked(decoder: str) -> None:
    """:func:`prepare`, once a process: the reader's own check when no dataset was built first."""
    prepare(decoder)


def video_stream(path: Path) -> int:
    """The index of the first video stream of ``path`` (the one the PyAV reader reads), found by opening it with
    PyAV: a file that is no readable video is named in the user's words before torchcodec sees it. Kept per
    process while the file's size and time of change stay."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    if stat is None:
        return _first_video_stream(str(path))  # open_video names why (a missing file, a folder, ...)
    return _first_video_stream_kept(str(path), stat.st_size, stat.st_mtime_ns)


def _first_video_stream(path: str) -> int:
    with open_video(Path(path)) as container:
        return container.streams.video[0].index


@lru_cache(maxsize=4096)
def _first_video_stream_kept(path: str, size: int, changed_ns: int) -> int:
    return _first_video_stream(path)


def read_with_torchcodec(path: Path, indices: list[int], width: int, height: int, decoder: str) -> np.ndarray:
    """Frames ``indices`` (display order, 0-based) of the video at ``path`` as (N, height, width, 3) uint8 RGB,
    decoded by torchcodec on the CPU (``decoder`` torchcodec) or with NVDEC (nvdec); see the module. Raises
    VideoFileError or TurnError with the reason in the user's words, ClipflowError for a frame out of range or a
    decoder that cannot run here."""
    import torch

    if decoder == "nvdec" and torch.cuda._is_in_bad_fork():
        raise ClipflowError(
            "data.decoder nvdec cannot decode in a loader process forked from one that uses CUDA (CUDA does not "
            "survive a fork): set train.loader_workers to 0 with nvdec, or use data.decoder torchcodec"
        )
    _checked(decoder)
    from torchcodec.decoders import VideoDecoder

    stream = video_stream(path)
    device = torch.device("cuda", torch.cuda.current_device()) if decoder == "nvdec" else "cpu"
    try:
        reader = VideoDecoder(str(path), stream_index=stream, dimension_order="NHWC", num_ffmpeg_threads=1,
                              device=device, seek_mode="exact")  # fmt: skip
    except Exception:  # torchcodec's RuntimeError or ValueError, with its source file and line
        if decoder == "nvdec":  # PyAV opened it: the GPU's part failed
            raise VideoFileError(
                "cannot decode on the GPU: torchcodec's NVDEC could not open it (PyAV can); data.decoder torchcodec "
                "reads it on the CPU"
            ) from None
        raise VideoFileError(f"cannot open as a video: torchcodec cannot read it ({NOT_A_CONTAINER})") from None
    rotation = reader.metadata.rotation
    if rotation is not None and round(rotation) % 90:
        degrees = (-round(rotation)) % 360
        raise TurnError(f"its display matrix turns the picture by {degrees} degrees; only quarter turns are read")
    bad = [i for i in indices if not 0 <= i < len(reader)]
    if bad:
        raise ClipflowError(f"frame {bad[0]} is out of range: the video has {len(reader)} frames")
    if not indices:  # torchcodec refuses an empty batch
        return np.empty((0, height, width, 3), np.uint8)
    try:
        frames = reader.get_frames_at(list(indices)).data
    except Exception:
        on = " on the GPU" if decoder == "nvdec" else ""
        raise VideoFileError(f"damaged or cut short: torchcodec could not decode the frames{on}") from None
    frames = frames.cpu().numpy() if frames.is_cuda else frames.numpy()
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ClipflowError(f"torchcodec gave frames of shape {frames.shape} ({frames.dtype}), not (N, H, W, 3) uint8")
    return resize_rgb(frames, width, height)
