"""Optional re-encode stage: every video to one size, one constant frame rate and a fixed keyframe spacing.

Decoding cost in training depends on the source files: large frames, variable frame
rates and long keyframe distances make random clip access slow. Re-encoding once to
a short side of 256 (or GluonCV's fixed 340x256), 30 frames per second and H.264
with a keyframe every 16 frames makes every clip cheap to seek to and decode.

Frame rate conversion is ffmpeg's ``fps`` filter: each input frame's time is rounded to
the nearest output slot (k / fps, halves up), and output frame k shows the last input
frame whose slot is at or before k, so frames are repeated when the source is slower and
dropped when it is faster, and the duration is kept. Rounding to the nearest slot, not
up, matters for timestamps in milliseconds (MKV, WebM: 30 fps is 0, 33, 67, 100 ms):
rounded up, 67 ms x 30 = 2.01 takes slot 3, and a third of the frames were dropped.

Matched to a recipe (``frame_step`` d > 1, ``data.reencode.match_recipe``): of the fps conversion's frames only
0, d, 2d, ... are written, at fps / d, so a video holds the frames the recipe's clips read and none of the others
(:meth:`clipflow.data.sampling.ClipSpec.on_every` maps the clips onto it). Stride 2 at 30 fps is 15 fps, each
frame the one the 30 fps output shows in its slot: the same moments as the unmatched re-encode's even frames.
The journal records the step, and :func:`frame_step_of` reads it back for the datasets built on the folder.

Each frame is shown as ffmpeg shows it (:mod:`clipflow.data.display`) and written so:
a display matrix's turn goes into the pixels (the output has none), and the colours keep
their look: limited range, the source's matrix if it is BT.709 and BT.601 otherwise,
tagged on the output, so a full-range phone or MJPEG video is not brightened.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path, PurePosixPath

import av
from av.video.frame import PictureType
from tqdm import tqdm

from clipflow.data.display import Display, Look, shown_size
from clipflow.data.reader import open_video
from clipflow.data.sampling import ClipSpec
from clipflow.environment import read_env
from clipflow.errors import ClipflowError
from clipflow.files import (
    check_output_dir,
    check_output_file,
    temp_beside,
    write_text_atomic,
)
from clipflow.jsonl import append_record, journal_lines
from clipflow.values import is_int, is_number

X264_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
BT709, SMPTE170M, LIMITED = 1, 6, 1  # FFmpeg's AVColorSpace and AVColorRange values
JOURNAL = "reencode.jsonl"  # in dst_root: one JSON line per finished output, the last line for a path wins
RECORD_KEYS = {"dst", "spec", "frames", "size"}
# x264's bitstream depends on its thread count (by default taken from the CPUs it may run on): one thread makes
# the same file on every machine, and videos are encoded side by side anyway (the decoder takes the threads given)
ENCODER_THREADS = 1
VERSION = 2  # of how outputs are made: 2 picks ffmpeg's fps frames, turns and keeps the colours (1: no record)


@dataclass(frozen=True)
class ReencodeSpec:
    """What every output looks like. Without width and height the short side is scaled to `short_side`
    keeping the aspect ratio; with them every output is exactly width x height (GluonCV's Kinetics
    preparation uses 340x256), whatever the source's aspect ratio."""

    short_side: int = 256
    width: int | None = None
    height: int | None = None
    fps: int | float = 30
    keyframe_interval: int = 16
    crf: int = 23
    preset: str = "veryfast"
    frame_step: int = 1  # keep frames 0, frame_step, 2 frame_step, ... of the fps conversion (output fps / step)

    def __post_init__(self) -> None:
        if not is_int(self.short_side) or self.short_side <= 0 or self.short_side % 2:
            raise ClipflowError(
                f"reencode short_side must be a positive even integer (yuv420p needs even sizes), "
                f"got {self.short_side!r}"
            )
        if (self.width is None) != (self.height is None):
            raise ClipflowError(
                f"reencode width and height must be given together or not at all, got width={self.width!r} "
                f"height={self.height!r}"
            )
        for name in ("width", "height"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value <= 0 or value % 2):
                raise ClipflowError(f"reencode {name} must be a positive even integer, got {value!r}")
        if not is_number(self.fps) or not 0 < self.fps < math.inf or not self.rate:
            raise ClipflowError(f"reencode fps must be a positive number, got {self.fps!r}")
        if not is_int(self.keyframe_interval) or self.keyframe_interval < 1:
            raise ClipflowError(f"reencode keyframe_interval must be an integer >= 1, got {self.keyframe_interval!r}")
        if not is_int(self.crf) or not 0 <= self.crf <= 51:
            raise ClipflowError(f"reencode crf must be an integer from 0 (lossless) to 51, got {self.crf!r}")
        if self.preset not in X264_PRESETS:
            raise ClipflowError(f"reencode preset {self.preset!r} is not an x264 preset; use one of {X264_PRESETS}")
        if not is_int(self.frame_step) or self.frame_step < 1:
            raise ClipflowError(f"reencode frame_step must be an integer >= 1, got {self.frame_step!r}")

    @property
    def rate(self) -> Fraction:
        """The frame rate as an exact fraction; 29.97002997 becomes NTSC's 30000/1001."""
        return Fraction(self.fps).limit_denominator(1001)

    @property
    def output_rate(self) -> Fraction:
        """The output's frame rate: :attr:`rate` over the frame step."""
        return self.rate / self.frame_step

    def matched(self, clip: ClipSpec) -> ReencodeSpec:
        """This spec for a recipe's clips (``data.reencode.match_recipe``): every ``clip.frame_step``-th frame
        kept, and a keyframe at least every ``n // 10 + 1`` frames for a clip of ``n`` frames in a row, so that
        the frames decoded before a clip's first one, ``(interval - 1) / 2`` on average, stay within 5% of it."""
        in_a_row = clip.on_every(clip.frame_step).skip_length
        return replace(
            self, frame_step=clip.frame_step, keyframe_interval=min(self.keyframe_interval, in_a_row // 10 + 1)
        )

    def matched_to_recipe(self, recipe: dict) -> ReencodeSpec:
        """:meth:`matched` for the recipe's clips; a recipe whose ``data.fit_step`` may lower ``new_step`` when
        training starts is refused (its clips would then read frames the re-encode dropped)."""
        data = recipe["data"]
        if data.get("fit_step") and data.get("new_step", 1) > 1:
            raise ClipflowError(
                f"match_recipe keeps one frame in {ClipSpec.from_recipe(recipe).frame_step} (fast_temporal_stride x "
                f"new_step {data['new_step']}), and the recipe's data.fit_step may lower new_step when training "
                "starts, to clips reading frames the re-encode dropped: set data.fit_step false, or match_recipe false"
            )
        return self.matched(ClipSpec.from_recipe(recipe))

    def recorded(self) -> dict:
        """The spec as the journal records it; a frame step of 1 left out, as records made before it had one."""
        return {k: v for k, v in asdict(self).items() if k != "frame_step" or v != 1}

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the output for a source of width x height; both even."""
        if self.width is not None and self.height is not None:
            return self.width, self.height
        if width <= 0 or height <= 0:
            raise ValueError(f"video has no picture size ({width}x{height})")
        scale = self.short_side / min(width, height)
        long_side = max(2, round(max(width, height) * scale / 2) * 2)
        return (long_side, self.short_side) if width >= height else (self.short_side, long_side)


@dataclass
class ReencodeResult:
    src: str
    dst: str
    status: str  # "done", "skipped" (up to date) or "failed"
    frames: int = 0  # frames in the output
    width: int = 0
    height: int = 0
    error: str | None = None  # why it failed, for status "failed"
    seconds: float = 0.0  # time spent encoding


def _frame_time(frame: av.VideoFrame, previous: Fraction | None, step: Fraction) -> Fraction:
    """Presentation time of a decoded frame in seconds; a frame without a timestamp follows the previous one."""
    if frame.pts is not None and frame.time_base is not None:
        return frame.pts * Fraction(frame.time_base)
    return Fraction(0) if previous is None else previous + step


def _frame_duration(frame: av.VideoFrame, step: Fraction) -> Fraction:
    """How long a frame is shown, in seconds: its own duration when the container has one, else step."""
    if frame.duration and frame.time_base is not None:
        return frame.duration * Fraction(frame.time_base)
    return step


def _timed_frames(container: av.container.InputContainer) -> Iterator[tuple[av.VideoFrame, Fraction, Fraction]]:
    """(frame, start, end) for every decoded frame of the first video stream in order: the times in seconds at
    which it is shown and at which the next frame replaces it; the last one lasts its own duration."""
    stream = container.streams.video[0]
    step = 1 / Fraction(stream.average_rate or stream.guessed_rate or 25)
    pending: av.VideoFrame | None = None
    previous = None
    for frame in container.decode(stream):
        t = _frame_time(frame, previous, step)
        if pending is not None:
            yield pending, previous, t
        pending, previous = frame, t
    if pending is not None:
        yield pending, previous, previous + _frame_duration(pending, step)


def output_slot(seconds: Fraction, rate: Fraction) -> int:
    """The output frame a time falls on, as ffmpeg's fps filter rounds it: to the nearest, halves up."""
    return math.floor(seconds * rate + Fraction(1, 2))


def output_look(frame: av.VideoFrame, width: int, height: int) -> Look:
    """yuv420p at width x height in limited range, with the matrix of ``frame`` if it is BT.709, else BT.601."""
    matrix = "bt709" if frame.colorspace == BT709 else "bt601"
    return Look(width, height, "yuv420p", f"out_range=tv:out_color_matrix={matrix}")


def _open_input(src: Path) -> av.container.InputContainer:
    """Opens src for decoding; raises ValueError with the reason in the user's words for a missing, empty or
    unreadable file, a folder, a file no container format reads, or one without a video stream
    (:func:`clipflow.data.reader.open_video`)."""
    return open_video(src)


def _add_video_stream(
    out: av.container.OutputContainer, spec: ReencodeSpec, width: int, height: int, bt709: bool
) -> av.VideoStream:
    """H.264 yuv420p stream with a keyframe exactly every spec.keyframe_interval frames.

    gop_size ("g") alone is only the longest keyframe distance: x264 also starts a new
    GOP wherever it detects a scene cut. sc_threshold 0 turns that detection off, so
    keyframes fall exactly on multiples of the interval; keyint_min is raised along
    (x264 caps it at half the interval plus one) so no other rule places one earlier.
    """
    stream = out.add_stream("libx264", rate=spec.output_rate)
    stream.width, stream.height = width, height
    stream.pix_fmt = "yuv420p"
    stream.codec_context.gop_size = spec.keyframe_interval
    stream.codec_context.thread_count = ENCODER_THREADS
    stream.codec_context.color_range = LIMITED
    stream.codec_context.colorspace = BT709 if bt709 else SMPTE170M  # SMPTE 170M: BT.601's matrix
    interval = str(spec.keyframe_interval)
    stream.options = {
        "crf": str(spec.crf),
        "preset": spec.preset,
        "g": interval,
        "keyint_min": interval,
        "sc_threshold": "0",
    }
    return stream


def _encode(src: Path, tmp: Path, spec: ReencodeSpec, threads: int) -> tuple[int, int, int]:
    """Decodes src and writes the re-encoded video (video stream only) to tmp; returns (frames, width, height).
    Slot k of the fps conversion is output frame k / frame_step when the step divides it, else not written."""
    rate, step = spec.rate, spec.frame_step
    time_base = 1 / spec.output_rate
    written = decoded = 0
    with _open_input(src) as source, av.open(str(tmp), mode="w", format="mp4") as out:
        source.streams.video[0].thread_type = "AUTO"
        source.streams.video[0].codec_context.thread_count = threads
        expected = source.streams.video[0].frames  # from the container's index; 0 when it has none
        stream = display = None
        for frame, start, end in _timed_frames(source):
            decoded += 1
            if stream is None:
                first = output_slot(start, rate)
                width, height = spec.output_size(*shown_size(frame))
                stream = _add_video_stream(out, spec, width, height, frame.colorspace == BT709)
                display = Display(output_look(frame, width, height))
            # this frame fills the output slots from its own to the next frame's (ffmpeg's fps filter)
            last = output_slot(end, rate) - first
            if written >= last:
                continue  # dropped: the next frame takes the slot this one rounds to
            kept = range(-(-written // step) * step, last, step)  # the slots of [written, last) the step keeps
            written = last
            if not kept:
                continue
            picture = display(frame)
            picture.time_base = time_base
            # a decoded frame keeps its source picture type, and libx264 turns a source I frame into a
            # forced keyframe; clearing it leaves keyframe placement to the interval alone
            picture.pict_type = PictureType.NONE
            for k in kept:
                picture.pts = k // step
                out.mux(stream.encode(picture))
        if stream is None:
            raise ValueError("no video frames")
        if decoded < expected:
            raise ValueError(f"truncated: decoded {decoded} of the {expected} frames its index lists")
        out.mux(stream.encode())
    return -(-written // step), width, height


def reencode(src: str | Path, dst: str | Path, spec: ReencodeSpec, threads: int = 0) -> ReencodeResult:
    """Re-encodes src to dst (mp4) as spec says, without audio; raises OSError or ValueError with the reason
    when src cannot be read to its end.

    The output is written to a new `<dst>.<random>.part` and renamed to dst only when complete, so an interrupted
    run never leaves a partial file under dst's name. threads is the decoder's thread count (0: as many as fit
    the machine); use 1 when several videos are encoded in parallel. The encoder runs on one thread, so the file
    is the same on every machine.
    """
    src, dst = Path(src), Path(dst)
    began = time.perf_counter()
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with temp_beside(dst, ".part") as tmp:  # a new file beside its own output: never one that was there
            frames, width, height = _encode(src, tmp, spec, threads)
    except av.FFmpegError as exc:
        raise ValueError(f"re-encoding failed: {exc.strerror or exc}") from None
    tmp.replace(dst)
    return ReencodeResult(str(src), str(dst), "done", frames, width, height, seconds=time.perf_counter() - began)


def _output_rel(path: str) -> PurePosixPath:
    """The output's path relative to dst_root: the input's relative path with extension .mp4."""
    rel = PurePosixPath(Path(path).as_posix())
    if rel.is_absolute() or ".." in rel.parts or not rel.name:
        raise ValueError(f"path {path!r} must be relative to the source root, without '..'")
    return rel.with_suffix(".mp4")


def output_names(paths: Iterable[str]) -> dict[str, PurePosixPath]:
    """Each input path's output, relative to dst_root: the path with extension .mp4, or, where inputs of one
    folder share a stem (``a.mkv`` and ``a.mp4``), the path with ``.mp4`` added (``a.mkv.mp4``) for each of them
    that is not an .mp4, so no output is made from two inputs. A path that is not relative is left out (its job
    fails with the reason)."""
    by_output: dict[PurePosixPath, set[str]] = {}
    for path in paths:
        try:
            by_output.setdefault(_output_rel(path), set()).add(path)
        except ValueError:
            continue
    names = {}
    for rel, sources in by_output.items():
        for path in sources:
            kept_apart = len(sources) > 1 and PurePosixPath(Path(path).as_posix()).suffix != ".mp4"
            names[path] = PurePosixPath(Path(path).as_posix() + ".mp4") if kept_apart else rel
    return names


def failure_of(root: str | Path, path: str) -> str | None:
    """Why the re-encode whose outputs are under ``root`` made no ``path`` (relative to root), from its journal;
    None when it records no failure there (or ``root`` is no re-encode's)."""
    record = _read_journal(Path(root)).get(PurePosixPath(Path(path).as_posix()).as_posix())
    return record.get("error") if record else None


def _read_journal(dst_root: Path) -> dict[str, dict]:
    """{output path: record} from the journal, an output made or the reason it failed ("error"); lines cut
    short by a killed run are set aside beside it (clipflow.jsonl)."""
    records: dict[str, dict] = {}
    for _, record in journal_lines(dst_root / JOURNAL):
        if record is not None and (RECORD_KEYS <= record.keys() or {"dst", "error"} <= record.keys()):
            records[record["dst"]] = record
    return records


def frame_step_of(root: str | Path) -> int | None:
    """The frame step of the videos re-encoded under ``root`` (its journal's records); None when it holds no
    journal or no video made. One folder holds one step (a changed spec re-encodes every video); raises
    ClipflowError when its records disagree."""
    if not (Path(root) / JOURNAL).is_file():
        return None
    steps = {record["spec"].get("frame_step", 1) for record in _read_journal(Path(root)).values() if "spec" in record}
    if len(steps) > 1:
        raise ClipflowError(
            f"{Path(root) / JOURNAL} records videos re-encoded with frame steps {sorted(steps)}: a clip cannot be "
            "sampled the same way on all of them; re-encode every video of the folder with one setting, or give "
            "each setting a folder of its own (data.dir)"
        )
    return steps.pop() if steps else None


def _write_journal(dst_root: Path, records: dict[str, dict]) -> None:
    """Rewrites the journal with one line per output, dropping the lines later ones replaced."""
    write_text_atomic(dst_root / JOURNAL, "".join(json.dumps(r) + "\n" for r in records.values()))


def _is_up_to_date(src: Path, dst: Path, record: dict | None, spec: ReencodeSpec) -> bool:
    """dst exists, is not older than src and was made with this spec by this VERSION of the re-encode."""
    if record is None or record.get("version") != VERSION or record.get("spec") != spec.recorded():
        return False
    if not dst.exists() or not src.exists():
        return False
    return dst.stat().st_mtime_ns >= src.stat().st_mtime_ns


def _reencode_one(args: tuple[str, str, ReencodeSpec, int]) -> ReencodeResult:
    """reencode() for one tree entry in a worker process, turning a failure into a result."""
    src, dst, spec, threads = args
    try:
        return reencode(src, dst, spec, threads)
    except (OSError, ValueError) as exc:
        return ReencodeResult(src, dst, "failed", error=str(exc).splitlines()[0][:300])


def reencode_tree(
    entries: Iterable[object],
    src_root: str | Path,
    dst_root: str | Path,
    spec: ReencodeSpec,
    workers: int = 1,
    names: dict[str, PurePosixPath] | None = None,
) -> list[ReencodeResult]:
    """Re-encodes every entry under src_root to the same relative path under dst_root, extension .mp4 (or
    ``names``, from :func:`output_names` of all the inputs the folder takes: same stems kept apart).

    entries are relative paths (str or Path) or objects with a `.path`, like VideoEntry. Results
    come in entry order. An output that exists, is not older than its input and was made with
    the same spec (recorded in dst_root/reencode.jsonl) is skipped, so a rerun only does what is
    missing or stale. A failing input is reported in its result and never stops the others; an
    earlier output of an input that is there but fails now is removed, so a stale output never stays, and
    the journal keeps why it failed (:func:`failure_of`, which the scan reports).
    """
    src_root, dst_root = Path(src_root), Path(dst_root)
    entries = list(entries)
    names = names if names is not None else output_names(str(getattr(e, "path", e)) for e in entries)
    check_out_root([entries], dst_root, names)
    dst_root.mkdir(parents=True, exist_ok=True)
    journal = _read_journal(dst_root)
    results: list[ReencodeResult | None] = []
    jobs: dict[int, tuple[str, str, ReencodeSpec, int]] = {}
    taken: dict[str, str] = {}
    threads = 1 if workers > 1 else 0
    for entry in entries:
        path = str(getattr(entry, "path", entry))
        src = src_root / path
        try:
            rel = names[path] if path in names else _output_rel(path)
        except ValueError as exc:
            results.append(ReencodeResult(str(src), "", "failed", error=str(exc)))
            continue
        dst = dst_root / rel
        if str(rel) in taken:
            error = f"output {rel} is already made from {taken[str(rel)]}"
            results.append(ReencodeResult(str(src), str(dst), "failed", error=error))
            continue
        taken[str(rel)] = path
        record = journal.get(str(rel))
        if _is_up_to_date(src, dst, record, spec):
            results.append(ReencodeResult(str(src), str(dst), "skipped", record["frames"], *record["size"]))
            continue
        jobs[len(results)] = (str(src), str(dst), spec, threads)
        results.append(None)
    _run_jobs(jobs, spec, results, journal, dst_root, workers)
    return results


def check_out_root(entry_lists: Iterable[Iterable[object]], dst_root: Path, names: dict[str, PurePosixPath]) -> None:
    """Before anything is encoded: a ``dst_root`` that is not a re-encode's own folder (no :data:`JOURNAL` in it)
    must hold no file at a path an output would take, since an output replaces what is there. The journal is
    opened before the first output is renamed into place, so every folder this stage wrote to holds one."""
    if (dst_root / JOURNAL).is_file():
        return
    taken = []
    for entries in entry_lists:
        for entry in entries:
            path = str(getattr(entry, "path", entry))
            if path not in names:
                continue  # failed in its result, never written
            dst = dst_root / names[path]
            if dst.exists() or dst.is_symlink():
                taken.append(dst)
    if taken:
        raise ClipflowError(
            f"--out-root {dst_root} holds {len(taken)} file(s) where outputs would go (e.g. {taken[0]}) and no "
            f"{JOURNAL}, so no re-encode made them and they would be replaced: name a new or empty --out-root, "
            "or move them away; nothing was changed"
        )


def _drop_stale_output(src: Path, dst: Path, rel: str, journal: dict[str, dict]) -> None:
    """After a failed job: an output made earlier from a source that is still there but no longer re-encodes
    (changed, broken) is removed with its journal record, so that no later stage reads it as the source's.
    The output of a source that is not there is kept (a source folder that is not mounted must not wipe
    the tree); its result says "file not found". ``dst`` is under the re-encode's own folder (it holds the
    journal: :func:`check_out_root`), at the output path of ``src``."""
    if src.exists() and dst.exists():
        dst.unlink()
        journal.pop(rel, None)


def _run_jobs(
    jobs: dict[int, tuple[str, str, ReencodeSpec, int]],
    spec: ReencodeSpec,
    results: list[ReencodeResult | None],
    journal: dict[str, dict],
    dst_root: Path,
    workers: int,
) -> None:
    """Runs the jobs in parallel processes, filling results[index] and appending each success to the journal
    as it finishes, so a killed run keeps what it completed."""
    disable = read_env().no_progress
    with (
        ProcessPoolExecutor(max_workers=max(1, workers)) as pool,
        open(dst_root / JOURNAL, "a", encoding="utf-8") as log,
    ):
        futures = {pool.submit(_reencode_one, job): index for index, job in jobs.items()}
        for future in tqdm(as_completed(futures), total=len(futures), desc="reencode", disable=disable):
            result = future.result()
            results[futures[future]] = result
            rel = Path(result.dst).relative_to(dst_root).as_posix()
            if result.status != "done":
                _drop_stale_output(Path(result.src), Path(result.dst), rel, journal)
                if not Path(result.dst).exists():  # why there is no output, for the scan (failure_of)
                    journal[rel] = {"version": VERSION, "dst": rel, "error": result.error}
                    append_record(log, journal[rel])
            else:
                record = {
                    "version": VERSION,
                    "dst": rel,
                    "spec": spec.recorded(),
                    "frames": result.frames,
                    "size": [result.width, result.height],
                }
                journal[rel] = record
                append_record(log, record)
    _write_journal(dst_root, journal)


SHOWN_FAILURES = 10  # failed videos logged one by one; the rest are counted


def _check_out_lists(lists: list[str | Path], out_lists: list[str | Path]) -> None:
    """Every ``--out-list`` a file that can be written, and none of them one of the lists being read."""
    inputs = {Path(path).resolve(): path for path in lists}
    for out_list in out_lists:
        check_output_file(out_list, "--out-list", "train_labels.txt")
        if Path(out_list).resolve() in inputs:
            raise ClipflowError(
                f"--out-list {out_list} is the --list {inputs[Path(out_list).resolve()]} being re-encoded: the list "
                "of outputs would replace it; name another file (e.g. beside the outputs); nothing was changed"
            )


def reencode_lists(lists: list[str | Path], root: str | Path, out_root: str | Path, spec: ReencodeSpec,
                   out_lists: list[str | Path] | None = None, workers: int = 2, log=print) -> None:  # fmt: skip
    """Re-encodes every video of ``lists`` (paths relative to ``root``) to the same relative paths under
    ``out_root``, as .mp4; done ones (in its journal) are skipped. With ``out_lists`` (one per list), writes a
    ``path label`` list of each list's outputs. Every list is read before any video is encoded; raises
    ClipflowError when no video of a list could be re-encoded."""
    from collections import Counter

    from clipflow.data.listfile import VideoEntry, read_list, write_labels

    out_lists = list(out_lists or [])
    if out_lists and len(out_lists) != len(lists):
        raise ClipflowError(f"give one --out-list per --list: {len(lists)} lists, {len(out_lists)} out lists")
    root, out_root = Path(root), Path(out_root)
    if not root.is_dir():
        raise ClipflowError(f"video root {root} is not a folder")
    if out_root.resolve() == root.resolve():
        raise ClipflowError(f"--out-root {out_root} is the video root: the outputs would replace their inputs")
    check_output_dir(out_root, "--out-root")
    _check_out_lists(lists, out_lists)
    read = [(path, read_list(path)) for path in lists]
    names = output_names(e.path for _, entries in read for e in entries)
    check_out_root([entries for _, entries in read], out_root, names)
    shape = f"{spec.width}x{spec.height}" if spec.width else f"short side {spec.short_side}"
    kept = (
        f" keeping every {spec.frame_step}th frame ({float(spec.output_rate):.4g} fps)" if spec.frame_step > 1 else ""
    )
    log(f"re-encoding to {shape}, {spec.fps} fps{kept}, a keyframe every {spec.keyframe_interval} frames, no audio")
    nothing_from = []
    for i, (path, entries) in enumerate(read):
        results = reencode_tree(entries, root, out_root, spec, workers=workers, names=names)
        count = Counter(r.status for r in results)
        log(f"{path}: {count['done']} re-encoded, {count['skipped']} skipped (up to date in "
            f"{out_root / JOURNAL}), {count['failed']} failed, of {len(entries)}")  # fmt: skip
        failed = [(e, r) for e, r in zip(entries, results, strict=True) if r.status == "failed"]
        for entry, result in failed[:SHOWN_FAILURES]:
            log(f"failed: {entry.path} ({path} line {entry.line}): {result.error}")
        if len(failed) > SHOWN_FAILURES:
            log(f"failed: ... and {len(failed) - SHOWN_FAILURES} more")
        if out_lists:
            # failed entries stay (but for paths outside the root), so that the scan lists them as failures too
            outputs = [VideoEntry(Path(r.dst).relative_to(out_root).as_posix(), e.label, None, e.line)
                       for e, r in zip(entries, results, strict=True) if r.dst]  # fmt: skip
            write_labels(out_lists[i], outputs)
            log(f"{path}: list of the outputs in {out_lists[i]}")
        if count["failed"] == len(entries):
            nothing_from.append(str(path))
    if nothing_from:
        raise ClipflowError(f"no video of {', '.join(nothing_from)} could be re-encoded; see the failures above")
