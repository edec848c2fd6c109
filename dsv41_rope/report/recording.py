"""What a test records: the `ulp_drift` fixture's recorder, and the checks of its counts and error summaries.

The plugin's ``ulp_drift`` fixture (`dsv41_rope.report.pytest_hooks`) hands the recorder to each test; nothing here
touches pytest.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from dsv41_rope.report.model import CaseRecord, plain

__all__ = [
    "RecordKeeper",
    "UlpDriftRecorder",
    "checked_counts",
    "checked_device",
    "oracle_histogram_edges",
    "split_summary",
]

# Counts that are parts of `elements`: none may exceed it.
_PARTS_OF_ELEMENTS = ("mismatches", "nan_bit_differences", "signed_zero_differences")


def checked_counts(comparison: str, counts: Mapping[str, Any]) -> dict[str, int]:
    """Returns the counts of one comparison (elements, mismatches, ...) as Python ints.

    Args:
        comparison: the comparison's label, for messages.
        counts: the counts by field name; integers of any kind (numpy, torch) are accepted.

    Raises:
        ValueError: on an empty label, a negative count, or a difference count above `elements`.
        TypeError: on a count that is not an integer.
    """
    if not comparison or not isinstance(comparison, str):
        raise ValueError(f"comparison must be a non-empty label, got {comparison!r}")
    checked = {name: _count(name, value) for name, value in counts.items()}
    for name in _PARTS_OF_ELEMENTS:
        if checked.get(name, 0) > checked["elements"]:
            raise ValueError(f"{name}={checked[name]} exceeds elements={checked['elements']} for {comparison!r}")
    return checked


def _count(name: str, value: Any) -> int:
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if count < 0:
        raise ValueError(f"{name} must not be negative, got {count}")
    return count


def checked_device(device: Any) -> str:
    """Returns the device that ran a case as the report writes it: "cpu", or an accelerator with its index ("cuda:3").

    On a host with several GPUs the index says which one ran the case (xdist worker ``gwN`` runs on GPU ``N mod k``),
    so an accelerator without one (``torch.device("cuda")``) is refused rather than recorded ambiguously.

    Raises:
        ValueError: on an empty name, or an accelerator without an index.
    """
    name = str(device)
    kind, _, index = name.partition(":")
    if not kind or (kind != "cpu" and not index.isdigit()):
        raise ValueError(f"device {name!r} does not say which device ran the case: record its index, e.g. cuda:3")
    return name


def split_summary(
    summary: Mapping[str, Any] | None, *, edges_known: bool
) -> tuple[dict[str, Any] | None, list[float] | None]:
    """Converts a `dsv41_rope.oracle.ulp.summarize` dict to plain data and takes its histogram edges out of it.

    A report keeps the edges once per run instead of once per case. A summary with a histogram but no edges, recorded
    while no edges are known yet, takes them from `dsv41_rope.oracle.ulp` when the tests imported it.

    Args:
        summary: the summary, or None.
        edges_known: whether the caller already holds the run's edges.

    Returns:
        The summary without edges (None for None) and its edges as floats (None when it had none).

    Raises:
        TypeError: when the summary is not a dict.
    """
    if summary is None:
        return None, None
    if not isinstance(summary, Mapping):
        raise TypeError(
            f"a summary must be a dict as dsv41_rope.oracle.ulp.summarize returns, got {type(summary).__name__}"
        )
    data = plain(summary)
    edges = data.pop("histogram_edges", None)
    if edges is None and data.get("histogram") is not None and not edges_known:
        edges = oracle_histogram_edges()
    return data, None if edges is None else [float(e) for e in edges]


def oracle_histogram_edges() -> list[float] | None:
    """Returns `dsv41_rope.oracle.ulp.HISTOGRAM_EDGES` if the tests already imported it, else None.

    The report never imports dsv41_rope/oracle/ itself: it runs in an xdist controller that imports no torch.
    """
    module = sys.modules.get("dsv41_rope.oracle.ulp")
    edges = getattr(module, "HISTOGRAM_EDGES", None)
    return None if edges is None else [float(e) for e in plain(edges)]


class RecordKeeper(Protocol):
    """Where a recorder's records go: the plugin's session, which keeps them until the test's outcome is known."""

    def take_summary(self, summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Returns the summary as it is stored (plain data, histogram edges kept once per run)."""

    def add(self, record: CaseRecord) -> None:
        """Keeps one record of the current test."""

    def add_run_metadata(self, key: str, value: Any) -> None:
        """Merges one value of run-level metadata into the run's (`pytest_hooks.add_run_metadata`)."""


class UlpDriftRecorder:
    """The `ulp_drift` fixture: records one comparison of one test per `record` call.

    Args:
        keeper: where the records go (the plugin's session).
        nodeid: the test's node id.
        case_id: the test's parametrization id ("" for a test without parameters).
        properties: the test's user properties (junit XML), which get each comparison's mismatch count.
    """

    def __init__(
        self, keeper: RecordKeeper, *, nodeid: str, case_id: str, properties: list[tuple[str, object]]
    ) -> None:
        self._keeper = keeper
        self._nodeid = nodeid
        self._case_id = case_id
        self._properties = properties

    def record(
        self,
        *,
        comparison: str,
        dtype: str,
        backend: str,
        device: str,
        elements: int,
        mismatches: int,
        nan_bit_differences: int = 0,
        signed_zero_differences: int = 0,
        max_distance: int = 0,
        elementwise: Mapping[str, Any] | None = None,
        normwise: Mapping[str, Any] | None = None,
        allowed: str = "",
        detail: str = "",
    ) -> None:
        """Records one comparison of this test; the report keys it `<nodeid>::<comparison>`.

        Args:
            comparison: what was compared with what, e.g. "fused-vs-eager", "fused-vs-truth", "backward-vs-eager".
            dtype: the tensor dtype, e.g. "bfloat16" (a torch.dtype is accepted and written without `torch.`).
            backend: how the kernel ran, e.g. "cuda" or "interpreter" (`dsv41_rope.harness.backend.name()`).
            device: where it ran, "cpu" or an accelerator with its index, e.g. "cuda:3" (a torch.device is accepted).
            elements: elements compared.
            mismatches: elements whose bits differ (`BitDifferences.mismatches`).
            nan_bit_differences: NaNs whose payload or sign bits differ, counted apart.
            signed_zero_differences: +0 against -0, counted apart.
            max_distance: largest distance between the bit patterns, in ulps.
            elementwise: `dsv41_rope.oracle.ulp.summarize` of elementwise ulp errors against the float64 truth, if any.
            normwise: `dsv41_rope.oracle.ulp.summarize` of norm-wise ulp errors, if any.
            allowed: comma-separated difference kinds this comparison tolerates ("mismatch", "nan-bits",
                "signed-zero"), so the report shows them as allowed instead of hiding them.
            detail: free text shown next to the case in the report.

        Raises:
            ValueError: on a comparison already recorded by this test, on negative or impossible counts, or on an
                accelerator device without an index.
            TypeError: on a count that is not an integer or a summary that is not a dict.
        """
        counts = checked_counts(
            comparison,
            {
                "elements": elements,
                "mismatches": mismatches,
                "nan_bit_differences": nan_bit_differences,
                "signed_zero_differences": signed_zero_differences,
                "max_distance": max_distance,
            },
        )
        record = CaseRecord(
            nodeid=self._nodeid,
            comparison=comparison,
            case_id=self._case_id,
            outcome="unknown",
            dtype=str(dtype).removeprefix("torch."),
            backend=str(backend),
            device=checked_device(device),
            **counts,
            elementwise=self._keeper.take_summary(elementwise),
            normwise=self._keeper.take_summary(normwise),
            allowed=str(allowed),
            detail=str(detail),
        )
        self._keeper.add(record)
        self._properties.append((f"ulp_mismatches[{comparison}]", counts["mismatches"]))

    def add_run_metadata(self, key: str, value: Any) -> None:
        """Adds run-level metadata to the report, as `dsv41_rope.report.pytest_hooks.add_run_metadata` does (for a
        check that holds the recorder but not the session's config)."""
        self._keeper.add_run_metadata(key, value)
