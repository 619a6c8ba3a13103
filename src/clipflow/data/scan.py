"""Decode every video once with the loader's decoder: count its frames and find the broken ones.

The scan opens each video with the reader training will use (``data.decoder``: PyAV or
decord), so what it keeps can be read at any frame a clip asks for. It keeps the videos
that decode from first to last frame and lists every other one with its reason in the
manifest, so one bad file never stops a data set. The size it records is the displayed
one (a phone's portrait video turned upright, as ffmpeg and both readers show it).
With a journal, each probed video's result is appended to a JSON-lines file as soon
as it is known, so a scan that is killed resumes without decoding those videos again.
Each kept video's size, modification time and sha256 go to ``videos.json`` beside the
lists, so that a copy of the data elsewhere can be checked against what was scanned.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from tqdm import tqdm

from clipflow.checksums import sha256_of
from clipflow.data.display import shown_size
from clipflow.data.listfile import VideoEntry, list_text
from clipflow.data.reader import FrameTable, VideoFileError, open_video, open_with_decord
from clipflow.environment import read_env
from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir
from clipflow.jsonl import append_record, journal_lines
from clipflow.made import Made
from clipflow.textfile import json_kind, read_json_object

DECODE_CHUNK = 32
NOT_IN_FAILURES = ("from_journal", "size", "mtime_ns", "sha256")  # a failure in the manifest: where and why
MEASURED = ("num_frames", "fps", "duration", "width", "height", "error", "sha256")  # what a journal line keeps
VIDEOS = "videos.json"  # the kept videos' size, mtime_ns and sha256, beside the lists
VIDEOS_VERSION = 1
RESCAN = "snakemake --forcerun data_scan"  # how a workflow user scans again
RERUN = f"rerun the data stage ({RESCAN})"
SHA256 = re.compile(r"^[0-9a-f]{64}$")

Stamp = tuple[int, int] | None  # (size, mtime_ns) of a video file; None when it cannot be stat'ed


@dataclass
class ScanResult:
    path: str
    label: int
    line: int
    num_frames: int = 0
    fps: float = 0.0
    duration: float = 0.0  # seconds: num_frames / fps
    width: int = 0
    height: int = 0
    error: str | None = None
    size: int = 0  # bytes, and mtime_ns, of the file as stat'ed before decoding (0 when it could not be)
    mtime_ns: int = 0
    sha256: str | None = None  # of the file's bytes; None when it failed
    from_journal: bool = field(default=False, compare=False)  # taken from the journal instead of decoded


def probe(path: Path, decoder: str = "pyav") -> tuple[int, float, int, int]:
    """(frames, fps, width, height as displayed) after decoding every frame with ``decoder``; raises ValueError
    with the reason in the user's words when it cannot (:func:`clipflow.data.reader.open_video`: a decoder's own
    error text never becomes the reason). decord counts with decord; every other decoder numbers frames as
    PyAV's reader does (torchcodec reads PyAV's numbering), so they count with PyAV."""
    return _probe_with_decord(path) if decoder == "decord" else _probe_with_pyav(path)


def _probe_with_pyav(path: Path) -> tuple[int, float, int, int]:
    """probe() with the PyAV reader's numbering (:class:`clipflow.data.reader.FrameTable`): every frame it lists
    must come out of the decoder, as the reader asks for them by their timestamps."""
    import av

    packets: list[tuple[int, bool]] = []  # one pass: each packet's pts and keyframe flag, and its frames decoded
    decoded: set[int] = set()
    size = None
    with open_video(path) as container:
        stream = container.streams.video[0]
        stream.thread_count = 1
        listed = stream.frames
        try:
            for packet in container.demux(stream):
                if packet.pts is not None:
                    packets.append((packet.pts, packet.is_keyframe))
                for frame in packet.decode():
                    if size is None:
                        size = shown_size(frame)
                    decoded.add(frame.pts)
        except av.FFmpegError:
            failed_at = len(decoded)
        else:
            failed_at = None
        rate = stream.average_rate or stream.guessed_rate
    if failed_at is not None:  # the frames listed in all, as before the failure: a second read, on this path only
        with open_video(path) as container:
            total = len(FrameTable.demux(container, container.streams.video[0]).pts)
        raise VideoFileError(_decoding_failed(failed_at, total, listed) if total else "no video frames")
    table = FrameTable.of_packets(packets)
    total = len(table.pts)
    if total == 0:
        raise VideoFileError("no video frames")
    missing = [i for i, pts in enumerate(table.pts) if pts not in decoded]
    if missing or size is None:
        raise VideoFileError(_decoding_failed(missing[0] if missing else 0, total, listed))
    return total, float(rate or 0.0), *size


def _probe_with_decord(path: Path) -> tuple[int, float, int, int]:
    """probe() with decord, which shows frames turned upright, as ffmpeg does."""
    reader, listed = open_with_decord(path, num_threads=1)
    total = len(reader)
    if total == 0:
        raise VideoFileError("no video frames")
    height, width = reader[0].shape[:2]
    for start in range(0, total, DECODE_CHUNK):
        try:
            reader.get_batch(list(range(start, min(start + DECODE_CHUNK, total))))
        except Exception:
            raise VideoFileError(_decoding_failed(start, total, listed)) from None
    return total, float(reader.get_avg_fps()), int(width), int(height)


def _decoding_failed(start: int, total: int, listed: int) -> str:
    """Why decoding stopped, in the user's words: cut short when the container's index lists more frames
    than the file holds."""
    if listed > total:
        return f"cut short: decoding failed at frame {start}; the file holds {total} of the {listed} frames listed"
    return f"damaged: decoding failed at frame {start} of {total}"


def _probe_entry(entry: VideoEntry, root: str, decoder: str) -> ScanResult:
    """Decodes and hashes one video (in a worker process); a broken video becomes a result with its reason."""
    result = ScanResult(entry.path, entry.label, entry.line)
    try:
        path = entry.resolve(root)
        result.num_frames, result.fps, result.width, result.height = probe(path, decoder)
        result.sha256 = sha256_of(path)
    except (OSError, ValueError) as exc:
        result.error = _left_out_by_the_reencode(root, entry) or str(exc)
    result.duration = result.num_frames / result.fps if result.fps > 0 else 0.0
    return result


def _left_out_by_the_reencode(root: str, entry: VideoEntry) -> str | None:
    """The reason a re-encode under ``root`` gave for not making ``entry``'s video, when it is not there."""
    from clipflow.data.reencode import failure_of

    if entry.resolve(root).exists():
        return None
    reason = failure_of(root, entry.path)
    return f"re-encoding failed: {reason}" if reason else None


def _file_stamp(path: Path) -> Stamp:
    """(size, mtime_ns) of a file, or None when missing: a journal result is reused only while this is unchanged."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _journal_key(path: str, label: int, stamp: Stamp, decoder: str) -> tuple:
    return path, label, stamp, decoder


def _read_journal(journal: Path) -> dict[tuple, dict]:
    """Journal lines by (path, label, stamp), the latest line winning.

    A last line without its newline was torn by a killed scan: it is set aside beside the
    journal and named (clipflow.jsonl), so that the next append starts on a line of its own. Any other unreadable
    line is an error, since the journal was then damaged some other way. A line of an
    earlier clipflow, which kept no sha256 or no decoder, counts as not probed: that video
    is decoded and hashed again.
    """
    known: dict[tuple, dict] = {}
    for number, record in journal_lines(journal):
        try:
            stamp = None if record["size"] is None else (record["size"], record["mtime_ns"])
            key = _journal_key(record["path"], record["label"], stamp, record.get("decoder"))
            if "sha256" not in record or "decoder" not in record:
                known.pop(key, None)
                continue
            known[key] = {k: record[k] for k in MEASURED}
        except (KeyError, TypeError):
            raise ClipflowError(
                f"{journal} line {number}: not a scan journal record; delete the journal to scan from the start"
            ) from None
    return known


def _append_journal(log: IO[str], result: ScanResult, stamp: Stamp, decoder: str) -> None:
    """Appends one probed result with the file's stamp and the decoder that probed it."""
    size, mtime_ns = stamp if stamp is not None else (None, None)
    record = {"path": result.path, "label": result.label, "size": size, "mtime_ns": mtime_ns, "decoder": decoder}
    append_record(log, {**record, **{k: getattr(result, k) for k in MEASURED}})


def _open_journal(journal: Path | None) -> contextlib.AbstractContextManager[IO[str] | None]:
    """The journal opened for appending (its folder made), or a stand-in yielding None when there is none."""
    if journal is None:
        return contextlib.nullcontext()
    journal.parent.mkdir(parents=True, exist_ok=True)
    return journal.open("a", encoding="utf-8")


def scan(
    entries: list[VideoEntry],
    root: str | Path,
    workers: int = 1,
    desc: str = "scan",
    journal: str | Path | None = None,
    decoder: str = "pyav",
) -> list[ScanResult]:
    """Scans entries in parallel processes, decoding with ``decoder`` (the loader's); results come in list order.

    Duplicated paths are failures without decoding. Labels are the list reader's to check
    (read_list with num_classes): a label that is no class index is an error in the list,
    not a video that failed. With a journal, every probed result is appended to it as soon as it is known, and results
    it already holds for an unchanged file (same path, label, size, mtime and decoder) are
    reused (marked from_journal) instead of decoding the video again.
    """
    journal = Path(journal) if journal is not None else None
    known = _read_journal(journal) if journal is not None else {}
    results: list[ScanResult | None] = [None] * len(entries)
    todo: list[tuple[int, VideoEntry, Stamp]] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if e.path in seen:
            results[i] = ScanResult(e.path, e.label, e.line, error="duplicate entry")
            continue
        seen.add(e.path)
        stamp = _file_stamp(e.resolve(root))
        measured = known.get(_journal_key(e.path, e.label, stamp, decoder))
        if measured is not None:
            results[i] = _stamped(ScanResult(e.path, e.label, e.line, **measured, from_journal=True), stamp)
        else:
            todo.append((i, e, stamp))
    disable = read_env().no_progress
    with _open_journal(journal) as log, ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        pending = {pool.submit(_probe_entry, e, str(root), decoder): (i, stamp) for i, e, stamp in todo}
        for future in tqdm(
            as_completed(pending), total=len(entries), initial=len(entries) - len(todo), desc=desc, disable=disable
        ):
            i, stamp = pending[future]
            results[i] = _stamped(future.result(), stamp)
            if log is not None:
                _append_journal(log, results[i], stamp, decoder)
    return results


def _stamped(result: ScanResult, stamp: Stamp) -> ScanResult:
    """``result`` with the size and mtime_ns of ``stamp`` (taken before the video was decoded)."""
    if stamp is not None:
        result.size, result.mtime_ns = stamp
    return result


@dataclass(frozen=True)
class ShortVideos:
    """What the scan does with a video shorter than a clip's window: ``span`` frames (the recipe's new_length x
    new_step; 0: not known, nothing is short), kept (its clips repeat frames, as GluonCV's loader does) or, with
    ``leave_out``, left out with the reason (``data.short_videos``)."""

    span: int = 0
    leave_out: bool = False

    def apply(self, results: list[ScanResult]) -> int:
        """Marks the short ones left out (with ``leave_out``); returns how many are short."""
        short = [r for r in results if r.error is None and r.num_frames < self.span]
        if self.leave_out:
            for r in short:
                r.error = f"shorter than a clip: {r.num_frames} frames, a clip's window spans {self.span} " \
                          "(data.short_videos: leave_out)"  # fmt: skip
        return len(short)


def write_index(
    splits: dict[str, list[ScanResult]],
    out_dir: str | Path,
    classes: list[str] | None,
    root: str | Path,
    short_videos: ShortVideos = ShortVideos(),
    num_classes: int | None = None,
    dataset: str = "",
) -> dict:
    """Writes `{split}.lst` of the good videos, `manifest.json` (the data set in words, its number of classes and
    their names, counts, short videos, failures) and
    `videos.json`
    (size, mtime_ns and sha256 of every good video of every split, by its path in the lists, and the data root
    they are under), recorded as clipflow's (:mod:`clipflow.made`)."""
    made = Made(out_dir, "--out-dir")
    manifest: dict = {"dataset": dataset, "num_classes": num_classes if num_classes is not None else len(classes or []),
                      "splits": {}, "failures": [], "classes": classes, "clip_span": short_videos.span,
                      "short_videos": "leave_out" if short_videos.leave_out else "keep"}  # fmt: skip
    files: dict[str, dict] = {}
    for split, results in splits.items():
        short = short_videos.apply(results)
        good = [r for r in results if r.error is None]
        files.update({r.path: {"size": r.size, "mtime_ns": r.mtime_ns, "sha256": r.sha256} for r in good})
        made.write_text(f"{split}.lst", list_text([VideoEntry(r.path, r.label, r.num_frames, r.line) for r in good]))
        frames = [r.num_frames for r in good]
        manifest["splits"][split] = {
            "videos": len(good),
            "failed": len(results) - len(good),
            "per_class": dict(sorted(Counter(r.label for r in good).items())),
            "frames_min": min(frames, default=0),
            "frames_max": max(frames, default=0),
            "frames_total": sum(frames),
            "sizes": sorted({f"{r.width}x{r.height}" for r in good}),
            "shorter_than_clip": short,  # kept or left out, as short_videos says
        }
        manifest["failures"] += [
            {"split": split, **{k: v for k, v in asdict(r).items() if k not in NOT_IN_FAILURES}}
            for r in results
            if r.error is not None
        ]
    made.write_text("manifest.json", json.dumps(manifest, indent=2))
    videos = {"version": VIDEOS_VERSION, "root": os.path.abspath(root), "files": files}
    made.write_text(VIDEOS, json.dumps(videos, indent=1) + "\n")
    return manifest


@dataclass(frozen=True)
class VideoRecord:
    """A kept video as the scan found it: its size in bytes, its mtime_ns and the sha256 of its bytes."""

    size: int
    mtime_ns: int
    sha256: str


def read_video_records(index_dir: str | Path) -> dict[str, VideoRecord]:
    """The records of ``<index_dir>/videos.json`` by path as written in the lists; a missing or broken file is
    a ClipflowError naming it and saying to rerun the data stage."""
    path = Path(index_dir) / VIDEOS
    expected = '{"version": 1, "root": ..., "files": {path: {"size", "mtime_ns", "sha256"}}} as data scan writes'
    try:
        data = read_json_object(path, "video records", expected)
    except ClipflowError as exc:
        raise ClipflowError(f"{exc}; {RERUN}") from None

    def broken(what: str) -> ClipflowError:
        return ClipflowError(f"video records {path}: {what}; {RERUN}")

    if data.get("version") != VIDEOS_VERSION:
        raise broken(f"version {data.get('version')!r} is not {VIDEOS_VERSION}")
    if not isinstance(data.get("root"), str):
        raise broken(f'"root" is {json_kind(data.get("root"))}, not the data root\'s path')
    files = data.get("files")
    if not isinstance(files, dict):
        raise broken(f'"files" is {json_kind(files)}, not an object')
    records = {}
    for name, rec in files.items():
        try:
            size, mtime_ns, digest = rec["size"], rec["mtime_ns"], rec["sha256"]
        except (KeyError, TypeError):
            raise broken(f"{name!r} is not a record of size, mtime_ns and sha256") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (size, mtime_ns)):
            raise broken(f"{name!r} has a size or mtime_ns that is not a whole number")
        if not isinstance(digest, str) or not SHA256.match(digest):
            raise broken(f"{name!r} has a sha256 that is not 64 hex digits")
        records[name] = VideoRecord(size, mtime_ns, digest)
    return records


def check_out_dir(out_dir: str | Path, lists: dict[str, str | Path]) -> None:
    """``out_dir`` checked before any video is decoded: a folder there or makeable, none of its index files
    (``<split>.lst``, replaced by name) one of the lists being scanned, which the index would overwrite, and none
    of the files it writes someone else's (:meth:`clipflow.made.Made.check`)."""
    out = check_output_dir(out_dir, "--out-dir")
    for split, path in lists.items():
        for written in (out / f"{s}.lst" for s in lists):
            if written.resolve() == Path(path).resolve():
                raise ClipflowError(
                    f"--out-dir {out_dir}: the index {written} would replace the {split} list being scanned "
                    f"({path}); name another --out-dir (e.g. {out / 'index'}); nothing was changed"
                )
    Made(out, "--out-dir").check(
        [*(f"{s}.lst" for s in lists), "manifest.json", VIDEOS], [journal_name(s) for s in lists]
    )


def journal_name(split: str) -> str:
    """The scan journal of ``split`` in the output folder, from which an interrupted scan resumes."""
    return f"{split}.scan.jsonl"


def check_class_count(classes: list[str] | None, num_classes: int | None, classes_file: str | Path | None) -> None:
    """A class index of another number of classes than the recipe's ``num_classes`` is refused, naming both and the
    way out."""
    if classes is not None and num_classes is not None and len(classes) != num_classes:
        raise ClipflowError(
            f"the data has {len(classes)} classes (the class index {classes_file}) but the recipe's model has "
            f"num_classes {num_classes}: leave num_classes out of the recipe to take the data's, or set it to "
            f"{len(classes)} (overrides: {{model: {{num_classes: {len(classes)}}}}}); nothing was scanned"
        )


def data_classes(classes: list[str] | None, lists: dict[str, list[VideoEntry]], num_classes: int | None) -> int:
    """The number of classes of the data: its class index's names, else the recipe's ``num_classes`` when it fixes
    it (the labels were checked against it), else the largest label + 1."""
    if classes is not None:
        return len(classes)
    if num_classes is not None:
        return num_classes
    return 1 + max(e.label for entries in lists.values() for e in entries)


def check_every_class_trains(manifest: dict, lists: dict[str, list[VideoEntry]], names: list[str] | None,
                             out_dir: str | Path, log=print) -> None:  # fmt: skip
    """A class whose training videos were listed but none of them could be read is named, with the first reasons:
    the model would have a class it never sees. With a class index (``names``: a class folder, a published data set)
    that is refused; a list of label numbers only is warned about, since its classes may be numbered otherwise."""
    kept = {int(label) for label in manifest["splits"]["train"]["per_class"]}
    listed = Counter(e.label for e in lists["train"])
    lost = sorted(label for label in listed if label not in kept)
    if not lost:
        return
    label = lost[0]
    name = f"class {names[label]!r} (label {label})" if names else f"label {label}"
    reasons = [
        f"{f['path']}: {f['error']}" for f in manifest["failures"] if f["split"] == "train" and f["label"] == label
    ]
    more = f"; {len(lost) - 1} more class(es) without a readable video too" if len(lost) > 1 else ""
    message = (
        f"{name} has no readable training video: all {listed[label]} of its videos were left out ("
        + "; ".join(reasons[:3])
        + (", ..." if len(reasons) > 3 else "")
        + f"){more}; replace them with videos that "
        f"play, or remove the class; every failure is in {Path(out_dir) / 'manifest.json'}"
    )
    if names is None:
        log(f"warning: {message}")
        return
    raise ClipflowError(message)


def scan_lists(
    train_list: str | Path,
    val_list: str | Path,
    root: str | Path,
    num_classes: int | None,
    classes_file: str | Path | None,
    out_dir: str | Path,
    workers: int = 2,
    log=print,
    decoder: str = "pyav",
    short_videos: ShortVideos = ShortVideos(),
    dataset: str = "",
) -> dict:
    """Both lists scanned (each resumable from its journal in ``out_dir``), the index, the manifest and the
    kept videos' records (``videos.json``) written there; logs the counts, the videos shorter than a clip
    (:class:`ShortVideos`) and each video left out. ``num_classes``: the recipe's, None when it takes the data's
    (:func:`data_classes`, recorded in the manifest with ``dataset``, the data set in words). With a class index
    (``classes_file``), the lists' labels may be class names. Raises ClipflowError when a split keeps no video, when
    a class keeps no training video (:func:`check_every_class_trains`), when the class index names another number
    of classes than the model has, or when a list's label is no class index (one of num_classes or more, or a list
    numbered from 1: :func:`clipflow.data.listfile.check_labels`)."""
    from clipflow.data.kinetics import read_classes
    from clipflow.data.listfile import read_list

    check_out_dir(out_dir, {"train": train_list, "val": val_list})
    classes = read_classes(classes_file) if classes_file else None  # one name a line: Kinetics names hold spaces
    check_class_count(classes, num_classes, classes_file)
    # both lists read before any video is decoded: a label that is no class index stops here, named in its list
    known = len(classes) if classes is not None else num_classes
    lists = {split: read_list(path, known, classes) for split, path in (("train", train_list), ("val", val_list))}
    count = data_classes(classes, lists, num_classes)
    results = {}
    for split, entries in lists.items():
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        journal = Made(out_dir, "--out-dir").journal(journal_name(split))  # an interrupted scan resumes from it
        results[split] = scan(entries, root, workers=workers, desc=f"scan {split}", journal=journal, decoder=decoder)
    manifest = write_index(results, out_dir, classes, root, short_videos, count, dataset)
    for split, info in manifest["splits"].items():
        log(f"{split}: {info['videos']} videos kept, {info['failed']} failed")
        if info["shorter_than_clip"] and not short_videos.leave_out:
            log(f"{split}: {info['shorter_than_clip']} kept videos are shorter than a clip's window of "
                f"{short_videos.span} frames: their clips repeat frames (data.short_videos: leave_out leaves them "
                "out)")  # fmt: skip
        if info["videos"] == 0:
            raise ClipflowError(f"no {split} video could be decoded; see the failures in {out_dir}/manifest.json")
    for f in manifest["failures"]:
        log(f"left out ({f['split']}): {f['path']} (line {f['line']}): {f['error']}")
    check_every_class_trains(manifest, lists, classes, out_dir, log)
    log(f"{count} classes" + (f" ({dataset})" if dataset else ""))
    return manifest
