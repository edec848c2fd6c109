"""A failing implementation is judged as fast and as clearly as a passing one: a failure of the suite's own
comparisons (``dsv41_rope.harness.failures.ConformanceFailure``) shows as its one line, without the traceback whose
formatting cost more than the check; any other failure keeps its traceback; the run ends with the failed tests
grouped by test function and what failed them, one line each, however many failed.

The runs load the suite's plugin explicitly (``-p``), as where the distribution is not installed, on stand-in tests.
"""

from __future__ import annotations

import pytest

from dsv41_rope.harness.failures import ConformanceFailure, short_failure

pytest_plugins = ["pytester"]

PLUGIN = ["-p", "dsv41_rope.harness.under_test", "-p", "no:cacheprovider"]
LINE = (
    "bf16-4d-contiguous-query-forward-normal fused-vs-oracle: 3 bit mismatches (max 2 ulp) of 16 elements, first at "
    "(0, 1, 0, 6): input 0x3F80(1),0x4000(2) got 0x3F81(1.0078125) expected 0x3F80(1)"
)
# Stand-ins for the suite's tests: checks that fail as the suite's do, deep in helpers whose frames hold big objects,
# and tests that fail otherwise.
TESTS = f"""
import pytest

from dsv41_rope.harness.failures import ConformanceFailure


def compare(big, expected):
    raise ConformanceFailure({LINE!r}, what="fused-vs-oracle: bit mismatches")


@pytest.mark.parametrize("case", range(40))
def test_fused_equals_oracle(case):
    compare(list(range(5000)), "expected bits")


def test_crashes():
    raise TypeError("my_rope() got an unexpected keyword argument 'inverse'")


def test_plain_assert():
    assert 1 + 1 == 3, "arithmetic"
"""


@pytest.fixture
def suite(report_project: pytest.Pytester) -> pytest.Pytester:
    report_project.makepyfile(test_checks=TESTS)
    return report_project


def failure_blocks(output: str) -> dict[str, list[str]]:
    """The FAILURES section's lines per test, under pytest's header line for each."""
    section = output.split("= FAILURES =", 1)[1].split("= ulp drift =", 1)[0]
    blocks: dict[str, list[str]] = {}
    current = None
    for line in section.splitlines()[1:]:
        if line.startswith("____") and line.endswith("____"):
            current = line.strip("_ ")
            blocks[current] = []
        elif current is not None and line and not line.startswith("===="):
            blocks[current].append(line)
    return blocks


def test_a_checks_failure_shows_its_one_line_and_no_traceback(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess(*PLUGIN, "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    blocks = failure_blocks(result.stdout.str())
    assert blocks["test_fused_equals_oracle[0]"] == [LINE]
    assert all(blocks[f"test_fused_equals_oracle[{case}]"] == [LINE] for case in range(40))
    assert "compare(list(range(5000))" not in result.stdout.str(), "a traceback was formatted"


def test_any_other_failure_keeps_its_traceback(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess(*PLUGIN)
    blocks = failure_blocks(result.stdout.str())
    crash = "\n".join(blocks["test_crashes"])
    assert 'raise TypeError("my_rope() got an unexpected keyword argument' in crash and "test_checks.py:" in crash
    assert "assert 1 + 1 == 3" in "\n".join(blocks["test_plain_assert"])


def test_a_long_traceback_is_shown_when_asked_for(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess(*PLUGIN, "--tb=long", "-k", "test_fused_equals_oracle and 0]")
    assert "compare(list(range(5000))" in result.stdout.str()


def test_the_run_ends_with_one_line_per_test_function_and_what_failed(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess(*PLUGIN, "--ulp-report", "out")
    result.stdout.fnmatch_lines(
        [
            "failed tests (42), by test function and what failed them:",
            "  test_crashes: 1 failed: TypeError: my_rope() got an unexpected keyword argument 'inverse'",
            "  test_fused_equals_oracle: 40 failed: fused-vs-oracle: bit mismatches (40)",
            "  test_plain_assert: 1 failed: AssertionError: arithmetic",
            "ulp-drift verdict: FAIL - 0 cases: *; 42 tests failed; no baseline",
        ]
    )
    # After pytest's list of failed tests, not above it: however many failed, the grouped summary and the verdict are
    # what the run ends with, above pytest's one closing line.
    lines = result.stdout.lines
    assert lines.index("failed tests (42), by test function and what failed them:") > next(
        i for i, line in enumerate(lines) if "short test summary info" in line
    )
    assert lines[-2].startswith("ulp-drift verdict: FAIL") and "42 failed" in lines[-1], "\n".join(lines[-5:])
    markdown = (suite.path / "out" / "ulp-drift.md").read_text(encoding="utf-8")
    assert "- test_fused_equals_oracle: 40 failed: fused-vs-oracle: bit mismatches (40)" in markdown
    assert f"| `test_checks.py::test_fused_equals_oracle[0]` | {LINE} |" in markdown


def test_a_run_that_fails_everything_stays_readable(suite: pytest.Pytester) -> None:
    lines = suite.runpytest_inprocess(*PLUGIN, "-k", "test_fused_equals_oracle").stdout.lines
    # Per failed test: pytest's header, the line, pytest's FAILED line; and a fixed frame around them.
    assert len(lines) <= 3 * 40 + 40, "\n".join(lines)


def test_only_the_suites_failures_are_shortened() -> None:
    line = ConformanceFailure("case comparison: 1 bit mismatches", what="comparison: bit mismatches")
    assert short_failure(line).text == "case comparison: 1 bit mismatches"
    line.add_note("This case, rebuilt:\nimport torch")
    assert short_failure(line).text.splitlines() == [
        "case comparison: 1 bit mismatches",
        "This case, rebuilt:",
        "import torch",
    ]
    group = ExceptionGroup("two", [line, ConformanceFailure("other comparison: 2 bit mismatches", what="other")])
    assert short_failure(group).what == "comparison: bit mismatches; other"
    assert short_failure(AssertionError("plain")) is None
    assert short_failure(ExceptionGroup("mixed", [line, TypeError("crash")])) is None


# A failed check's frames held every tensor it compared (full-size on a GPU, GBs a test) after its test ended: pytest
# keeps the exception as sys.last_value, and a reference cycle through its traceback kept it until Python's cyclic
# collector ran, many tests later. With the collector off, only the release of the frames frees them.
RELEASED = """
import gc
import weakref

from dsv41_rope.harness.failures import ConformanceFailure


class Tensor:
    pass


held = []


def compare(actual, expected):
    raise ConformanceFailure("case fused-vs-oracle: 1 bit mismatches of 1 elements", what="fused-vs-oracle: bits")


def test_fused_equals_oracle():
    gc.disable()
    output = Tensor()
    held.append(weakref.ref(output))
    compare(output, Tensor())


def test_next():
    try:
        assert held[0]() is None, "the failed check's objects outlived its test"
    finally:
        gc.enable()
"""


def test_a_failed_checks_objects_are_released_when_its_test_ends(report_project: pytest.Pytester) -> None:
    report_project.makepyfile(test_released=RELEASED)
    result = report_project.runpytest_inprocess(*PLUGIN)
    result.assert_outcomes(failed=1, passed=1)
