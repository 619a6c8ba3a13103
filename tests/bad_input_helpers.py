"""Bad inputs made as a user would hand them over: videos that are not (a folder, audio only, cut short, ...) and
text with a byte that is not UTF-8."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

LATIN1_E = b"\xe9"  # "é" in Latin-1: no UTF-8 sequence starts with it and goes on with an ASCII byte


def write_audio_only(path: Path) -> Path:
    """An .mp4 holding one AAC audio stream (a quarter of a second of silence) and no video stream."""
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)
    return path


def bad_videos(root: Path, good: Path) -> dict[str, str]:
    """Files under ``root`` that are no readable video, by their path relative to root, each with the reason
    the readers give for it; ``good`` is a real video to cut short."""
    data = good.read_bytes()
    write_audio_only(root / "sound.mp4")
    (root / "folder.mp4").mkdir()
    (root / "empty.mp4").write_bytes(b"")
    (root / "cut.mp4").write_bytes(data[: len(data) // 3])  # the index (moov, at the end) cut off
    (root / "notes.mp4").write_text("not a video\n")
    return {
        "sound.mp4": "no video stream (the file holds 1 audio stream)",
        "folder.mp4": "a folder, not a video file",
        "missing.mp4": "file not found",
        "empty.mp4": "empty file (0 bytes)",
        "cut.mp4": "not a video file, or one cut short or damaged: no container format reads it",
        "notes.mp4": "not a video file, or one cut short or damaged: no container format reads it",
    }


def decoder_text_in(text: str) -> list[str]:
    """The decoders' own texts found in ``text`` (decord's check failures, its bare "Error reading"), which a
    message must translate; [] when there is none."""
    return [marker for marker in ("Check failed", "Error reading", "video_reader.cc", "Errno") if marker in text]
