"""CifarImages: the torch Dataset of an index list's CIFAR-10 images, each item cut as
clipflow.data.cifar.transforms says (the training view drawn from (seed, epoch, index))."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from clipflow.data.cifar.batches import NUM_CLASSES, read_batch
from clipflow.data.cifar.index import parse_image_path
from clipflow.data.cifar.transforms import ImageSpec, ImageView, apply_view, normalize_images, train_view, val_view
from clipflow.data.listfile import VideoEntry, read_list
from clipflow.errors import ClipflowError

MODES = ("train", "val", "test")  # "test" is "val": the test batch is CIFAR-10's validation set


class CifarImages(Dataset):
    """Item i: (image, label), image a (3, crop, crop) uint8 tensor, of an index list (index_cifar).

    ``root`` is the cifar-10-batches-py folder the list's batch files are relative to. Mode "train"
    draws each item's crop and flip from (seed, epoch, index) (the rule in clipflow.data.cifar.transforms), so an
    item is the same image in any process or loader worker; "val" (and "test", the same) is the
    unaugmented centre view. The interface is SlowFastClips's: ``epoch``, ``set_epoch``, ``transform``
    (the spec), ``normalize`` (a uint8 batch as the model's float input).

    Batch files are read when an item first needs them and kept for the process's life (a full
    training batch file is 30 MiB; each loader worker reads its own copy unless forked from a process
    that already had it). Pickling the dataset (spawned workers) leaves them out.
    """

    def __init__(
        self,
        list_path: str | Path,
        root: str | Path,
        mode: str = "train",
        seed: int = 0,
        spec: ImageSpec | None = None,
        entries: list[VideoEntry] | None = None,
        keys: list[int] | None = None,
    ):
        if mode not in MODES:
            raise ClipflowError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.list_path, self.root = Path(list_path), Path(root)
        self.mode = "val" if mode == "test" else mode
        self.seed = seed
        self.transform = spec if spec is not None else ImageSpec()
        self.epoch = 0
        entries = read_list(self.list_path, NUM_CLASSES) if entries is None else entries
        self.keys = keys  # item i's draws come from (seed, epoch, keys[i]), default i (as SlowFastClips)
        files: dict[Path, int] = {}
        file_ids, indices = [], []
        for e in entries:
            where = f"{self.list_path} line {e.line}"
            parsed = parse_image_path(e.path)
            if parsed is None:
                raise ClipflowError(
                    f"{where}: {e.path!r} is not a CIFAR image; expected BATCH_FILE#INDEX such as data_batch_1#17 "
                    "(make the list with clipflow.data.cifar.index.index_cifar)"
                )
            if e.num_frames not in (None, 1):
                raise ClipflowError(f"{where}: frame count {e.num_frames}; an image has 1 frame")
            path = VideoEntry(parsed[0], e.label).resolve(self.root)
            if path not in files:
                if not path.is_file():
                    raise ClipflowError(
                        f"{where}: batch file {path} does not exist; check the CIFAR-10 folder ({self.root}) "
                        "or index it again"
                    )
                files[path] = len(files)
            file_ids.append(files[path])
            indices.append(parsed[1])
        self.files = list(files)
        self._file_ids = np.array(file_ids, dtype=np.int32)
        self._indices = np.array(indices, dtype=np.int64)
        self._labels = np.array([e.label for e in entries], dtype=np.int64)
        self._lines = np.array([e.line for e in entries], dtype=np.int64)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}  # a worker reads the batch files it needs itself
        return state

    def __len__(self) -> int:
        return len(self._labels)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def views(self) -> int:
        """Images per item: 1 in every mode."""
        return 1

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """A uint8 batch (N, 3, H, W) of this dataset's images as the model's float input (spec's mean, std)."""
        return normalize_images(images, self.transform)

    def plan(self, index: int) -> ImageView:
        """Where item ``index`` is cut in this epoch, without reading it."""
        index = range(len(self))[index]
        if self.mode != "train":
            return val_view(self.transform)
        key = index if self.keys is None else self.keys[index]
        return train_view(self.transform, np.random.default_rng([self.seed, self.epoch, key]))

    def _batch(self, file_id: int, line: int) -> tuple[np.ndarray, np.ndarray]:
        if file_id not in self._cache:
            try:
                self._cache[file_id] = read_batch(self.files[file_id])
            except ClipflowError as exc:
                raise ClipflowError(f"{exc} (listed in {self.list_path} line {line})") from None
        return self._cache[file_id]

    def image(self, index: int) -> np.ndarray:
        """Item ``index``'s whole (3, 32, 32) uint8 image as stored, checked against its list line."""
        index = range(len(self))[index]
        file_id, row, line = int(self._file_ids[index]), int(self._indices[index]), int(self._lines[index])
        images, labels = self._batch(file_id, line)
        path = self.files[file_id]
        if row >= len(images):
            raise ClipflowError(
                f"{self.list_path} line {line}: {path} has {len(images)} images, no image {row}; "
                "the list does not match the batch files, index them again"
            )
        if labels[row] != self._labels[index]:
            raise ClipflowError(
                f"{self.list_path} line {line}: label {int(self._labels[index])}, but image {row} of {path} has "
                f"label {int(labels[row])}; the list does not match the batch files, index them again"
            )
        return images[row]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        index = range(len(self))[index]
        image = apply_view(self.image(index), self.plan(index), self.transform)
        return torch.from_numpy(image), int(self._labels[index])
