"""The baseline gate through the pytest plugin: a run saved as a baseline gates the next, a planted regression of
each kind fails it, tolerances and improvements pass, and missing, new, unselected and skipped cases are told apart;
a baseline drawn under another hypothesis version (or that records none) is said to be so.

The fake conformance tests and the report's helpers are those of test_report_plugin.py.
"""

from __future__ import annotations

import json

import pytest
from test_report_plugin import ALL_KEYS, FAKE_TESTS, FORWARD_BF16, load_cases

from dsv41_rope.harness import provenance
from dsv41_rope.report import (
    HYPOTHESIS,
    CaseRecord,
    Report,
    compare_to_baseline,
    hypothesis_note,
    render_markdown,
    render_terminal,
)

pytest_plugins = ["pytester"]


@pytest.fixture
def project(report_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project whose conftest loads the plugin, with the fake conformance tests."""
    monkeypatch.delenv("FAKE_ULP_DRIFT", raising=False)
    report_project.makepyfile(test_fake=FAKE_TESTS)
    return report_project


def test_baseline_round_trip_passes(project: pytest.Pytester) -> None:
    saved = project.runpytest("--ulp-save-baseline", "base.json")
    assert saved.ret == pytest.ExitCode.OK
    assert set(load_cases(project.path / "base.json")) == ALL_KEYS
    result = project.runpytest("--ulp-baseline", "base.json", "--ulp-baseline-strict")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["ulp-drift verdict: PASS*; baseline base.json: 0 regressed, 0 new, 0 missing"])


@pytest.mark.parametrize(
    ("drift", "key", "change"),
    [
        ({"mismatches": 3}, f"{FORWARD_BF16}::fused-vs-eager", "bit mismatches 0 -> 3"),
        ({"max_ulp": 1.5}, f"{FORWARD_BF16}::fused-vs-truth", "max elementwise ulp 0.5 -> 1.5"),
        ({"norm_ulp": 0.75}, f"{FORWARD_BF16}::fused-vs-truth", "max norm-wise ulp 0.25 -> 0.75"),
        ({"fraction": 0.75}, f"{FORWARD_BF16}::fused-vs-truth", "elementwise correctly-rounded fraction 0.875 -> 0.75"),
        ({"max_distance": 2}, f"{FORWARD_BF16}::fused-vs-truth", "max bit distance 1 -> 2"),
        ({"nan": 2}, "test_fake.py::test_backward::backward-vs-eager", "NaN-bit differences 1 -> 2"),
        ({"sz": 5}, "test_fake.py::test_backward::backward-vs-eager", "signed-zero differences 4 -> 5"),
    ],
    ids=["mismatches", "max-ulp", "norm-ulp", "cr-fraction", "bit-distance", "nan-bits", "signed-zero"],
)
def test_planted_regression_fails(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, drift: dict, key: str, change: str
) -> None:
    assert project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps(drift))
    result = project.runpytest("--ulp-baseline", "base.json", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"REGRESSION {key}",
            f"*{change}*",
            "ulp-drift verdict: FAIL*; baseline base.json: 1 regressed, 0 new, 0 missing",
        ]
    )
    assert "passed" in result.stdout.lines[-1] and "failed" not in result.stdout.lines[-1]
    assert "Traceback" not in result.stdout.str()
    markdown = (project.path / "out" / "ulp-drift.md").read_text(encoding="utf-8")
    assert f"| regression | `{key}` | {change} |" in markdown


def test_improvement_and_tolerance_pass(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps({"max_ulp": 0.25, "fraction": 0.9}))
    assert project.runpytest("--ulp-baseline", "base.json").ret == pytest.ExitCode.OK
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps({"max_ulp": 1.0}))
    assert project.runpytest("--ulp-baseline", "base.json").ret == pytest.ExitCode.TESTS_FAILED
    assert project.runpytest("--ulp-baseline", "base.json", "--ulp-tolerance", "0.5").ret == pytest.ExitCode.OK


def test_missing_and_new_cases(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert project.runpytest("-k", "forward", "--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps({"silent": True}))  # the bfloat16 test records no fused-vs-eager
    result = project.runpytest("--ulp-baseline", "base.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            f"MISSING    {FORWARD_BF16}::fused-vs-eager",
            "NEW        test_fake.py::test_backward::backward-vs-eager",
            "missing cases are not a failure; --ulp-baseline-strict makes them one",
            "ulp-drift verdict: PASS*; baseline base.json: 0 regressed, 1 new, 1 missing",
        ]
    )
    strict = project.runpytest("--ulp-baseline", "base.json", "--ulp-baseline-strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(
        ["ulp-drift verdict: FAIL*; baseline base.json: 0 regressed, 1 new, 1 missing (strict: a failure)"]
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_selection_is_gated_on_the_baseline_cases_of_its_own_tests(project: pytest.Pytester, workers) -> None:
    assert project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    selected = project.runpytest(
        *workers, "-k", "backward or float32", "--ulp-baseline", "base.json", "--ulp-baseline-strict"
    )
    assert selected.ret == pytest.ExitCode.OK
    selected.stdout.fnmatch_lines(
        [
            "2 baseline cases belong to tests this run did not select: not gated",
            "ulp-drift verdict: PASS*; baseline base.json: 0 regressed, 0 new, 0 missing, 2 outside the selection",
        ]
    )
    assert "MISSING" not in selected.stdout.str()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_baseline_cases_of_a_test_that_skipped_are_not_missing(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers
) -> None:
    """A test that does not apply to this run (the project kernel's internals while another implementation is judged)
    skips: its baseline cases are counted apart, not reported missing, even under strict gating."""
    assert project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps({"skip_backward": True}))
    result = project.runpytest(*workers, "--ulp-baseline", "base.json", "--ulp-baseline-strict")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "1 baseline cases belong to tests that skipped in this run (-rs says why): not gated",
            "ulp-drift verdict: PASS*; baseline base.json: 0 regressed, 0 new, 0 missing, 1 of skipped tests",
        ]
    )
    assert "MISSING" not in result.stdout.str()


def test_unreadable_baseline_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest("--ulp-baseline", "nowhere.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ulp-baseline: *nowhere.json*"])


def _gated(run_version: str | None, baseline_metadata: dict) -> tuple[str, list[str], str]:
    """A one-case run recording `run_version` gated on a baseline with `baseline_metadata`: its note, terminal lines
    and Markdown header (down to the first table)."""
    case = CaseRecord(
        nodeid="dsv41_rope/conformance/test_generated_layouts.py::test_generated[float32-2d-forward]",
        comparison="fused-vs-oracle",
        case_id="float32-2d-forward",
        outcome="passed",
        dtype="float32",
        backend="triton",
        device="cpu",
        elements=64,
        mismatches=0,
    )
    run = Report(cases={case.key: case}, metadata={HYPOTHESIS: run_version} if run_version else {})
    comparison = compare_to_baseline(run, Report(cases={case.key: case}, metadata=baseline_metadata), baseline_path="b")
    header = render_markdown(run, comparison).split("### By dtype", 1)[0]
    return comparison.hypothesis, render_terminal(run, comparison), header


def test_a_baseline_drawn_under_another_hypothesis_version_is_said_to_be() -> None:
    note, lines, markdown = _gated("6.150.0", {HYPOTHESIS: "6.170.17"})
    expected = "hypothesis 6.150.0 here, baseline drawn with 6.170.17: generated cases may differ"
    assert note == expected
    assert lines[0] == f"WARNING: {expected}", "the terminal section does not open with it"
    assert lines[-1].endswith(f"; baseline b: 0 regressed, 0 new, 0 missing; {expected}"), lines[-1]
    assert lines[-1].startswith("ulp-drift verdict: PASS"), "another hypothesis version fails nothing"
    assert "**ulp-drift verdict: PASS" in markdown and f"; {expected}**" in markdown
    assert f"> **Warning:** {expected}" in markdown


def test_a_baseline_that_records_no_hypothesis_version_is_said_to_be() -> None:
    note, lines, markdown = _gated("6.170.17", {"created": "2025-01-01"})
    expected = "hypothesis 6.170.17 here, baseline records no hypothesis version: generated cases may differ"
    assert note == expected and lines[0] == f"WARNING: {expected}" and lines[-1].endswith(expected)
    assert f"> **Warning:** {expected}" in markdown
    assert "no hypothesis version recorded here" in hypothesis_note({}, {HYPOTHESIS: "6.170.17"})


def test_the_same_hypothesis_version_says_nothing() -> None:
    note, lines, markdown = _gated("6.170.17", {HYPOTHESIS: "6.170.17"})
    assert note == "" and not any("hypothesis" in line for line in lines) and "hypothesis" not in markdown
    # A merged report's cases were drawn by its shards, not by the merger's process.
    shards = {HYPOTHESIS: "6.0.0", "shards": [{"source": "a", HYPOTHESIS: "6.170.17"}, {"source": "b"}]}
    assert hypothesis_note(shards, {HYPOTHESIS: "6.170.17"}) == ""
    assert "baseline drawn with 6.150.0" in hypothesis_note(shards, {"shards": [{HYPOTHESIS: "6.150.0"}]})


def test_a_run_records_its_hypothesis_version_and_a_gate_on_its_own_baseline_says_nothing(
    project: pytest.Pytester,
) -> None:
    assert provenance.versions()[HYPOTHESIS] == pytest.importorskip("hypothesis").__version__
    assert project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    saved = json.loads((project.path / "base.json").read_text(encoding="utf-8"))["metadata"]
    assert saved[HYPOTHESIS] == provenance.versions()[HYPOTHESIS]
    result = project.runpytest("--ulp-baseline", "base.json")
    assert "hypothesis" not in result.stdout.str().split("= ulp drift =", 1)[1]
    saved.pop(HYPOTHESIS)
    base = json.loads((project.path / "base.json").read_text(encoding="utf-8"))
    (project.path / "old.json").write_text(json.dumps({**base, "metadata": saved}), encoding="utf-8")
    result = project.runpytest("--ulp-baseline", "old.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["WARNING: hypothesis * here, baseline records no hypothesis version: generated cases may differ"]
    )
