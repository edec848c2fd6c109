"""The shard merger's command line: merges the ulp-drift reports of several runners into one, optionally gated.

Usage:
    python -m dsv41_rope.report OUT_DIR shard1/ulp-drift.json shard2/ulp-drift.json ... [--expect-splits N] \
        [--prefer-last] [--baseline FILE [--baseline-strict] [--ulp-tolerance ULPS] [--fraction-tolerance F]]

Writes OUT_DIR/ulp-drift.json, OUT_DIR/ulp-drift.md and (with matplotlib) OUT_DIR/ulp-drift.png, prints the summary,
and appends the Markdown to $GITHUB_STEP_SUMMARY when set. The metadata the shards' tests added
(`dsv41_rope.report.pytest_hooks.add_run_metadata`) merges as it does across xdist workers; each shard's own metadata
is kept under `shards`. Shards split by pytest-split are checked for completeness without a baseline
(`dsv41_rope.report.shards`); reports of several kinds of device are kept apart, device by device.

Exit status, the first that applies in this order (the merger's own, 10-12, are neither argparse's 2 nor pytest's
0-5, so a CI log tells them apart):

- 10 (``EXIT_BAD_INPUT``): an input cannot be read, or one case has different content in two inputs (nothing written);
- 12 (``EXIT_INCONSISTENT``): shards of different selections, splits, implementations, kernels or builds;
- 11 (``EXIT_INCOMPLETE``): a group missing or given twice, a shard interrupted, with tests not run or xdist workers
  without data;
- 1 (``EXIT_REGRESSION``): a regression against the baseline, as pytest's 1 for failed tests and the suite's own gate;
- 0 (``EXIT_MERGED``): merged, complete and not worse than the baseline.

2 is a usage error (argparse).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dsv41_rope.harness.provenance import run_metadata
from dsv41_rope.report import (
    COMPLETENESS,
    INCOMPLETE,
    INCONSISTENT,
    Report,
    ReportError,
    append_step_summary,
    check_shards,
    compare_to_baseline,
    device_label,
    merge_reports,
    render_terminal,
    write_report,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INCOMPLETE",
    "EXIT_INCONSISTENT",
    "EXIT_MERGED",
    "EXIT_REGRESSION",
    "EXIT_STATUS_HELP",
    "build_parser",
    "main",
]

EXIT_MERGED = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 10
EXIT_INCOMPLETE = 11
EXIT_INCONSISTENT = 12
EXIT_STATUS_HELP = f"""exit status, the first that applies:
  {EXIT_BAD_INPUT}  an input cannot be read, or one case differs between two inputs (nothing written)
  {EXIT_INCONSISTENT}  inconsistent shards: other selections, splits, implementations, kernels or builds
  {EXIT_INCOMPLETE}  incomplete: a group missing or given twice, a shard interrupted
  {EXIT_REGRESSION}   a regression against the baseline
  {EXIT_MERGED}   merged, complete and not worse than the baseline
  2   a usage error"""


def build_parser() -> argparse.ArgumentParser:
    """Returns the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m dsv41_rope.report",
        description="Merge ulp-drift.json reports from several shards into one report.",
        epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="where to write the merged report")
    parser.add_argument("shards", type=Path, nargs="+", metavar="SHARD_JSON", help="ulp-drift.json of each shard")
    parser.add_argument(
        "--expect-splits",
        type=int,
        metavar="N",
        help="each device's reports must be groups 1..N of one pytest-split run (--splits N): a workflow's shard count",
    )
    parser.add_argument(
        "--prefer-last",
        action="store_true",
        help="when a case appears in several shards with different content, keep the last one instead of failing",
    )
    parser.add_argument("--baseline", type=Path, metavar="FILE", help="gate the merged report on this baseline")
    parser.add_argument(
        "--baseline-strict", action="store_true", help="with --baseline, baseline cases missing here are a failure"
    )
    parser.add_argument(
        "--ulp-tolerance", type=float, default=0.0, metavar="ULPS", help="absolute slack on max ulp errors (default 0)"
    )
    parser.add_argument(
        "--fraction-tolerance",
        type=float,
        default=0.0,
        metavar="F",
        help="absolute slack on correctly-rounded fractions (default 0)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the merge; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    sources = [str(p) for p in args.shards]
    try:
        shards = [Report.load(path) for path in args.shards]
        completeness = check_shards(shards, sources, expect_splits=args.expect_splits)
        devices = [device_label(shard.metadata) for shard in shards]
        merged = merge_reports(
            shards,
            prefer_last=args.prefer_last,
            sources=sources,
            # One kind of device merges as before; several keep their cases apart, each device its own rows.
            device_names=devices if len(set(devices)) > 1 else None,
        )
        baseline = Report.load(args.baseline) if args.baseline is not None else None
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    command = shlex.join(["python", "-m", "dsv41_rope.report", *(sys.argv[1:] if argv is None else argv)])
    merged.metadata = {**run_metadata(command), **merged.metadata}
    merged.metadata["shards"] = [
        {"source": source, **shard.metadata} for source, shard in zip(sources, shards, strict=True)
    ]
    merged.metadata[COMPLETENESS] = completeness.to_json()
    comparison = None
    if baseline is not None:
        comparison = compare_to_baseline(
            merged,
            baseline,
            baseline_path=str(args.baseline),
            strict=args.baseline_strict,
            ulp_tolerance=args.ulp_tolerance,
            fraction_tolerance=args.fraction_tolerance,
        )
    written, markdown = write_report(merged, args.out_dir, comparison)
    print("\n".join(render_terminal(merged, comparison)))
    print("ulp-drift written: " + ", ".join(str(p) for p in written))
    append_step_summary(markdown)
    if completeness.status == INCONSISTENT:
        return EXIT_INCONSISTENT
    if completeness.status == INCOMPLETE:
        return EXIT_INCOMPLETE
    return EXIT_REGRESSION if comparison is not None and comparison.failed else EXIT_MERGED
