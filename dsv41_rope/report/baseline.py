"""The baseline gate: which cases of a run are worse than in an accepted report, and by how much; and whether the two
drew their generated cases with the same hypothesis version (`hypothesis_note`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from dsv41_rope.report.model import CaseRecord, Report, case_key, summary_value
from dsv41_rope.report.tables import format_number

__all__ = [
    "HYPOTHESIS",
    "BaselineComparison",
    "CaseDelta",
    "Change",
    "compare_cases",
    "compare_to_baseline",
    "hypothesis_note",
    "hypothesis_versions",
]

# The run metadata's hypothesis version (`dsv41_rope.harness.provenance.versions`): the generated-layout cases draw the
# same examples only under the version a baseline was drawn with.
HYPOTHESIS = "hypothesis"


@dataclass(frozen=True)
class Change:
    """One metric of one case that got worse than the baseline (current None: no longer recorded)."""

    metric: str
    baseline: float | int | None
    current: float | int | None

    def describe(self) -> str:
        """Returns e.g. `bit mismatches 0 -> 3`."""
        current = "not recorded" if self.current is None else format_number(self.current)
        return f"{self.metric} {format_number(self.baseline)} -> {current}"


@dataclass(frozen=True)
class CaseDelta:
    """A case that the baseline comparison lists: status is "regression", "missing" or "new"."""

    key: str
    status: str
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class BaselineComparison:
    """The outcome of gating a run on an accepted baseline."""

    baseline_path: str
    baseline_metadata: Mapping[str, Any]
    regressions: tuple[CaseDelta, ...]
    missing: tuple[str, ...]
    new: tuple[str, ...]
    strict: bool
    ulp_tolerance: float
    fraction_tolerance: float
    outside_selection: int = 0
    skipped: int = 0
    hypothesis: str = ""  # `hypothesis_note`: empty when both drew with the same version

    @property
    def failed(self) -> bool:
        """True on any regression, or on missing cases under strict mode."""
        return bool(self.regressions) or (self.strict and bool(self.missing))

    def origin(self) -> str:
        """Returns where the baseline came from: its path, commit, kernel digest and date, as far as it says."""
        meta = self.baseline_metadata
        commit = meta.get("git_commit")
        parts = [f"commit {commit[:12]}" if commit else "commit unknown", str(meta.get("created", "date unknown"))]
        if meta.get("kernel_sha256"):
            parts.insert(1, f"kernel {meta['kernel_sha256']}")
        return f"{self.baseline_path} ({', '.join(parts)})"

    def deltas(self) -> list[CaseDelta]:
        """Returns regressions, then missing cases, then new cases."""
        return [
            *self.regressions,
            *(CaseDelta(key, "missing") for key in self.missing),
            *(CaseDelta(key, "new") for key in self.new),
        ]


def hypothesis_versions(metadata: Mapping[str, Any]) -> list[str]:
    """Returns the hypothesis versions a report's cases were drawn with: a merged report's shards' (each drew its own;
    the merger's process drew none), else the run's own; empty when it records none."""
    shards = metadata.get("shards")
    runs = [shard for shard in shards if isinstance(shard, Mapping)] if isinstance(shards, list) else [metadata]
    return sorted({str(run[HYPOTHESIS]) for run in runs if run.get(HYPOTHESIS)})


def hypothesis_note(metadata: Mapping[str, Any], baseline_metadata: Mapping[str, Any]) -> str:
    """Returns why a run's generated cases may not be its baseline's, e.g. "hypothesis 6.150.0 here, baseline drawn
    with 6.170.17: generated cases may differ" (or "..., baseline records no hypothesis version: ..."); empty when
    both record the same version."""
    here, there = hypothesis_versions(metadata), hypothesis_versions(baseline_metadata)
    if here and here == there:
        return ""
    run = f"hypothesis {', '.join(here)} here" if here else "no hypothesis version recorded here"
    baseline = f"baseline drawn with {', '.join(there)}" if there else "baseline records no hypothesis version"
    return f"{run}, {baseline}: generated cases may differ"


def _is_worse(current: float, baseline: float, tolerance: float, *, higher_is_worse: bool) -> bool:
    if math.isnan(current) or math.isnan(baseline):
        return math.isnan(current) and not math.isnan(baseline)
    # An absolute tolerance: most ulp baselines are 0, where any relative threshold is meaningless.
    return current > baseline + tolerance if higher_is_worse else current < baseline - tolerance


def compare_cases(
    current: CaseRecord, baseline: CaseRecord, *, ulp_tolerance: float = 0.0, fraction_tolerance: float = 0.0
) -> tuple[Change, ...]:
    """Returns the metrics in which `current` is worse than `baseline`.

    Counts (bit mismatches, NaN-bit and signed-zero differences) may not grow at all; the max bit distance and max
    elementwise / norm-wise ulp errors may grow by `ulp_tolerance` (absolute, in ulps); correctly-rounded fractions may
    shrink by `fraction_tolerance` (absolute). A summary the baseline had and the run lacks counts as worse.
    """
    changes: list[Change] = []
    for metric, base, now in (
        ("bit mismatches", baseline.mismatches, current.mismatches),
        ("NaN-bit differences", baseline.nan_bit_differences, current.nan_bit_differences),
        ("signed-zero differences", baseline.signed_zero_differences, current.signed_zero_differences),
    ):
        if now > base:
            changes.append(Change(metric, base, now))
    if _is_worse(current.max_distance, baseline.max_distance, ulp_tolerance, higher_is_worse=True):
        changes.append(Change("max bit distance", baseline.max_distance, current.max_distance))
    for label, base_summary, now_summary in (
        ("elementwise", baseline.elementwise, current.elementwise),
        ("norm-wise", baseline.normwise, current.normwise),
    ):
        for name, metric, tolerance, higher_is_worse in (
            ("max", f"max {label} ulp", ulp_tolerance, True),
            ("correctly_rounded_fraction", f"{label} correctly-rounded fraction", fraction_tolerance, False),
        ):
            base = summary_value(base_summary, name)
            if base is None:
                continue
            now = summary_value(now_summary, name)
            if now is None or _is_worse(now, base, tolerance, higher_is_worse=higher_is_worse):
                changes.append(Change(metric, base, now))
    return tuple(changes)


def compare_to_baseline(
    report: Report,
    baseline: Report,
    *,
    baseline_path: str = "",
    strict: bool = False,
    ulp_tolerance: float = 0.0,
    fraction_tolerance: float = 0.0,
    selected: Collection[str] | None = None,
    skipped: Collection[str] = (),
) -> BaselineComparison:
    """Gates `report` on an accepted `baseline` case by case (see `compare_cases` for what counts as worse).

    A report merged from several kinds of device keys each case by its device too; a baseline of one kind of device
    then gates the cases of every device in the report (a merged, multi-device baseline gates each device's own).

    A run of part of the suite (``-k``, ``-m``, a shard) is gated on the baseline cases of the tests it selected: a
    baseline case of a test it did not select is not missing, only counted (`BaselineComparison.outside_selection`);
    one of a selected test that recorded no such case is, unless the test skipped (it does not apply to this run: the
    project kernel's internals while another implementation is judged, a GPU-only test on a CPU); those are counted
    apart (`BaselineComparison.skipped`).

    Args:
        report: this run.
        baseline: the accepted run.
        baseline_path: where the baseline came from, for messages.
        strict: whether cases missing from this run make the comparison fail.
        ulp_tolerance: absolute slack, in ulps, on max ulp errors and bit distances.
        fraction_tolerance: absolute slack on correctly-rounded fractions.
        selected: the node ids (as records name them) of the tests the run selected; None gates on every baseline case
            (a merged report, which stands for whole runs).
        skipped: the node ids (as records name them) of the tests that skipped in this run.
    """
    expected = _expected_cases(baseline, sorted({r.device_name for r in report.cases.values()}) or [""])
    outside = 0
    if selected is not None:
        chosen = set(selected)
        outside = sum(record.nodeid not in chosen for record in expected.values())
        expected = {key: record for key, record in expected.items() if record.nodeid in chosen}
    skipped_tests = set(skipped)
    skipped_cases = {key for key, record in expected.items() if record.nodeid in skipped_tests} - report.cases.keys()
    expected = {key: record for key, record in expected.items() if key not in skipped_cases}
    regressions = []
    for key in sorted(report.cases.keys() & expected.keys()):
        changes = compare_cases(
            report.cases[key], expected[key], ulp_tolerance=ulp_tolerance, fraction_tolerance=fraction_tolerance
        )
        if changes:
            regressions.append(CaseDelta(key, "regression", changes))
    return BaselineComparison(
        baseline_path=baseline_path,
        baseline_metadata=baseline.metadata,
        regressions=tuple(regressions),
        missing=tuple(sorted(expected.keys() - report.cases.keys())),
        new=tuple(sorted(report.cases.keys() - expected.keys())),
        strict=strict,
        ulp_tolerance=ulp_tolerance,
        fraction_tolerance=fraction_tolerance,
        outside_selection=outside,
        skipped=len(skipped_cases),
        hypothesis=hypothesis_note(report.metadata, baseline.metadata),
    )


def _expected_cases(baseline: Report, device_names: list[str]) -> dict[str, CaseRecord]:
    """The baseline's records under the keys they have in the report: a record without a device name stands for each
    device of the report, one with a name for its own."""
    expected: dict[str, CaseRecord] = {}
    for key, record in baseline.cases.items():
        if record.device_name:
            expected[key] = record
            continue
        for name in device_names:
            expected[case_key(record.nodeid, record.comparison, name)] = record
    return expected
