"""The ``dsv41-rope`` command (also ``python -m dsv41_rope``): certify a RoPE implementation with the installed suite.

Usage:
    dsv41-rope certify MODULE:FUNCTION [--smoke] [--in-place MODULE:FUNCTION] [--claims CLAIMS] [--report DIR]
                       [-n WORKERS] [-- PYTEST_ARGS...]    (what follows -- goes to pytest)
    dsv41-rope vendor DEST_DIR --namespace NAME [--force]
    dsv41-rope matrix [--peers NAMES] [--out DIR] [...]   (dsv41-rope matrix --help)

``certify`` runs ``python -m pytest --pyargs dsv41_rope.conformance`` on the function, in a fresh process, with a
worker count right for the machine (``-n auto``: one a core on a CPU, 16 or 8 a GPU), writes the ulp-drift report to
``--report`` and prints the verdict, the references the implementation was held to and where the report is. Its exit
status is pytest's (:data:`EXIT_STATUSES`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dsv41_rope import vendor
from dsv41_rope.harness.smoke import SMOKE_SELECTION
from dsv41_rope.report.added_metadata import FROM_TESTS
from dsv41_rope.report.model import JSON_NAME, MARKDOWN_NAME

__all__ = [
    "DEFAULT_REPORT",
    "EXIT_STATUSES",
    "SMOKE_SELECTION",
    "build_parser",
    "certify_command",
    "final_line",
    "held_to",
    "main",
    "parse_arguments",
]

SUITE = "dsv41_rope.conformance"
DEFAULT_REPORT = "rope-report"
# pytest's exit statuses, which certify passes on: what each means, and the verdict word of the last line.
EXIT_STATUSES = {
    0: ("every test passed", "PASS"),
    1: ("some tests failed", "FAIL: tests failed"),
    2: ("interrupted", "INTERRUPTED"),
    3: ("internal error", "INTERNAL ERROR"),
    4: ("usage error, including an implementation that cannot be imported or called", "USAGE ERROR"),
    5: ("no tests collected", "NO TESTS SELECTED"),
}
_DESCRIPTION = (
    "Certify a RoPE implementation with the installed conformance suite, vendor the kernel, or judge the DeepSeek V4 "
    "RoPEs the field runs side by side."
)
_CERTIFY_DESCRIPTION = f"""\
Judge MODULE:FUNCTION, a function with the contract of Automodel's eager _apply_rope,
fn(values, angles, *, inverse=False) -> tensor, with the installed conformance suite. It runs
  python -m pytest --pyargs {SUITE} --rope-impl MODULE:FUNCTION -n auto
in a fresh process, writes the ulp-drift report (ulp-drift.json, .md, .png) to --report DIR
(default: {DEFAULT_REPORT}), and prints the verdict, the references the function was held to and
where the report is."""
_EPILOG = "\n".join(
    [
        "exit status of certify (pytest's):",
        *(f"  {status}  {meaning}" for status, (meaning, _) in EXIT_STATUSES.items()),
        "",
        "Arguments after -- go to pytest as they are, e.g.:",
        "  dsv41-rope certify my_package.rope:apply_rope --smoke -- -x -k bf16",
        f"The report's folder is {DEFAULT_REPORT} unless --report DIR names another.",
    ]
)


def certify_command(args: argparse.Namespace) -> list[str]:
    """The pytest command line ``certify`` runs for its parsed arguments."""
    command = [sys.executable, "-m", "pytest", "--pyargs", SUITE, "--rope-impl", args.implementation]
    command += ["-n", args.workers, "--ulp-report", args.report]
    if args.in_place:
        command += ["--rope-impl-in-place", args.in_place]
    if args.claims:
        command += ["--rope-impl-claims", args.claims]
    if args.smoke:
        command += ["-k", SMOKE_SELECTION]
    return command + list(args.pytest_args)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: ``certify`` and ``vendor``; their help is plain text and names the exit statuses."""
    plain = {"formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": _EPILOG}
    parser = argparse.ArgumentParser(prog="dsv41-rope", description=_DESCRIPTION, **plain)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{certify,vendor,matrix}")
    certify = commands.add_parser(
        "certify",
        help="judge an implementation with the installed conformance suite",
        description=_CERTIFY_DESCRIPTION,
        usage="%(prog)s [options] MODULE:FUNCTION [-- PYTEST_ARGS...]",
        **plain,
    )
    certify.add_argument("implementation", metavar="MODULE:FUNCTION", help="the out-of-place function to judge")
    certify.add_argument("--smoke", action="store_true", help="the smoke selection: under a minute on a CPU")
    certify.add_argument("--in-place", metavar="MODULE:FUNCTION", help="an in-place function to judge too")
    certify.add_argument(
        "--claims", metavar="CLAIMS", help="what it claims: comma-separated compile, cuda-graphs, double-backward, none"
    )
    certify.add_argument(
        "--report",
        default=DEFAULT_REPORT,
        metavar="DIR",
        help=f"the ulp-drift report's folder (default: {DEFAULT_REPORT})",
    )
    certify.add_argument("-n", dest="workers", default="auto", help="pytest-xdist workers (default: auto)")
    vendoring = commands.add_parser("vendor", help="write a copy of the kernel package (python -m dsv41_rope.vendor)")
    vendoring.add_argument("arguments", nargs=argparse.REMAINDER, help="DEST_DIR --namespace NAME [--force]")
    # Its own parser takes its arguments (main hands them over before this one parses).
    commands.add_parser("matrix", help="judge the DeepSeek V4 RoPEs the field runs side by side (matrix --help)")
    return parser


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; for ``certify``, what follows ``--`` goes to pytest as it is (``pytest_args``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv and argv[:1] == ["certify"] else len(argv)
    args = build_parser().parse_args(argv[:split])
    args.pytest_args = argv[split + 1 :]
    return args


def held_to(report_json: Path) -> list[str]:
    """The short names of the references a report says the implementation was held to (its tests' ``references``
    metadata, ``{short name: description}``); none when the report does not say or cannot be read."""
    try:
        metadata = json.loads(report_json.read_text(encoding="utf-8"))["metadata"]
        references = metadata[FROM_TESTS].get("references")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    if isinstance(references, dict | list):
        return [str(name) for name in references]
    return [str(references)] if references else []


def final_line(status: int, report: str | Path, started: float) -> str:
    """The last line ``certify`` prints: the verdict and exit status, the references held to, and the report's folder
    if this run wrote the report there (files older than ``started``, a time.time(), are an earlier run's)."""
    report = Path(report)
    verdict = EXIT_STATUSES.get(status, ("", "ERROR"))[1]
    parts = [f"dsv41-rope certify: {verdict} (exit {status})"]
    files = [report / JSON_NAME, report / MARKDOWN_NAME]
    if all(file.is_file() and file.stat().st_mtime >= started for file in files):
        references = held_to(report / JSON_NAME)
        if references:
            parts.append(f"held to: {'; '.join(references)}")
        parts.append(f"report in {report}/")
    elif status == 4:
        parts.append(f"no report written: {EXIT_STATUSES[4][0]} (pytest's message above says which)")
    else:
        parts.append(f"no report written in {report}/")
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["matrix"]:  # its own process and parser: python -m dsv41_rope.matrix
        return subprocess.run([sys.executable, "-m", "dsv41_rope.matrix", *argv[1:]], check=False).returncode
    args = parse_arguments(argv)
    if args.command == "vendor":
        return vendor.main(args.arguments)
    command = certify_command(args)
    print("dsv41-rope certify:", " ".join(command[1:]), flush=True)
    started = time.time()
    status = subprocess.run(command, check=False).returncode
    print(final_line(status, args.report, started), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
