"""What every data set form makes: the class names and the train and val entries, and their writer.

A form's reader (one module beside this one) reads the files as published and returns a :class:`DatasetLists`:
labels are indices into ``classes``, paths are relative to the video root, each entry keeps the line of the file it
came from. Videos that are not under the root stay in the lists, so that the scan names each as "file not found";
a split none of whose videos is there is refused (the root is then the wrong one). :func:`write_dataset` writes the
lists and the class index as the scan reads them, recorded as clipflow's (:mod:`clipflow.made`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clipflow.data.listfile import VideoEntry, labels_text
from clipflow.errors import ClipflowError

SPLITS = ("train", "val")
LISTS = ("train_labels.txt", "val_labels.txt", "classes.txt")  # what write_dataset writes
SHOWN = 10  # missing videos logged one by one; the rest are counted


@dataclass
class DatasetLists:
    """A data set's lists, as one form's reader made them."""

    name: str  # the data set in words, for the log and the report: "UCF101 split 1"
    classes: list[str]  # label i is classes[i]
    classes_from: str  # where the names come from, for messages: "from classInd.txt"
    root: Path  # the videos; entry paths are relative to it
    lists: dict[str, list[VideoEntry]]  # "train" and "val", in the order of their source
    sources: dict[str, str]  # split -> the file or folder its entries come from, for messages
    notes: list[str] = field(default_factory=list)  # what was left out and why, one line each, for the log
    _missing: dict[str, list[VideoEntry]] = field(default_factory=dict, repr=False, compare=False)

    def missing(self, split: str) -> list[VideoEntry]:
        """The entries of ``split`` whose video is not under the root (looked for once: the check and the log both
        ask, and a Kinetics split holds a quarter of a million videos)."""
        if split not in self._missing:
            self._missing[split] = [e for e in self.lists[split] if not e.resolve(self.root).is_file()]
        return self._missing[split]

    def check(self) -> None:
        """Both splits hold entries, and some video of each is under the root (else the root is the wrong one)."""
        for split in SPLITS:
            entries = self.lists.get(split) or []
            if not entries:
                raise ClipflowError(f"{self.name}: {self.sources.get(split, split)} gives no {split} video")
            missing = self.missing(split)
            if len(missing) == len(entries):
                raise ClipflowError(
                    f"{self.name}: none of the {len(entries)} {split} videos of {self.sources[split]} is under "
                    f"{self.root} (looked for e.g. {missing[0].resolve(self.root)}); check the video folder"
                )


def classes_text(classes: list[str]) -> str:
    """A class index: one name a line, line i for label i."""
    return "".join(f"{name}\n" for name in classes)


def check_out(out_dir: str | Path) -> Path:
    """``out_dir`` as the lists' folder, checked before any file of the data set is read: a folder there or
    makeable, and none of :data:`LISTS` there someone else's (:meth:`clipflow.made.Made.check`)."""
    from clipflow.files import check_output_dir
    from clipflow.made import Made

    out = check_output_dir(out_dir, "--out-dir")
    Made(out, "--out-dir").check(LISTS)
    return out


def write_dataset(made: DatasetLists, out_dir: str | Path, log: Callable[[str], None] = print) -> DatasetLists:
    """``made`` checked (:meth:`DatasetLists.check`) and written to ``out_dir`` as ``train_labels.txt``,
    ``val_labels.txt`` (``path label``) and ``classes.txt``, recorded as clipflow's (:func:`check_out`). Logs what
    was made, the videos not found (kept: the scan lists each as a failure) and the notes."""
    from clipflow.made import Made

    out = check_out(out_dir)
    made.check()
    record = Made(out, "--out-dir")
    for split in SPLITS:
        record.write_text(f"{split}_labels.txt", labels_text(made.lists[split]))
    record.write_text("classes.txt", classes_text(made.classes))
    for split in SPLITS:
        missing = made.missing(split)
        found = f"; {len(missing)} not found under {made.root} (kept: the scan lists them as failures)"
        log(f"{split}: {len(made.lists[split])} videos from {made.sources[split]} in {out / f'{split}_labels.txt'}"
            + (found if missing else ""))  # fmt: skip
        for entry in missing[:SHOWN]:
            log(f"not found ({split}): {entry.path} ({made.sources[split]} line {entry.line})")
        if len(missing) > SHOWN:
            log(f"not found ({split}): ... and {len(missing) - SHOWN} more")
    for note in made.notes:
        log(note)
    log(f"{made.name}: {len(made.classes)} classes ({made.classes_from}) in {out / 'classes.txt'}")
    return made
