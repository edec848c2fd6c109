"""CI's gates beside the suite, on the CPU: the Python lint that `.ci/run` runs first (`.ci/lint-python`), the speed
gate's job of a pull request (`conformance.yml`'s `speed`, `.ci/speed-gate`, `python -m benchmarks.run --against`),
and the usage of `./run` and `python -m benchmarks.run`. The workflows' other jobs: tests/test_ci.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks import against
from benchmarks import run as benchmarks_run

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "conformance.yml"
BASE_SHA = "${{ github.event.pull_request.base.sha }}"


def conformance() -> tuple[dict[str, Any], dict[str, Any]]:
    """This repository's workflow and its triggers (YAML 1.1 reads the key `on` as True)."""
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return data, data.get("on", data.get(True))


def speed_steps() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The speed job's checkout, its one `run:` step and its upload."""
    job = conformance()[0]["jobs"]["speed"]
    [checkout] = [step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@")]
    [command] = [step for step in job["steps"] if "run" in step]
    [upload] = [step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]
    return checkout, command, upload


def test_the_speed_gate_runs_on_a_pull_request_only_on_the_suites_gpu_runners() -> None:
    data, triggers = conformance()
    assert "pull_request" in triggers
    speed, gpu = data["jobs"]["speed"], data["jobs"]["gpu"]
    # Not on pushes or manual runs, and not for forks: self-hosted runners run no foreign code.
    assert speed["if"] == (
        "github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == github.repository"
    )
    [label] = re.findall(r"inputs\.runner \|\| '([\w-]+)'", gpu["with"]["runner"])  # the suite's label on a PR
    assert speed["runs-on"] == ["self-hosted", label]
    assert speed["permissions"] == {"contents": "read"} and "needs" not in speed


def test_the_speed_gate_checks_out_the_history_and_gets_the_base_commit_through_env() -> None:
    checkout, command, upload = speed_steps()
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}  # the base revision is in the clone
    assert command["env"] == {"BASE_SHA": BASE_SHA}
    assert "${{" not in command["run"]  # no expression spliced into the shell: the value arrives as data
    words = shlex.split(command["run"])
    assert words == [".ci/speed-gate", "$BASE_SHA", "speed-report"]
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == words[2]


def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in python that has numpy and logs the arguments of its `-m` run, one a line."""
    log = tmp_path / "python-args.log"
    script = tmp_path / "python"
    script.write_text(f'#!/usr/bin/env bash\nif [ "$1" = -c ]; then exit 0; fi\nprintf "%s\\n" "$@" > "{log}"\n')
    script.chmod(0o755)
    return script, log


def head_commit() -> str:
    """This clone's HEAD, the one commit a shallow CI checkout surely has."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip("not a git clone: .ci/speed-gate needs one")
    return done.stdout.strip()


def test_the_speed_gate_command_is_benchmarks_run_against_the_base(tmp_path: Path) -> None:
    _, command, _ = speed_steps()
    python, log = fake_python(tmp_path)
    base = head_commit()
    out = tmp_path / "speed-report"
    words = [word.replace("$BASE_SHA", base) for word in shlex.split(command["run"])]
    env = {**os.environ, "DSV41_PYTHON": str(python)}
    done = subprocess.run([words[0], words[1], str(out)], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    flag, module, *arguments = log.read_text(encoding="utf-8").splitlines()
    assert (flag, module) == ("-m", "benchmarks.run")
    # benchmarks.run's parser takes the words and hands them to the gate, whose parser reads them so.
    assert benchmarks_run.parse_args(arguments).against == base
    gate = against.parse_args(arguments)
    assert (gate.against, gate.out, gate.margin) == (base, out, against.MARGIN)


def test_the_speed_gate_refuses_a_base_the_clone_lacks_and_a_bad_command_line(tmp_path: Path) -> None:
    python, log = fake_python(tmp_path)
    env = {**os.environ, "DSV41_PYTHON": str(python)}
    missing = subprocess.run(
        [".ci/speed-gate", "0" * 40, str(tmp_path / "out")], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "fetch-depth: 0" in missing.stderr
    usage = subprocess.run([".ci/speed-gate", "HEAD"], cwd=REPO, env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: .ci/speed-gate" in usage.stderr
    assert not log.exists()


def test_benchmarks_run_lists_the_speed_gate_and_hands_it_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    text = benchmarks_run.build_parser().format_help()
    assert all(option in text for option in ("--against REV", "--margin", "--rounds", "--cases", "--quick"))
    calls: list[list[str]] = []
    monkeypatch.setattr(against, "main", lambda argv: calls.append(list(argv)) or 1)
    assert benchmarks_run.main(["--against", "abc123", "--margin", "0.1", "--dtypes", "bf16"]) == 1
    assert calls == [["--against", "abc123", "--margin", "0.1", "--dtypes", "bf16"]]
    with pytest.raises(SystemExit) as usage:  # the gate's options do nothing without it
        benchmarks_run.parse_args(["--margin", "0.1"])
    assert usage.value.code == 2


def test_run_help_prints_the_usage_and_succeeds() -> None:
    for flag in ("--help", "-h"):
        done = subprocess.run(["./run", flag], cwd=REPO, capture_output=True, text=True, check=False)
        assert done.returncode == 0 and done.stdout.startswith("usage: ./run conformance|tests") and not done.stderr
    wrong = subprocess.run(["./run"], cwd=REPO, capture_output=True, text=True, check=False)
    assert wrong.returncode == 2 and wrong.stderr.startswith("usage: ./run") and not wrong.stdout


def fake_ruff(tmp_path: Path, check_status: int, format_status: int) -> tuple[Path, Path]:
    """A venv holding a stand-in for the pinned ruff that logs its arguments and exits as told."""
    pin = re.search(r"^ruff_version=(\S+)$", (REPO / ".ci" / "lint-python").read_text(encoding="utf-8"), re.M)
    assert pin and re.fullmatch(r"\d+\.\d+\.\d+", pin[1])
    log, bin_dir = tmp_path / "calls.log", tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ruff").write_text(
        f'#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "ruff {pin[1]}"; exit 0; fi\n'
        f'echo "ruff $*" >> "{log}"\nif [ "$1" = check ]; then exit {check_status}; fi\nexit {format_status}\n'
    )
    (bin_dir / "ruff").chmod(0o755)
    return tmp_path / "venv", log


@pytest.mark.parametrize(
    ("check_status", "format_status", "expected_status"),
    [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2)],  # clean; a finding; a file to reformat; ruff's own error first
)
def test_lint_python_runs_ruff_check_and_format_check_and_either_fails(
    tmp_path: Path, check_status: int, format_status: int, expected_status: int
) -> None:
    venv, log = fake_ruff(tmp_path, check_status, format_status)
    env = {**os.environ, "DSV41_LINT_VENV": str(venv)}
    done = subprocess.run([".ci/lint-python"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == expected_status, done.stdout + done.stderr
    assert "installing" not in done.stdout  # the pinned version was there
    # Both run, so one log lists every finding and every file to reformat.
    assert log.read_text(encoding="utf-8").splitlines() == ["ruff check .", "ruff format --check ."]
