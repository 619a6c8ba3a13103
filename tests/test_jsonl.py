"""Append-only JSON-lines records (clipflow.jsonl): a last line cut short set aside, byte for byte, and named once
before the next record; a last whole record given its newline; readers read every whole line and name a cut one.
The records that use it: restarts.jsonl in tests/train/test_restarts.py, metrics.jsonl in tests/train/test_trainer.py
and tests/evaluate/test_status.py, the scan's journal in tests/data/test_scan.py."""

from __future__ import annotations

import json

import pytest

from clipflow.checksums import checksum_path, record_checksum, sha256_of
from clipflow.errors import ClipflowError
from clipflow.jsonl import open_for_append, record_lines

WHOLE = b'{"epoch": 1, "loss": 2.5}\n{"epoch": 2, "loss": 2.0}\n'
CUT = b'{"epoch": 3, "lo\xc3'  # cut inside a two-byte UTF-8 character, too


def test_a_cut_last_line_is_set_aside_byte_for_byte_and_named_once(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_bytes(WHOLE + CUT)
    record_checksum(record)
    said = []

    aside = open_for_append(record, said.append)

    assert aside == tmp_path / "metrics.jsonl.cut-1"
    assert aside.read_bytes() == CUT
    assert record.read_bytes() == WHOLE
    assert checksum_path(record).read_text().split()[0] == sha256_of(record)  # the checksum of what it now holds
    assert said == [
        f"clipflow: {record} ended in a line cut short ({len(CUT)} bytes without a newline, from a write that was "
        f"stopped): its bytes are set aside in {aside} and the record goes on after its 2 whole lines; look at "
        "metrics.jsonl.cut-1 and delete it when it holds nothing you need"
    ]
    with record.open("a") as fh:  # the next record on a line of its own
        fh.write(json.dumps({"epoch": 3, "loss": 1.5}) + "\n")
    assert [r["epoch"] for _, r in record_lines(record, "training history", "one object an epoch")] == [1, 2, 3]
    assert open_for_append(record, said.append) is None and len(said) == 1  # whole now: nothing more to say


def test_a_second_cut_goes_beside_the_first_and_never_over_a_file_that_was_there(tmp_path):
    record = tmp_path / "restarts.jsonl"
    (tmp_path / "restarts.jsonl.cut-1").write_bytes(b"the user's")
    record.write_bytes(WHOLE + b'{"att')

    aside = open_for_append(record, lambda line: None)

    assert aside.name == "restarts.jsonl.cut-2" and aside.read_bytes() == b'{"att'
    assert (tmp_path / "restarts.jsonl.cut-1").read_bytes() == b"the user's"


@pytest.mark.parametrize("tail", [b'{"epoch": 3}', b"  "], ids=["whole-record", "blank"])
def test_a_last_line_missing_only_its_newline_gets_it_and_nothing_is_set_aside(tmp_path, tail):
    record = tmp_path / "metrics.jsonl"
    record.write_bytes(WHOLE + tail)
    said = []
    assert open_for_append(record, said.append) is None
    assert record.read_bytes() == WHOLE + tail + b"\n" and said == []
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_a_reader_reads_every_whole_line_names_a_cut_one_and_changes_nothing(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_bytes(WHOLE + CUT)
    notes = []

    got = list(record_lines(record, "training history", "one object an epoch", notes.append))

    assert got == [(1, {"epoch": 1, "loss": 2.5}), (2, {"epoch": 2, "loss": 2.0})]
    assert notes == [
        f"clipflow: note: training history {record} line 3 is cut short ({len(CUT)} bytes without a newline, from a "
        "write that was stopped): left out; the next write to the record sets it aside beside it"
    ]
    assert record.read_bytes() == WHOLE + CUT


def test_a_whole_line_that_is_not_an_object_is_named_with_its_line(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_bytes(WHOLE + b"[1, 2]\n")
    with pytest.raises(ClipflowError) as err:
        list(record_lines(record, "training history", "one object an epoch"))
    assert str(err.value) == (
        f"training history {record} line 3 is JSON but not an object (it holds a list); expected one object an epoch"
    )
