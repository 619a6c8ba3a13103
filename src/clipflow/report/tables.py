"""HTML tables for the report: plain rows, and the confusion matrix shaded by row share."""

from __future__ import annotations

import html

MAX_CONFUSION_CELLS = 20  # classes up to which the confusion matrix is also a table (beyond: the figure only)


def cell(value: object) -> str:
    if value is None:
        return "&mdash;"
    if isinstance(value, float):
        return f"{value:.2f}"
    return html.escape(str(value))


def table(header: list[str], rows: list[list[object]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def pairs(rows: list[tuple[str, object]]) -> str:
    """A two-column table of names and values."""
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{cell(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def confusion_table(matrix: list[list[int]], names: list[str]) -> str:
    """Rows: true class; columns: predicted; each cell shaded by its share of its row."""
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    rows = []
    for name, counts in zip(names, matrix, strict=True):
        total = sum(counts) or 1
        cells = "".join(
            f'<td style="background: rgba(31, 119, 180, {c / total:.2f})">{c}</td>' if c else "<td></td>"
            for c in counts
        )
        rows.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
    return (f'<table class="confusion"><thead><tr><th>true \\ predicted</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
