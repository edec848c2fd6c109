"""The ``dsv41-rope`` command's own words: its help is plain text that names every exit status, what ``--`` does and
the report's default folder; its last line names the report's folder only where the run wrote the report, and then the
references the report says the implementation was held to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv41_rope import cli

REFERENCES = {
    "eager CUDA (emulated)": "the oracle's bits of eager CUDA",
    "eager on cpu": "torch's eager path on the CPU",
}


def dsv41_rope_command(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m dsv41_rope ARGS``, with no variable of a surrounding pytest or of the suite's."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DSV41_ROPE_IMPL"))}
    command = [sys.executable, "-m", "dsv41_rope", *args]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


def write_report(folder: Path, from_tests: dict[str, object]) -> Path:
    """A report folder as --ulp-report leaves it: the JSON (with what the tests added) and the Markdown."""
    folder.mkdir()
    report = {"metadata": {"from_tests": from_tests}, "cases": {}}
    (folder / "ulp-drift.json").write_text(json.dumps(report), encoding="utf-8")
    (folder / "ulp-drift.md").write_text("## ulp drift\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("argv", [["--help"], ["certify", "--help"]], ids=["command", "certify"])
def test_the_help_is_plain_text_naming_exit_statuses_pytest_arguments_and_the_report(argv: list[str]) -> None:
    done = dsv41_rope_command(*argv)
    assert done.returncode == 0, done.stderr
    assert "`" not in done.stdout, f"got markup in the help:\n{done.stdout}"
    assert sorted(cli.EXIT_STATUSES) == [0, 1, 2, 3, 4, 5]
    for status, (meaning, _) in cli.EXIT_STATUSES.items():
        assert f"  {status}  {meaning}\n" in done.stdout, (
            f"exit status {status} ({meaning}) missing from:\n{done.stdout}"
        )
    assert "cannot be imported or called" in cli.EXIT_STATUSES[4][0]
    assert "Arguments after -- go to pytest" in done.stdout
    assert "rope-report" in done.stdout and cli.DEFAULT_REPORT == "rope-report"


def test_the_last_line_names_the_references_held_to_and_the_report(tmp_path: Path) -> None:
    started = time.time()
    report = write_report(tmp_path / "report", {"references": REFERENCES, "implementation under test": {}})
    expected = f"dsv41-rope certify: PASS (exit 0); held to: eager CUDA (emulated); eager on cpu; report in {report}/"
    got = cli.final_line(0, report, started)
    assert got == expected, f"got {got!r}, expected {expected!r}"


def test_the_last_line_says_nothing_of_references_the_report_does_not_name(tmp_path: Path) -> None:
    started = time.time()
    report = write_report(tmp_path / "report", {"implementation under test": {}})
    got = cli.final_line(1, report, started)
    assert got == f"dsv41-rope certify: FAIL: tests failed (exit 1); report in {report}/", got


def test_an_earlier_runs_report_is_not_this_runs(tmp_path: Path) -> None:
    report = write_report(tmp_path / "report", {"references": REFERENCES})
    started = time.time() + 60  # the files are a minute older than the run
    got = cli.final_line(1, report, started)
    assert got == f"dsv41-rope certify: FAIL: tests failed (exit 1); no report written in {report}/", got


def test_an_implementation_that_cannot_be_imported_writes_no_report_and_the_last_line_says_so(tmp_path: Path) -> None:
    done = dsv41_rope_command(
        "certify", "no_such_module_anywhere:rope", "--smoke", "--report", "report", "-n", "0", cwd=tmp_path
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, f"got exit {done.returncode}, expected 4:\n{done.stderr}"
    assert "cannot import module 'no_such_module_anywhere'" in done.stdout + done.stderr
    assert not (tmp_path / "report").exists()
    last = done.stdout.splitlines()[-1]
    expected = (
        "dsv41-rope certify: USAGE ERROR (exit 4); no report written: usage error, including an implementation that "
        "cannot be imported or called (pytest's message above says which)"
    )
    assert last == expected, f"got {last!r}, expected {expected!r}"
