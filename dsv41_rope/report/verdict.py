"""The one-line verdict of a run: its status (PASS, WARN, FAIL, INCOMPLETE, NO DATA) and what it is made of.

The verdict agrees with pytest's outcome: a run in which a test failed is a FAIL, whether or not that test recorded a
case (a rejected input, a crash record nothing).
"""

from __future__ import annotations

from collections.abc import Mapping

from dsv41_rope.report.added_metadata import CPU_VERDICT, FROM_TESTS, INTERPRETER_ARTEFACTS, REFERENCES
from dsv41_rope.report.baseline import BaselineComparison
from dsv41_rope.report.failed_tests import tests_failed
from dsv41_rope.report.model import COMPLETENESS, Report

__all__ = ["held_to", "incompleteness", "verdict", "verdict_status"]


def incompleteness(report: Report) -> list[str]:
    """Returns why a merged report does not stand for whole runs (missing or repeated groups, interrupted or
    inconsistent shards), as its merge recorded; empty for a complete merge and for a single run."""
    completeness = report.metadata.get(COMPLETENESS)
    if not isinstance(completeness, dict) or completeness.get("status") not in ("incomplete", "inconsistent"):
        return []
    return [str(problem) for problem in completeness.get("problems", [])] or [str(completeness["status"])]


def verdict_status(report: Report, comparison: BaselineComparison | None = None) -> str:
    """Returns FAIL when the baseline gate fails, INCOMPLETE for an interrupted run or a merge of shards that do not
    make up whole runs (the text says how many tests failed), FAIL when a test failed, NO DATA when nothing was
    recorded, WARN on differences no comparison allows or on tests that recorded a case and did not pass (skipped,
    xfailed, xpassed), PASS otherwise."""
    if comparison is not None and comparison.failed:
        return "FAIL"
    if report.metadata.get("interrupted") or incompleteness(report):
        return "INCOMPLETE"
    if tests_failed(report):
        return "FAIL"
    if not report.cases:
        return "NO DATA"
    if any(r.unexpected_differences() or r.outcome != "passed" for r in report.cases.values()):
        return "WARN"
    return "PASS"


def verdict(report: Report, comparison: BaselineComparison | None = None) -> str:
    """Returns the one-line verdict: status, how the cases differ, and the baseline outcome, with the hypothesis
    versions when the run's and the baseline's differ (`dsv41_rope.report.baseline.hypothesis_note`).

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
    failed = tests_failed(report)
    if failed:
        text += f"; {failed} tests failed"
    text += _artefacts(report)
    if report.metadata.get("interrupted"):
        text += f"; run interrupted, {report.metadata.get('tests_not_run', 'some')} tests not run"
    problems = incompleteness(report)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        text += f"; shards {report.metadata[COMPLETENESS]['status']}: {problems[0]}{more}"
    if comparison is None:
        baseline = "no baseline"
    else:
        strict = " (strict: a failure)" if comparison.strict and comparison.missing else ""
        outside = f", {comparison.outside_selection} outside the selection" if comparison.outside_selection else ""
        outside += f", {comparison.skipped} of skipped tests" if comparison.skipped else ""
        baseline = (
            f"baseline {comparison.baseline_path}: {len(comparison.regressions)} regressed, {len(comparison.new)} new,"
            f" {len(comparison.missing)} missing{strict}{outside}"
        )
        if comparison.hypothesis:
            baseline += f"; {comparison.hypothesis}"
    return f"ulp-drift verdict: {verdict_status(report, comparison)} - {text}; {baseline}{held_to(report)}"


def held_to(report: Report) -> str:
    """What the run held the implementation to (``metadata["from_tests"]["references"]``, name: description), and,
    for a run on a CPU, that its verdict says nothing of a GPU's bits and what to run there; empty when the tests
    recorded no reference."""
    added = report.metadata.get(FROM_TESTS)
    if not isinstance(added, Mapping):
        return ""
    references = added.get(REFERENCES)
    text = ""
    if isinstance(references, Mapping) and references:
        text = "; held to " + "; and to ".join(f"{name} ({description})" for name, description in references.items())
    cpu_verdict = added.get(CPU_VERDICT)
    if cpu_verdict:
        text += f" - {cpu_verdict if isinstance(cpu_verdict, str) else '; '.join(map(str, cpu_verdict))}"
    return text


def _artefacts(report: Report) -> str:
    """How many failed tests are in a dtype whose casts Triton's interpreter gets wrong, for an implementation that
    runs Triton kernels under it (``metadata["from_tests"]["interpreter artefacts"]``): they may be the interpreter's.
    """
    added = report.metadata.get(FROM_TESTS)
    artefacts = added.get(INTERPRETER_ARTEFACTS) if isinstance(added, Mapping) else None
    if not isinstance(artefacts, Mapping) or not artefacts:
        return ""
    dtypes = sorted(artefacts)
    failed = {r.nodeid for r in report.cases.values() if r.outcome == "failed" and r.dtype in artefacts}
    if not failed:
        return ""
    return (
        f"; {len(failed)} failed tests in {', '.join(dtypes)} may be Triton's interpreter, not the implementation "
        f"(its {', '.join(dtypes)} casts are wrong: see '{INTERPRETER_ARTEFACTS}'; judge {', '.join(dtypes)} on a GPU)"
    )
