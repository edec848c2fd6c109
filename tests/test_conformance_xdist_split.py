"""The conformance suite's results do not depend on how xdist splits it: a slice of the real suite run serially and
with two workers records the same cases with the same numbers (inputs are seeded from each case's id; generated
cases from each shard's seed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLICE = ["conformance/test_forward_bits.py", "conformance/test_error_vs_truth.py", "-k", "window-kv and bf16"]
# Two shards of the generated cases, so that two workers each draw one.
GENERATED_SLICE = [
    "conformance/test_generated_layouts.py",
    "-k",
    "out_of_place and (fp32-3d-forward or bf16-4d-inverse)",
]


def _cases(tmp_path: Path, name: str, workers: list[str], tests: list[str] = SLICE) -> dict:
    out = tmp_path / name
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, *tests, "--ulp-report", out]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    cases = json.loads((out / "ulp-drift.json").read_text())["cases"]
    assert cases, "the slice recorded no cases"
    # Which device ran a case legitimately depends on the split (worker i uses GPU i mod k); nothing else may.
    return {key: {field: value for field, value in case.items() if field != "device"} for key, case in cases.items()}


def test_serial_and_two_workers_record_identical_cases(tmp_path):
    serial = _cases(tmp_path, "serial", [])
    parallel = _cases(tmp_path, "parallel", ["-n", "2"])
    assert serial == parallel


def test_generated_cases_record_identically_serially_and_on_two_workers(tmp_path):
    serial = _cases(tmp_path, "serial", [], GENERATED_SLICE)
    parallel = _cases(tmp_path, "parallel", ["-n", "2"], GENERATED_SLICE)
    shards = {key.rsplit("::", 1)[0] for key in serial}
    comparisons = {key.rsplit("::", 1)[1] for key in serial}
    assert len(shards) == 2 and {"generated-fused-vs-oracle", "generated-backward-vs-oracle"} <= comparisons
    assert serial == parallel
