"""Type checks of settings read from YAML or JSON: a bool is not a number there, though Python says it is."""

from __future__ import annotations

import numpy as np


def is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
