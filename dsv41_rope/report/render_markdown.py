"""The Markdown report (`ulp-drift.md`, the CI job page): one small function per section."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsv41_rope.report.added_metadata import FROM_TESTS
from dsv41_rope.report.baseline import BaselineComparison, CaseDelta
from dsv41_rope.report.failed_tests import failed_tests, grouped_lines
from dsv41_rope.report.model import COMPLETENESS, PNG_NAME, Report, encode_non_finite
from dsv41_rope.report.plot import PNG_NO_DATA, PNG_NO_MATPLOTLIB, PNG_NOT_REQUESTED, PNG_WRITTEN
from dsv41_rope.report.summary import GroupSummary, bin_labels, shown_bins, summarize_groups
from dsv41_rope.report.tables import (
    NUMERIC_COLUMNS,
    format_number,
    group_row,
    markdown_table,
    shows_fp32_errors,
    with_device_column,
)
from dsv41_rope.report.verdict import verdict

__all__ = ["FP32_ERROR_NOTE", "MARKDOWN_HEADERS", "MARKDOWN_MAX_LISTED", "render_markdown"]

MARKDOWN_HEADERS = (
    "dtype", "backend", "comparison", "cases", "elements", "bit mismatches", "NaN-bit diffs", "signed-zero diffs",
    "max elementwise ulp", "max norm-wise ulp", "correctly rounded", "devices", "allowed",
)  # fmt: skip
MARKDOWN_MAX_LISTED = 50
# Beside FP32 error figures: why the elementwise max can be thousands of ulps, and which figure the suite bounds.
FP32_ERROR_NOTE = (
    "FP32: elementwise ulp error has no bound near cancellation in `a*c - b*d` (a rotated value near 0 while its pair "
    "is not), so its max can be large; the norm-wise figure is the one held to the bound: 5.0 ulps, 6.0 when a part "
    'of the contraction is `none` (BF16/FP16: 0.504 ulp; docs/conformance.md, "Norm-wise error bound").'
)

_PNG_NOTES = {
    PNG_WRITTEN: f"Histogram plot: `{PNG_NAME}` next to this file.",
    PNG_NO_MATPLOTLIB: f"No `{PNG_NAME}`: matplotlib is not importable on this runner (install the `report` extra).",
    PNG_NO_DATA: f"No `{PNG_NAME}`: no case recorded an elementwise histogram.",
    PNG_NOT_REQUESTED: "No plot: this summary was not written with `--ulp-report`.",
}
# The columns of a list of run descriptions in the metadata (the shards of a merged report).
_RUN_COLUMNS = (
    "source", "hostname", "gpu", "torch", "triton", "hypothesis", "git_commit", "kernel_sha256", "created", "command",
)  # fmt: skip


def render_markdown(report: Report, comparison: BaselineComparison | None = None, png: str = PNG_NOT_REQUESTED) -> str:
    """Returns the Markdown report: verdict, a warning when the baseline's hypothesis version is not the run's, the
    metadata the tests added, the failed tests, group table, baseline deltas, differing cases, histograms, run
    metadata.

    Args:
        report: the run.
        comparison: the baseline gate, if one was run.
        png: what became of the PNG plot, one of the `PNG_*` constants; the text says so.
    """
    groups = summarize_groups(report.cases.values())
    lines = ["## ulp drift", "", f"**{verdict(report, comparison)}**", ""]
    if comparison is not None and comparison.hypothesis:
        lines += [f"> **Warning:** {comparison.hypothesis} (docs/conformance.md).", ""]
    lines += _shard_lines(report.metadata)
    lines += _added_metadata_lines(report.metadata.get(FROM_TESTS) or {})
    lines += _failed_section(failed_tests(report))
    lines += _groups_section(groups)
    lines += _completeness_section(report.metadata.get(COMPLETENESS))
    if comparison is not None:
        lines += _baseline_section(comparison)
    lines += _differences_section(report)
    lines += _histogram_section(report, groups, png)
    lines += _run_section(report.metadata)
    return "\n".join(lines) + "\n"


def _shard_lines(metadata: Mapping[str, Any]) -> list[str]:
    """Which part of the suite a shard ran (`metadata["shard"]`, `metadata["selection"]`), one line."""
    shard, selection = metadata.get("shard"), metadata.get("selection")
    if not isinstance(shard, Mapping):
        return []
    whole = f" of the {selection['tests']} selected tests" if isinstance(selection, Mapping) else ""
    return [
        f"Shard: group {shard.get('group')} of {shard.get('splits')} ({shard.get('algorithm')}), "
        f"{shard.get('tests')} tests{whole}.",
        "",
    ]


def _completeness_section(completeness: Any) -> list[str]:
    """A merged report's shards: whether they make up whole runs, what is missing, and one row per shard."""
    if not isinstance(completeness, Mapping):
        return []
    lines = ["### Shards", "", f"Completeness: **{completeness.get('status')}**.", ""]
    lines += [f"- {problem}" for problem in completeness.get("problems", [])]
    rows = [
        [str(row.get(column, "-")) for column in ("source", "device", "group", "tests", "cases", "status")]
        for row in completeness.get("shards", [])
    ]
    if completeness.get("problems"):
        lines.append("")
    lines += markdown_table(("report", "device", "group", "tests", "cases", "verdict"), rows, (3, 4))
    return [*lines, ""]


def _added_metadata_lines(added: Mapping[str, Any]) -> list[str]:
    """One line "key: value" per key the tests added (`add_run_metadata`), or a small table for a dict value."""
    lines: list[str] = []
    for key, value in added.items():
        if isinstance(value, Mapping):
            lines += markdown_table((key, "value"), [[str(k), _metadata_text(v)] for k, v in value.items()])
        else:
            lines.append(f"{key}: {_metadata_text(value)}")
        lines.append("")
    return lines


def _metadata_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(_metadata_text, value)) or "-"
    if isinstance(value, Mapping):
        return json.dumps(encode_non_finite(value), sort_keys=True)
    return str(value)


def _failed_section(failed: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The failed tests, grouped by test function and what failed them, then each one's line (the first 50)."""
    if not failed:
        return []
    lines = [f"### Failed tests ({len(failed)})", "", *(f"- {line}" for line in grouped_lines(failed, indent=""))]
    listed = list(failed.items())[:MARKDOWN_MAX_LISTED]
    rows = [[f"`{nodeid}`", str(entry.get("message", "-"))] for nodeid, entry in listed]
    lines += ["", *markdown_table(("test", "failure"), rows)]
    if len(failed) > MARKDOWN_MAX_LISTED:
        lines += ["", f"... and {len(failed) - MARKDOWN_MAX_LISTED} more (every one in `ulp-drift.json`, metadata)."]
    return [*lines, ""]


def _groups_section(groups: Sequence[GroupSummary]) -> list[str]:
    lines = ["### By dtype, backend and comparison", ""]
    if groups:
        rows = [[*group_row(g), ", ".join(g.allowed) or "-"] for g in groups]
        lines += markdown_table(*with_device_column(MARKDOWN_HEADERS, rows, groups, NUMERIC_COLUMNS))
        lines += [
            "",
            "A bit mismatch is an element whose bit pattern differs; NaN-bit (NaN payload/sign) and signed-zero (+0 vs"
            " -0) differences are counted apart. `*` marks counts made only of differences the comparison allows.",
        ]
        if shows_fp32_errors(groups):
            lines += ["", FP32_ERROR_NOTE]
    else:
        lines.append("No cases recorded.")
    return [*lines, ""]


def _baseline_section(comparison: BaselineComparison) -> list[str]:
    lines = [
        f"### Against baseline `{comparison.baseline_path}`",
        "",
        f"Baseline: {comparison.origin()}.",
        f"Tolerance: {format_number(comparison.ulp_tolerance)} ulp (absolute) on max errors, "
        f"{format_number(comparison.fraction_tolerance)} on correctly-rounded fractions; counts may not grow.",
        "",
    ]
    deltas = comparison.deltas()
    if not deltas:
        return [*lines, "Same cases as the baseline, none worse.", ""]
    shown, capped = _cap_listed(deltas)
    rows = [[d.status, f"`{d.key}`", "; ".join(c.describe() for c in d.changes) or "-"] for d in shown]
    lines += markdown_table(("status", "case", "worse than baseline"), rows)
    for status, count in capped.items():
        if count:
            lines += ["", f"... and {count} more {status} cases (not listed here)."]
    return [*lines, ""]


def _cap_listed(deltas: Sequence[CaseDelta]) -> tuple[list[CaseDelta], dict[str, int]]:
    """Returns the deltas to list and how many of each capped status are left out.

    Regressions are listed in full; new and missing cases are capped so that a -k run's page stays readable.
    """
    shown = [d for d in deltas if d.status not in ("new", "missing")]
    capped = {}
    for status in ("missing", "new"):
        of_status = [d for d in deltas if d.status == status]
        shown += of_status[:MARKDOWN_MAX_LISTED]
        capped[status] = len(of_status) - len(of_status[:MARKDOWN_MAX_LISTED])
    return shown, capped


def _differences_section(report: Report) -> list[str]:
    differing = [r for key, r in sorted(report.cases.items()) if r.differences()]
    if not differing:
        return []
    headers = (
        "case", "device", "outcome", "mismatch", "nan-bits", "signed-zero", "max distance", "allowed", "detail",
    )  # fmt: skip
    rows = [
        [
            f"`{r.key}`",
            r.device,
            r.outcome,
            str(r.mismatches),
            str(r.nan_bit_differences),
            str(r.signed_zero_differences),
            str(r.max_distance),
            r.allowed or "-",
            r.detail or "-",
        ]
        for r in differing
    ]
    return ["### Cases with differences", "", *markdown_table(headers, rows, range(3, 7)), ""]


def _histogram_section(report: Report, groups: Sequence[GroupSummary], png: str) -> list[str]:
    lines = ["### Elementwise ulp histogram", "", _PNG_NOTES.get(png, png), ""]
    with_histograms = [g for g in groups if g.histogram]
    if with_histograms:
        bins = shown_bins(with_histograms)
        group_header = (
            "device / dtype / backend / comparison" if groups[0].device_name else "dtype / backend / comparison"
        )
        headers = (group_header, *bin_labels(report.histogram_edges, bins))
        rows = [[g.label, *map(str, g.histogram[:bins])] for g in with_histograms]
        lines += markdown_table(headers, rows, range(1, bins + 1))
        lines.append("")
    return lines


def _run_section(metadata: Mapping[str, object]) -> list[str]:
    lines = ["### Run", ""]
    scalars = {k: v for k, v in metadata.items() if not isinstance(v, list | dict)}
    lines += markdown_table(("field", "value"), [[k, "-" if v is None else f"`{v}`"] for k, v in scalars.items()])
    for name, value in metadata.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            rows = [["-" if v.get(c) is None else str(v[c]) for c in _RUN_COLUMNS] for v in value]
            lines += ["", f"{name}:", "", *markdown_table(_RUN_COLUMNS, rows)]
        elif isinstance(value, list):
            lines.append(f"\n{name}: {', '.join(map(str, value)) or '-'}")
    return lines
