"""Merging ulp-drift reports: the records of xdist workers or of shards run on several machines, into one report.

Reports that judged different implementations (``metadata["from_tests"]["implementation under test"]``: another
function or another source digest) never merge: their cases share keys and would mix in one table. Merge each
implementation's shards apart; a report that names none (the self-tests, an older report) merges with any.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsv41_rope.report.added_metadata import FROM_TESTS, IMPLEMENTATION, merge_added
from dsv41_rope.report.model import Report, ReportError, encode_non_finite

__all__ = ["check_one_implementation", "merge_edges", "merge_reports"]


def merge_edges(first: list[float] | None, second: list[float] | None, source: str = "") -> list[float] | None:
    """Returns the histogram edges two reports share; a report without edges takes the other's.

    Raises:
        ReportError: when both have edges and they differ, since their histograms cannot be summed.
    """
    if first is None or second is None:
        return first if second is None else second
    if encode_non_finite(first) != encode_non_finite(second):
        raise ReportError(f"{source or 'reports'}: histogram edges differ ({first} vs {second}); cannot sum histograms")
    return first


def merge_reports(
    reports: Sequence[Report],
    *,
    prefer_last: bool = False,
    sources: Sequence[str] | None = None,
    device_names: Sequence[str] | None = None,
) -> Report:
    """Merges the cases of several reports (shards, xdist workers) into one, and the metadata their tests added.

    Args:
        reports: the reports, in order.
        prefer_last: when two reports hold the same key with different content, keep the later one instead of failing.
        sources: names for the reports in error messages (paths, worker ids); defaults to their positions.
        device_names: the kind of device of each report, to keep the cases of several kinds apart (each record gets
            its report's `device_name`, which its key and the summary's groups include); None merges them as one.

    Returns:
        A report with the union of the cases and the shared histogram edges. Its metadata holds only what the tests
        added (`metadata["from_tests"]`, merged as `dsv41_rope.report.added_metadata` says), when any report has
        some; the rest of the metadata (provenance, the command) is the caller's.

    Raises:
        ReportError: on reports of different implementations, on conflicting duplicate keys (unless `prefer_last`), on
            different histogram edges, or on added metadata that is not a dict.
    """
    names = list(sources) if sources is not None else [f"report #{i + 1}" for i in range(len(reports))]
    check_one_implementation(reports, names)
    merged = Report()
    origin: dict[str, str] = {}
    conflicts: list[str] = []
    added: list[Mapping[str, Any]] = []
    kinds = list(device_names) if device_names is not None else [""] * len(reports)
    for name, report, kind in zip(names, reports, kinds, strict=True):
        if kind:
            report = Report(
                cases={r.key: r for r in (dataclasses.replace(r, device_name=kind) for r in report.cases.values())},
                metadata=report.metadata,
                histogram_edges=report.histogram_edges,
            )
        merged.histogram_edges = merge_edges(merged.histogram_edges, report.histogram_edges, name)
        if FROM_TESTS in report.metadata:
            if not isinstance(report.metadata[FROM_TESTS], Mapping):
                raise ReportError(f"{name}: metadata {FROM_TESTS!r} is not a dict")
            added.append(report.metadata[FROM_TESTS])
        for key, record in report.cases.items():
            previous = merged.cases.get(key)
            if previous is not None and previous.to_json() != record.to_json() and not prefer_last:
                conflicts.append(f"{key} ({origin[key]} vs {name})")
                continue
            merged.cases[key] = record
            origin[key] = name
    if added:
        merged.metadata[FROM_TESTS] = merge_added(added)
    if conflicts:
        shown = "\n  ".join(conflicts[:20])
        more = f"\n  ... and {len(conflicts) - 20} more" if len(conflicts) > 20 else ""
        raise ReportError(
            f"{len(conflicts)} case(s) recorded twice with different content (use --prefer-last to keep the later one):"
            f"\n  {shown}{more}"
        )
    return merged


def check_one_implementation(reports: Sequence[Report], names: Sequence[str]) -> None:
    """Checks that the reports judged one implementation (those that name none aside).

    Raises:
        ReportError: listing each implementation and the reports that judged it.
    """
    judged: dict[str, list[str]] = {}
    described: dict[str, str] = {}
    for name, report in zip(names, reports, strict=True):
        added = report.metadata.get(FROM_TESTS)
        implementation = added.get(IMPLEMENTATION) if isinstance(added, Mapping) else None
        if implementation is None:
            continue
        identity = json.dumps(encode_non_finite(implementation), sort_keys=True)
        judged.setdefault(identity, []).append(name)
        described[identity] = _describe(implementation)
    if len(judged) > 1:
        lines = "\n  ".join(f"{described[identity]}: {', '.join(found)}" for identity, found in judged.items())
        raise ReportError(
            f"the reports judged {len(judged)} different implementations, whose cases must not mix in one report; "
            f"merge each implementation's reports apart:\n  {lines}"
        )


def _describe(implementation: Any) -> str:
    if isinstance(implementation, Mapping) and "function" in implementation:
        return f"{implementation['function']} (sha256 {implementation.get('sha256', '-')})"
    return json.dumps(encode_non_finite(implementation), sort_keys=True)
