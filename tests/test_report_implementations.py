"""Which implementation a report judged: it heads the Markdown, reports of different implementations never merge
(in one process or with the shard merger), and case keys are the same whether the suite runs from a checkout or
installed elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv41_rope.harness.provenance import kernel_sha256
from dsv41_rope.report import (
    FROM_TESTS,
    IMPLEMENTATION,
    CaseRecord,
    Report,
    ReportError,
    merge_cli,
    merge_reports,
    portable_nodeid,
    render_markdown,
)

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[1]
PROJECT = {"function": "dsv41_rope.kernel:apply_rope_triton", "sha256": "258de3f026818b87", "claims": "compile"}
VENDORED = {"function": "vendored_rope:apply_rope_triton", "sha256": "258de3f026818b87", "claims": "none"}


def report(implementation: dict | None, nodeid: str = "dsv41_rope/conformance/test_forward_bits.py::test[a]") -> Report:
    record = CaseRecord(nodeid, "fused-vs-oracle", "a", "passed", "bf16", "interpreter", "cpu", 16, 0)
    added = {FROM_TESTS: {IMPLEMENTATION: implementation}} if implementation is not None else {}
    return Report(cases={record.key: record}, metadata=added)


def test_reports_of_one_implementation_merge_and_keep_its_name() -> None:
    other_case = report(PROJECT, "dsv41_rope/conformance/test_forward_bits.py::test[b]")
    merged = merge_reports([report(PROJECT), other_case, report(None)])
    assert len(merged.cases) == 2
    assert merged.metadata[FROM_TESTS][IMPLEMENTATION] == PROJECT


def test_reports_of_different_implementations_do_not_merge() -> None:
    with pytest.raises(ReportError) as raised:
        merge_reports([report(PROJECT), report(VENDORED), report(PROJECT)], sources=["a.json", "b.json", "c.json"])
    message = str(raised.value)
    assert "2 different implementations" in message
    assert "dsv41_rope.kernel:apply_rope_triton (sha256 258de3f026818b87): a.json, c.json" in message
    assert "vendored_rope:apply_rope_triton (sha256 258de3f026818b87): b.json" in message


def test_another_source_of_the_same_module_is_another_implementation() -> None:
    edited = {**PROJECT, "sha256": "0123456789abcdef"}
    with pytest.raises(ReportError, match="0123456789abcdef"):
        merge_reports([report(PROJECT), report(edited)])


def test_the_shard_merger_refuses_them_as_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shards = [report(PROJECT).write_json(tmp_path / "a.json"), report(VENDORED).write_json(tmp_path / "b.json")]
    assert merge_cli.main([str(tmp_path / "out"), *map(str, shards)]) == merge_cli.EXIT_BAD_INPUT
    assert "merge each implementation's reports apart" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_markdown_names_the_implementation_under_the_verdict() -> None:
    head = render_markdown(report(VENDORED)).split("### By dtype")[0]
    assert f"| {IMPLEMENTATION} | value |" in head
    assert "| function | vendored_rope:apply_rope_triton |" in head
    assert "| sha256 | 258de3f026818b87 |" in head


def _package(root: Path, *parts: str) -> Path:
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True)
    for depth in range(1, len(parts) + 1):
        (root.joinpath(*parts[:depth]) / "__init__.py").touch()
    return folder


def test_node_ids_of_an_installed_suite_are_the_checkouts(tmp_path: Path) -> None:
    site = _package(tmp_path / "venv" / "site-packages", "dsv41_rope", "conformance")
    installed = site / "test_forward_bits.py"
    # pytest names an installed test by the path from the folder it was pointed at (--pyargs dsv41_rope.conformance).
    assert (
        portable_nodeid("test_forward_bits.py::test[a]", installed)
        == "dsv41_rope/conformance/test_forward_bits.py::test[a]"
    )
    checkout = _package(tmp_path / "checkout", "dsv41_rope", "conformance") / "test_forward_bits.py"
    nodeid = "dsv41_rope/conformance/test_forward_bits.py::test[a]"
    assert portable_nodeid(nodeid, checkout) == nodeid
    nested = _package(tmp_path / "deep", "suite", "sub") / "test_x.py"
    assert portable_nodeid("test_x.py::test", nested) == "suite/sub/test_x.py::test"


def test_a_test_outside_a_package_keeps_its_node_id(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    assert portable_nodeid("tests/test_x.py::test", tmp_path / "tests" / "test_x.py") == "tests/test_x.py::test"
    assert portable_nodeid("test_x.py::test", None) == "test_x.py::test"


# A test that judges another implementation, as the suite's fixture records it.
JUDGING_TESTS = """
import pytest

from dsv41_rope.report.pytest_hooks import add_run_metadata
from dsv41_rope.report import IMPLEMENTATION


@pytest.fixture(scope="session", autouse=True)
def judged(request, pytestconfig):
    source = str(pytestconfig.rootpath / "their_rope.py")
    add_run_metadata(request.config, IMPLEMENTATION, {"function": "their_rope:rope", "source": source})


def test_forward(ulp_drift):
    ulp_drift.record(comparison="fused-vs-oracle", dtype="bf16", backend="interpreter", device="cpu", elements=8,
                     mismatches=0)
"""


def test_the_run_table_names_the_judged_implementations_source_digest(report_project: pytest.Pytester) -> None:
    report_project.makepyfile(test_judging=JUDGING_TESTS, their_rope="def rope(values, angles, *, inverse=False): ...")
    assert report_project.runpytest("--ulp-report", "out").ret == pytest.ExitCode.OK
    metadata = json.loads((report_project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    judged = kernel_sha256(report_project.path / "their_rope.py")
    assert metadata["kernel_sha256"] == judged
    assert metadata["reference_sha256"] == kernel_sha256(REPO / "dsv41_rope" / "kernel")
    run_table = (report_project.path / "out" / "ulp-drift.md").read_text(encoding="utf-8").split("### Run")[1]
    assert f"| kernel_sha256 | `{judged}` |" in run_table
