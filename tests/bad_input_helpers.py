"""Bad inputs made as a user would hand them over: videos that are not (a folder, audio only, cut short, ...),
text with a byte that is not UTF-8, and files the command may not read or write (see :func:`bound_by_modes`)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import numpy as np
import pytest
from helpers import python_env

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


# root reads and writes any file whatever its mode; without these two capabilities it is held to the modes as
# any user is, while it still owns (and so may read) the venv under /root
DROP_BYPASS = ("--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search")


@functools.cache
def bound_by_modes() -> tuple[str, ...]:
    """The command prefix under which a process is held to file modes: none when the tests do not run as root,
    ``setpriv`` dropping root's file-mode bypass when they do. Checked once by reading a mode-000 file under
    it; the test is skipped, with the reason, when that file is still read."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("the tests run as root and setpriv (util-linux) is missing: root reads any file")
        prefix = ("setpriv", *DROP_BYPASS, "--")
    with tempfile.TemporaryDirectory() as folder:
        locked = Path(folder) / "locked"
        locked.write_text("x")
        locked.chmod(0)
        probe = [*prefix, sys.executable, "-c", f"open({str(locked)!r}).read()"]
        done = subprocess.run(probe, capture_output=True, text=True, env=python_env())
    if done.returncode == 0 or "PermissionError" not in done.stderr:
        pytest.skip(f"a mode-000 file is still read under {' '.join(prefix) or 'this user'}: {done.stderr[-200:]}")
    return prefix


def clipflow_bound(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` held to file modes (:func:`bound_by_modes`), output captured."""
    command = [*bound_by_modes(), sys.executable, "-m", "clipflow", *args]
    return subprocess.run(command, env=python_env(), capture_output=True, text=True, timeout=timeout)
