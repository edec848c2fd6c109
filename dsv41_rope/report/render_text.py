"""The terminal summary: the group table fitted to a width, its legend, the baseline deltas and the verdict."""

from __future__ import annotations

from collections.abc import Sequence

from dsv41_rope.report.baseline import BaselineComparison
from dsv41_rope.report.failed_tests import failed_tests, grouped_lines
from dsv41_rope.report.model import COMPLETENESS, Report
from dsv41_rope.report.summary import GroupSummary, summarize_groups
from dsv41_rope.report.tables import (
    NUMERIC_COLUMNS,
    format_number,
    group_row,
    shows_fp32_errors,
    text_table,
    with_device_column,
)
from dsv41_rope.report.verdict import verdict

__all__ = ["FP32_ERROR_NOTE", "TERMINAL_HEADERS", "render_terminal"]

# Beside FP32 error figures, in the table's width: why "ulp max" can be thousands, and which figure the suite bounds
# (docs/conformance.md, "Norm-wise error bound").
FP32_ERROR_NOTE = (
    "fp32 ulp max is unbounded where a*c - b*d cancels (a rotated value near 0, its pair not); "
    "norm max is held to the bound"
)
TERMINAL_HEADERS = (
    "dtype", "backend", "comparison", "cases", "elements", "mismatch", "nan-bits", "+-0",
    "ulp max", "norm max", "cr frac", "devices",
)  # fmt: skip


def render_terminal(
    report: Report, comparison: BaselineComparison | None = None, *, width: int = 120, max_listed: int = 20
) -> list[str]:
    """Returns the terminal summary lines: a warning when the baseline's hypothesis version is not the run's, the
    group table, its legend, the baseline deltas, the failed tests grouped by test function and what failed them, and
    the verdict."""
    lines = [f"WARNING: {comparison.hypothesis}"] if comparison is not None and comparison.hypothesis else []
    lines += _group_lines(summarize_groups(report.cases.values()), width)
    lines += _completeness_lines(report.metadata.get(COMPLETENESS), width)
    if comparison is not None:
        lines += _baseline_lines(comparison, max_listed)
    failed = failed_tests(report)
    if failed:
        lines += [f"failed tests ({len(failed)}), by test function and what failed them:", *grouped_lines(failed)]
    lines.append(verdict(report, comparison))
    return lines


def _group_lines(groups: Sequence[GroupSummary], width: int) -> list[str]:
    if not groups:
        return ["no ulp-drift cases recorded"]
    lines = []
    headers, rows, right = list(TERMINAL_HEADERS), [group_row(g) for g in groups], set(NUMERIC_COLUMNS)
    # A run has one backend and usually spreads every group over the same devices: say so once, above the table,
    # rather than spend 120 columns repeating it.
    common = []
    for column in (len(headers) - 1, 1):
        values = {row[column] for row in rows}
        if len(values) == 1:
            common.insert(0, f"{headers[column]} {values.pop()}")
            del headers[column]
            rows = [row[:column] + row[column + 1 :] for row in rows]
            right = {i - 1 if i > column else i for i in right}
    if common:
        lines.append("all cases: " + ", ".join(common))
    lines += text_table(*with_device_column(headers, rows, groups, right), width)
    lines += [
        "mismatch: elements whose bits differ; nan-bits, +-0: NaN-payload and signed-zero differences, apart;",
        "* = only differences the comparison allows; ulp/norm max: largest ulp error; cr frac: correctly rounded",
    ]
    if shows_fp32_errors(groups):
        lines.append(FP32_ERROR_NOTE)
    return lines


def _completeness_lines(completeness: object, width: int) -> list[str]:
    """A merged report's shards: one row each, then whether they make up whole runs and what is missing."""
    if not isinstance(completeness, dict):
        return []
    columns = ("source", "device", "group", "tests", "cases", "status")
    rows = [[str(row.get(column, "-")) for column in columns] for row in completeness.get("shards", [])]
    lines = text_table(("shard", "device", "group", "tests", "cases", "verdict"), rows, (3, 4), width)
    lines.append(f"shards: {completeness.get('status')}")
    lines += [f"  {problem}" for problem in completeness.get("problems", [])]
    return lines


def _baseline_lines(comparison: BaselineComparison, max_listed: int) -> list[str]:
    tolerance = f"tolerance {format_number(comparison.ulp_tolerance)} ulp"
    tolerance += f", {format_number(comparison.fraction_tolerance)} correctly-rounded fraction"
    lines = [f"baseline: {comparison.origin()}; {tolerance}"]
    # Every regression is listed; new and missing cases (a -k run misses most of a baseline) up to max_listed.
    listed = {"new": 0, "missing": 0}
    for delta in comparison.deltas():
        if delta.status in listed:
            listed[delta.status] += 1
            if listed[delta.status] > max_listed:
                continue
        lines.append(f"{delta.status.upper():<10} {delta.key}")
        if delta.changes:
            lines.append("           " + "; ".join(change.describe() for change in delta.changes))
    for status, count in listed.items():
        if count > max_listed:
            lines.append(f"... and {count - max_listed} more {status} cases (not listed here)")
    if comparison.missing and not comparison.strict:
        lines.append("missing cases are not a failure; --ulp-baseline-strict makes them one")
    if comparison.outside_selection:
        outside = comparison.outside_selection
        lines.append(f"{outside} baseline cases belong to tests this run did not select: not gated")
    if comparison.skipped:
        skipped = comparison.skipped
        lines.append(f"{skipped} baseline cases belong to tests that skipped in this run (-rs says why): not gated")
    return lines
