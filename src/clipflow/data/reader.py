"""Read chosen frames of a video as (N, H, W, 3) uint8 RGB: with PyAV (the default) or decord.

Frame ``i`` is the i-th frame in display order, the numbering decord uses and the
scan counts with: the demuxed packets' timestamps, sorted.

The PyAV reader decodes on one thread and does no more than a clip needs:

- it seeks to the keyframe at or before a needed frame and decodes from there, and
  seeks again only when that skips SEEK_AFTER frames or more (a test item's clips far
  apart are short runs, not the whole video; a clip crossing keyframes is one run);
- a packet that holds no needed frame is decoded with ``skip_frame`` NONREF, so the
  decoder drops it when no other frame refers to it (a non-reference B-frame); a
  frame others refer to is decoded as always, so the needed ones come out the same.
  Only H.264 and HEVC, whose decoders drop by each frame's own reference flag
  (SKIP_NONREF_CODECS); AV1's decoder (libdav1d) then never outputs some needed
  frames, so every other codec decodes every packet;
- it keeps the needed frames as decoded (YUV) and shows them as ffmpeg does at the end
  (:mod:`clipflow.data.display`): turned upright by the display matrix, converted by
  ffmpeg's ``scale`` filter (bicubic) to RGB at the requested size, with the stream's
  colour range and matrix; converting while decoding slows the decoder through the cache.

decord (``VideoReader(...).get_batch``) is kept as the other choice: it was GluonCV's
reader. It shows frames as ffmpeg does at their displayed size (turned, same colours: equal
on every form of the test zoo), but its RGB frames are resized afterwards, so at another
size its pictures differ a little from this reader's (which resize in YUV, as ffmpeg).
On 340x256 H.264 clips of 64 frames it measured 35 to 53 ms a clip, against
31 to 35 for this one (bench/loader.py has the loader's figures with each). decord
decodes at the video's stored size and :func:`resize_rgb` resizes its RGB frames:
decord2 3.4.0's own resize (``VideoReader(width=, height=)``) is wrong on some CPUs (on
an AMD EPYC it made 4-channel frames and get_batch failed), decord 0.6.0's was not.

A file no decoder can read is named in the user's words (:class:`VideoFileError`): a missing
file, a folder, one this process may not read, an empty one, one that no container format
reads (not a video, or cut short), one without a video stream (audio only). Every reader
(this one, the scan's probe, the re-encode) opens its input through :func:`open_video`, so
the reasons are the same everywhere and never a decoder's own check text.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clipflow.data.display import Look, TurnError, display_for
from clipflow.errors import ClipflowError

DECODERS = ("pyav", "decord", "torchcodec", "nvdec")  # the last two: clipflow.data.torchcodec_reader
NOT_A_CONTAINER = "not a video file, or one cut short or damaged: no container format reads it"


class VideoFileError(ValueError):
    """Why a video file cannot be read, in the user's words ("a folder, not a video file"); the caller names the
    file. A ValueError, as the scan and the re-encode take a video's failure."""


def check_video_file(path: Path) -> None:
    """Raises VideoFileError unless ``path`` is a non-empty regular file this process may read."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise VideoFileError("a folder, not a video file")
        if not stat.S_ISREG(info.st_mode):
            raise VideoFileError("not a regular file (a device, pipe or socket), not a video file")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise VideoFileError("file not found") from None
    except PermissionError:
        raise VideoFileError("cannot be read: permission denied (check its mode and owner)") from None
    except OSError as exc:
        raise VideoFileError(f"cannot be read: {exc.strerror or exc}") from None
    if size == 0:
        raise VideoFileError("empty file (0 bytes)")


def _streams(container) -> str:
    """The container's streams in words: "1 audio stream", "no stream"."""
    kinds = Counter(s.type for s in container.streams)
    return ", ".join(f"{n} {kind} stream{'s' if n > 1 else ''}" for kind, n in kinds.items()) or "no stream"


def open_video(path: Path):
    """``path`` opened with PyAV (an ``InputContainer`` with a video stream), or VideoFileError saying what
    the file is: see :func:`check_video_file`, then one no container format reads, or one with no video
    stream."""
    import av

    check_video_file(path)
    try:
        container = av.open(str(path))
    except av.error.InvalidDataError:
        raise VideoFileError(NOT_A_CONTAINER) from None
    except av.FFmpegError as exc:
        raise VideoFileError(f"cannot open as a video: {exc.strerror or type(exc).__name__}") from None
    if not container.streams.video:
        held = _streams(container)
        container.close()
        raise VideoFileError(f"no video stream (the file holds {held})")
    return container


def open_with_decord(path: Path, **options):
    """(a ``decord.VideoReader`` of ``path`` with ``options``, the frame count the container's index lists, 0
    when it lists none), or VideoFileError in the user's words. The file is opened with :func:`open_video`
    first, so decord only sees files with a video stream: when decord fails it writes its own check text to
    stderr, which the user must not get for a folder, an audio-only file or a text file."""
    import decord

    with open_video(path) as container:
        listed = container.streams.video[0].frames
    try:
        return decord.VideoReader(str(path), **options), listed
    except Exception:  # decord's DECORDError and RuntimeError, with its internal check text
        raise VideoFileError(f"cannot open as a video: decord cannot read it ({NOT_A_CONTAINER})") from None


def damaged(exc: Exception) -> str:
    """A decoding failure past the opening, in the user's words (FFmpeg's error text, never a check's)."""
    detail = getattr(exc, "strerror", None)
    return "damaged or cut short: decoding failed" + (f" ({detail})" if detail else "")


@dataclass(frozen=True)
class FrameTable:
    """A video stream's frames in display order: each one's pts, and which are keyframes."""

    pts: list[int]
    keys: list[int]  # display indices of the keyframes, ascending

    @classmethod
    def demux(cls, container, stream) -> FrameTable:
        """Built from the packets' timestamps (no decoding), as decord numbers frames."""
        return cls.of_packets([(p.pts, p.is_keyframe) for p in container.demux(stream) if p.pts is not None])

    @classmethod
    def of_packets(cls, packets: list[tuple[int, bool]]) -> FrameTable:
        """Built from (pts, is_keyframe) of the demuxed packets that have a pts."""
        pts = sorted(q for q, _ in packets)
        where = {q: i for i, q in enumerate(pts)}
        return cls(pts, sorted(where[q] for q, key in packets if key))

    def key_at_or_before(self, frame: int) -> int:
        """The last keyframe at or before ``frame`` (0 when none is: decoding then starts at the top)."""
        at = bisect.bisect_right(self.keys, frame)
        return self.keys[at - 1] if at else 0


def frames_now(path: Path) -> int | None:
    """How many frames the video at ``path`` lists now, numbered as this reader and the scan number them (its
    packets' timestamps, no decoding); None when it cannot be opened."""
    import av

    try:
        with open_video(path) as container:
            stream = container.streams.video[0]
            return len(FrameTable.demux(container, stream).pts)
    except (VideoFileError, av.FFmpegError, OSError):
        return None


SKIP_NONREF_CODECS = ("h264", "hevc")  # decoders whose skip_frame NONREF drops only frames nothing refers to
SEEK_AFTER = 16  # frames: seek only when that skips at least this many (a keyframe interval at GluonCV's settings)


def runs(table: FrameTable, frames: list[int]) -> list[list[int]]:
    """The sorted needed ``frames`` cut where seeking to a keyframe skips at least SEEK_AFTER frames
    that decoding on would pass."""
    out: list[list[int]] = []
    for frame in frames:
        if out and table.key_at_or_before(frame) - out[-1][-1] <= SEEK_AFTER:
            out[-1].append(frame)
        else:
            out.append([frame])
    return out


class PyAVReader:
    """Decodes the needed frames of one video; see the module for how."""

    def __init__(self, path: Path, width: int, height: int):
        self.path, self.width, self.height = path, width, height
        self.container = open_video(path)
        self.stream = self.container.streams.video[0]
        self.stream.thread_count = 1
        self.skips = self.stream.codec_context.name in SKIP_NONREF_CODECS
        self.table = FrameTable.demux(self.container, self.stream)
        self.frames_decoded = 0  # frames the decoder output, needed or not

    def __len__(self) -> int:
        return len(self.table.pts)

    def close(self) -> None:
        self.container.close()

    def get(self, indices: list[int]) -> np.ndarray:
        """(len(indices), height, width, 3) uint8, in the order of ``indices`` (repeats allowed)."""
        wanted = sorted(set(indices))
        if wanted and (wanted[0] < 0 or wanted[-1] >= len(self)):
            bad = wanted[0] if wanted[0] < 0 else wanted[-1]
            raise ClipflowError(f"frame {bad} is out of range: the video has {len(self)} frames")
        decoded: dict[int, object] = {}
        for run in runs(self.table, wanted):
            decoded.update(self._decode_run(run))
        return self._to_rgb([decoded[i] for i in indices])

    def _decode_run(self, frames: list[int]) -> dict[int, object]:
        out = self._decode_from(self.table.key_at_or_before(frames[0]), frames)
        if len(out) < len(frames):  # the container's own index put the seek past a needed frame: from the top
            out = self._decode_from(0, frames)
        if len(out) < len(frames):
            missing = min(set(frames) - set(out))
            raise ClipflowError(f"frame {missing} did not decode (the stream ended or is damaged before it)")
        return out

    def _decode_from(self, key: int, frames: list[int]) -> dict[int, object]:
        pts = self.table.pts
        wanted = {pts[f]: f for f in frames}
        self.container.seek(pts[key], stream=self.stream, backward=True, any_frame=False)
        codec = self.stream.codec_context
        out: dict[int, object] = {}
        skipping = False
        for packet in self.container.demux(self.stream):
            if self.skips and skipping == (packet.pts in wanted):  # set only on a change: the setter parses a string
                skipping = not skipping
                codec.skip_frame = "NONREF" if skipping else "DEFAULT"
            for frame in codec.decode(packet):
                self.frames_decoded += 1
                index = wanted.get(frame.pts)
                if index is not None:
                    out[index] = frame
            if len(out) == len(wanted):
                break
        codec.skip_frame = "DEFAULT"
        return out

    def _to_rgb(self, frames: list) -> np.ndarray:
        display = display_for(Look(self.width, self.height))
        rgb = np.empty((len(frames), self.height, self.width, 3), np.uint8)
        for i, frame in enumerate(frames):
            rgb[i] = display(frame).to_ndarray()
        return rgb


def resize_rgb(frames: np.ndarray, width: int, height: int) -> np.ndarray:
    """(N, H, W, 3) uint8 RGB ``frames`` at (height, width): returned as they are when that is their size.

    swscale's bicubic, as the PyAV reader's resize, with BITEXACT so that every CPU gives the
    same pixels: without it swscale runs SIMD code chosen by the CPU, whose rounding is not the
    C code's (measured here: 855 of 3.6 million values one off). It costs nothing measurable
    (0.6 ms a frame, 340x256 to 224x168, either way). One thread, as the decoders: the
    loader's parallelism is its worker processes.
    """
    if frames.shape[1:3] == (height, width):
        return frames
    import av
    from av.video.reformatter import Interpolation, VideoReformatter

    reformatter = VideoReformatter()
    bicubic = Interpolation.BICUBIC | Interpolation.BITEXACT
    out = np.empty((len(frames), height, width, 3), np.uint8)
    for i, frame in enumerate(frames):
        source = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        out[i] = reformatter.reformat(
            source, width=width, height=height, format="rgb24", interpolation=bicubic, threads=1
        ).to_ndarray()
    return out


def read_frames(path: Path, indices: list[int], width: int, height: int, decoder: str = "pyav") -> np.ndarray:
    """Frames ``indices`` (display order, 0-based) of the video at ``path`` as (N, height, width, 3) uint8 RGB.

    Raises ClipflowError with the reason in the user's words (:func:`open_video`; "damaged or cut short")
    when the file cannot be read; the caller names the file.
    """
    import av

    if decoder not in DECODERS:
        raise ClipflowError(f"decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
    try:
        if decoder == "decord":
            return _read_with_decord(path, indices, width, height)
        if decoder in ("torchcodec", "nvdec"):
            from clipflow.data.torchcodec_reader import read_with_torchcodec

            return read_with_torchcodec(path, indices, width, height, decoder)
        reader = PyAVReader(path, width, height)
        try:
            return reader.get(indices)
        finally:
            reader.close()
    except (VideoFileError, TurnError) as exc:
        raise ClipflowError(str(exc)) from None
    except (av.FFmpegError, OSError) as exc:
        raise ClipflowError(damaged(exc)) from None


def _read_with_decord(path: Path, indices: list[int], width: int, height: int) -> np.ndarray:
    """read_frames with decord (:func:`open_with_decord`); decord's own errors (its check texts) become
    "damaged or cut short"."""
    reader, _ = open_with_decord(path, num_threads=1)
    bad = [i for i in indices if not 0 <= i < len(reader)]
    if bad:
        raise ClipflowError(f"frame {bad[0]} is out of range: the video has {len(reader)} frames")
    try:
        frames = reader.get_batch(indices).asnumpy()
    except Exception:
        raise VideoFileError("damaged or cut short: decord could not decode the frames") from None
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ClipflowError(f"decord gave frames of shape {frames.shape}, not (N, H, W, 3)")
    return resize_rgb(frames, width, height)
