"""Merges the ulp-drift reports of several runners (shards) into one, and optionally gates it on a baseline.

Usage:
    python -m conformance.merge OUT_DIR shard1/ulp-drift.json shard2/ulp-drift.json ... \
        [--prefer-last] [--baseline FILE [--baseline-strict] [--ulp-tolerance ULPS] [--fraction-tolerance F]]

Writes OUT_DIR/ulp-drift.json, OUT_DIR/ulp-drift.md and (with matplotlib) OUT_DIR/ulp-drift.png, prints the summary,
and appends the Markdown to $GITHUB_STEP_SUMMARY when set. The metadata the shards' tests added
(`conformance.plugin.add_run_metadata`) merges as it does across xdist workers; each shard's own metadata is kept
under `shards`. Exit status: 0 merged, 1 regression against the baseline, 2 unreadable or conflicting inputs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.provenance import run_metadata
from conformance.report import (
    Report,
    ReportError,
    append_step_summary,
    compare_to_baseline,
    merge_reports,
    render_terminal,
    write_report,
)


def build_parser() -> argparse.ArgumentParser:
    """Returns the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.merge",
        description="Merge ulp-drift.json reports from several shards into one report.",
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="where to write the merged report")
    parser.add_argument("shards", type=Path, nargs="+", metavar="SHARD_JSON", help="ulp-drift.json of each shard")
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
    """Runs the merge; returns the exit status (0 ok, 1 regression, 2 bad input)."""
    args = build_parser().parse_args(argv)
    try:
        shards = [Report.load(path) for path in args.shards]
        merged = merge_reports(shards, prefer_last=args.prefer_last, sources=[str(p) for p in args.shards])
        baseline = Report.load(args.baseline) if args.baseline is not None else None
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "conformance.merge", *(sys.argv[1:] if argv is None else argv)])
    merged.metadata = {**run_metadata(command), **merged.metadata}
    merged.metadata["shards"] = [
        {"source": str(path), **shard.metadata} for path, shard in zip(args.shards, shards, strict=True)
    ]
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
    return 1 if comparison is not None and comparison.failed else 0


if __name__ == "__main__":
    sys.exit(main())
