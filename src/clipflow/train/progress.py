"""What rank 0 shows while training: a tqdm bar per epoch, and optionally TensorBoard scalars.

The bar. A worker's output reaches the user through the launcher, which reads it
line by line and prefixes each line with the process (``[worker 0 host]``). A
terminal bar redraws itself with carriage returns; here each redraw becomes one line
instead (:class:`LineFile`), at most every ``CLIPFLOW_PROGRESS_S`` seconds (default
10) plus the epoch's first and last, with the running loss and learning rate.

TensorBoard. With ``train launch --tensorboard DIR`` rank 0 writes event files to DIR:
``train/loss`` (rank 0's batch) and ``train/lr`` per step, and every number of the epoch's
metrics.jsonl record at the epoch's last step (``epoch/loss``, ``epoch/val_top1``,
...): one step axis for all, so a resumed run can purge the events an interrupted
one wrote past its checkpoint's step, and the curves have no doubles.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from tqdm import tqdm

from clipflow.environment import read_env


class LineFile:
    """A file for tqdm that turns every redraw into one line of ``stream``."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            print(line, file=self.stream, flush=True)

    def flush(self) -> None:
        self.stream.flush()


def progress_interval() -> float:
    """CLIPFLOW_PROGRESS_S: the most seconds between two progress lines."""
    return read_env().progress_s


def epoch_bar(epoch: int, epochs: int, total: int, initial: int, interval: float, enabled: bool) -> tqdm:
    """The bar of one epoch of ``total`` iterations, ``initial`` of them done before a resume; a line at most
    every ``interval`` seconds."""
    return tqdm(
        total=total,
        initial=initial,
        desc=f"epoch {epoch}/{epochs}",
        unit="it",
        mininterval=interval,
        maxinterval=max(interval, 10.0),
        ncols=100,
        ascii=True,
        file=LineFile(sys.stdout),
        disable=not enabled,
    )


class TensorBoardScalars:
    """Rank 0's scalars as TensorBoard event files in ``folder``, for a run that has ``done_steps`` steps behind it
    (its checkpoint's): events an interrupted run wrote for later steps are purged (hidden from TensorBoard)."""

    def __init__(self, folder: Path, done_steps: int):
        from torch.utils.tensorboard import SummaryWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(folder), purge_step=done_steps + 1)

    def step(self, step: int, loss: float, lr: float) -> None:
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)

    def epoch(self, record: dict) -> None:
        for name, value in record.items():
            if name not in ("epoch", "step") and isinstance(value, int | float):
                self.writer.add_scalar(f"epoch/{name}", value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        """Closes the event file, then records the checksum of every event file here (an interrupted run's too:
        nothing writes them any more), so that a copy (collect) is checked."""
        from clipflow.checksums import SUFFIX, record_checksum

        self.writer.close()
        for events in Path(self.writer.get_logdir()).glob("events.out.tfevents.*"):
            if not events.name.endswith(SUFFIX):
                record_checksum(events)
