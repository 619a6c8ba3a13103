"""clipflow.train.totals: an epoch's running totals travel through float32 sums exactly, and a resumed worker goes
on with the very additions an unbroken one makes."""

from __future__ import annotations

import math

import pytest
import torch

from clipflow.train.totals import Totals, checkpoint_record, from_checkpoint, gather, words_of

AWKWARD = [0.1, 1 / 3, 2.3303539752960205, 1e-300, -0.0, 2.0**60 + 1.5, math.pi * 1e12, math.inf]


@pytest.mark.parametrize("loss_sum", AWKWARD)
def test_a_totals_words_are_exact_in_float32_and_come_back_to_the_bit(loss_sum):
    totals = Totals(loss_sum, 123_456_789, 2**40 + 7)
    words = totals.words()
    assert words.dtype == torch.float32 and words.shape == (3, 4)
    assert torch.equal(words, words.double().float())  # every word is a whole number below 2**16
    back = Totals.from_words(words)
    assert back == totals and math.copysign(1, back.loss_sum) == math.copysign(1, loss_sum)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_every_workers_own_double_comes_through_a_float32_sum_of_the_rows_in_any_order(order):
    """What :func:`gather` sends: a table with each worker's words in its row and zeros elsewhere; the back end sums
    the workers' tables in float32 in an order of its own."""
    mine = [Totals(0.1 + 0.2, 3, 4), Totals(1 / 3, 5, 6), Totals(2.3303539752960205, 7, 8)]
    tables = []
    for rank, totals in enumerate(mine):
        rows = torch.zeros(3, 3, 4)
        rows[rank] = totals.words()
        tables.append(rows)
    summed = torch.zeros(3, 3, 4)
    for rank in order:
        summed += tables[rank]
    assert [Totals.from_words(row) for row in summed] == mine
    # a float32 sum of the doubles themselves would not be exact
    assert float(torch.tensor([t.loss_sum for t in mine], dtype=torch.float32)[0]) != mine[0].loss_sum


def test_gather_alone_is_the_workers_own_totals():
    mine = Totals(0.1 + 0.2, 3, 4)
    assert gather(lambda name, table: None, "partial", mine, 0, 1) == [mine]


def test_a_resumed_worker_ends_the_epoch_with_the_unbroken_workers_totals_to_the_bit():
    losses = [2.302585092994046, 2.1972245773362196, 0.6931471805599453, 1.0986122886681098, 2.4849066497880004]
    unbroken = Totals()
    for loss in losses:
        unbroken = unbroken.add(loss, 1, 2)
    before = Totals()
    for loss in losses[:2]:
        before = before.add(loss, 1, 2)
    record = checkpoint_record([before, Totals(9.0, 1, 2)])
    carried = from_checkpoint(record, 2)[0]
    resumed = Totals.from_words(words_of([carried])[0])
    for loss in losses[2:]:
        resumed = resumed.add(loss, 1, 2)
    assert resumed == unbroken and resumed.loss_sum == unbroken.loss_sum
    # the workers' total in the record is for readers (clipflow status, tests); adding it instead would not do
    assert record["count"] == before.count + 2 and record["workers"][1] == {"loss_sum": 9.0, "correct": 1, "count": 2}


def test_an_older_checkpoint_with_the_sum_alone_gives_it_to_worker_0_and_a_wrong_worker_count_is_refused():
    old = {"loss_sum": 5.5, "correct": 3, "count": 8}
    assert from_checkpoint(old, 3) == [Totals(5.5, 3, 8), Totals(), Totals()]
    with pytest.raises(ValueError, match="the totals of 2 workers, this run has 3"):
        from_checkpoint(checkpoint_record([Totals(), Totals()]), 3)
