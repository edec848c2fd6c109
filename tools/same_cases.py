"""Whether two ulp-drift reports hold the same cases with the same numbers, the device each case ran on aside: a
GPU's run against the accepted CUDA baseline, or a run split into shards and merged against the suite run unsplit.

    python -m tools.same_cases REFERENCE_JSON OTHER_JSON [--label TEXT] [--strict] [--allow-new]
                               [--moved OLD_PATH=NEW_PATH ...]

Prints one line of counts, then up to five differing cases. Exits 1 when a report is missing or, with ``--strict``,
when a case differs or is in one report only (with ``--allow-new``, only in the reference); else 0. ``--moved`` reads
the reference's cases of a test file that has since moved under the file's new path (its key and node id), so that a
moved test's cases still count as the same cases.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SHOWN", "compare", "main", "moved", "without_device"]

SHOWN = 5


def without_device(case: dict[str, Any]) -> dict[str, Any]:
    """A case's record without the device that ran it (shards on other GPUs name other devices)."""
    return {key: value for key, value in case.items() if key != "device"}


def moved(cases: dict[str, dict], renames: dict[str, str]) -> dict[str, dict]:
    """``cases`` with each key and node id that starts with a renamed test file's path (``old::``) under its new
    path."""
    result = {}
    for key, case in cases.items():
        for old, new in renames.items():
            if key.startswith(f"{old}::"):
                key = new + key[len(old) :]
                case = {**case, "nodeid": new + case["nodeid"][len(old) :]}
                break
        result[key] = case
    return result


def compare(reference: dict[str, dict], other: dict[str, dict]) -> tuple[list[str], list[str], list[str]]:
    """The keys of cases only in ``reference``, only in ``other``, and in both with different records (device
    aside), each sorted."""
    differ = sorted(
        k for k in other.keys() & reference.keys() if without_device(other[k]) != without_device(reference[k])
    )
    return sorted(reference.keys() - other.keys()), sorted(other.keys() - reference.keys()), differ


def main(argv: Sequence[str] | None = None) -> int:
    """Compares the two reports' cases and prints the counts; returns the exit status the module docstring gives."""
    parser = argparse.ArgumentParser(prog="python -m tools.same_cases", description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="the report compared against (ulp-drift.json)")
    parser.add_argument("other", type=Path, help="the report compared (ulp-drift.json)")
    parser.add_argument("--label", default="same cases")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any case differs or is in one report only")
    parser.add_argument("--allow-new", action="store_true", help="with --strict, cases only in OTHER_JSON are fine")
    parser.add_argument(
        "--moved", action="append", default=[], metavar="OLD=NEW", help="a test file's old and new path (repeatable)"
    )
    args = parser.parse_args(argv)
    renames = dict(rename.split("=", 1) for rename in args.moved)
    for path in (args.reference, args.other):
        if not path.exists():
            print(f"{args.label}: no {path}")
            return 1
    reference, other = (json.loads(path.read_text())["cases"] for path in (args.reference, args.other))
    reference = moved(reference, renames)
    only_reference, only_other, differ = compare(reference, other)
    print(
        f"{args.label}: {len(reference)} cases in {args.reference}, {len(other)} in {args.other};"
        f" {len(only_reference)} only in the first, {len(only_other)} only in the second,"
        f" {len(differ)} differ (device aside)"
    )
    print("".join(f"  differs: {key}\n" for key in differ[:SHOWN]), end="")
    for label, keys in (("only in the first", only_reference), ("only in the second", only_other)):
        print("".join(f"  {label}: {key}\n" for key in keys[:SHOWN]), end="")
    unexpected = only_reference or differ or (only_other and not args.allow_new)
    return 1 if args.strict and unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
