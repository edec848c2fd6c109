"""The ulp-drift report: data model, merging, baseline comparison and rendering.

The pytest plugin (`conformance.plugin`) and the shard merger (`conformance.merge`) both go through this module, so a
report written by one runner, merged from several, or gated against a baseline is read, compared and rendered the same
way everywhere. Nothing here imports torch, triton or the oracle: records arrive as plain numbers and dicts.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "dsv41-rope/ulp-drift/1"
JSON_NAME = "ulp-drift.json"
MARKDOWN_NAME = "ulp-drift.md"
PNG_NAME = "ulp-drift.png"

# Names of the difference kinds a comparison may list in `allowed`; other words are kept and shown but match nothing.
MISMATCH = "mismatch"
NAN_BITS = "nan-bits"
SIGNED_ZERO = "signed-zero"
DIFFERENCE_KINDS = (MISMATCH, NAN_BITS, SIGNED_ZERO)

# Strict JSON has no inf/nan, yet an ulp error is infinite when a NaN meets a number; spell them as strings.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class ReportError(ValueError):
    """A report cannot be read, or several reports cannot be merged."""


def case_key(nodeid: str, comparison: str) -> str:
    """Returns the key of one record: the test's node id and the comparison label, joined by `::`."""
    return f"{nodeid}::{comparison}"


def plain(value: Any) -> Any:
    """Converts numpy/torch scalars and arrays inside `value` to Python numbers and lists, recursively.

    Args:
        value: a summary as `oracle.ulp.summarize` returns it, or any part of one.

    Returns:
        The same structure built from dict, list, str, int, float, bool and None only.
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays, torch tensors
        return plain(value.tolist())
    if isinstance(value, Sequence):
        return [plain(v) for v in value]
    raise TypeError(f"cannot store a {type(value).__name__} in the ulp-drift report: {value!r}")


def _encode(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


@dataclass(frozen=True)
class CaseRecord:
    """What one test recorded about one comparison, plus the test's case id and outcome.

    Counts come from `oracle.ulp.compare_bits`; `elementwise` and `normwise` are `oracle.ulp.summarize` dicts
    (max, mean, p99, histogram, correctly_rounded_fraction, count) or None when the comparison has no float64 truth.
    """

    nodeid: str
    comparison: str
    case_id: str
    outcome: str
    dtype: str
    backend: str
    device: str
    elements: int
    mismatches: int
    nan_bit_differences: int = 0
    signed_zero_differences: int = 0
    max_distance: int = 0
    elementwise: dict[str, Any] | None = None
    normwise: dict[str, Any] | None = None
    allowed: str = ""
    detail: str = ""

    @property
    def key(self) -> str:
        """The record's key in the report: `<nodeid>::<comparison>`."""
        return case_key(self.nodeid, self.comparison)

    @property
    def allowed_kinds(self) -> frozenset[str]:
        """The words of `allowed`, e.g. {"signed-zero", "nan-bits"}."""
        return frozenset(word.strip() for word in self.allowed.split(",") if word.strip())

    def differences(self) -> dict[str, int]:
        """Returns the non-zero difference counts by kind (mismatch, nan-bits, signed-zero)."""
        counts = {
            MISMATCH: self.mismatches,
            NAN_BITS: self.nan_bit_differences,
            SIGNED_ZERO: self.signed_zero_differences,
        }
        return {kind: count for kind, count in counts.items() if count}

    def unexpected_differences(self) -> dict[str, int]:
        """Returns the non-zero difference counts whose kind `allowed` does not list."""
        return {kind: n for kind, n in self.differences().items() if kind not in self.allowed_kinds}

    def to_json(self) -> dict[str, Any]:
        """Returns the record as strict-JSON-ready data (non-finite floats spelled as strings)."""
        return _encode(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseRecord:
        """Builds a record from `to_json` output; unknown keys are an error so schema drift is loud."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ReportError(f"unknown case fields {sorted(unknown)}")
        return cls(**_decode(dict(data)))


@dataclass
class Report:
    """A whole ulp-drift run: its cases by key, run metadata, and the ulp histogram bin edges.

    Histograms inside the cases are counts over `histogram_edges`, so merging runs means summing lists; edges are
    None when no record carried a histogram or the edges were not known to the recording process.
    """

    cases: dict[str, CaseRecord] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    histogram_edges: list[float] | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns the report in its JSON form, cases sorted by key so equal runs give equal files."""
        return {
            "schema": SCHEMA,
            "metadata": _encode(self.metadata),
            "histogram_edges": _encode(self.histogram_edges),
            "cases": {key: self.cases[key].to_json() for key in sorted(self.cases)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "report") -> Report:
        """Reads `to_json` output back.

        Raises:
            ReportError: on another schema or malformed cases, naming `source`.
        """
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
            raise ReportError(f"{source}: expected schema {SCHEMA!r}, found {found!r}")
        cases: dict[str, CaseRecord] = {}
        for key, raw in data.get("cases", {}).items():
            try:
                record = CaseRecord.from_json(raw)
            except (TypeError, ReportError) as error:
                raise ReportError(f"{source}: case {key!r}: {error}") from error
            if record.key != key:
                raise ReportError(f"{source}: case stored under {key!r} has key {record.key!r}")
            cases[key] = record
        metadata = _decode(dict(data.get("metadata", {})))
        return cls(cases=cases, metadata=metadata, histogram_edges=_decode(data.get("histogram_edges")))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Reads a report (or a baseline, which is a report) from a JSON file.

        Raises:
            ReportError: when the file is missing, not JSON, or not an ulp-drift report.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ReportError(f"{path}: {error}") from error
        return cls.from_json(data, source=str(path))

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        """Writes the report as JSON (strict: no NaN/Infinity literals) and returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
        return path


def merge_edges(first: list[float] | None, second: list[float] | None, source: str = "") -> list[float] | None:
    """Returns the histogram edges two reports share; a report without edges takes the other's.

    Raises:
        ReportError: when both have edges and they differ, since their histograms cannot be summed.
    """
    if first is None or second is None:
        return first if second is None else second
    if _encode(first) != _encode(second):
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


def run_metadata(command: str, cwd: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describes the machine and checkout a run came from.

    Args:
        command: the command line that produced the run.
        cwd: where to ask git for the commit; the current directory when None.

    Returns:
        created (UTC, ISO 8601), hostname, platform, python, torch, triton, gpu, git_commit, git_dirty,
        kernel_sha256, command.
        Versions come from installed distributions, so writing metadata never imports torch; the GPU is named only
        when torch is already imported (it always is in the conformance suite).
    """
    metadata: dict[str, Any] = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _distribution_version("torch"),
        "triton": _distribution_version("triton"),
        "gpu": _gpu_names(),
    }
    metadata.update(_git_state(Path(cwd) if cwd is not None else Path.cwd()))
    metadata["kernel_sha256"] = kernel_fingerprint()
    metadata["command"] = command
    return metadata


KERNEL_SOURCE = Path(__file__).resolve().parents[1] / "impl" / "rope_triton.py"


def kernel_fingerprint() -> str | None:
    """The first 16 hex digits of the SHA-256 of ``impl/rope_triton.py``: which kernel ran, where git cannot say.

    A copy of the checkout (a GPU runner's, the device tool's) may carry a stale or no ``.git``, so a run records
    the kernel source it ran as well as the commit; ``sha256sum impl/rope_triton.py`` gives the same digits.
    """
    try:
        return hashlib.sha256(KERNEL_SOURCE.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu_names() -> str | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        return ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count()))
    except Exception:  # a broken driver must not cost the report
        return None


def _git_state(cwd: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


# ---------------------------------------------------------------------------------------------------------------------
# Aggregation by dtype x backend x comparison


@dataclass(frozen=True)
class GroupSummary:
    """The cases of one dtype x backend x comparison, added up.

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


def _max_ulp(values: Iterable[float]) -> float | None:
    values = list(values)
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def _summary_value(summary: Mapping[str, Any] | None, name: str) -> float | None:
    if summary is None or summary.get(name) is None:
        return None
    return float(summary[name])


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
    """Adds up cases per dtype x backend x comparison, sorted by those three."""
    groups: dict[tuple[str, str, str], list[CaseRecord]] = {}
    for record in cases:
        groups.setdefault((record.dtype, record.backend, record.comparison), []).append(record)
    summaries = []
    for (dtype, backend, comparison), records in sorted(groups.items()):
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
                elementwise_max=_max_ulp(v for r in records if (v := _summary_value(r.elementwise, "max")) is not None),
                normwise_max=_max_ulp(v for r in records if (v := _summary_value(r.normwise, "max")) is not None),
                correctly_rounded_fraction=sum(f * w for f, w in weighted) / weight if weight else None,
                devices=tuple(sorted({r.device for r in records})),
                allowed=tuple(sorted(set().union(*(r.allowed_kinds for r in records)))),
                not_passed=sum(r.outcome != "passed" for r in records),
                unexpected=unexpected,
                histogram=_sum_histograms(
                    r.elementwise["histogram"] for r in records if r.elementwise and r.elementwise.get("histogram")
                ),
            )
        )
    return summaries


# ---------------------------------------------------------------------------------------------------------------------
# Baseline comparison


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

    @property
    def failed(self) -> bool:
        """True on any regression, or on missing cases under strict mode."""
        return bool(self.regressions) or (self.strict and bool(self.missing))

    def deltas(self) -> list[CaseDelta]:
        """Returns regressions, then missing cases, then new cases."""
        return [
            *self.regressions,
            *(CaseDelta(key, "missing") for key in self.missing),
            *(CaseDelta(key, "new") for key in self.new),
        ]


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
            base = _summary_value(base_summary, name)
            if base is None:
                continue
            now = _summary_value(now_summary, name)
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
) -> BaselineComparison:
    """Gates `report` on an accepted `baseline` case by case (see `compare_cases` for what counts as worse).

    Args:
        report: this run.
        baseline: the accepted run.
        baseline_path: where the baseline came from, for messages.
        strict: whether cases missing from this run make the comparison fail.
        ulp_tolerance: absolute slack, in ulps, on max ulp errors and bit distances.
        fraction_tolerance: absolute slack on correctly-rounded fractions.
    """
    regressions = []
    for key in sorted(report.cases.keys() & baseline.cases.keys()):
        changes = compare_cases(
            report.cases[key], baseline.cases[key], ulp_tolerance=ulp_tolerance, fraction_tolerance=fraction_tolerance
        )
        if changes:
            regressions.append(CaseDelta(key, "regression", changes))
    return BaselineComparison(
        baseline_path=baseline_path,
        baseline_metadata=baseline.metadata,
        regressions=tuple(regressions),
        missing=tuple(sorted(baseline.cases.keys() - report.cases.keys())),
        new=tuple(sorted(report.cases.keys() - baseline.cases.keys())),
        strict=strict,
        ulp_tolerance=ulp_tolerance,
        fraction_tolerance=fraction_tolerance,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Rendering


def format_number(value: float | int | None) -> str:
    """Formats a count or an ulp error for a table: `-` for None, 4 significant digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def format_fraction(value: float | None) -> str:
    """Formats a fraction truncated (not rounded) to 6 decimals, so only an exact 1 reads as 1."""
    if value is None:
        return "-"
    if value == 1.0:
        return "1"
    return f"{math.floor(value * 1e6) / 1e6:.6f}"


def _count_cell(total: int, unexpected: int) -> str:
    # A star says every difference in the cell is one its comparison declared allowed; the trailing space of the
    # others keeps digits aligned in right-aligned columns.
    return f"{total}*" if total and not unexpected else f"{total} "


_TERMINAL_HEADERS = (
    "dtype", "backend", "comparison", "cases", "elements", "mismatch", "nan-bits", "+-0",
    "ulp max", "norm max", "cr frac", "devices",
)  # fmt: skip
_MARKDOWN_HEADERS = (
    "dtype", "backend", "comparison", "cases", "elements", "bit mismatches", "NaN-bit diffs", "signed-zero diffs",
    "max elementwise ulp", "max norm-wise ulp", "correctly rounded", "devices", "allowed",
)  # fmt: skip
_NUMERIC_COLUMNS = frozenset(range(3, 11))


def _group_row(group: GroupSummary) -> list[str]:
    return [
        group.dtype,
        group.backend,
        group.comparison,
        str(group.cases),
        str(group.elements),
        _count_cell(group.mismatches, group.unexpected[MISMATCH]),
        _count_cell(group.nan_bit_differences, group.unexpected[NAN_BITS]),
        _count_cell(group.signed_zero_differences, group.unexpected[SIGNED_ZERO]),
        format_number(group.elementwise_max),
        format_number(group.normwise_max),
        format_fraction(group.correctly_rounded_fraction),
        compact_devices(group.devices),
    ]


def compact_devices(devices: Iterable[str]) -> str:
    """Writes device names compactly: ("cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:5") -> "cpu,cuda:0-2,5"."""
    indices: dict[str, list[int]] = {}
    others: list[str] = []
    for device in devices:
        kind, _, index = device.partition(":")
        if index.isdigit():
            indices.setdefault(kind, []).append(int(index))
        else:
            others.append(device)
    parts = sorted(set(others))
    for kind in sorted(indices):
        numbers = sorted(set(indices[kind]))
        runs: list[str] = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            runs.append(str(start) if start == previous else f"{start}-{previous}")
            if number is not None:
                start = previous = number
        parts.append(f"{kind}:{','.join(runs)}")
    return ",".join(parts)


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = (), width: int = 120
) -> list[str]:
    """Lays out a fixed-width table; columns in `right` are right-aligned; gaps shrink to fit `width`."""
    right = set(right)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    gap = "  " if sum(widths) + 2 * (len(widths) - 1) <= width else " "

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return gap.join(padded).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _md_cell(text: str) -> str:
    return text.strip().replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Lays out a GitHub-flavoured Markdown table; `|` inside cells is escaped."""
    right = set(right)
    rule = ["---:" if i in right else "---" for i in range(len(headers))]
    return [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "| " + " | ".join(rule) + " |",
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows),
    ]


MARKDOWN_MAX_LISTED = 50


def verdict_status(report: Report, comparison: BaselineComparison | None = None) -> str:
    """Returns FAIL when the baseline gate fails, INCOMPLETE for an interrupted run, NO DATA when nothing was recorded,
    WARN on differences no comparison allows or on tests that did not pass, PASS otherwise."""
    if comparison is not None and comparison.failed:
        return "FAIL"
    if report.metadata.get("interrupted"):
        return "INCOMPLETE"
    if not report.cases:
        return "NO DATA"
    if any(r.unexpected_differences() or r.outcome != "passed" for r in report.cases.values()):
        return "WARN"
    return "PASS"


def verdict(report: Report, comparison: BaselineComparison | None = None) -> str:
    """Returns the one-line verdict: status, how the cases differ, and the baseline outcome.

    "allowed-only" cases differ only in kinds their comparison allows; "unexpected" ones differ in another kind.
    Records that carry an error summary (elementwise or norm-wise, e.g. ``fused-vs-truth``) are error measurements,
    not bit comparisons, and are counted apart rather than as bit-exact.
    """
    cases = list(report.cases.values())
    bit_cases = [r for r in cases if r.elementwise is None and r.normwise is None]
    exact = sum(not r.differences() for r in bit_cases)
    unexpected = sum(bool(r.unexpected_differences()) for r in cases)
    allowed_only = len(bit_cases) - exact - sum(bool(r.unexpected_differences()) for r in bit_cases)
    measured = len(cases) - len(bit_cases)
    text = (
        f"{len(cases)} cases: {exact} bit-exact, {allowed_only} allowed-only, {unexpected} unexpected,"
        f" {measured} error measurements"
    )
    not_passed = sum(r.outcome != "passed" for r in cases)
    if not_passed:
        text += f", {not_passed} from tests not passed"
    if report.metadata.get("interrupted"):
        text += f"; run interrupted, {report.metadata.get('tests_not_run', 'some')} tests not run"
    if comparison is None:
        baseline = "no baseline"
    else:
        strict = " (strict: a failure)" if comparison.strict and comparison.missing else ""
        baseline = (
            f"baseline {comparison.baseline_path}: {len(comparison.regressions)} regressed, {len(comparison.new)} new,"
            f" {len(comparison.missing)} missing{strict}"
        )
    return f"ulp-drift verdict: {verdict_status(report, comparison)} - {text}; {baseline}"


def _baseline_origin(comparison: BaselineComparison) -> str:
    meta = comparison.baseline_metadata
    commit = meta.get("git_commit")
    parts = [f"commit {commit[:12]}" if commit else "commit unknown", str(meta.get("created", "date unknown"))]
    if meta.get("kernel_sha256"):
        parts.insert(1, f"kernel {meta['kernel_sha256']}")
    return f"{comparison.baseline_path} ({', '.join(parts)})"


def render_terminal(
    report: Report, comparison: BaselineComparison | None = None, *, width: int = 120, max_listed: int = 20
) -> list[str]:
    """Returns the terminal summary lines: the group table, its legend, the baseline deltas and the verdict."""
    lines: list[str] = []
    groups = summarize_groups(report.cases.values())
    if groups:
        headers, rows, right = list(_TERMINAL_HEADERS), [_group_row(g) for g in groups], set(_NUMERIC_COLUMNS)
        # A run has one backend and usually spreads every group over the same devices: say so once, above the table,
        # rather than spend 120 columns repeating it.
        common = []
        for column in (len(headers) - 1, 1):
            values = {row[column] for row in rows}
            if len(values) == 1:
                common.insert(0, f"{headers[column]} {values.pop()}")
                del headers[column]
                rows = [row[:column] + row[column + 1 :] for row in rows]
                right = {i - 1 if i > column else i for i in right}
        if common:
            lines.append("all cases: " + ", ".join(common))
        lines += text_table(headers, rows, right, width)
        lines += [
            "mismatch: elements whose bits differ; nan-bits, +-0: NaN-payload and signed-zero differences, apart;",
            "* = only differences the comparison allows; ulp/norm max: largest ulp error; cr frac: correctly rounded",
        ]
    else:
        lines.append("no ulp-drift cases recorded")
    if comparison is not None:
        tolerance = f"tolerance {format_number(comparison.ulp_tolerance)} ulp"
        tolerance += f", {format_number(comparison.fraction_tolerance)} correctly-rounded fraction"
        lines.append(f"baseline: {_baseline_origin(comparison)}; {tolerance}")
        # Every regression is listed; new and missing cases (a -k run misses most of a baseline) up to max_listed.
        listed = {"new": 0, "missing": 0}
        for delta in comparison.deltas():
            if delta.status in listed:
                listed[delta.status] += 1
                if listed[delta.status] > max_listed:
                    continue
            lines.append(f"{delta.status.upper():<10} {delta.key}")
            if delta.changes:
                lines.append("           " + "; ".join(change.describe() for change in delta.changes))
        for status, count in listed.items():
            if count > max_listed:
                lines.append(f"... and {count - max_listed} more {status} cases (not listed here)")
        if comparison.missing and not comparison.strict:
            lines.append("missing cases are not a failure; --ulp-baseline-strict makes them one")
    lines.append(verdict(report, comparison))
    return lines


def _edge_label(edge: float) -> str:
    if math.isinf(edge):
        return "inf"
    if edge >= 1024 and math.frexp(edge)[0] == 0.5:
        return f"2^{math.frexp(edge)[1] - 1}"
    return f"{edge:g}"


def _bin_labels(edges: Sequence[float] | None, bins: int) -> list[str]:
    # The oracle.ulp convention: one bin per edge, bin 0 holds errors <= edges[0] (exact results), bin i > 0 holds
    # edges[i-1] < error <= edges[i].
    if edges is None or len(edges) < bins:
        return [f"bin {i}" for i in range(bins)]
    labels = [_edge_label(float(e)) for e in edges]
    return [f"<= {labels[0]}", *(f"({lo}, {hi}]" for lo, hi in zip(labels, labels[1:], strict=False))][:bins]


def _shown_bins(groups: Sequence[GroupSummary]) -> int:
    """Returns how many leading bins to show: up to the last one any group fills (the far tail is usually empty)."""
    filled = [i for g in groups for i, count in enumerate(g.histogram or ()) if count]
    return max(filled, default=0) + 1


PNG_WRITTEN = "written"
PNG_NO_MATPLOTLIB = "no-matplotlib"
PNG_NO_DATA = "no-data"
PNG_NOT_REQUESTED = "not-requested"

_PNG_NOTES = {
    PNG_WRITTEN: f"Histogram plot: `{PNG_NAME}` next to this file.",
    PNG_NO_MATPLOTLIB: f"No `{PNG_NAME}`: matplotlib is not importable on this runner (install the `report` extra).",
    PNG_NO_DATA: f"No `{PNG_NAME}`: no case recorded an elementwise histogram.",
    PNG_NOT_REQUESTED: "No plot: this summary was not written with `--ulp-report`.",
}


def render_markdown(report: Report, comparison: BaselineComparison | None = None, png: str = PNG_NOT_REQUESTED) -> str:
    """Returns the Markdown report: verdict, group table, baseline deltas, differing cases, histograms, metadata.

    Args:
        report: the run.
        comparison: the baseline gate, if one was run.
        png: what became of the PNG plot, one of the `PNG_*` constants; the text says so.
    """
    lines = ["## ulp drift", "", f"**{verdict(report, comparison)}**", ""]
    groups = summarize_groups(report.cases.values())
    lines += ["### By dtype, backend and comparison", ""]
    if groups:
        rows = [[*_group_row(g), ", ".join(g.allowed) or "-"] for g in groups]
        lines += markdown_table(_MARKDOWN_HEADERS, rows, _NUMERIC_COLUMNS)
        lines += [
            "",
            "A bit mismatch is an element whose bit pattern differs; NaN-bit (NaN payload/sign) and signed-zero (+0 vs"
            " -0) differences are counted apart. `*` marks counts made only of differences the comparison allows.",
        ]
    else:
        lines.append("No cases recorded.")
    lines.append("")
    if comparison is not None:
        lines += [
            f"### Against baseline `{comparison.baseline_path}`",
            "",
            f"Baseline: {_baseline_origin(comparison)}.",
            f"Tolerance: {format_number(comparison.ulp_tolerance)} ulp (absolute) on max errors, "
            f"{format_number(comparison.fraction_tolerance)} on correctly-rounded fractions; counts may not grow.",
            "",
        ]
        deltas = comparison.deltas()
        if deltas:
            # Regressions in full; new and missing cases are capped so a -k run's page stays readable.
            shown = [d for d in deltas if d.status not in ("new", "missing")]
            capped = {}
            for status in ("missing", "new"):
                of_status = [d for d in deltas if d.status == status]
                shown += of_status[:MARKDOWN_MAX_LISTED]
                capped[status] = len(of_status) - len(of_status[:MARKDOWN_MAX_LISTED])
            rows = [[d.status, f"`{d.key}`", "; ".join(c.describe() for c in d.changes) or "-"] for d in shown]
            lines += markdown_table(("status", "case", "worse than baseline"), rows)
            for status, count in capped.items():
                if count:
                    lines += ["", f"... and {count} more {status} cases (not listed here)."]
        else:
            lines.append("Same cases as the baseline, none worse.")
        lines.append("")
    differing = [r for key, r in sorted(report.cases.items()) if r.differences()]
    if differing:
        lines += ["### Cases with differences", ""]
        headers = (
            "case", "device", "outcome", "mismatch", "nan-bits", "signed-zero", "max distance", "allowed", "detail",
        )  # fmt: skip
        rows = [
            [
                f"`{r.key}`",
                r.device,
                r.outcome,
                str(r.mismatches),
                str(r.nan_bit_differences),
                str(r.signed_zero_differences),
                str(r.max_distance),
                r.allowed or "-",
                r.detail or "-",
            ]
            for r in differing
        ]
        lines += markdown_table(headers, rows, range(3, 7))
        lines.append("")
    lines += ["### Elementwise ulp histogram", "", _PNG_NOTES.get(png, png), ""]
    with_histograms = [g for g in groups if g.histogram]
    if with_histograms:
        bins = _shown_bins(with_histograms)
        headers = ("dtype / backend / comparison", *_bin_labels(report.histogram_edges, bins))
        rows = [[f"{g.dtype} / {g.backend} / {g.comparison}", *map(str, g.histogram[:bins])] for g in with_histograms]
        lines += markdown_table(headers, rows, range(1, bins + 1))
        lines.append("")
    lines += ["### Run", ""]
    scalars = {k: v for k, v in report.metadata.items() if not isinstance(v, list | dict)}
    lines += markdown_table(("field", "value"), [[k, "-" if v is None else f"`{v}`"] for k, v in scalars.items()])
    for name, value in report.metadata.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            columns = (
                "source",
                "hostname",
                "gpu",
                "torch",
                "triton",
                "git_commit",
                "kernel_sha256",
                "created",
                "command",
            )
            lines += ["", f"{name}:", ""]
            lines += markdown_table(columns, [["-" if v.get(c) is None else str(v[c]) for c in columns] for v in value])
        elif isinstance(value, list):
            lines.append(f"\n{name}: {', '.join(map(str, value)) or '-'}")
    return "\n".join(lines) + "\n"


def write_histogram_png(report: Report, path: str | os.PathLike[str]) -> str:
    """Plots the summed elementwise ulp histogram of each group, one step line per group, on a log count axis.

    Returns:
        PNG_WRITTEN, PNG_NO_DATA, or PNG_NO_MATPLOTLIB when matplotlib cannot be imported (the plot is optional).
    """
    groups = [g for g in summarize_groups(report.cases.values()) if g.histogram]
    if not groups:
        return PNG_NO_DATA
    try:
        # The object-oriented API needs no pyplot and no global backend switch, so the caller's state is untouched.
        from matplotlib.figure import Figure
    except ImportError:
        return PNG_NO_MATPLOTLIB
    bins = _shown_bins(groups)
    figure = Figure(figsize=(max(6.0, 0.5 * bins + 3.0), 4.5), layout="constrained")
    axes = figure.add_subplot()
    for group in groups:
        label = f"{group.dtype} / {group.backend} / {group.comparison}"
        axes.stairs(group.histogram[:bins], range(bins + 1), label=label, linewidth=1.5)
    axes.set_yscale("log")
    # Below one element: a bin holding one stays visible, empty bins drop off the bottom.
    axes.set_ylim(bottom=0.5)
    labels = _bin_labels(report.histogram_edges, bins)
    axes.set_xticks([i + 0.5 for i in range(bins)], labels, rotation=30, ha="right", rotation_mode="anchor")
    axes.set_xlabel("elementwise error (ulp)")
    axes.set_ylabel("elements")
    axes.set_title("ulp drift: elementwise error against float64 truth")
    axes.legend(fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return PNG_WRITTEN


def write_report(
    report: Report, directory: str | os.PathLike[str], comparison: BaselineComparison | None = None
) -> tuple[list[Path], str]:
    """Writes ulp-drift.json, ulp-drift.md and, when matplotlib imports, ulp-drift.png into `directory`.

    Returns:
        The paths written and the Markdown text (for the CI step summary).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = [report.write_json(directory / JSON_NAME)]
    png = write_histogram_png(report, directory / PNG_NAME)
    if png == PNG_WRITTEN:
        written.append(directory / PNG_NAME)
    markdown = render_markdown(report, comparison, png)
    (directory / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
    written.insert(1, directory / MARKDOWN_NAME)
    return written, markdown


def append_step_summary(markdown: str) -> Path | None:
    """Appends `markdown` to the file named by GITHUB_STEP_SUMMARY (the CI job page), if that variable is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as stream:
        stream.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return Path(target)
