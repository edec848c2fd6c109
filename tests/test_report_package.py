"""Tests of the report package's functions, without pytest runs: the baseline comparison, the strict JSON, the
optional plot, the terminal table's width, and the line beside FP32 error figures."""

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
from dsv41_rope.report.render_markdown import FP32_ERROR_NOTE as MARKDOWN_FP32_NOTE
from dsv41_rope.report.render_text import FP32_ERROR_NOTE as TERMINAL_FP32_NOTE

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


def test_fp32_error_figures_say_why_the_elementwise_max_is_large_and_which_figure_is_bounded() -> None:
    fp32 = record(dtype="fp32", elementwise={"max": 2.156e4}, normwise={"max": 1.47})
    bf16 = record(nodeid="t.py::test[bf16]", elementwise={"max": 0.5}, normwise={"max": 0.5})
    report = Report(cases={case.key: case for case in (fp32, bf16)})
    markdown = render_markdown(report)
    note = MARKDOWN_FP32_NOTE
    assert note in markdown.splitlines(), "the Markdown report has no line on the FP32 figures"
    table_end = markdown.index("| fp32 | triton | fused-vs-truth |")
    assert table_end < markdown.index(note) < markdown.index("### Elementwise ulp histogram"), "not beside the table"
    for words in ("cancellation in `a*c - b*d`", "near 0 while its pair is not", "norm-wise figure is the one held"):
        assert words in note, f"the note does not say {words!r}: {note!r}"
    for bound in ("5.0 ulps", "6.0 when a part of the contraction is `none`", "0.504 ulp", "Norm-wise error bound"):
        assert bound in note, f"the note does not name {bound!r}: {note!r}"
    lines = render_terminal(report)
    terminal_note = TERMINAL_FP32_NOTE
    assert terminal_note in lines, "the terminal summary has no line on the FP32 figures"
    assert "a*c - b*d" in terminal_note and "norm max is held to the bound" in terminal_note
    assert lines.index(terminal_note) < len(lines) - 1 and max(len(line) for line in lines) <= 120


def test_no_fp32_line_without_fp32_error_figures() -> None:
    bits = record(dtype="fp32", comparison="fused-vs-oracle")  # a bit comparison: no ulp figures
    bf16 = record(nodeid="t.py::test[bf16]", elementwise={"max": 2.0}, normwise={"max": 0.5})
    report = Report(cases={case.key: case for case in (bits, bf16)})
    assert MARKDOWN_FP32_NOTE not in render_markdown(report)
    assert TERMINAL_FP32_NOTE not in render_terminal(report)
