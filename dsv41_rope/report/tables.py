"""Cells and tables shared by the terminal and Markdown renderings: numbers, device lists, the group row."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from dsv41_rope.report.model import MISMATCH, NAN_BITS, SIGNED_ZERO
from dsv41_rope.report.summary import GroupSummary

__all__ = [
    "FP32_DTYPES",
    "NUMERIC_COLUMNS",
    "compact_devices",
    "format_fraction",
    "format_number",
    "group_row",
    "markdown_table",
    "shows_fp32_errors",
    "text_table",
    "with_device_column",
]


def format_number(value: float | int | None) -> str:
    """Formats a count or an ulp error for a table: `-` for None, 4 significant digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def format_fraction(value: float | None) -> str:
    """Formats a fraction truncated (not rounded) to 6 decimals, so only an exact 1 reads as 1."""
    if value is None:
        return "-"
    if value == 1.0:
        return "1"
    return f"{math.floor(value * 1e6) / 1e6:.6f}"


def _count_cell(total: int, unexpected: int) -> str:
    # A star says every difference in the cell is one its comparison declared allowed; the trailing space of the
    # others keeps digits aligned in right-aligned columns.
    return f"{total}*" if total and not unexpected else f"{total} "


# The numeric columns of a group row (cases to correctly-rounded fraction): right-aligned in both renderings.
NUMERIC_COLUMNS = frozenset(range(3, 11))


def group_row(group: GroupSummary) -> list[str]:
    """Returns the cells of one group's row, from dtype to devices, as both renderings show them."""
    return [
        group.dtype,
        group.backend,
        group.comparison,
        str(group.cases),
        str(group.elements),
        _count_cell(group.mismatches, group.unexpected[MISMATCH]),
        _count_cell(group.nan_bit_differences, group.unexpected[NAN_BITS]),
        _count_cell(group.signed_zero_differences, group.unexpected[SIGNED_ZERO]),
        format_number(group.elementwise_max),
        format_number(group.normwise_max),
        format_fraction(group.correctly_rounded_fraction),
        compact_devices(group.devices),
    ]


# The names an FP32 case's dtype goes by: the suite records "fp32", other projects torch's "float32".
FP32_DTYPES = frozenset({"fp32", "float32"})


def shows_fp32_errors(groups: Iterable[GroupSummary]) -> bool:
    """Whether a group table shows FP32 error figures (a max elementwise or norm-wise ulp error), beside which both
    renderings say why the elementwise one can be large."""
    return any(
        group.dtype.lower() in FP32_DTYPES and (group.elementwise_max is not None or group.normwise_max is not None)
        for group in groups
    )


def with_device_column(
    headers: Sequence[str], rows: Sequence[Sequence[str]], groups: Sequence[GroupSummary], right: Iterable[int]
) -> tuple[list[str], list[list[str]], set[int]]:
    """Puts a first column "device" (the kind of device of each group) before a group table, when the report was
    merged from several kinds of device; otherwise returns the table as it is.

    Args:
        headers, rows: the table, one row per group, in the order of `groups`.
        groups: the groups of the rows.
        right: the right-aligned columns, which move one to the right with the new column.
    """
    if not any(group.device_name for group in groups):
        return list(headers), [list(row) for row in rows], set(right)
    return (
        ["device", *headers],
        [[group.device_name, *row] for group, row in zip(groups, rows, strict=True)],
        {i + 1 for i in right},
    )


def compact_devices(devices: Iterable[str]) -> str:
    """Writes device names compactly: ("cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:5") -> "cpu,cuda:0-2,5"."""
    indices: dict[str, list[int]] = {}
    others: list[str] = []
    for device in devices:
        kind, _, index = device.partition(":")
        if index.isdigit():
            indices.setdefault(kind, []).append(int(index))
        else:
            others.append(device)
    parts = sorted(set(others))
    for kind in sorted(indices):
        numbers = sorted(set(indices[kind]))
        runs: list[str] = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            runs.append(str(start) if start == previous else f"{start}-{previous}")
            if number is not None:
                start = previous = number
        parts.append(f"{kind}:{','.join(runs)}")
    return ",".join(parts)


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = (), width: int = 120
) -> list[str]:
    """Lays out a fixed-width table; columns in `right` are right-aligned; gaps shrink to fit `width`."""
    right = set(right)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    gap = "  " if sum(widths) + 2 * (len(widths) - 1) <= width else " "

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return gap.join(padded).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _md_cell(text: str) -> str:
    return text.strip().replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Lays out a GitHub-flavoured Markdown table; `|` inside cells is escaped."""
    right = set(right)
    rule = ["---:" if i in right else "---" for i in range(len(headers))]
    return [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "| " + " | ".join(rule) + " |",
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows),
    ]
