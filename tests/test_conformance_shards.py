"""A slice of the real conformance suite run as three shards (pytest-split over the committed durations, as `.ci/shard`
runs them) merges into the report of the unsplit run; dropping or repeating a shard fails the merge, naming the group
and how many tests it should have held."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_rope.report import COMPLETENESS, SHARD, Report, merge_cli, verdict_status

REPO = Path(__file__).resolve().parents[1]
# Small and fast under the interpreter: the bad-input checks and the BF16 window-KV forward bits (36 tests), gated by
# the interpreter's baseline as ./run gates them.
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "dsv41_rope/conformance"]
SLICE = [
    "-k",
    "test_bad_input or (test_forward_bits and window-kv and bf16)",
    "--ulp-baseline",
    "dsv41_rope/baselines/ulp-drift-interpreter.json",
]


# What the outer run may have set that the inner runs must not inherit (its CI page, its implementation, its report).
OUTER = ("GITHUB_STEP_SUMMARY", "DSV41_ROPE_IMPL", "DSV41_REPORT", "PYTEST_CURRENT_TEST")


def run_slice(root: Path) -> None:
    """Runs the slice whole and as three shards, all at once."""
    env = {key: value for key, value in os.environ.items() if key not in OUTER and not key.startswith("PYTEST_XDIST")}
    commands = {"whole": [*PYTEST, *SLICE, "--ulp-report", str(root / "whole")]}
    for g in (1, 2, 3):
        out = root / f"shard{g}"
        split = ["--splits", "3", "--group", str(g), "--junitxml", str(out / "junit.xml")]
        commands[f"shard{g}"] = [*PYTEST, *SLICE, *split, "--ulp-report", str(out)]
    running = {
        name: subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for name, command in commands.items()
    }
    for name, process in running.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name}:\n{output.decode()[-3000:]}"


# One test, so that xdist never runs the slice's four runs twice in parallel (a fixture is per worker).
def test_the_merged_shards_are_the_unsplit_run_and_a_lost_or_repeated_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = tmp_path
    run_slice(runs)
    shards = [str(runs / f"shard{g}" / "ulp-drift.json") for g in (1, 2, 3)]
    assert all((Path(path).parent / "junit.xml").is_file() for path in shards)
    capsys.readouterr()
    assert merge_cli.main([str(runs / "merged"), *shards, "--expect-splits", "3"]) == merge_cli.EXIT_MERGED
    merged, whole = Report.load(runs / "merged" / "ulp-drift.json"), Report.load(runs / "whole" / "ulp-drift.json")
    assert whole.cases and merged.to_json()["cases"] == whole.to_json()["cases"]
    assert verdict_status(merged) == verdict_status(whole) == "PASS"
    assert merged.metadata[COMPLETENESS]["status"] == "complete"
    assert sorted(row["tests"] for row in merged.metadata[COMPLETENESS]["shards"]) == sorted(
        Report.load(shards[0]).metadata[SHARD]["group_tests"]
    )
    assert sum(Report.load(path).metadata[SHARD]["tests"] for path in shards) == whole.metadata["selection"]["tests"]

    expected = json.loads(Path(shards[0]).read_text(encoding="utf-8"))["metadata"][SHARD]["group_tests"][1]
    capsys.readouterr()
    assert (
        merge_cli.main([str(runs / "lost"), shards[0], shards[2], "--expect-splits", "3"]) == merge_cli.EXIT_INCOMPLETE
    )
    output = capsys.readouterr().out
    assert f"cpu: group 2 of 3 missing: it should have held {expected} tests" in output
    assert "ulp-drift verdict: INCOMPLETE" in output
    assert merge_cli.main([str(runs / "twice"), *shards, shards[1]]) == merge_cli.EXIT_INCOMPLETE
    assert f"cpu: group 2 of 3 given 2 times: {shards[1]}, {shards[1]}" in capsys.readouterr().out
