"""An epoch's running totals (loss sum, top-1 hits, clips) and how a checkpoint inside the epoch carries them over
exactly.

Each worker adds its own batches' losses in a double, in its own order, and the epoch's totals are summed over
the workers once, at its end. For a run resumed inside the epoch to end with the same totals to the bit, every
worker must go on from its own sums as they were, not from the workers' total (the same numbers added in another
order round differently). So a checkpoint keeps every worker's totals, and the resumed workers each take theirs
back.

Moving a worker's double through the back ends' float32 sums would round it; instead each value travels as four
16-bit words, each exact in a float32, in a row of its own: the other workers' rows are zero there, and a sum of
one word and zeros is that word. :func:`gather` and :func:`scatter` are those two exchanges.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import torch

WORDS = 4  # 16-bit words of one 64-bit value
FIELDS = 3  # loss_sum, correct, count


@dataclass(frozen=True)
class Totals:
    """One worker's totals over the batches of an epoch it trained so far."""

    loss_sum: float = 0.0  # the sum of batch loss x batch size, in the order the batches came
    correct: int = 0
    count: int = 0

    def add(self, batch_loss: float, correct: int, count: int) -> Totals:
        return Totals(self.loss_sum + batch_loss * count, self.correct + correct, self.count + count)

    def words(self) -> torch.Tensor:
        """[FIELDS, WORDS] float32: the loss sum's 64 bits and the two counts as 16-bit words, exactly."""
        raw = struct.pack("<dqq", self.loss_sum, self.correct, self.count)
        return torch.tensor(struct.unpack(f"<{FIELDS * WORDS}H", raw), dtype=torch.float32).view(FIELDS, WORDS)

    @classmethod
    def from_words(cls, words: torch.Tensor) -> Totals:
        values = [int(w) for w in words.reshape(-1).tolist()]
        loss_sum, correct, count = struct.unpack("<dqq", struct.pack(f"<{FIELDS * WORDS}H", *values))
        return cls(loss_sum, correct, count)

    def as_record(self) -> dict:
        return {"loss_sum": self.loss_sum, "correct": self.correct, "count": self.count}


AllSum = Callable[[str, torch.Tensor], None]  # a back end's all_sum(name, tensor), in place


def gather(all_sum: AllSum, name: str, mine: Totals, rank: int, workers: int) -> list[Totals]:
    """Collective: every worker's totals, exactly, on every worker (``mine`` is worker ``rank``'s)."""
    rows = torch.zeros(workers, FIELDS, WORDS)
    rows[rank] = mine.words()
    all_sum(name, rows)
    return [Totals.from_words(row) for row in rows]


def checkpoint_record(every: list[Totals]) -> dict:
    """What a checkpoint keeps: every worker's totals, and (for a reader) their sum."""
    whole = Totals(sum(t.loss_sum for t in every), sum(t.correct for t in every), sum(t.count for t in every))
    return {**whole.as_record(), "workers": [t.as_record() for t in every]}


def from_checkpoint(record: dict, workers: int) -> list[Totals]:
    """Every worker's totals from :func:`checkpoint_record`'s form. A checkpoint of a clipflow before that kept only
    the sum: worker 0 carries it, as that version did."""
    if "workers" in record:
        every = [Totals(w["loss_sum"], w["correct"], w["count"]) for w in record["workers"]]
        if len(every) != workers:
            raise ValueError(f"the checkpoint carries the totals of {len(every)} workers, this run has {workers}")
        return every
    return [Totals(record["loss_sum"], record["correct"], record["count"])] + [Totals()] * (workers - 1)


def words_of(every: list[Totals]) -> torch.Tensor:
    """[workers, FIELDS, WORDS]: every worker's totals as :meth:`Totals.words`, for a broadcast."""
    return torch.stack([t.words() for t in every])
