"""The reproduction audit: a run's recipe beside the published setup its reference names, row by row.

A recipe's ``reference.setup`` (workflow/schemas/recipe.schema.yaml) holds what the source it names
published: global batch, learning rate, schedule, warm-up, scale jitter and crop, precise BatchNorm,
test views and the data set's video counts, with a ``source`` saying where they come from. The audit
sets this run's value beside each of them:

- global batch: cluster.num_workers x train.batch_size x train.accumulate;
- learning rate: train.base_lr scaled by the linear rule to that global batch (what the trainer uses);
- schedule (train.lr_mode, train.epochs), warm-up (train.warmup_epochs, train.warmup_lr);
- scale jitter: the short side the network sees, from the multi-scale crop: a crop of
  ``ratio x min(new_width, new_height)`` pixels resized to ``input_size`` scales the frame's short side to
  ``input_size / ratio``, so data.scale_ratios give the range ``input_size / max .. input_size / min``;
  compared with a published ``scale.short_side`` pair; a published scale in words is shown to check by hand;
- crop (data.input_size), precise BN (train.precise_bn_batches, 0 when the recipe has none);
- test views (data.test_clips x data.test_crops);
- train and val videos: the lines of the run's index lists (train.lst, val.lst).

Each row's verdict is ``SAME`` or ``DIFFERS`` (numbers compared to a relative 1e-6), ``NOT_PUBLISHED`` where the
setup lacks the value, ``BY_HAND`` where it is published in words only. Beside the rows: the training's last
single-clip validation top-1 and the evaluation's multi-view test top-1 (metrics.json), and the data set's
fingerprint: each list file's video count and sha256. The report page renders these; nothing here writes HTML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from clipflow.checksums import sha256_of
from clipflow.data.listfile import read_list
from clipflow.errors import ClipflowError
from clipflow.train.schedule import scaled_lr

SAME = "\u2713 same"
DIFFERS = "\u2717 differs"
NOT_PUBLISHED = "not published"
BY_HAND = "check by hand (published in words)"


@dataclass(frozen=True)
class AuditRow:
    """One setting: this run's value and the published one, as shown, and the verdict."""

    setting: str
    this_run: str
    published: str | None
    verdict: str


@dataclass(frozen=True)
class ListPrint:
    """One list file of the run's data set: its split, path, video count and sha256."""

    split: str
    path: Path
    videos: int
    sha256: str


@dataclass(frozen=True)
class RunFacts:
    """What the audit needs of the run beyond its recipe: its workers and the training's last validation."""

    workers: int
    val_top1: float | None = None  # a fraction, as the trainer's metrics.jsonl records it
    val_videos: int | None = None

    @classmethod
    def of(cls, plan: dict, history: list[dict]) -> RunFacts:
        """The facts from the cluster plan (num_workers) and the trainer's epoch records (the last val_top1)."""
        if not isinstance(plan.get("num_workers"), int):
            raise ClipflowError("cluster plan has no whole num_workers: give the plan.json clipflow cluster plan wrote")
        last = next((h for h in reversed(history) if h.get("val_top1") is not None), {})
        return cls(plan["num_workers"], last.get("val_top1"), last.get("val_videos"))


@dataclass(frozen=True)
class Audit:
    """The audit of one run: the setting rows, the accuracy rows (protocol, videos, top-1 %) and the lists."""

    source: str | None
    rows: list[AuditRow]
    accuracy: list[tuple[str, int | None, float | None]]
    lists: list[ListPrint]

    @property
    def differing(self) -> list[str]:
        return [row.setting for row in self.rows if row.verdict == DIFFERS]


def list_print(split: str, path: str | Path) -> ListPrint:
    """The fingerprint of one list file: its videos (entries, as training reads them) and its sha256."""
    path = Path(path)
    if not path.is_file():
        raise ClipflowError(f"{split} list {path} is not there: give the run's index list (index/{split}.lst)")
    return ListPrint(split, path, len(read_list(path)), sha256_of(path))


def _number(value: object) -> str:
    """A value as the tables show it: a float shortest (0.1, not 0.1000), anything else as it is."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _same(a: object, b: object) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def _row(setting: str, this_run: object, published: object, shown: str | None = None) -> AuditRow:
    """A row comparing values; ``shown`` is this run's value as text (default: the value itself)."""
    run_text = shown if shown is not None else _number(this_run)
    if published is None:
        return AuditRow(setting, run_text, None, NOT_PUBLISHED)
    published_text = _number(published)
    return AuditRow(setting, run_text, published_text, SAME if _same(this_run, published) else DIFFERS)


def _pair_row(setting: str, this_run: tuple, published: tuple, joiner: str) -> AuditRow:
    """A row of two values compared together (e.g. clips x crops); not published when either is missing."""
    run_text = joiner.join(map(_number, this_run))
    if any(v is None for v in published):
        return AuditRow(setting, run_text, None, NOT_PUBLISHED)
    published_text = joiner.join(map(_number, published))
    same = all(_same(a, b) for a, b in zip(this_run, published, strict=True))
    return AuditRow(setting, run_text, published_text, SAME if same else DIFFERS)


def short_side_range(data: dict) -> tuple[float, float] | None:
    """The [least, most] short side in pixels the network sees frames at, from the multi-scale crop (see the
    module's docstring); None for a recipe without the crop's settings (images)."""
    size, ratios = data.get("input_size"), data.get("scale_ratios")
    if not size or not ratios:
        return None
    return (round(size / max(ratios), 1), round(size / min(ratios), 1))


def _scale_row(data: dict, published: object) -> AuditRow:
    sides = short_side_range(data)
    decoded = f"{data.get('new_width')}x{data.get('new_height')}" if data.get("new_width") else None
    ratios = ", ".join(_number(float(r)) for r in data.get("scale_ratios") or [])
    run_text = "unknown" if sides is None else (
        f"short side {_number(sides[0])}-{_number(sides[1])} (decoded {decoded}, crops of {ratios} x the short side)"
    )  # fmt: skip
    setting = "scale jitter (short side seen)"
    if published is None:
        return AuditRow(setting, run_text, None, NOT_PUBLISHED)
    if isinstance(published, str):
        return AuditRow(setting, run_text, published, BY_HAND)
    low, high = published["short_side"]
    published_text = f"short side {_number(float(low))}-{_number(float(high))}" + (
        f" ({published['text']})" if published.get("text") else ""
    )
    same = sides is not None and _same(sides[0], low) and _same(sides[1], high)
    return AuditRow(setting, run_text, published_text, SAME if same else DIFFERS)


def audit(recipe: dict, facts: RunFacts, metrics: dict | None, lists: list[ListPrint]) -> Audit:
    """The audit rows of a run: ``recipe`` as it ran (overrides merged, schema defaults filled), ``facts`` of the
    run, evaluate's ``metrics`` (None: no test row) and the fingerprints of its train and val lists."""
    setup = (recipe.get("reference") or {}).get("setup") or {}
    t, d = recipe["train"], recipe["data"]
    accumulate = t.get("accumulate", 1)
    global_batch = facts.workers * t["batch_size"] * accumulate
    lr = scaled_lr(t["base_lr"], t["base_batch"], global_batch)
    counts = {p.split: p.videos for p in lists}
    rows = [
        _row("global batch (workers x batch_size x accumulate)", global_batch, setup.get("global_batch"),
             f"{facts.workers} x {t['batch_size']} x {accumulate} = {global_batch}"),
        _row("learning rate (scaled to the global batch)", lr, setup.get("lr"),
             f"{_number(lr)} (base_lr {_number(float(t['base_lr']))} x {global_batch} / {t['base_batch']})"),
        _row("schedule (lr_mode)", t.get("lr_mode", "cosine"), setup.get("lr_mode")),
        _row("epochs", t["epochs"], setup.get("epochs")),
        _row("warm-up epochs", t.get("warmup_epochs", 0), setup.get("warmup_epochs")),
        _row("warm-up start lr", float(t.get("warmup_lr", 0.0)), setup.get("warmup_lr")),
        _scale_row(d, setup.get("scale")),
        _row("crop (input_size)", d.get("input_size"), setup.get("input_size")),
        _row("precise BN batches", t.get("precise_bn_batches", 0), setup.get("precise_bn_batches")),
        _pair_row("test views (clips x crops)", (d.get("test_clips"), d.get("test_crops")),
                  (setup.get("test_clips"), setup.get("test_crops")), " x "),
        _row("train videos", counts.get("train", "unknown"), setup.get("train_videos")),
        _row("val videos", counts.get("val", "unknown"), setup.get("val_videos")),
    ]  # fmt: skip
    accuracy: list[tuple[str, int | None, float | None]] = [
        ("single-clip validation (the training's last)", facts.val_videos,
         None if facts.val_top1 is None else 100.0 * facts.val_top1),
    ]  # fmt: skip
    if metrics is not None:
        views = f"{d.get('test_clips')} clips x {d.get('test_crops')} crops"
        accuracy.append((f"{views} test (evaluate)", metrics.get("num_videos"), 100.0 * metrics["top1"]))
    return Audit(setup.get("source"), rows, accuracy, lists)
