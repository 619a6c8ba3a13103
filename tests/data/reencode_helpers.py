"""Source videos for the re-encode tests (test_reencode, test_kinetics_cli): write_counter_video makes an
H.264 video with audio whose frame i shows i as BITS black or white blocks, and frame_number reads it back."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

BITS = 6  # frame numbers up to 63 are drawn as black/white blocks


def write_counter_video(
    path: Path, width: int = 320, height: int = 180, frames: int = 60, fps: int = 25, container_options=None
) -> None:
    """H.264 video with an AAC audio track whose frame i shows i in binary as BITS blocks across the top
    half, over a new random colour in the bottom half: a scene cut at every frame, which x264 would
    answer with extra keyframes unless told not to."""
    rng = np.random.default_rng(frames)
    with av.open(str(path), mode="w", options=container_options or {}) as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.options = {"preset": "ultrafast"}
        audio = out.add_stream("aac", rate=8000, layout="mono")
        for i in range(frames):
            picture = np.empty((height, width, 3), dtype=np.uint8)
            picture[height // 2 :] = rng.integers(0, 256, 3)
            for bit in range(BITS):
                columns = slice(bit * width // BITS, (bit + 1) * width // BITS)
                picture[: height // 2, columns] = 255 if i >> bit & 1 else 0
            out.mux(video.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        out.mux(video.encode())
        tone = np.sin(np.arange(frames * 8000 // fps) / 8000 * 2 * np.pi * 440).astype(np.float32)
        for start in range(0, len(tone), 1024):
            chunk = av.AudioFrame.from_ndarray(tone[None, start : start + 1024], format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = 8000, start
            out.mux(audio.encode(chunk))
        out.mux(audio.encode())


def frame_number(picture: np.ndarray) -> int:
    """Reads back the number write_counter_video drew, from the centre of each block."""
    height, width = picture.shape[:2]
    row = picture[height // 4].mean(axis=1)
    return sum(1 << bit for bit in range(BITS) if row[(2 * bit + 1) * width // (2 * BITS)] > 127)
