"""A decoded frame as ffmpeg shows it: turned upright by its display matrix, its colours converted by ffmpeg's own
``scale`` filter, at the size asked for.

A phone stores a portrait video as landscape pictures and a display matrix saying "turn it a quarter"; ffmpeg
(``-autorotate``, its default) turns every frame before anything else, with ``transpose=clock`` for a quarter turn
clockwise, ``transpose=cclock`` for three, ``hflip,vflip`` for a half. The turn is read from the frame (FFmpeg
copies the stream's display matrix to each frame); a turn that is not a multiple of 90 degrees is refused by name.

Colour is converted by an FFmpeg filter graph, not by a bare swscale context: the ``scale`` filter takes the range
(full or limited) and the matrix (BT.601, BT.709, ...) from each frame, converts 10-bit and interlaced pictures the
way the ffmpeg command does, and gave bit-equal pictures to Debian's ffmpeg 5.1 (``-vf scale=W:H``) on every form of
the test zoo (tests/data/video_zoo.py) on this machine. A bare swscale context (PyAV's reformatter) did not: 10-bit
HEVC differed by up to 55 levels at colour edges, interlaced H.264 by up to 24 (its chroma rows by field).

Plain frames to RGB (8-bit, progressive, not turned: what most collections and every re-encoded video hold) are
converted by a bare swscale context as before, bicubic: at their own size its pictures equal ffmpeg's on every plain
form of the zoo, and at another size it keeps the pixels earlier runs trained on (the graph rounds a downscale
differently, mean 1.2 levels at 84x64 to 42x32, which changed the embedded default's weights). The graph takes every
other frame, and every frame of the re-encode, whose output needs the colour options.

One graph serves every frame of the same format, size, turn and colour tags, and is made anew when they change;
a process keeps one :class:`Display` a look (:func:`display_for`), so the clips of a loader process share their
graph (making one costs about as much as converting 5 frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

PLAIN_FORMATS = ("yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12")  # 8-bit YUV
TURNS = {90: ("transpose=clock",), 180: ("hflip", "vflip"), 270: ("transpose=cclock",)}


class TurnError(ValueError):
    """A display matrix ffmpeg would turn by an angle that is not a multiple of 90 degrees."""


def turn_of(frame) -> int:
    """Degrees clockwise (0, 90, 180 or 270) ffmpeg turns ``frame`` to show it; TurnError for any other angle."""
    degrees = (-round(frame.rotation)) % 360
    if degrees % 90:
        raise TurnError(f"its display matrix turns the picture by {degrees} degrees; only quarter turns are read")
    return degrees


def shown_size(frame) -> tuple[int, int]:
    """(width, height) of ``frame`` as shown: swapped by a quarter turn."""
    if turn_of(frame) % 180:
        return frame.height, frame.width
    return frame.width, frame.height


@dataclass(frozen=True)
class Look:
    """What the converted frames are: ``format`` (an FFmpeg pixel format) at ``width`` x ``height``, and the
    ``scale`` filter's output options for colour (e.g. ``out_range=tv:out_color_matrix=bt709``), if any."""

    width: int
    height: int
    format: str = "rgb24"
    colour: str = ""


class Display:
    """Turns and converts decoded frames to a :class:`Look`, as ffmpeg does (see the module). Bicubic scaling, as
    ffmpeg's default; one thread, since the loader's parallelism is its worker processes."""

    def __init__(self, look: Look):
        self.look = look
        self._graph = None
        self._key = None
        self._reformatter = None

    def __call__(self, frame):
        if self._is_plain(frame):
            return self._reformatter.reformat(
                frame,
                width=self.look.width,
                height=self.look.height,
                format=self.look.format,
                interpolation="BICUBIC",
                threads=1,  # no slice threads: a loader process forked later would wait on them forever
            )
        key = (frame.format.name, frame.width, frame.height, turn_of(frame), frame.color_range, frame.colorspace)
        if key != self._key:
            self._graph, self._key = self._make(frame, key[3]), key
        self._graph.push(frame)
        return self._graph.pull()

    def _is_plain(self, frame) -> bool:
        """An 8-bit progressive frame with no turn, to RGB: the bare swscale context's (see the module)."""
        if self.look.format != "rgb24" or self.look.colour or frame.format.name not in PLAIN_FORMATS:
            return False
        if frame.interlaced_frame or turn_of(frame):
            return False
        if self._reformatter is None:
            from av.video.reformatter import VideoReformatter

            self._reformatter = VideoReformatter()
        return True

    def _make(self, frame, turn: int):
        import av

        graph = av.filter.Graph()
        graph.threads = 1  # before any filter: FFmpeg's default, 0, runs the scale filter on every core
        source = graph.add_buffer(
            width=frame.width, height=frame.height, format=frame.format, time_base=frame.time_base or Fraction(1, 1000)
        )
        scale = f"{self.look.width}:{self.look.height}:flags=bicubic" + (
            f":{self.look.colour}" if self.look.colour else ""
        )
        chain = [source]
        for step in (*TURNS.get(turn, ()), f"scale={scale}", f"format={self.look.format}"):
            name, _, args = step.partition("=")
            chain.append(graph.add(name, args or None))
        chain.append(graph.add("buffersink"))
        for a, b in zip(chain, chain[1:], strict=False):
            a.link_to(b)
        graph.configure()
        return graph


@lru_cache(maxsize=8)
def display_for(look: Look) -> Display:
    """This process's :class:`Display` for ``look``."""
    return Display(look)
