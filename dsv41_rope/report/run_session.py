"""The ulp-drift state of one pytest process, and the hooks that keep it: `UlpDriftSession`.

One session object a process (a serial run, an xdist worker, or the controller), registered by
`dsv41_rope.report.pytest_hooks`. It keeps each test's records until the test's outcome is known, tracks outcomes,
failed and skipped tests, and the run metadata the tests add; it passes records from xdist workers to the controller
(`dsv41_rope.report.xdist_transfer`) and, at the end of the run, merges, gates and writes the report
(`dsv41_rope.report.run_end`). Which tests the run selected, and under pytest-split which group it ran, come from the
selection recorder it registers (`dsv41_rope.report.selection`).

Installed beside another project, the plugin loads in that project's sessions too, and stays out of them: a session
that neither asked for the suite (``dsv41_rope.harness.under_test.suite_requested``: its tests, its options, its
environment variables) nor recorded or added anything registers no selection recorder, attaches nothing to test
reports, and builds, gates and writes no report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dsv41_rope.harness.under_test import suite_requested
from dsv41_rope.report.added_metadata import FROM_TESTS, checked_value, merge_added
from dsv41_rope.report.baseline import BaselineComparison
from dsv41_rope.report.failed_tests import entry_of_report
from dsv41_rope.report.merge import merge_edges
from dsv41_rope.report.model import CaseRecord, Report, ReportError, portable_nodeid
from dsv41_rope.report.options import ReportOptions
from dsv41_rope.report.recording import split_summary
from dsv41_rope.report.run_end import (
    fail,
    finished_report,
    gate,
    unfinished_tests,
    write_outputs,
    write_terminal_section,
)
from dsv41_rope.report.selection import SelectionRecorder, register_recorder
from dsv41_rope.report.xdist_transfer import ControllerInbox, WorkerOutbox

__all__ = ["UlpDriftSession"]


def _phase_outcome(report: pytest.TestReport) -> str | None:
    if report.failed:
        return "failed"
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.skipped:
        return "skipped"
    return "passed" if report.when == "call" else None


class UlpDriftSession:
    """The ulp-drift state of one pytest run (one per process: the controller, a worker, or a serial run)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.options = ReportOptions.from_config(config)
        # Whether the session asked for the suite or the report; one that did not reports only what its tests record.
        self.requested = self.options.requested or suite_requested(config)
        self.baseline = None if self.is_worker else self.options.load_baseline()
        self.histogram_edges: list[float] | None = None
        # Metadata added in this process (and, on the controller, streamed by workers).
        self.added_metadata: dict[str, Any] = {}
        # The selection and shard this process collects (registered at session start).
        self.selection_recorder: SelectionRecorder | None = None
        self._pending: dict[str, list[CaseRecord]] = {}
        # The node id each test's records carry (`portable_nodeid`), back to pytest's own.
        self._pytest_nodeids: dict[str, str] = {}
        self._outcomes: dict[str, str] = {}
        self._local: dict[str, CaseRecord] = {}
        # Each failed test's line (`dsv41_rope.report.failed_tests`), by pytest's node id, in the order they failed.
        self._failed: dict[str, dict[str, str]] = {}
        # Tests that skipped (the project kernel's internals while another implementation is judged, GPU-only tests on
        # a CPU), as records name them: their baseline cases are not expected of this run.
        self._skipped: set[str] = set()
        self._finished_tests: set[str] = set()
        self.errors: list[str] = []
        self.outbox = WorkerOutbox()
        self.inbox = ControllerInbox(self.errors)
        self.report: Report | None = None
        self.comparison: BaselineComparison | None = None
        self.unfinished = 0
        self.written: list[Path] = []

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Registers the selection recorder, placed among the plugins so that it sees the unsplit selection (only in a
        session that asked for the suite or the report)."""
        if self.requested:
            self.selection_recorder = register_recorder(self.config)

    def used(self) -> bool:
        """Whether there is anything to report: the session asked for it, or this process's tests (or, on the
        controller, a worker's) recorded a case or added run metadata, or something went wrong."""
        return bool(
            self.requested
            or self._local
            or any(self._pending.values())
            or self.added_metadata
            or self.errors
            or any(report.cases or report.metadata.get(FROM_TESTS) for report in self.inbox.reports.values())
        )

    def own_selection(self) -> dict[str, Any]:
        """The selection and shard this process collected, as report metadata; empty before collection."""
        return self.selection_recorder.metadata() if self.selection_recorder is not None else {}

    # -- recording -----------------------------------------------------------------------------------------------------

    def take_summary(self, summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Converts a summary to plain data, keeping the histogram edges once per run instead of once per case."""
        data, edges = split_summary(summary, edges_known=self.histogram_edges is not None)
        if edges is not None:
            self.histogram_edges = merge_edges(self.histogram_edges, edges, "ulp_drift.record")
        return data

    def add_run_metadata(self, key: str, value: Any) -> None:
        """Merges one value of run-level metadata into this process's; see `pytest_hooks.add_run_metadata`."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"run metadata needs a non-empty string key, got {key!r}")
        self.added_metadata = merge_added([self.added_metadata, {key: checked_value(value)}])

    def report_nodeid(self, item: pytest.Item) -> str:
        """Returns the node id the test's records carry: the same in a checkout and in an installed suite."""
        nodeid = portable_nodeid(item.nodeid, getattr(item, "path", None))
        self._pytest_nodeids[nodeid] = item.nodeid
        return nodeid

    def add(self, record: CaseRecord) -> None:
        """Keeps a record until its test's outcome is known.

        Raises:
            ValueError: when this run of the test already recorded the comparison. A test run again (a rerun plugin)
                replaces its earlier records instead.
        """
        pending = self._pending.setdefault(self._pytest_nodeids.get(record.nodeid, record.nodeid), [])
        if any(r.key == record.key for r in pending):
            raise ValueError(f"comparison {record.comparison!r} already recorded for {record.nodeid}")
        pending.append(record)

    def _finish(self, nodeid: str) -> None:
        outcome = self._outcomes.pop(nodeid, "unknown")
        for record in self._pending.pop(nodeid, []):
            self._local[record.key] = dataclasses.replace(record, outcome=outcome)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        """On an xdist worker: sends the test's finished records, and run metadata added since, with its teardown
        report (`dsv41_rope.report.xdist_transfer`)."""
        made = yield
        if not self.is_worker or call.when != "teardown":
            return
        if not (self.requested or self._pending.get(item.nodeid) or self.added_metadata):
            return
        report = made.get_result()
        outcome = "failed" if report.failed else self._outcomes.get(item.nodeid, "unknown")
        gated = self.options.baseline_path is not None and self.selection_recorder is not None
        self.outbox.attach(
            report,
            selection=self.own_selection(),
            selected=self.selection_recorder.selected if gated else None,
            metadata=self.added_metadata,
            records=[dataclasses.replace(r, outcome=outcome) for r in self._pending.get(item.nodeid, ())],
            histogram_edges=self.histogram_edges,
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Tracks each test's outcome over its phases (a failure in any phase sticks); on the controller, also takes
        what a worker sent with the report."""
        if not self.is_worker:
            streamed = self.inbox.take_streamed(report)
            if streamed.metadata:
                self.added_metadata = merge_added([self.added_metadata, streamed.metadata])
            if streamed.histogram_edges is not None:
                self.histogram_edges = merge_edges(self.histogram_edges, streamed.histogram_edges, report.nodeid)
            self._local.update((record.key, record) for record in streamed.records)
        outcome = _phase_outcome(report)
        if outcome is not None and self._outcomes.get(report.nodeid) != "failed":
            self._outcomes[report.nodeid] = outcome
        if report.failed and not self.is_worker and report.nodeid not in self._failed:
            self._failed[report.nodeid] = entry_of_report(report)
        if report.skipped and not self.is_worker:
            self._skipped.add(portable_nodeid(report.nodeid, Path(self.config.rootpath) / report.location[0]))
        if report.when == "teardown":
            self._finished_tests.add(report.nodeid)
            self._finish(report.nodeid)

    def local_report(self) -> Report:
        """Returns this process's records, finishing any whose test never reached teardown (interrupted)."""
        for nodeid in list(self._pending):
            self._finish(nodeid)
        metadata: dict[str, Any] = self.own_selection()
        if self.added_metadata:
            metadata[FROM_TESTS] = self.added_metadata
        return Report(cases=dict(self._local), metadata=metadata, histogram_edges=self.histogram_edges)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """On the xdist controller: takes a finished worker's records, or notes that it sent none."""
        self.inbox.node_down(node, error)

    # -- end of run ----------------------------------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Ships records to the controller (on a worker) or merges, gates and writes the report; a collect-only run
        (``--co``) ran nothing to report on."""
        if self.config.getoption("collectonly", False):
            return
        if self.is_worker:
            self.outbox.send_report(self.config, self.local_report())
            return
        if not self.used():
            return
        self.unfinished = unfinished_tests(session, len(self._finished_tests))
        if self.unfinished:
            fail(session)  # a gate that did not run every test must not pass
        try:
            self.report = finished_report(
                self.local_report(),
                self.inbox,
                config=self.config,
                selection=self.own_selection(),
                failed=self._failed,
                unfinished=self.unfinished,
            )
        except ReportError as error:
            self.errors.append(str(error))
            fail(session)
            return
        if self.errors:
            fail(session)
        if self.baseline is not None:
            self.comparison = gate(
                self.report, self.baseline, self.options, selected=self.selected(), skipped=self._skipped
            )
            if self.comparison.failed:
                fail(session)
        try:
            write_outputs(self.report, self.options, self.comparison, self.written)
        except OSError as error:
            self.errors.append(f"could not write the ulp-drift report: {error}")
            fail(session)

    def selected(self) -> list[str] | None:
        """The tests this run selected, as records name them (this process's collection, else the workers'); None
        when no process said (the gate then expects every baseline case)."""
        own = self.selection_recorder.selected if self.selection_recorder is not None else None
        return own if own is not None else self.inbox.selected

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        """Prints the ulp-drift section after pytest's own summaries, its list of failed tests included, so that a run
        ends with the failed tests grouped by test function and the verdict, however many failed."""
        result = yield
        if not self.is_worker:
            write_terminal_section(
                terminalreporter,
                self.report,
                self.comparison,
                options=self.options,
                errors=self.errors,
                silent_workers=self.inbox.silent,
                written=self.written,
            )
        return result
