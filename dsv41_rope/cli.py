"""The ``dsv41-rope`` command (also ``python -m dsv41_rope``): certify a RoPE implementation with the installed suite.

Usage:
    dsv41-rope certify MODULE:FUNCTION [--smoke] [--in-place MODULE:FUNCTION] [--claims CLAIMS] [--report DIR]
                       [-n WORKERS] [-- PYTEST_ARGS...]    (what follows -- goes to pytest)
    dsv41-rope vendor DEST_DIR --namespace NAME [--force]

``certify`` runs ``python -m pytest --pyargs dsv41_rope.conformance`` on the function, in a fresh process, with a
worker count right for the machine (``-n auto``: one a core on a CPU, 16 or 8 a GPU), writes the ulp-drift report to
``--report`` and prints the verdict. Its exit status is pytest's: 0 every test passed, 1 some failed, 2 interrupted,
3 internal error, 4 usage error (an implementation that cannot be imported or called), 5 no tests collected.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

from dsv41_rope import vendor

__all__ = ["SMOKE_SELECTION", "build_parser", "certify_command", "main", "parse_arguments"]

# A first try in under a minute on a CPU: forward bits, copied channels, gradient, error bound, bad input and one
# shard of generated layouts, on small cases of every dtype (README.md, "Certify your own kernel").
SMOKE_SELECTION = (
    "contiguous-pairs1-forward-normal or contiguous-pairs1-forward-special or test_bad_input or ci-fp32-4d-forward"
)
SUITE = "dsv41_rope.conformance"


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
    """The command line's parser: ``certify`` and ``vendor``."""
    parser = argparse.ArgumentParser(prog="dsv41-rope", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{certify,vendor}")
    certify = commands.add_parser("certify", help="judge an implementation with the installed conformance suite")
    certify.add_argument("implementation", metavar="MODULE:FUNCTION", help="the out-of-place function to judge")
    certify.add_argument("--smoke", action="store_true", help="the smoke selection: under a minute on a CPU")
    certify.add_argument("--in-place", metavar="MODULE:FUNCTION", help="an in-place function to judge too")
    certify.add_argument(
        "--claims", metavar="CLAIMS", help="what it claims: comma-separated compile, cuda-graphs, double-backward, none"
    )
    certify.add_argument("--report", default="rope-report", metavar="DIR", help="the ulp-drift report's folder")
    certify.add_argument("-n", dest="workers", default="auto", help="pytest-xdist workers (default: auto)")
    vendoring = commands.add_parser("vendor", help="write a copy of the kernel package (python -m dsv41_rope.vendor)")
    vendoring.add_argument("arguments", nargs=argparse.REMAINDER, help="DEST_DIR --namespace NAME [--force]")
    return parser


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; for ``certify``, what follows ``--`` goes to pytest as it is (``pytest_args``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv and argv[:1] == ["certify"] else len(argv)
    args = build_parser().parse_args(argv[:split])
    args.pytest_args = argv[split + 1 :]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    args = parse_arguments(argv)
    if args.command == "vendor":
        return vendor.main(args.arguments)
    command = certify_command(args)
    print("dsv41-rope certify:", " ".join(command[1:]), flush=True)
    status = subprocess.run(command, check=False).returncode
    verdict = {0: "PASS", 1: "FAIL: tests failed", 2: "INTERRUPTED", 4: "USAGE ERROR", 5: "NO TESTS SELECTED"}
    print(f"dsv41-rope certify: {verdict.get(status, 'ERROR')} (exit {status}); report in {args.report}/", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
