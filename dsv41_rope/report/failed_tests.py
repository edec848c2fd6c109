"""The tests a run failed: what each failure names, and the grouped summary that ends the terminal and the Markdown.

A run records, in its metadata, how many tests failed (``tests_failed``: a failed setup, call or teardown) and each
failed test's one line (``failed_tests``: pytest's node id -> ``{"what": ..., "message": ...}``), so that the verdict
agrees with pytest's outcome and a merged report still says which tests failed. ``what`` is the comparison and the
kind of difference that failed a check of the suite (``fused-vs-oracle: bit mismatches``, ``norm-wise error over the
bound``), or, for any other failure, the start of its message (``TypeError: ...``). The summary groups the failed
tests by test function and by what failed them, one line per test function, however many cases failed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from dsv41_rope.report.model import Report

__all__ = [
    "FAILED_TESTS",
    "MESSAGE_LIMIT",
    "NORM_WISE_OVER_BOUND",
    "TESTS_FAILED",
    "entry_of_report",
    "failed_tests",
    "failure_entry",
    "grouped_lines",
    "merge_failed",
    "tests_failed",
    "what_failed",
]

TESTS_FAILED = "tests_failed"
FAILED_TESTS = "failed_tests"
# The longest message a failed test keeps in the report (its first line; the checks' lines fit).
MESSAGE_LIMIT = 2000
_WHAT_LIMIT = 100

# A check's failure reads "<case id> <comparison>: <count> <kind> ..." (`dsv41_rope.conformance.checks.assert_bits`) or
# "<case id> <comparison>: norm-wise error ... > bound ..." (`dsv41_rope.conformance.checks.error_within_bound`).
_BITS_FAILURE = re.compile(r"^\S+ (?P<comparison>[\w-]+): \d+ (?P<kind>[A-Za-z -]+?)(?: \(| of |,|;)")
NORM_WISE_OVER_BOUND = "norm-wise error over the bound"


def what_failed(message: str) -> str:
    """The comparison a check's failure message names and what differed, e.g. ``fused-vs-oracle: bit mismatches``;
    the message's start (its first line, at most 100 characters) when it is not a check's."""
    first = message.strip().splitlines()[0] if message.strip() else "-"
    text = first.removeprefix("AssertionError: ").removeprefix("ConformanceFailure: ")
    found = _BITS_FAILURE.match(text)
    if found:
        return f"{found['comparison']}: {found['kind']}"
    if ": norm-wise error " in text and " > bound " in text:
        return NORM_WISE_OVER_BOUND
    return first[:_WHAT_LIMIT]


def failure_entry(message: str, what: str | None = None) -> dict[str, str]:
    """One failed test's entry in ``metadata["failed_tests"]``: its first line and what failed it (read from the
    message when not given)."""
    first = message.strip().splitlines()[0] if message.strip() else "-"
    return {"what": what or what_failed(first), "message": first[:MESSAGE_LIMIT]}


def failed_tests(report: Report) -> dict[str, Mapping[str, Any]]:
    """The failed tests a report records: its own, else (a merged report) those of the shards it lists."""
    own = report.metadata.get(FAILED_TESTS)
    if isinstance(own, Mapping):
        return dict(own)
    shards = report.metadata.get("shards")
    return merge_failed(s for s in shards if isinstance(s, Mapping)) if isinstance(shards, list) else {}


def tests_failed(report: Report) -> int:
    """How many tests of the run failed, by its own count, else by the failed tests it (or its shards) lists."""
    count = report.metadata.get(TESTS_FAILED)
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    shards = report.metadata.get("shards")
    if isinstance(shards, list):
        counts = [s.get(TESTS_FAILED) for s in shards if isinstance(s, Mapping)]
        if counts and all(isinstance(c, int) for c in counts):
            return sum(counts)
    return len(failed_tests(report))


def merge_failed(metadata: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The failed tests of several runs (each one's metadata), together."""
    merged: dict[str, Mapping[str, Any]] = {}
    for one in metadata:
        found = one.get(FAILED_TESTS)
        if isinstance(found, Mapping):
            merged.update(found)
    return merged


def grouped_lines(failed: Mapping[str, Mapping[str, Any]], *, indent: str = "  ") -> list[str]:
    """One line per test function: how many of its tests failed, and what failed them with how many each, e.g.
    ``test_fused_equals_oracle: 34 failed: fused-vs-oracle: bit mismatches (30); fused-vs-oracle: NaN bit-pattern
    differences (4)``. Empty when nothing failed."""
    by_function: dict[str, dict[str, int]] = {}
    for nodeid, entry in sorted(failed.items()):
        function = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        what = str(entry.get("what") or "-") if isinstance(entry, Mapping) else "-"
        counts = by_function.setdefault(function, {})
        counts[what] = counts.get(what, 0) + 1
    lines = []
    for function, counts in by_function.items():
        total = sum(counts.values())
        listed = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        whats = "; ".join(what if total == 1 else f"{what} ({count})" for what, count in listed)
        lines.append(f"{indent}{function}: {total} failed: {whats}")
    return lines


def entry_of_report(report: Any) -> dict[str, str]:
    """The ``failed_tests`` entry of a failed pytest report (duck-typed: ``longrepr``, ``when``): the one line the
    suite's plugin gave a check's failure (with ``conformance_failure``, what failed it), else the crash line of
    pytest's traceback; a failure outside the test's call (a fixture's setup or teardown) says in which phase."""
    longrepr = report.longrepr
    if isinstance(longrepr, str):
        message = longrepr
    else:
        message = getattr(getattr(longrepr, "reprcrash", None), "message", None) or str(longrepr)
    entry = failure_entry(message, getattr(report, "conformance_failure", None))
    if report.when != "call":
        entry = {"what": f"error in {report.when}: {entry['what']}", "message": f"({report.when}) {entry['message']}"}
    return entry
