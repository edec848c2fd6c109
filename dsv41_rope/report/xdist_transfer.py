"""How an xdist run's ulp-drift data reaches its controller, so that a distributed run reports what a serial one does.

A worker attaches each test's finished records, with the run metadata and the selection it has not sent yet, to the
test's teardown report, which xdist hands to the controller as the test ends: an interrupted run (a time limit on a
GPU runner) still reports the tests that finished. At the end of its session the worker also puts its whole report in
``config.workeroutput``, which the controller takes in ``pytest_testnodedown``, as pytest-cov does; a worker that sent
nothing there (it crashed) is noted, and its cases are missing from the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from dsv41_rope.report.model import CaseRecord, Report, ReportError, decode_non_finite, encode_non_finite
from dsv41_rope.report.shards import SELECTION, SHARD

__all__ = ["WORKEROUTPUT_KEY", "ControllerInbox", "Streamed", "WorkerOutbox", "worker_id"]

# Key of the report's data in an xdist worker's `workeroutput`.
WORKEROUTPUT_KEY = "dsv41_ulp_drift"


class WorkerOutbox:
    """What an xdist worker sends the controller: on each teardown report, and in its ``workeroutput`` at the end."""

    def __init__(self) -> None:
        self.selection_sent = False
        self.metadata_sent: Any = {}

    def attach(
        self,
        report: pytest.TestReport,
        *,
        selection: Mapping[str, Any],
        selected: list[str] | None,
        metadata: Mapping[str, Any],
        records: Sequence[CaseRecord],
        histogram_edges: list[float] | None,
    ) -> None:
        """Attaches to a test's teardown report its records, the run metadata added since the last such report and,
        on the first, the selection (and the tests selected, which the baseline gate needs).

        Args:
            report: the teardown report.
            selection: this worker's selection and shard (`dsv41_rope.report.selection`).
            selected: the tests this worker selected, as records name them; None unless the run is gated.
            metadata: the run metadata added in this worker so far.
            records: the test's records, with its outcome.
            histogram_edges: the run's histogram edges.
        """
        if not self.selection_sent:
            report.ulp_drift_selection = dict(selection)
            if selected is not None:
                report.ulp_drift_selected = selected
            self.selection_sent = True
        encoded = encode_non_finite(dict(metadata))
        if encoded != self.metadata_sent:
            report.ulp_drift_metadata = self.metadata_sent = encoded
        if records:
            report.ulp_drift_records = [record.to_json() for record in records]
            report.ulp_drift_histogram_edges = histogram_edges

    @staticmethod
    def send_report(config: pytest.Config, report: Report) -> None:
        """Hands the worker's whole report to the controller, at the end of its session."""
        config.workeroutput[WORKEROUTPUT_KEY] = report.to_json()  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class Streamed:
    """What a worker attached to one teardown report: records, run metadata (None: unchanged) and histogram edges."""

    records: list[CaseRecord]
    metadata: dict[str, Any] | None
    histogram_edges: list[float] | None


class ControllerInbox:
    """What the xdist controller received from its workers.

    Attributes:
        reports: each worker's whole report, by worker id.
        silent: each worker that sent none, with why.
        selection: the selection and shard the workers collected (every worker collects the same one).
        selected: the tests the workers selected, as records name them; None when none said.
        errors: where a disagreement between workers is noted (the session's list of errors).
    """

    def __init__(self, errors: list[str]) -> None:
        self.reports: dict[str, Report] = {}
        self.silent: dict[str, str] = {}
        self.selection: dict[str, Any] = {}
        self.selected: list[str] | None = None
        self.errors = errors

    def take_streamed(self, report: pytest.TestReport) -> Streamed:
        """Takes what a worker attached to a test report (see `WorkerOutbox.attach`)."""
        self.take_selection(getattr(report, "ulp_drift_selection", None), report.nodeid)
        selected = getattr(report, "ulp_drift_selected", None)
        if selected is not None and self.selected is None:
            self.selected = list(selected)
        metadata = getattr(report, "ulp_drift_metadata", None)
        edges = getattr(report, "ulp_drift_histogram_edges", None)
        return Streamed(
            records=[CaseRecord.from_json(data) for data in getattr(report, "ulp_drift_records", None) or ()],
            metadata=decode_non_finite(metadata) if metadata else None,
            histogram_edges=[float(edge) for edge in edges] if edges is not None else None,
        )

    def take_selection(self, selection: Mapping[str, Any] | None, source: str) -> None:
        """Keeps the selection a worker collected, noting an error when it differs from another worker's."""
        selection = {key: value for key, value in (selection or {}).items() if key in (SELECTION, SHARD)}
        if not selection:
            return
        if not self.selection:
            self.selection = selection
        elif selection != self.selection:
            self.errors.append(
                f"xdist workers recorded different selections ({source}): {selection} vs {self.selection}"
            )

    def node_down(self, node: Any, error: object | None) -> None:
        """Takes a finished worker's report from its ``workeroutput``, or notes that it sent none."""
        worker = worker_id(node)
        data = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if data is None:
            # xdist reports a crashed worker after its regular shutdown too; data already received stands.
            if worker not in self.reports:
                self.silent[worker] = str(error) if error else "finished without sending ulp-drift data"
            return
        try:
            self.reports[worker] = Report.from_json(data, source=f"xdist worker {worker}")
        except ReportError as err:
            self.silent[worker] = str(err)
            return
        self.silent.pop(worker, None)
        self.take_selection(self.reports[worker].metadata, f"xdist worker {worker}")

    def metadata(self) -> dict[str, Any]:
        """The report's metadata about the workers (empty without xdist): their ids, those that sent no data, and
        which device each ran on, from the devices its records name ("gw1: cuda:1")."""
        workers = sorted(self.reports)
        if not (workers or self.silent):
            return {}
        return {
            "xdist_workers": workers,
            "workers_without_data": sorted(self.silent),
            "xdist_worker_devices": [
                f"{worker}: {', '.join(sorted({r.device for r in self.reports[worker].cases.values()})) or '-'}"
                for worker in workers
            ],
        }


def worker_id(node: Any) -> str:
    """The id of an xdist worker node ("gw3")."""
    workerinput = getattr(node, "workerinput", None)
    if isinstance(workerinput, Mapping) and "workerid" in workerinput:
        return str(workerinput["workerid"])
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", node))
