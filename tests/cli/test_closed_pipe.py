"""A reader that stops early (``clipflow data frames ... | head -1``) ends the command quietly, as it ends a Unix
tool: no BrokenPipeError traceback, status 141 (128 + SIGPIPE) for a shell with pipefail to see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import python_env


def test_frames_into_head_ends_quietly_with_the_status_of_a_closed_pipe(tmp_path: Path) -> None:
    listed = tmp_path / "many.lst"  # frames plans clips without decoding: no video need exist
    listed.write_text("".join(f"v{i}.mp4 64 {i % 2}\n" for i in range(3000)))  # ~1 MB of output, past a pipe's buffer
    script = (f"{sys.executable} -m clipflow data frames {listed} --recipe slowfast_tiny_synthetic | head -1; "
              'echo "status ${PIPESTATUS[0]}" >&2')  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=python_env(), capture_output=True, text=True, timeout=120)
    assert done.stdout.count("\n") == 1 and done.stdout.startswith('{"path": "v0.mp4"'), done.stdout[:200]
    assert done.stderr == "status 141\n", done.stderr


def test_a_reader_that_reads_everything_sees_status_0(tmp_path: Path) -> None:
    listed = tmp_path / "few.lst"
    listed.write_text("v0.mp4 64 0\nv1.mp4 64 1\n")
    script = (f"{sys.executable} -m clipflow data frames {listed} --recipe slowfast_tiny_synthetic | cat; "
              'echo "status ${PIPESTATUS[0]}" >&2')  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=python_env(), capture_output=True, text=True, timeout=120)
    assert done.stdout.count("\n") == 2 and done.stderr == "status 0\n", done.stderr
