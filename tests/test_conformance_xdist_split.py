"""The conformance suite's results do not depend on how xdist splits it: a slice of the real suite run serially and
with two workers records the same cases with the same numbers (inputs are seeded from each case's id, a generated
shard's examples from the shard's seed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLICE = [
    "dsv41_rope/conformance/test_forward_bits.py",
    "dsv41_rope/conformance/test_error_vs_truth.py",
    "dsv41_rope/conformance/test_generated_layouts.py",
    "-k",
    "(window-kv and bf16) or (out_of_place and fp32-3d-forward)",
]


def _cases(tmp_path: Path, name: str, workers: list[str]) -> dict:
    out = tmp_path / name
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, *SLICE, "--ulp-report", out]
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
