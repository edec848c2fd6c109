"""The ulp-drift report's command-line options (``--ulp-*``), and what a run asks of the report through them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsv41_rope.report.model import Report, ReportError

__all__ = ["ReportOptions", "add_options"]


def add_options(parser: pytest.Parser) -> None:
    """Adds the --ulp-* options to pytest's parser."""
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


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """The --ulp-* options of one run, paths resolved against the directory pytest was invoked from.

    Attributes:
        report_dir: where to write the report (``--ulp-report``), or None.
        baseline_path: the accepted report to gate on (``--ulp-baseline``), or None.
        baseline_name: that option as given, for messages.
        save_baseline_path: where to save this run as a baseline (``--ulp-save-baseline``), or None.
        strict: whether baseline cases missing from the run fail it (``--ulp-baseline-strict``).
        ulp_tolerance: absolute slack on ulp errors and bit distances (``--ulp-tolerance``).
        fraction_tolerance: absolute slack on correctly-rounded fractions (``--ulp-fraction-tolerance``).
    """

    report_dir: Path | None
    baseline_path: Path | None
    baseline_name: str | None
    save_baseline_path: Path | None
    strict: bool
    ulp_tolerance: float
    fraction_tolerance: float

    @classmethod
    def from_config(cls, config: pytest.Config) -> ReportOptions:
        """Reads the options of a run."""

        def path(name: str) -> Path | None:
            value = config.getoption(name)
            return None if value is None else Path(config.invocation_params.dir, value)

        return cls(
            report_dir=path("--ulp-report"),
            baseline_path=path("--ulp-baseline"),
            baseline_name=config.getoption("--ulp-baseline"),
            save_baseline_path=path("--ulp-save-baseline"),
            strict=config.getoption("--ulp-baseline-strict"),
            ulp_tolerance=config.getoption("--ulp-tolerance"),
            fraction_tolerance=config.getoption("--ulp-fraction-tolerance"),
        )

    @property
    def requested(self) -> bool:
        """Whether the run asked for a report, a gate or a baseline (the CI job page gets the Markdown then)."""
        return any(path is not None for path in (self.report_dir, self.baseline_path, self.save_baseline_path))

    def load_baseline(self) -> Report | None:
        """Reads the baseline, before any test runs: a typo in its path should not cost a whole GPU run.

        Raises:
            pytest.UsageError: when it cannot be read.
        """
        if self.baseline_path is None:
            return None
        try:
            return Report.load(self.baseline_path)
        except ReportError as error:
            raise pytest.UsageError(f"--ulp-baseline: {error}") from error
