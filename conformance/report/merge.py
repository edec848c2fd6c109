"""Merging ulp-drift reports: the records of xdist workers or of shards run on several machines, into one report."""

from __future__ import annotations

from collections.abc import Sequence

from conformance.report.model import Report, ReportError, encode_non_finite


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
    reports: Sequence[Report], *, prefer_last: bool = False, sources: Sequence[str] | None = None
) -> Report:
    """Merges the cases of several reports (shards, xdist workers) into one.

    Args:
        reports: the reports, in order.
        prefer_last: when two reports hold the same key with different content, keep the later one instead of failing.
        sources: names for the reports in error messages (paths, worker ids); defaults to their positions.

    Returns:
        A report with the union of the cases and the shared histogram edges; metadata is left empty for the caller.

    Raises:
        ReportError: on conflicting duplicate keys (unless `prefer_last`) or on different histogram edges.
    """
    names = list(sources) if sources is not None else [f"report #{i + 1}" for i in range(len(reports))]
    merged = Report()
    origin: dict[str, str] = {}
    conflicts: list[str] = []
    for name, report in zip(names, reports, strict=True):
        merged.histogram_edges = merge_edges(merged.histogram_edges, report.histogram_edges, name)
        for key, record in report.cases.items():
            previous = merged.cases.get(key)
            if previous is not None and previous.to_json() != record.to_json() and not prefer_last:
                conflicts.append(f"{key} ({origin[key]} vs {name})")
                continue
            merged.cases[key] = record
            origin[key] = name
    if conflicts:
        shown = "\n  ".join(conflicts[:20])
        more = f"\n  ... and {len(conflicts) - 20} more" if len(conflicts) > 20 else ""
        raise ReportError(
            f"{len(conflicts)} case(s) recorded twice with different content (use --prefer-last to keep the later one):"
            f"\n  {shown}{more}"
        )
    return merged
