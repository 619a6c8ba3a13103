"""One entry to the forms: :func:`dataset_lists` reads the data set of ``data.source`` with the reader of its form."""

from __future__ import annotations

from pathlib import Path

from clipflow.data.datasets.lists import DatasetLists


def dataset_lists(source: str, root: str | Path, annotations: str | Path = "", split: int = 1,
                  val_fraction: float = 0.2, seed: int = 0) -> DatasetLists:  # fmt: skip
    """The lists of ``source`` (a class-per-folder tree, UCF101, HMDB51 or Something-Something v2) with the videos
    at ``root``: the folder's ``val_fraction`` and ``seed``, the published data sets' ``annotations`` folder and
    (UCF101, HMDB51) ``split``."""
    if source == "folder":
        from clipflow.data.datasets.folder import folder_lists

        return folder_lists(root, val_fraction, seed)
    if source == "ucf101":
        from clipflow.data.datasets.ucf101 import ucf101_lists

        return ucf101_lists(root, annotations, split)
    if source == "hmdb51":
        from clipflow.data.datasets.hmdb51 import hmdb51_lists

        return hmdb51_lists(root, annotations, split)
    if source == "ssv2":
        from clipflow.data.datasets.ssv2 import ssv2_lists

        return ssv2_lists(root, annotations)
    raise ValueError(f"no reader for data source {source!r}")
