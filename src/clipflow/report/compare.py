"""This run's accuracy against the recipe's reference results: one row per published number.

A recipe's ``reference`` holds top-1 / top-5 in percent with their source and test protocol, and
maybe ``others`` (further published numbers, same keys). metrics.json holds fractions; the rows
are in percent, and the difference is this run minus the reference, in percentage points.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Comparison:
    metric: str  # "top-1" or "top-5"
    this_run: float  # percent
    reference: float | None  # percent; None: the source publishes none
    source: str
    protocol: str  # the reference's test protocol

    @property
    def difference(self) -> float | None:
        return None if self.reference is None else self.this_run - self.reference


def comparisons(metrics: dict) -> list[Comparison]:
    """Rows for the top-1 and top-5 of ``metrics`` (evaluate's metrics.json) against every reference."""
    reference = metrics.get("reference") or {}
    published = [reference, *(reference.get("others") or [])] if reference else []
    rows = []
    for ref in published:
        for metric, key in (("top-1", "top1"), ("top-5", "top5")):
            value = ref.get(key)
            if value is None and metric == "top-5":
                continue  # a source without top-5 makes no top-5 row
            reference_value = None if value is None else float(value)
            source, protocol = str(ref.get("source") or "unknown"), str(ref.get("protocol") or "unknown")
            rows.append(Comparison(metric, 100.0 * metrics[key], reference_value, source, protocol))
    return rows
