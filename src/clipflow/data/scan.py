"""Decode every video once with decord: count its frames and find the broken ones.

The scan keeps the videos that decode from first to last frame and lists every
other one with its reason in the manifest, so one bad file never stops a data set.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from clipflow.data.listfile import VideoEntry, write_list

DECODE_CHUNK = 32


@dataclass
class ScanResult:
    path: str
    label: int
    line: int
    num_frames: int = 0
    fps: float = 0.0
    width: int = 0
    height: int = 0
    error: str | None = None


def probe(path: Path) -> tuple[int, float, int, int]:
    """(frames, fps, width, height) after decoding every frame; raises with the reason when it cannot."""
    import decord  # imported here: decord's import is slow and only scans need it

    if not path.exists():
        raise FileNotFoundError("file not found")
    if path.stat().st_size == 0:
        raise ValueError("empty file (0 bytes)")
    try:
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
    except Exception as exc:  # decord raises its own DECORDError and RuntimeError
        raise ValueError(f"cannot open as a video: {str(exc).splitlines()[0][:200]}") from None
    total = len(reader)
    if total == 0:
        raise ValueError("no video frames")
    height, width = reader[0].shape[:2]
    for start in range(0, total, DECODE_CHUNK):
        try:
            reader.get_batch(list(range(start, min(start + DECODE_CHUNK, total))))
        except Exception as exc:
            raise ValueError(f"decoding failed at frame {start} of {total}: {str(exc).splitlines()[0][:200]}") from None
    return total, float(reader.get_avg_fps()), int(width), int(height)


def _scan_one(args: tuple[VideoEntry, str, int | None]) -> ScanResult:
    entry, root, num_classes = args
    result = ScanResult(entry.path, entry.label, entry.line)
    if num_classes is not None and not 0 <= entry.label < num_classes:
        result.error = f"label {entry.label} out of range [0, {num_classes})"
        return result
    try:
        result.num_frames, result.fps, result.width, result.height = probe(entry.resolve(root))
    except (OSError, ValueError) as exc:
        result.error = str(exc)
    return result


def scan(
    entries: list[VideoEntry], root: str | Path, num_classes: int | None = None, workers: int = 1, desc: str = "scan"
) -> list[ScanResult]:
    """Scans entries in parallel processes, in list order; duplicated paths and labels out of range are failures."""
    seen: set[str] = set()
    results: list[ScanResult] = []
    todo: list[VideoEntry] = []
    for e in entries:
        if e.path in seen:
            results.append(ScanResult(e.path, e.label, e.line, error="duplicate entry"))
        else:
            seen.add(e.path)
            todo.append(e)
    disable = os.environ.get("CLIPFLOW_NO_PROGRESS") == "1"
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        scanned = list(
            tqdm(
                pool.map(_scan_one, [(e, str(root), num_classes) for e in todo], chunksize=4),
                total=len(todo),
                desc=desc,
                disable=disable,
            )
        )
    return scanned + results


def write_index(splits: dict[str, list[ScanResult]], out_dir: str | Path, classes: list[str] | None) -> dict:
    """Writes `{split}.lst` of the good videos and `manifest.json` (counts, classes, failures)."""
    out = Path(out_dir)
    manifest: dict = {"splits": {}, "failures": [], "classes": classes}
    for split, results in splits.items():
        good = [r for r in results if r.error is None]
        write_list(out / f"{split}.lst", [VideoEntry(r.path, r.label, r.num_frames, r.line) for r in good])
        frames = [r.num_frames for r in good]
        manifest["splits"][split] = {
            "videos": len(good),
            "failed": len(results) - len(good),
            "per_class": dict(sorted(Counter(r.label for r in good).items())),
            "frames_min": min(frames, default=0),
            "frames_max": max(frames, default=0),
            "frames_total": sum(frames),
            "sizes": sorted({f"{r.width}x{r.height}" for r in good}),
        }
        manifest["failures"] += [{"split": split, **asdict(r)} for r in results if r.error is not None]
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    tmp.replace(out / "manifest.json")
    return manifest
