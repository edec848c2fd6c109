"""The cases of a report added up per dtype x backend x comparison, and the histogram bins worth showing."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dsv41_rope.report.model import DIFFERENCE_KINDS, CaseRecord, ReportError, summary_value

__all__ = ["GroupSummary", "bin_labels", "shown_bins", "summarize_groups"]


@dataclass(frozen=True)
class GroupSummary:
    """The cases of one dtype x backend x comparison (of one kind of device, in a report merged from several), added up.

    `unexpected` counts, per kind, the differences in cases whose `allowed` does not list that kind; the
    correctly-rounded fraction is weighted by each summary's element count.
    """

    dtype: str
    backend: str
    comparison: str
    cases: int
    elements: int
    mismatches: int
    nan_bit_differences: int
    signed_zero_differences: int
    max_distance: int
    elementwise_max: float | None
    normwise_max: float | None
    correctly_rounded_fraction: float | None
    devices: tuple[str, ...]
    allowed: tuple[str, ...]
    not_passed: int
    unexpected: Mapping[str, int]
    histogram: tuple[int, ...] | None
    device_name: str = ""

    @property
    def label(self) -> str:
        """The group's name in the histogram table and plot: "dtype / backend / comparison", after the device's."""
        parts = [self.device_name] if self.device_name else []
        return " / ".join([*parts, self.dtype, self.backend, self.comparison])


def _max_ulp(values: Iterable[float]) -> float | None:
    values = list(values)
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def _sum_histograms(histograms: Iterable[Sequence[int]]) -> tuple[int, ...] | None:
    total: list[int] | None = None
    for histogram in histograms:
        if total is None:
            total = [0] * len(histogram)
        if len(histogram) != len(total):
            raise ReportError(f"histograms of {len(total)} and {len(histogram)} bins cannot be summed")
        total = [a + int(b) for a, b in zip(total, histogram, strict=True)]
    return tuple(total) if total is not None else None


def summarize_groups(cases: Iterable[CaseRecord]) -> list[GroupSummary]:
    """Adds up cases per dtype x backend x comparison, sorted by those three; in a report merged from several kinds of
    device, per device too (the records' `device_name`), so each device's drift has its own rows."""
    groups: dict[tuple[str, str, str, str], list[CaseRecord]] = {}
    for record in cases:
        groups.setdefault((record.device_name, record.dtype, record.backend, record.comparison), []).append(record)
    summaries = []
    for (device_name, dtype, backend, comparison), records in sorted(groups.items()):
        weighted = [
            (float(r.elementwise["correctly_rounded_fraction"]), int(r.elementwise.get("count", r.elements)))
            for r in records
            if r.elementwise is not None and r.elementwise.get("correctly_rounded_fraction") is not None
        ]
        weight = sum(w for _, w in weighted)
        unexpected = {kind: 0 for kind in DIFFERENCE_KINDS}
        for record in records:
            for kind, count in record.unexpected_differences().items():
                unexpected[kind] += count
        summaries.append(
            GroupSummary(
                dtype=dtype,
                backend=backend,
                comparison=comparison,
                cases=len(records),
                elements=sum(r.elements for r in records),
                mismatches=sum(r.mismatches for r in records),
                nan_bit_differences=sum(r.nan_bit_differences for r in records),
                signed_zero_differences=sum(r.signed_zero_differences for r in records),
                max_distance=max(r.max_distance for r in records),
                elementwise_max=_max_ulp(v for r in records if (v := summary_value(r.elementwise, "max")) is not None),
                normwise_max=_max_ulp(v for r in records if (v := summary_value(r.normwise, "max")) is not None),
                correctly_rounded_fraction=sum(f * w for f, w in weighted) / weight if weight else None,
                devices=tuple(sorted({r.device for r in records})),
                allowed=tuple(sorted(set().union(*(r.allowed_kinds for r in records)))),
                not_passed=sum(r.outcome != "passed" for r in records),
                unexpected=unexpected,
                histogram=_sum_histograms(
                    r.elementwise["histogram"] for r in records if r.elementwise and r.elementwise.get("histogram")
                ),
                device_name=device_name,
            )
        )
    return summaries


def _edge_label(edge: float) -> str:
    if math.isinf(edge):
        return "inf"
    if edge >= 1024 and math.frexp(edge)[0] == 0.5:
        return f"2^{math.frexp(edge)[1] - 1}"
    return f"{edge:g}"


def bin_labels(edges: Sequence[float] | None, bins: int) -> list[str]:
    """Returns the labels of the first `bins` histogram bins, e.g. "<= 0", "(0, 0.5]", or "bin i" without edges."""
    # The dsv41_rope.oracle.ulp convention: one bin per edge, bin 0 holds errors <= edges[0] (exact results), bin
    # i > 0 holds edges[i-1] < error <= edges[i].
    if edges is None or len(edges) < bins:
        return [f"bin {i}" for i in range(bins)]
    labels = [_edge_label(float(e)) for e in edges]
    return [f"<= {labels[0]}", *(f"({lo}, {hi}]" for lo, hi in zip(labels, labels[1:], strict=False))][:bins]


def shown_bins(groups: Sequence[GroupSummary]) -> int:
    """Returns how many leading bins to show: up to the last one any group fills (the far tail is usually empty)."""
    filled = [i for g in groups for i, count in enumerate(g.histogram or ()) if count]
    return max(filled, default=0) + 1
