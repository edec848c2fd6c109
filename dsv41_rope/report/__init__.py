"""The ulp-drift report: what the conformance tests measured, merged, gated on a baseline and rendered.

The pytest plugin and the shard merger (``python -m dsv41_rope.report``) both go through this package, so a report
written by one runner, merged from several, or gated against a baseline is read, compared and rendered the same way
everywhere. Nothing here imports torch, triton or the oracle: records arrive as plain numbers and dicts.

One module per concern. The report itself, which never imports pytest:

- `model`: the records, the report and their strict-JSON form (schema `dsv41-rope/ulp-drift/1`).
- `merge`: several reports (xdist workers, shards) into one.
- `shards`: what a run records about its part of the suite, and whether a merge's shards make up whole runs.
- `added_metadata`: run-level metadata the tests add (`pytest_hooks.add_run_metadata`) and how it merges.
- `recording`: the `ulp_drift` fixture's recorder and the checks of what a test records.
- `summary`: cases added up per dtype x backend x comparison; histogram bins.
- `baseline`: the gate against an accepted report.
- `failed_tests`: the tests a run failed, what failed each, and their grouped summary.
- `verdict`: the one-line verdict and its status.
- `tables`: cells and tables both renderings share.
- `render_text`, `render_markdown`: the terminal summary and the Markdown report.
- `plot`: the PNG histogram (matplotlib, optional).
- `output`: the report directory and the CI job page.
- `merge_cli`: the shard merger's command line (``python -m dsv41_rope.report``).

The pytest plugin, `pytest_hooks`, with `options`, `run_session`, `xdist_transfer`, `run_end` and `selection`.

The names below are the package's interface; import them from here.
"""

from dsv41_rope.report.added_metadata import (
    CPU_VERDICT,
    FROM_TESTS,
    IMPLEMENTATION,
    INTERPRETER_ARTEFACTS,
    REFERENCES,
    checked_value,
    merge_added,
    merge_values,
)
from dsv41_rope.report.baseline import (
    HYPOTHESIS,
    BaselineComparison,
    CaseDelta,
    Change,
    compare_cases,
    compare_to_baseline,
    hypothesis_note,
    hypothesis_versions,
)
from dsv41_rope.report.failed_tests import (
    FAILED_TESTS,
    TESTS_FAILED,
    entry_of_report,
    failed_tests,
    failure_entry,
    grouped_lines,
    merge_failed,
    tests_failed,
    what_failed,
)
from dsv41_rope.report.merge import merge_edges, merge_reports
from dsv41_rope.report.model import (
    COMPLETENESS,
    DIFFERENCE_KINDS,
    JSON_NAME,
    MARKDOWN_NAME,
    MISMATCH,
    NAN_BITS,
    PNG_NAME,
    SCHEMA,
    SIGNED_ZERO,
    CaseRecord,
    Report,
    ReportError,
    case_key,
    decode_non_finite,
    encode_non_finite,
    plain,
    portable_nodeid,
)
from dsv41_rope.report.output import append_step_summary, write_report
from dsv41_rope.report.plot import PNG_NO_DATA, PNG_NO_MATPLOTLIB, PNG_NOT_REQUESTED, PNG_WRITTEN, write_histogram_png
from dsv41_rope.report.recording import (
    RecordKeeper,
    UlpDriftRecorder,
    checked_counts,
    checked_device,
    oracle_histogram_edges,
    split_summary,
)
from dsv41_rope.report.render_markdown import render_markdown
from dsv41_rope.report.render_text import render_terminal
from dsv41_rope.report.shards import (
    COMPLETE,
    INCOMPLETE,
    INCONSISTENT,
    NOT_CHECKED,
    SELECTION,
    SHARD,
    Completeness,
    check_shards,
    device_label,
    digest,
    selection_record,
    shard_record,
)
from dsv41_rope.report.summary import GroupSummary, summarize_groups
from dsv41_rope.report.tables import compact_devices, format_fraction, format_number, markdown_table, text_table
from dsv41_rope.report.verdict import incompleteness, verdict, verdict_status

__all__ = [
    "COMPLETE",
    "COMPLETENESS",
    "DIFFERENCE_KINDS",
    "FAILED_TESTS",
    "FROM_TESTS",
    "HYPOTHESIS",
    "INCOMPLETE",
    "INCONSISTENT",
    "IMPLEMENTATION",
    "INTERPRETER_ARTEFACTS",
    "REFERENCES",
    "CPU_VERDICT",
    "JSON_NAME",
    "MARKDOWN_NAME",
    "MISMATCH",
    "NAN_BITS",
    "NOT_CHECKED",
    "PNG_NAME",
    "PNG_NOT_REQUESTED",
    "PNG_NO_DATA",
    "PNG_NO_MATPLOTLIB",
    "PNG_WRITTEN",
    "SCHEMA",
    "SELECTION",
    "SHARD",
    "SIGNED_ZERO",
    "TESTS_FAILED",
    "BaselineComparison",
    "CaseDelta",
    "CaseRecord",
    "Change",
    "Completeness",
    "GroupSummary",
    "RecordKeeper",
    "Report",
    "ReportError",
    "UlpDriftRecorder",
    "append_step_summary",
    "case_key",
    "checked_counts",
    "check_shards",
    "checked_device",
    "checked_value",
    "compact_devices",
    "compare_cases",
    "compare_to_baseline",
    "decode_non_finite",
    "device_label",
    "digest",
    "encode_non_finite",
    "entry_of_report",
    "failed_tests",
    "failure_entry",
    "format_fraction",
    "format_number",
    "grouped_lines",
    "hypothesis_note",
    "hypothesis_versions",
    "incompleteness",
    "markdown_table",
    "merge_added",
    "merge_edges",
    "merge_failed",
    "merge_reports",
    "merge_values",
    "oracle_histogram_edges",
    "plain",
    "portable_nodeid",
    "render_markdown",
    "render_terminal",
    "selection_record",
    "shard_record",
    "split_summary",
    "summarize_groups",
    "tests_failed",
    "text_table",
    "verdict",
    "verdict_status",
    "what_failed",
    "write_histogram_png",
    "write_report",
]
