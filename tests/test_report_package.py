"""Tests of the report package's functions, without pytest runs: the baseline comparison, the strict JSON, the
optional plot, and the terminal table's width."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from dsv41_rope.report import (
    PNG_NAME,
    CaseRecord,
    Report,
    compact_devices,
    compare_cases,
    render_markdown,
    render_terminal,
    write_report,
)

EDGES = [0.0, 0.5, 1.0, 2.0, math.inf]


def record(**fields: object) -> CaseRecord:
    base = {
        "nodeid": "t.py::test",
        "comparison": "fused-vs-truth",
        "case_id": "",
        "outcome": "passed",
        "dtype": "bfloat16",
        "backend": "triton",
        "device": "cpu",
        "elements": 16,
        "mismatches": 0,
    }
    return CaseRecord(**{**base, **fields})


def test_zero_baselines_use_absolute_tolerance() -> None:
    exact = record(elementwise={"max": 0.0, "correctly_rounded_fraction": 1.0})
    assert compare_cases(exact, exact) == ()
    drifted = record(elementwise={"max": 0.5, "correctly_rounded_fraction": 1.0})
    assert [c.describe() for c in compare_cases(drifted, exact)] == ["max elementwise ulp 0 -> 0.5"]
    assert compare_cases(drifted, exact, ulp_tolerance=0.5) == ()
    dropped = record()
    assert [c.describe() for c in compare_cases(dropped, exact)] == [
        "max elementwise ulp 0 -> not recorded",
        "elementwise correctly-rounded fraction 1 -> not recorded",
    ]


def test_non_finite_errors_survive_strict_json(tmp_path: Path) -> None:
    case = record(elementwise={"max": math.inf, "mean": math.nan, "histogram": [1, 2, 0]})
    report = Report(cases={case.key: case}, histogram_edges=EDGES[:3])
    path = report.write_json(tmp_path / "r.json")
    assert "Infinity" not in path.read_text(encoding="utf-8") and "NaN" not in path.read_text(encoding="utf-8")
    loaded = Report.load(path)
    assert loaded.cases[case.key].elementwise["max"] == math.inf
    assert math.isnan(loaded.cases[case.key].elementwise["mean"])
    assert loaded.to_json() == report.to_json()


def test_png_skipped_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    case = record(elementwise={"max": 0.5, "histogram": [3, 1, 0]})
    written, markdown = write_report(Report(cases={case.key: case}, histogram_edges=[0.0, 0.5, 1.0]), tmp_path)
    assert [p.name for p in written] == ["ulp-drift.json", "ulp-drift.md"]
    assert not (tmp_path / PNG_NAME).exists()
    assert "matplotlib is not importable" in markdown
    assert "| bfloat16 / triton / fused-vs-truth | 3 | 1 |" in markdown
    assert "| dtype / backend / comparison | <= 0 | (0, 0.5] |" in markdown


def test_compact_devices() -> None:
    assert compact_devices(["cuda:3", "cuda:0", "cuda:1", "cpu", "cuda:5", "cuda:1"]) == "cpu,cuda:0-1,3,5"
    assert compact_devices([f"cuda:{i}" for i in range(8)]) == "cuda:0-7"


def test_terminal_table_fits_an_eight_gpu_run() -> None:
    truth = {"max": 1.5, "correctly_rounded_fraction": 0.999999, "count": 123456789, "histogram": [0, 1]}
    cases = [
        record(
            nodeid=f"t.py::test[{dtype}-{i}]",
            comparison=comparison,
            dtype=dtype,
            backend="interpreter",
            device=f"cuda:{i}",
            elements=123456789,
            signed_zero_differences=12345,
            elementwise=truth,
            normwise=truth,
            allowed="signed-zero",
        )
        for i in range(8)
        for dtype in ("bfloat16", "float16", "float32")
        for comparison in ("backward-independent-of-values", "fused-vs-truth")
    ]
    lines = render_terminal(Report(cases={case.key: case for case in cases}))
    assert lines[0] == "all cases: backend interpreter, devices cuda:0-7"
    assert max(len(line) for line in lines) <= 120


def test_devices_kept_apart_have_rows_of_their_own() -> None:
    cases = [
        record(device_name=name, device=f"cuda:{i}", elementwise={"max": 0.5, "histogram": [3, 1]})
        for i, name in enumerate(("NVIDIA H200", "NVIDIA B200"))
    ]
    report = Report(cases={case.key: case for case in cases}, histogram_edges=[0.0, 0.5])
    assert sorted(report.cases) == [
        "[NVIDIA B200] t.py::test::fused-vs-truth",
        "[NVIDIA H200] t.py::test::fused-vs-truth",
    ]
    markdown = render_markdown(report)
    assert "| NVIDIA B200 | bfloat16 | triton | fused-vs-truth | 1 | 16 |" in markdown
    assert "| device / dtype / backend / comparison | <= 0 | (0, 0.5] |" in markdown
    assert "| NVIDIA H200 / bfloat16 / triton / fused-vs-truth | 3 | 1 |" in markdown
    lines = render_terminal(report)
    assert lines[0] == "all cases: backend triton"
    assert lines[1].split()[:3] == ["device", "dtype", "comparison"] and lines[3].startswith("NVIDIA B200  bfloat16")
    assert max(len(line) for line in lines) <= 120
