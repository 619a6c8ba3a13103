"""YAML read with YAML 1.2's numbers (clipflow.yaml12): what PyYAML's YAML 1.1 turns into other numbers stays
the text typed, for the setting's schema to take or refuse; decimal numbers read as before."""

from __future__ import annotations

import math

import pytest
import yaml

from clipflow.yaml12 import load


@pytest.mark.parametrize(
    ("text", "yaml11", "yaml12"),
    [
        ("12:00:00", 43200, "12:00:00"),  # base 60
        ("1:30", 90, "1:30"),
        ("0x2000", 8192, "0x2000"),  # hex: YAML 1.2 has it, clipflow refuses it (module docstring)
        ("0o17", "0o17", "0o17"),
        ("0b11", 3, "0b11"),
        ("1_0", 10, "1_0"),
        ("1_000.5", 1000.5, "1_000.5"),
        ("010", 8, 10),  # octal in 1.1, decimal in 1.2
        ("1e-3", "1e-3", 0.001),  # a string in 1.1, a number in 1.2
        ("+.5e+2", "+.5e+2", 50.0),
        ("2024-05-01", __import__("datetime").date(2024, 5, 1), "2024-05-01"),
        ("-7", -7, -7),
        ("2.5", 2.5, 2.5),
        ('"12:00:00"', "12:00:00", "12:00:00"),
        ("yes", True, True),  # booleans as PyYAML reads them
        ("~", None, None),
    ],
)
def test_numbers_are_read_as_yaml_1_2_writes_them(text, yaml11, yaml12):
    assert yaml.safe_load(f"a: {text}")["a"] == yaml11
    got = load(f"a: {text}")["a"]
    assert got == yaml12 and type(got) is type(yaml12)


def test_infinities_and_nan_are_numbers_for_the_finite_check_to_refuse():
    got = load("a: [.inf, -.Inf, .NaN]")["a"]
    assert got[:2] == [math.inf, -math.inf] and math.isnan(got[2])


def test_an_explicit_int_tag_on_a_hex_number_is_refused_as_yaml():
    with pytest.raises(yaml.YAMLError, match="'0x10' is not a decimal integer"):
        load("a: !!int 0x10")
