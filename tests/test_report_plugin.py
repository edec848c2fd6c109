"""The ulp-drift report through the pytest plugin (pytester runs): the files and terminal section a run writes, test
outcomes and failures, xdist workers (finished, dead, interrupted), and the shard merger's command line.

The baseline gate is tested in test_report_baseline_gate.py, over the fake conformance tests defined here; the
metadata tests add in test_report_metadata.py; the report package's functions in test_report_package.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from dsv41_rope.report import PNG_NAME, SCHEMA, merge_cli

pytest_plugins = ["pytester"]

# A stand-in for the conformance tests. Drift is planted through an environment variable rather than by rewriting
# the module, so no stale bytecode can hide a change between two runs in the same second.
FAKE_TESTS = """
import json
import os

import pytest

EDGES = [0.0, 0.5, 1.0, 2.0, float("inf")]
DRIFT = json.loads(os.environ.get("FAKE_ULP_DRIFT", "{}"))


def summary(max_ulp, fraction, with_edges=True):
    data = {
        "max": max_ulp, "mean": max_ulp / 4, "p99": max_ulp / 2, "histogram": [0, 896, 128, 0, 0],
        "correctly_rounded_fraction": fraction, "count": 1024,
    }
    if with_edges:
        data["histogram_edges"] = EDGES
    return data


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward(ulp_drift, dtype):
    drift = DRIFT if dtype == "bfloat16" else {}
    if not drift.get("silent"):
        ulp_drift.record(
            comparison="fused-vs-eager", dtype=dtype, backend="triton", device="cpu", elements=1024,
            mismatches=drift.get("mismatches", 0),
        )
    ulp_drift.record(
        comparison="fused-vs-truth", dtype=dtype, backend="triton", device="cpu", elements=1024, mismatches=128,
        max_distance=drift.get("max_distance", 1),
        elementwise=summary(drift.get("max_ulp", 0.5), drift.get("fraction", 0.875), DRIFT.get("edges", True)),
        normwise=summary(drift.get("norm_ulp", 0.25), 1.0, DRIFT.get("edges", True)),
        allowed="mismatch",
    )


def test_backward(ulp_drift):
    if DRIFT.get("skip_backward"):
        pytest.skip("does not apply to the implementation judged")
    ulp_drift.record(
        comparison="backward-vs-eager", dtype="float32", backend="triton", device="cpu", elements=512, mismatches=0,
        nan_bit_differences=DRIFT.get("nan", 1), signed_zero_differences=DRIFT.get("sz", 4),
        allowed="signed-zero,nan-bits", detail="autograd zero-fill turns -0 into +0",
    )
"""

FORWARD_BF16 = "test_fake.py::test_forward[bfloat16]"
ALL_KEYS = {
    "test_fake.py::test_forward[float32]::fused-vs-eager",
    "test_fake.py::test_forward[float32]::fused-vs-truth",
    f"{FORWARD_BF16}::fused-vs-eager",
    f"{FORWARD_BF16}::fused-vs-truth",
    "test_fake.py::test_backward::backward-vs-eager",
}


@pytest.fixture
def project(report_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project whose conftest loads the plugin, with the fake conformance tests."""
    monkeypatch.delenv("FAKE_ULP_DRIFT", raising=False)
    report_project.makepyfile(test_fake=FAKE_TESTS)
    return report_project


def matplotlib_importable() -> bool:
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(params=["with-matplotlib", "without-matplotlib"])
def plotting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether reports written in this test can plot: with matplotlib, the optional `report` extra (skipped, saying
    why, where it is not installed), or with its import blocked, as on a runner without the extra."""
    if request.param == "without-matplotlib":
        for name in ("matplotlib", "matplotlib.figure"):
            monkeypatch.setitem(sys.modules, name, None)
        return False
    if not matplotlib_importable():
        pytest.skip("matplotlib (the optional `report` extra) is not installed: no PNG to check")
    return True


def assert_plot(directory: Path, plotted: bool) -> None:
    """The report directory holds the PNG and the Markdown points to it, or it has none and the Markdown says why."""
    markdown = (directory / "ulp-drift.md").read_text(encoding="utf-8")
    if plotted:
        assert (directory / PNG_NAME).stat().st_size > 0
        assert f"Histogram plot: `{PNG_NAME}` next to this file." in markdown
    else:
        assert not (directory / PNG_NAME).exists()
        assert f"No `{PNG_NAME}`: matplotlib is not importable on this runner" in markdown


def load_cases(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA
    return data["cases"]


def test_report_files_and_case_content(project: pytest.Pytester, plotting: bool) -> None:
    result = project.runpytest("--ulp-report", "out")
    assert result.ret == pytest.ExitCode.OK
    data = json.loads((project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))
    assert set(data) == {"schema", "metadata", "histogram_edges", "cases"}
    assert data["histogram_edges"] == [0.0, 0.5, 1.0, 2.0, "inf"]
    assert set(data["cases"]) == ALL_KEYS
    truth = data["cases"][f"{FORWARD_BF16}::fused-vs-truth"]
    assert truth["case_id"] == "bfloat16"
    assert truth["outcome"] == "passed"
    assert truth["elementwise"]["histogram"] == [0, 896, 128, 0, 0]
    assert "histogram_edges" not in truth["elementwise"]
    assert data["cases"]["test_fake.py::test_backward::backward-vs-eager"]["case_id"] == ""
    for key in ("created", "hostname", "python", "torch", "triton", "gpu", "git_commit", "kernel_sha256", "command"):
        assert key in data["metadata"]
    markdown = (project.path / "out" / "ulp-drift.md").read_text(encoding="utf-8")
    assert "| bfloat16 | triton | fused-vs-truth | 1 | 1024 | 128* |" in markdown
    assert "autograd zero-fill turns -0 into +0" in markdown
    assert "--ulp-report out" in markdown
    assert_plot(project.path / "out", plotting)


def test_terminal_summary_fits_120_columns(project: pytest.Pytester) -> None:
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= ulp drift =*",
            "all cases: backend triton, devices cpu",
            "dtype*comparison*cases*elements*mismatch*nan-bits*+-0*ulp max*norm max*cr frac",
            "bfloat16*fused-vs-truth*1*1024*128[*]*0*0*0.5*0.25*0.875000",
            "float32*backward-vs-eager*1*512*0*1[*]*4[*]*-*-*-",
            "ulp-drift verdict: PASS - 5 cases: 2 bit-exact, 1 allowed-only, 0 unexpected, 2 error measurements; *",
        ]
    )
    section = result.stdout.str().split("ulp drift", 1)[1].splitlines()
    assert max(len(line) for line in section) <= 120


def test_outcomes_and_duplicate_labels(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_outcomes="""
        import pytest

        def record(ulp_drift, comparison="fused-vs-eager", mismatches=0):
            ulp_drift.record(comparison=comparison, dtype="float32", backend="triton", device="cpu",
                             elements=8, mismatches=mismatches)

        def test_fails(ulp_drift):
            record(ulp_drift, mismatches=2)
            assert False

        def test_skips(ulp_drift):
            record(ulp_drift)
            pytest.skip("no GPU")

        @pytest.mark.xfail(reason="known")
        def test_xfails(ulp_drift):
            record(ulp_drift)
            assert False

        def test_duplicate(ulp_drift):
            record(ulp_drift)
            record(ulp_drift)
        """
    )
    result = project.runpytest("test_outcomes.py", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ValueError: comparison 'fused-vs-eager' already recorded*"])
    cases = load_cases(project.path / "out" / "ulp-drift.json")
    outcomes = {key.split("::")[1]: case["outcome"] for key, case in cases.items()}
    assert outcomes == {
        "test_fails": "failed",
        "test_skips": "skipped",
        "test_xfails": "xfailed",
        "test_duplicate": "failed",
    }
    result.stdout.fnmatch_lines(
        [
            "ulp-drift verdict: FAIL - 4 cases: 3 bit-exact, 0 allowed-only, 1 unexpected, 0 error measurements, 4 from"
            "*; 2 tests failed; *"
        ]
    )


def test_a_test_that_failed_without_recording_makes_the_verdict_fail(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_rejects="def test_rejects_bad_input():\n    assert False, 'accepted an input eager rejects'\n"
    )
    result = project.runpytest("--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "failed tests (1), by test function and what failed them:",
            "  test_rejects_bad_input: 1 failed: AssertionError: accepted an input eager rejects",
            "ulp-drift verdict: FAIL - 5 cases: 2 bit-exact, 1 allowed-only, 0 unexpected, 2 error measurements; 1 "
            "tests failed; no baseline",
        ]
    )
    metadata = json.loads((project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert metadata["tests_failed"] == 1
    assert metadata["failed_tests"]["test_rejects.py::test_rejects_bad_input"]["message"].startswith(
        "AssertionError: accepted an input eager rejects"
    )


def test_exit_status_without_tests_is_unchanged(project: pytest.Pytester) -> None:
    (project.path / "test_fake.py").unlink()
    assert project.runpytest().ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "ulp drift" not in project.runpytest().stdout.str()
    result = project.runpytest("--ulp-report", "out", "--ulp-save-baseline", "empty.json")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["no ulp-drift cases recorded"])
    assert load_cases(project.path / "out" / "ulp-drift.json") == {}
    assert project.runpytest("--ulp-baseline", "empty.json").ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_collect_only_run_is_not_an_interrupted_one(project: pytest.Pytester) -> None:
    result = project.runpytest("--co", "--ulp-baseline-strict", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.OK
    assert "ulp-drift verdict" not in result.stdout.str() and not (project.path / "out").exists()


def test_github_step_summary_appended(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    page = project.path / "step-summary.md"
    page.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(page))
    assert project.runpytest("--ulp-report", "out").ret == pytest.ExitCode.OK
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# earlier step\n## ulp drift\n")
    assert text.endswith((project.path / "out" / "ulp-drift.md").read_text(encoding="utf-8"))


def test_junitxml_keeps_working(project: pytest.Pytester) -> None:
    assert project.runpytest("--junitxml", "junit.xml", "--ulp-report", "out").ret == pytest.ExitCode.OK
    suite = ElementTree.parse(project.path / "junit.xml").getroot()
    properties = {
        (case.get("name"), prop.get("name")): prop.get("value")
        for case in suite.iter("testcase")
        for prop in case.iter("property")
    }
    assert properties[("test_forward[bfloat16]", "ulp_mismatches[fused-vs-truth]")] == "128"
    assert properties[("test_backward", "ulp_mismatches[backward-vs-eager]")] == "0"


def test_histogram_edges_taken_from_the_imported_oracle(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        sys.modules, "dsv41_rope.oracle.ulp", types.SimpleNamespace(HISTOGRAM_EDGES=(0.0, 1.0, 3.0, 7.0, 15.0))
    )
    monkeypatch.setenv("FAKE_ULP_DRIFT", json.dumps({"edges": False}))
    assert project.runpytest("--ulp-report", "out").ret == pytest.ExitCode.OK
    data = json.loads((project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))
    assert data["histogram_edges"] == [0.0, 1.0, 3.0, 7.0, 15.0]


def test_xdist_report_matches_serial(project: pytest.Pytester) -> None:
    assert project.runpytest("--ulp-report", "serial").ret == pytest.ExitCode.OK
    parallel = project.runpytest_subprocess("-n", "2", "--ulp-report", "parallel")
    assert parallel.ret == pytest.ExitCode.OK
    assert "sent no ulp-drift data" not in parallel.stdout.str()
    serial_cases = load_cases(project.path / "serial" / "ulp-drift.json")
    assert serial_cases == load_cases(project.path / "parallel" / "ulp-drift.json")
    assert set(serial_cases) == ALL_KEYS
    metadata = json.loads((project.path / "parallel" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert metadata["xdist_workers"] == ["gw0", "gw1"]
    assert metadata["workers_without_data"] == []


def test_xdist_worker_that_dies_is_reported(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_crash="""
        import os

        def test_dies(ulp_drift):
            ulp_drift.record(comparison="fused-vs-eager", dtype="float32", backend="triton", device="cpu",
                             elements=8, mismatches=0)
            os._exit(3)
        """
    )
    result = project.runpytest_subprocess("-n", "2", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["WARNING: xdist worker gw* sent no ulp-drift data*; its cases are missing"])
    metadata = json.loads((project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert len(metadata["workers_without_data"]) == 1
    # Records travel on each test's teardown report, so the dead worker's finished tests are not lost with it.
    assert ALL_KEYS <= set(load_cases(project.path / "out" / "ulp-drift.json"))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_stopped_run_is_incomplete_and_fails(project: pytest.Pytester, workers: list[str]) -> None:
    project.makepyfile(test_aaa_stop="def test_stops_the_run():\n    assert False, 'stop here'\n")
    result = project.runpytest_subprocess(*workers, "-x", "--ulp-report", "out")
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist reports -x as the latter
    result.stdout.fnmatch_lines(["ulp-drift verdict: INCOMPLETE*run interrupted*"])
    metadata = json.loads((project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert metadata["interrupted"] is True


def test_run_without_records_says_no_data(project: pytest.Pytester) -> None:
    project.makepyfile(test_fake="def test_plain():\n    pass\n")
    result = project.runpytest("--ulp-report", "out")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["ulp-drift verdict: NO DATA*"])


def test_merge_two_shards(project: pytest.Pytester, capsys: pytest.CaptureFixture[str], plotting: bool) -> None:
    assert project.runpytest("--ulp-report", "full").ret == pytest.ExitCode.OK
    assert project.runpytest("-k", "forward", "--ulp-report", "shard1").ret == pytest.ExitCode.OK
    assert project.runpytest("-k", "backward", "--ulp-report", "shard2").ret == pytest.ExitCode.OK
    shards = [str(project.path / name / "ulp-drift.json") for name in ("shard1", "shard2")]
    out = project.path / "merged"
    capsys.readouterr()
    assert merge_cli.main([str(out), *shards]) == 0
    assert load_cases(out / "ulp-drift.json") == load_cases(project.path / "full" / "ulp-drift.json")
    assert_plot(out, plotting)
    merged = json.loads((out / "ulp-drift.json").read_text(encoding="utf-8"))
    assert [s["source"] for s in merged["metadata"]["shards"]] == shards
    assert "ulp-drift verdict: PASS - 5 cases" in capsys.readouterr().out

    # The same case with different content in two shards is an error unless the later one is preferred.
    changed = json.loads(Path(shards[0]).read_text(encoding="utf-8"))
    changed["cases"][f"{FORWARD_BF16}::fused-vs-eager"]["mismatches"] = 7
    rerun = project.path / "rerun.json"
    rerun.write_text(json.dumps(changed), encoding="utf-8")
    assert merge_cli.main([str(out), *shards, str(rerun)]) == merge_cli.EXIT_BAD_INPUT
    assert f"{FORWARD_BF16}::fused-vs-eager" in capsys.readouterr().err
    assert merge_cli.main([str(out), *shards, shards[0]]) == 0  # identical duplicates merge quietly
    assert merge_cli.main([str(out), *shards, str(rerun), "--prefer-last"]) == 0
    assert load_cases(out / "ulp-drift.json")[f"{FORWARD_BF16}::fused-vs-eager"]["mismatches"] == 7

    # Gating the merged report on the full run's report as baseline catches the planted mismatches.
    baseline = str(project.path / "full" / "ulp-drift.json")
    capsys.readouterr()
    assert merge_cli.main([str(out), *shards, str(rerun), "--prefer-last", "--baseline", baseline]) == 1
    output = capsys.readouterr().out
    assert f"REGRESSION {FORWARD_BF16}::fused-vs-eager" in output and "bit mismatches 0 -> 7" in output


def test_merge_runs_as_a_module(project: pytest.Pytester) -> None:
    assert project.runpytest("--ulp-report", "shard").ret == pytest.ExitCode.OK
    done = subprocess.run(
        [sys.executable, "-m", "dsv41_rope.report", "merged", "shard/ulp-drift.json"],
        cwd=project.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ulp-drift verdict: PASS" in done.stdout
    assert set(load_cases(project.path / "merged" / "ulp-drift.json")) == ALL_KEYS
