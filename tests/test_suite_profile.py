"""``tools.suite_profile`` reads a profiled run back: per test function its seconds, and the run's phases outside its
tests (start-up before the first test, the end after the last), from the files its plugin writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.suite_profile import main, summarize

ROOT = Path(__file__).resolve().parents[1]


def test_phases_are_measured_from_the_controllers_start(tmp_path: Path) -> None:
    start = 1_000_000.0
    (tmp_path / "phases-main.json").write_text(
        json.dumps({"configure": start, "sessionfinish": start + 40.0, "unconfigure": start + 43.5})
    )
    for worker, configured, first, last in (("gw0", 9.5, 13.0, 38.0), ("gw1", 12.4, 13.6, 38.5)):
        moments = {"configure": start + configured, "first_test": start + first, "last_test_end": start + last}
        (tmp_path / f"phases-{worker}.json").write_text(json.dumps(moments))
        (tmp_path / f"profile-{worker}.jsonl").write_text(json.dumps({"test": "t.py::test_a", "seconds": 2.0}) + "\n")
    summary = summarize(tmp_path)
    assert "2 tests on 2 workers" in summary
    assert (
        "phases (s from the controller's start): workers configured 9.5-12.4, first tests 13.0-13.6, last test ends"
        " 38.5, controller's session finish 40.0, its end 43.5"
    ) in summary, summary


def test_phases_count_from_the_plugins_load_where_recorded(tmp_path: Path) -> None:
    start = 1_000_000.0
    (tmp_path / "phases-main.json").write_text(
        json.dumps({"loaded": start, "configure": start + 4.9, "sessionfinish": start + 45, "unconfigure": start + 48})
    )
    for worker, loaded, configured in (("gw0", 5.2, 14.4), ("gw1", 5.6, 17.3)):
        moments = {
            "loaded": start + loaded,
            "configure": start + configured,
            "first_test": start + 18.0,
            "last_test_end": start + 44.0,
        }
        (tmp_path / f"phases-{worker}.json").write_text(json.dumps(moments))
        (tmp_path / f"profile-{worker}.jsonl").write_text(json.dumps({"test": "t.py::test_a", "seconds": 2.0}) + "\n")
    assert (
        "phases (s from the controller's start): controller configured 4.9, workers started 5.2-5.6, workers"
        " configured 14.4-17.3, first tests 18.0-18.0, last test ends 44.0, controller's session finish 45.0, its"
        " end 48.0"
    ) in summarize(tmp_path)


def test_a_run_without_phases_says_so(tmp_path: Path) -> None:
    (tmp_path / "profile-gw0.jsonl").write_text(json.dumps({"test": "t.py::test_a", "seconds": 1.0}) + "\n")
    assert "phases: not recorded" in summarize(tmp_path)


def test_the_workers_shutdown_is_timed_apart_from_the_report(tmp_path: Path) -> None:
    start = 1_000_000.0
    main = {"configure": start, "sessionfinish": start + 40.0, "unconfigure": start + 44.0}
    main |= {"workers_teardown": start + 40.5, "workers_down": start + 43.75}
    (tmp_path / "phases-main.json").write_text(json.dumps(main))
    moments = {"configure": start + 9.5, "first_test": start + 13.0, "last_test_end": start + 39.9}
    (tmp_path / "phases-gw0.json").write_text(json.dumps(moments))
    (tmp_path / "profile-gw0.jsonl").write_text(json.dumps({"test": "t.py::test_a", "seconds": 2.0}) + "\n")
    assert "controller's session finish 40.0, workers' shutdown 40.5-43.8, its end 44.0" in summarize(tmp_path)


def test_a_profiled_xdist_run_records_when_its_workers_were_shut_down(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    profile = tmp_path / "profile"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "tools.suite_profile", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_one.py")],
        cwd=ROOT,
        # Without this run's own xdist variables (PYTEST_XDIST_WORKER would name the new controller a worker).
        env={name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
        | {"DSV41_PROFILE_DIR": str(profile), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    main = json.loads((profile / "phases-main.json").read_text())
    assert main["sessionfinish"] <= main["workers_teardown"] <= main["workers_down"] <= main["unconfigure"], main


def test_the_command_line_prints_thesummarize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "profile-gw0.jsonl").write_text(json.dumps({"test": "t.py::test_a[x]", "seconds": 1.5}) + "\n")
    assert main([str(tmp_path), "--top", "1"]) == 0
    printed = capsys.readouterr().out
    assert "1 tests on 1 workers" in printed and "slowest 1 tests" in printed and "t.py::test_a[x]" in printed
