"""The end of a run, in the controller or a serial run: the merged report with its provenance, the baseline gate, the
files written, and the ulp-drift section of the terminal summary.

The verdict agrees with pytest's outcome: the report records how many tests failed and each one's line
(`dsv41_rope.report.failed_tests`), which the terminal and the Markdown group by test function. The baseline gate
expects the baseline's cases of the tests the run selected, not those a `-k` or a shard left out. A gate that could
not judge (a run interrupted, a report that cannot be merged or written) fails the session through its exit status,
never by raising from a hook, which would end in a raw traceback.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dsv41_rope.harness.provenance import kernel_sha256, kernel_source, run_metadata
from dsv41_rope.report.added_metadata import FROM_TESTS, IMPLEMENTATION
from dsv41_rope.report.baseline import BaselineComparison, compare_to_baseline
from dsv41_rope.report.failed_tests import FAILED_TESTS, TESTS_FAILED
from dsv41_rope.report.merge import merge_reports
from dsv41_rope.report.model import Report, portable_metadata
from dsv41_rope.report.options import ReportOptions
from dsv41_rope.report.output import append_step_summary, write_report
from dsv41_rope.report.render_markdown import render_markdown
from dsv41_rope.report.render_text import render_terminal
from dsv41_rope.report.verdict import verdict_status
from dsv41_rope.report.xdist_transfer import ControllerInbox

__all__ = [
    "fail",
    "finished_report",
    "gate",
    "judged_source",
    "unfinished_tests",
    "write_outputs",
    "write_terminal_section",
]


def fail(session: pytest.Session) -> None:
    """Turns a passing (or empty) run into a failure; an interrupt or a usage error keeps its own exit status."""
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def unfinished_tests(session: pytest.Session, finished: int) -> int:
    """How many collected tests did not finish (-1: the run was interrupted, though every test finished).

    An interrupt (a time limit's SIGINT, -x) can end an xdist run with a normal exit status, so the counts decide."""
    unfinished = max(0, session.testscollected - finished)
    if session.exitstatus == pytest.ExitCode.INTERRUPTED and not unfinished:
        return -1
    return unfinished


def judged_source(metadata: Mapping[str, Any]) -> Path | None:
    """The source file of the implementation the tests judged (``implementation under test``), whose digest is the
    run's ``kernel_sha256``; None (the project's kernel) when the tests named none."""
    added = metadata.get(FROM_TESTS)
    judged = added.get(IMPLEMENTATION) if isinstance(added, Mapping) else None
    source = judged.get("source") if isinstance(judged, Mapping) else None
    return Path(source) if isinstance(source, str) and source != "-" else None


def finished_report(
    local: Report,
    inbox: ControllerInbox,
    *,
    config: pytest.Config,
    selection: Mapping[str, Any],
    failed: Mapping[str, Mapping[str, str]],
    unfinished: int,
) -> Report:
    """The run's report: this process's records merged with every worker's, with the run's provenance, selection,
    failed tests, completeness and workers.

    Args:
        local: this process's report (`UlpDriftSession.local_report`).
        inbox: what the xdist workers sent.
        config: the run's config, for the command line and the checkout.
        selection: the selection and shard this process collected (empty in an xdist controller: the workers').
        failed: each failed test's line, by pytest's node id.
        unfinished: `unfinished_tests`.

    Raises:
        ReportError: when the reports cannot be merged.
    """
    workers = sorted(inbox.reports)
    merged = merge_reports(
        [local, *(inbox.reports[worker] for worker in workers)],
        # xdist runs each test once, so workers never share a key; if a plugin ever makes them, keep the later
        # record rather than lose the whole report at the end of a long run.
        prefer_last=True,
        sources=["controller", *workers],
    )
    command = shlex.join(["pytest", *config.invocation_params.args])
    judged = judged_source(merged.metadata)
    provenance = run_metadata(command, config.rootpath, kernel_path=judged)
    if judged is not None and provenance["kernel_sha256"] != kernel_sha256(kernel_source()):
        # Another implementation: the project's kernel still holds the eager reference and the calibration.
        provenance["reference_sha256"] = kernel_sha256(kernel_source())
    merged.metadata = {**provenance, **(selection or inbox.selection), **merged.metadata}
    merged.metadata[TESTS_FAILED] = len(failed)
    merged.metadata[FAILED_TESTS] = dict(failed)
    if unfinished:
        merged.metadata["interrupted"] = True
        if unfinished > 0:
            merged.metadata["tests_not_run"] = unfinished
    merged.metadata.update(inbox.metadata())
    return merged


def gate(
    report: Report,
    baseline: Report,
    options: ReportOptions,
    *,
    selected: list[str] | None,
    skipped: set[str],
) -> BaselineComparison:
    """Compares the run with its baseline, expecting the baseline cases of the tests it selected (all of them when
    `selected` is None) and setting apart those of tests that skipped."""
    return compare_to_baseline(
        report,
        baseline,
        baseline_path=str(options.baseline_name),
        strict=options.strict,
        ulp_tolerance=options.ulp_tolerance,
        fraction_tolerance=options.fraction_tolerance,
        selected=selected,
        skipped=skipped,
    )


def write_outputs(
    report: Report, options: ReportOptions, comparison: BaselineComparison | None, written: list[Path]
) -> None:
    """Writes the report directory and the saved baseline that the options ask for, adding each file to `written`,
    and appends the Markdown to the CI job page when the run asked for any of them.

    Raises:
        OSError: when a file cannot be written (`written` then lists those that were).
    """
    markdown = None
    if options.report_dir is not None:
        paths, markdown = write_report(report, options.report_dir, comparison)
        written += paths
    if options.save_baseline_path is not None:
        metadata = portable_metadata(report.metadata, Path.cwd())
        written.append(dataclasses.replace(report, metadata=metadata).write_json(options.save_baseline_path))
    if options.requested:
        append_step_summary(markdown if markdown is not None else render_markdown(report, comparison))


def write_terminal_section(
    terminalreporter: pytest.TerminalReporter,
    report: Report | None,
    comparison: BaselineComparison | None,
    *,
    options: ReportOptions,
    errors: list[str],
    silent_workers: Mapping[str, str],
    written: list[Path],
) -> None:
    """Prints the group table, baseline deltas, worker warnings, files written and the verdict.

    A session that neither recorded nor judged anything (another project's tests, in an environment where the suite
    is installed) gets no section; one whose tests judged an implementation does, failures and all."""
    if report is None and not errors:
        return
    judged = report is not None and (report.cases or report.metadata.get(FROM_TESTS))
    if report is not None and not (judged or options.requested or silent_workers):
        return
    terminalreporter.write_sep("=", "ulp drift")
    for worker, why in sorted(silent_workers.items()):
        terminalreporter.write_line(
            f"WARNING: xdist worker {worker} sent no ulp-drift data ({why}); its cases are missing", yellow=True
        )
    for error in errors:
        terminalreporter.write_line(f"ERROR: {error}", red=True)
    if report is None:
        return
    lines = render_terminal(report, comparison, width=120)
    for line in lines[:-1]:
        terminalreporter.write_line(line)
    if options.save_baseline_path is not None and any(r.outcome != "passed" for r in report.cases.values()):
        terminalreporter.write_line("WARNING: baseline saved from a run whose tests did not all pass", yellow=True)
    if written:
        terminalreporter.write_line("ulp-drift written: " + ", ".join(str(p) for p in written))
    color = {"PASS": "green", "WARN": "yellow"}.get(verdict_status(report, comparison), "red")
    terminalreporter.write_line(lines[-1], **{color: True, "bold": True})
