"""pytest glue for the ulp-drift report: options, the `ulp_drift` fixture, xdist merging and the baseline gate.

Registered from the root conftest with `pytest_plugins = ["conformance.plugin"]`. Tests call
`ulp_drift.record(...)` with the numbers `oracle.ulp` computed; the run ends with a summary table, and optionally a
report directory (`--ulp-report`), a baseline gate (`--ulp-baseline`) and a new baseline (`--ulp-save-baseline`).
Under pytest-xdist each worker hands its records to the controller through `config.workeroutput`, as pytest-cov does,
so a distributed run reports exactly what a serial one does. Code running in the session (a fixture, a hook) adds
run-level metadata to the report with `add_run_metadata`. The report records which tests the run selected and, under
pytest-split, which group it ran (`conformance.selection`). Data model, comparison and rendering live in the
`conformance.report` package.

The verdict agrees with pytest's outcome: the report records how many tests failed and each one's line
(`conformance.report.failed_tests`), which the terminal and the Markdown group by test function. The baseline gate
expects the baseline's cases of the tests the run selected, not those a `-k` or a shard left out.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from conformance.provenance import kernel_sha256, kernel_source, run_metadata
from conformance.report import (
    FAILED_TESTS,
    FROM_TESTS,
    IMPLEMENTATION,
    SELECTION,
    SHARD,
    TESTS_FAILED,
    BaselineComparison,
    CaseRecord,
    Report,
    ReportError,
    UlpDriftRecorder,
    append_step_summary,
    checked_value,
    compare_to_baseline,
    decode_non_finite,
    encode_non_finite,
    entry_of_report,
    merge_added,
    merge_edges,
    merge_reports,
    portable_nodeid,
    render_markdown,
    render_terminal,
    split_summary,
    verdict_status,
    write_report,
)
from conformance.selection import RECORDER_PLUGIN, SelectionRecorder, register_recorder

# Key of this plugin's data in an xdist worker's `workeroutput`.
WORKEROUTPUT_KEY = "dsv41_ulp_drift"

_SESSION = pytest.StashKey["UlpDriftSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds the --ulp-* options."""
    group = parser.getgroup("ulp-drift", "ulp-drift report (dsv41-rope conformance)")
    group.addoption(
        "--ulp-report",
        metavar="DIR",
        help="write DIR/ulp-drift.json, DIR/ulp-drift.md and (with matplotlib) DIR/ulp-drift.png",
    )
    group.addoption(
        "--ulp-baseline",
        metavar="FILE",
        help="fail the session when any case is worse than in this accepted ulp-drift.json",
    )
    group.addoption(
        "--ulp-baseline-strict",
        action="store_true",
        help="with --ulp-baseline, also fail when baseline cases are missing from this run",
    )
    group.addoption(
        "--ulp-save-baseline",
        metavar="FILE",
        help="write this run as a baseline (an ulp-drift.json) to FILE",
    )
    group.addoption(
        "--ulp-tolerance",
        metavar="ULPS",
        type=float,
        default=0.0,
        help="absolute slack on max ulp errors and bit distances against the baseline (default 0)",
    )
    group.addoption(
        "--ulp-fraction-tolerance",
        metavar="FRACTION",
        type=float,
        default=0.0,
        help="absolute slack on correctly-rounded fractions against the baseline (default 0)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Creates the per-run session object and registers it for the run's hooks."""
    session = UlpDriftSession(config)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "ulp-drift-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregisters the session object (pytester runs many configs in one process)."""
    session = config.stash.get(_SESSION, None)
    if session is not None:
        recorder = session.selection_recorder
        if recorder is not None and config.pluginmanager.get_plugin(RECORDER_PLUGIN) is recorder:
            config.pluginmanager.unregister(recorder)
        config.pluginmanager.unregister(session)
        del config.stash[_SESSION]


def add_run_metadata(config: pytest.Config, key: str, value: Any) -> None:
    """Adds run-level metadata to this run's ulp-drift report, from anywhere in the session (a fixture, a hook).

    It ends up in the report's JSON as ``metadata["from_tests"][key]`` and at the top of the Markdown, as a line
    "key: value" or, for a dict, a small table. On an xdist worker the value travels to the controller with the
    worker's records. Values of one key from several calls, workers or shards merge: dicts key by key (so each worker
    can add one entry per device), equal values collapse to one, different values become a sorted list of them.

    A fixture calls it with its request's config::

        @pytest.fixture(scope="session")
        def contraction(request, device):
            variant = calibrate(device)
            add_run_metadata(request.config, "contraction variant", {f"{device} ({name(device)})": variant})
            return variant

    Args:
        config: the session's config (``request.config``, the ``pytestconfig`` fixture).
        key: a non-empty name, shown as it is.
        value: JSON-able data: None, a bool, number or string, a list of them (taken as several values), or a dict
            with string keys of such values; numpy and torch scalars are converted.

    Raises:
        ValueError: on an empty key.
        TypeError: on a value JSON cannot hold.
        RuntimeError: when this plugin is not active in the session.
    """
    session = config.stash.get(_SESSION, None)
    if session is None:
        raise RuntimeError('the ulp-drift plugin is not active: load it with pytest_plugins = ["conformance.plugin"]')
    session.add_run_metadata(key, value)


@pytest.fixture
def ulp_drift(request: pytest.FixtureRequest) -> UlpDriftRecorder:
    """Records the ulp-drift of the comparisons the test makes; see `UlpDriftRecorder.record`."""
    callspec = getattr(request.node, "callspec", None)
    session = request.config.stash[_SESSION]
    return UlpDriftRecorder(
        session,
        nodeid=session.report_nodeid(request.node),
        case_id=callspec.id if callspec is not None else "",
        # junit XML readers see each comparison's mismatch count too, without parsing the ulp-drift report.
        properties=request.node.user_properties,
    )


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
        self.report_dir = self._path_option("--ulp-report")
        self.baseline_path = self._path_option("--ulp-baseline")
        self.save_baseline_path = self._path_option("--ulp-save-baseline")
        self.strict: bool = config.getoption("--ulp-baseline-strict")
        self.ulp_tolerance: float = config.getoption("--ulp-tolerance")
        self.fraction_tolerance: float = config.getoption("--ulp-fraction-tolerance")
        self.requested = any(p is not None for p in (self.report_dir, self.baseline_path, self.save_baseline_path))
        self.histogram_edges: list[float] | None = None
        self._pending: dict[str, list[CaseRecord]] = {}
        # The node id each test's records carry (`portable_nodeid`), back to pytest's own.
        self._pytest_nodeids: dict[str, str] = {}
        self._outcomes: dict[str, str] = {}
        # Each failed test's line (`conformance.report.failed_tests`), by pytest's node id, in the order they failed.
        self._failed: dict[str, dict[str, str]] = {}
        # Tests that skipped (the project kernel's internals while another implementation is judged, GPU-only tests on
        # a CPU), as records name them: their baseline cases are not expected of this run.
        self._skipped: set[str] = set()
        # The tests xdist workers selected (node ids as records carry them), for the baseline gate.
        self._workers_selected: list[str] | None = None
        self._local: dict[str, CaseRecord] = {}
        self._worker_reports: dict[str, Report] = {}
        self._silent_workers: dict[str, str] = {}
        # Metadata added in this process (and, on the controller, streamed by workers), and what a worker last sent.
        self.added_metadata: dict[str, Any] = {}
        self._metadata_sent: dict[str, Any] = {}
        # The selection and shard this process collected (registered at session start), and those a worker sent.
        self.selection_recorder: SelectionRecorder | None = None
        self._selection: dict[str, Any] = {}
        self._selection_sent = False
        self.report: Report | None = None
        self.unfinished = 0
        self._finished_tests: set[str] = set()
        self.comparison: BaselineComparison | None = None
        self.written: list[Path] = []
        self.errors: list[str] = []
        self.baseline: Report | None = None
        if self.baseline_path is not None and not self.is_worker:
            # Read it before any test runs: a typo in the path should not cost a whole GPU run.
            try:
                self.baseline = Report.load(self.baseline_path)
            except ReportError as error:
                raise pytest.UsageError(f"--ulp-baseline: {error}") from error

    def _path_option(self, name: str) -> Path | None:
        value = self.config.getoption(name)
        return None if value is None else Path(self.config.invocation_params.dir, value)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Registers the selection recorder, placed among the plugins so that it sees the unsplit selection."""
        self.selection_recorder = register_recorder(self.config)

    def _own_selection(self) -> dict[str, Any]:
        return self.selection_recorder.metadata() if self.selection_recorder is not None else {}

    # -- recording -----------------------------------------------------------------------------------------------------

    def take_summary(self, summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Converts a summary to plain data, keeping the histogram edges once per run instead of once per case."""
        data, edges = split_summary(summary, edges_known=self.histogram_edges is not None)
        if edges is not None:
            self.histogram_edges = merge_edges(self.histogram_edges, edges, "ulp_drift.record")
        return data

    def add_run_metadata(self, key: str, value: Any) -> None:
        """Merges one value of run-level metadata into this process's; see `add_run_metadata`."""
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
        """On an xdist worker: attaches the test's finished records, and run metadata added since the last such report,
        to its teardown report, so that they reach the controller as each test ends and an interrupted run (a time
        limit on a GPU runner) still reports them."""
        made = yield
        if not self.is_worker or call.when != "teardown":
            return
        report = made.get_result()
        if not self._selection_sent:
            report.ulp_drift_selection = self._own_selection()
            if self.baseline_path is not None and self.selection_recorder is not None:
                report.ulp_drift_selected = self.selection_recorder.selected
            self._selection_sent = True
        metadata = encode_non_finite(self.added_metadata)
        if metadata != self._metadata_sent:
            report.ulp_drift_metadata = self._metadata_sent = metadata
        if item.nodeid not in self._pending:
            return
        outcome = "failed" if report.failed else self._outcomes.get(item.nodeid, "unknown")
        report.ulp_drift_records = [
            dataclasses.replace(r, outcome=outcome).to_json() for r in self._pending[item.nodeid]
        ]
        report.ulp_drift_histogram_edges = self.histogram_edges

    def _take_streamed(self, report: pytest.TestReport) -> None:
        """On the controller: keeps the records, selection and run metadata a worker attached to a teardown report."""
        self._take_selection(getattr(report, "ulp_drift_selection", None), report.nodeid)
        selected = getattr(report, "ulp_drift_selected", None)
        if selected is not None and self._workers_selected is None:
            self._workers_selected = list(selected)
        metadata = getattr(report, "ulp_drift_metadata", None)
        if metadata:
            self.added_metadata = merge_added([self.added_metadata, decode_non_finite(metadata)])
        edges = getattr(report, "ulp_drift_histogram_edges", None)
        if edges is not None:
            self.histogram_edges = merge_edges(self.histogram_edges, [float(e) for e in edges], report.nodeid)
        for data in getattr(report, "ulp_drift_records", None) or ():
            record = CaseRecord.from_json(data)
            self._local[record.key] = record

    def _take_selection(self, selection: Mapping[str, Any] | None, source: str) -> None:
        """On the controller: keeps the selection a worker collected; every worker collects the same one."""
        selection = {key: value for key, value in (selection or {}).items() if key in (SELECTION, SHARD)}
        if not selection:
            return
        if not self._selection:
            self._selection = selection
        elif selection != self._selection:
            self.errors.append(
                f"xdist workers recorded different selections ({source}): {selection} vs {self._selection}"
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Tracks each test's outcome over its phases; a failure in any phase sticks."""
        if not self.is_worker:
            self._take_streamed(report)
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
        metadata: dict[str, Any] = self._own_selection()
        if self.added_metadata:
            metadata[FROM_TESTS] = self.added_metadata
        return Report(cases=dict(self._local), metadata=metadata, histogram_edges=self.histogram_edges)

    # -- xdist ---------------------------------------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """On the xdist controller: takes a finished worker's records, or notes that it sent none."""
        worker = _worker_id(node)
        data = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if data is None:
            # xdist reports a crashed worker after its regular shutdown too; data already received stands.
            if worker not in self._worker_reports:
                self._silent_workers[worker] = str(error) if error else "finished without sending ulp-drift data"
            return
        try:
            self._worker_reports[worker] = Report.from_json(data, source=f"xdist worker {worker}")
        except ReportError as err:
            self._silent_workers[worker] = str(err)
            return
        self._silent_workers.pop(worker, None)
        self._take_selection(self._worker_reports[worker].metadata, f"xdist worker {worker}")

    # -- end of run ----------------------------------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Ships records to the controller (on a worker) or writes, gates and saves the report; a collect-only run
        (``--co``) ran nothing to report on."""
        if self.config.getoption("collectonly", False):
            return
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = self.local_report().to_json()  # type: ignore[attr-defined]
            return
        # An interrupt (a time limit's SIGINT, -x) can end an xdist run with a normal exit status: compare counts.
        self.unfinished = max(0, session.testscollected - len(self._finished_tests))
        if session.exitstatus == pytest.ExitCode.INTERRUPTED and not self.unfinished:
            self.unfinished = -1
        if self.unfinished:
            self._fail(session)  # a gate that did not run every test must not pass
        try:
            self.report = self._merged_report()
        except ReportError as error:
            self.errors.append(str(error))
            self._fail(session)
            return
        if self.errors:
            self._fail(session)
        if self.baseline is not None:
            self.comparison = compare_to_baseline(
                self.report,
                self.baseline,
                baseline_path=str(self.config.getoption("--ulp-baseline")),
                strict=self.strict,
                ulp_tolerance=self.ulp_tolerance,
                fraction_tolerance=self.fraction_tolerance,
                selected=self._selected(),
                skipped=self._skipped,
            )
            if self.comparison.failed:
                self._fail(session)
        try:
            self._write_outputs()
        except OSError as error:
            self.errors.append(f"could not write the ulp-drift report: {error}")
            self._fail(session)

    def _selected(self) -> list[str] | None:
        """The tests this run selected, as records name them (this process's collection, else the workers'); None
        when no process said (the gate then expects every baseline case)."""
        own = self.selection_recorder.selected if self.selection_recorder is not None else None
        return own if own is not None else self._workers_selected

    def _merged_report(self) -> Report:
        workers = sorted(self._worker_reports)
        merged = merge_reports(
            [self.local_report(), *(self._worker_reports[w] for w in workers)],
            # xdist runs each test once, so workers never share a key; if a plugin ever makes them, keep the later
            # record rather than lose the whole report at the end of a long run.
            prefer_last=True,
            sources=["controller", *workers],
        )
        command = shlex.join(["pytest", *self.config.invocation_params.args])
        selection = self._own_selection() or self._selection
        judged_source = _judged_source(merged.metadata)
        provenance = run_metadata(command, self.config.rootpath, kernel_path=judged_source)
        if judged_source is not None and provenance["kernel_sha256"] != kernel_sha256(kernel_source()):
            # Another implementation: the project's kernel file still holds the eager reference and the calibration.
            provenance["reference_sha256"] = kernel_sha256(kernel_source())
        merged.metadata = {**provenance, **selection, **merged.metadata}
        merged.metadata[TESTS_FAILED] = len(self._failed)
        merged.metadata[FAILED_TESTS] = dict(self._failed)
        if self.unfinished:
            merged.metadata["interrupted"] = True
            if self.unfinished > 0:
                merged.metadata["tests_not_run"] = self.unfinished
        if workers or self._silent_workers:
            merged.metadata["xdist_workers"] = workers
            merged.metadata["workers_without_data"] = sorted(self._silent_workers)
            # Which worker ran on which device (a host with several GPUs pins worker gwN to GPU N mod k), from the
            # devices its records name: "gw1: cuda:1".
            merged.metadata["xdist_worker_devices"] = [
                f"{worker}: {', '.join(sorted({r.device for r in self._worker_reports[worker].cases.values()})) or '-'}"
                for worker in workers
            ]
        return merged

    def _write_outputs(self) -> None:
        assert self.report is not None
        markdown = None
        if self.report_dir is not None:
            paths, markdown = write_report(self.report, self.report_dir, self.comparison)
            self.written += paths
        if self.save_baseline_path is not None:
            self.written.append(self.report.write_json(self.save_baseline_path))
        if self.requested:
            if markdown is None:
                markdown = render_markdown(self.report, self.comparison)
            append_step_summary(markdown)

    @staticmethod
    def _fail(session: pytest.Session) -> None:
        # Only turn a passing (or empty) run into a failure; an interrupt or a usage error keeps its own code.
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        """Prints the ulp-drift section after pytest's own summaries, its list of failed tests included, so that a run
        ends with the failed tests grouped by test function and the verdict, however many failed."""
        result = yield
        self._write_terminal_section(terminalreporter)
        return result

    def _write_terminal_section(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Prints the group table, baseline deltas, worker warnings, files written and the verdict."""
        if self.is_worker or (self.report is None and not self.errors):
            return
        # A session that neither recorded nor judged anything (another project's tests, in an environment where the
        # suite is installed) gets no section; one whose tests judged an implementation does, failures and all.
        judged = self.report is not None and (self.report.cases or self.report.metadata.get(FROM_TESTS))
        if self.report is not None and not (judged or self.requested or self._silent_workers):
            return
        terminalreporter.write_sep("=", "ulp drift")
        for worker, why in sorted(self._silent_workers.items()):
            terminalreporter.write_line(
                f"WARNING: xdist worker {worker} sent no ulp-drift data ({why}); its cases are missing", yellow=True
            )
        for error in self.errors:
            terminalreporter.write_line(f"ERROR: {error}", red=True)
        if self.report is None:
            return
        lines = render_terminal(self.report, self.comparison, width=120)
        for line in lines[:-1]:
            terminalreporter.write_line(line)
        if self.save_baseline_path is not None and any(r.outcome != "passed" for r in self.report.cases.values()):
            terminalreporter.write_line("WARNING: baseline saved from a run whose tests did not all pass", yellow=True)
        if self.written:
            terminalreporter.write_line("ulp-drift written: " + ", ".join(str(p) for p in self.written))
        color = {"PASS": "green", "WARN": "yellow"}.get(verdict_status(self.report, self.comparison), "red")
        terminalreporter.write_line(lines[-1], **{color: True, "bold": True})


def _judged_source(metadata: Mapping[str, Any]) -> Path | None:
    """The source file of the implementation the tests judged (``implementation under test``), whose digest is the
    run's ``kernel_sha256``; None (the project's kernel file) when the tests named none."""
    added = metadata.get(FROM_TESTS)
    judged = added.get(IMPLEMENTATION) if isinstance(added, Mapping) else None
    source = judged.get("source") if isinstance(judged, Mapping) else None
    return Path(source) if isinstance(source, str) and source != "-" else None


def _worker_id(node: Any) -> str:
    workerinput = getattr(node, "workerinput", None)
    if isinstance(workerinput, Mapping) and "workerid" in workerinput:
        return str(workerinput["workerid"])
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", node))
