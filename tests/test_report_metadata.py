"""Run-level metadata that tests add (`dsv41_rope.report.pytest_hooks.add_run_metadata`): across xdist, into JSON and
Markdown, through the shard merger, and the merge rule itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv41_rope.report import FROM_TESTS, CaseRecord, Report, merge_added, merge_cli, merge_values
from dsv41_rope.report.pytest_hooks import add_run_metadata

pytest_plugins = ["pytester"]

# Tests that add run metadata from a session fixture, as the kernel's calibration will, one device per worker.
METADATA_TESTS = """
import os

import pytest

from dsv41_rope.report.pytest_hooks import add_run_metadata


@pytest.fixture(scope="session", autouse=True)
def calibrated(request):
    worker = getattr(request.config, "workerinput", {}).get("workerid", "serial")
    add_run_metadata(request.config, "contraction variant", {f"{worker} (fake device)": "first/first; in kernel"})
    add_run_metadata(request.config, "implementation", "dsv41_rope.kernel")
    add_run_metadata(request.config, "worker", worker)


def record(ulp_drift):
    ulp_drift.record(comparison="fused-vs-eager", dtype="float32", backend="triton", device="cpu", elements=8,
                     mismatches=0)


def test_one(ulp_drift):
    record(ulp_drift)


def test_two(ulp_drift):
    record(ulp_drift)
"""

METADATA_OF_TWO_WORKERS = {
    "contraction variant": {f"gw{i} (fake device)": "first/first; in kernel" for i in range(2)},
    "implementation": "dsv41_rope.kernel",
    "worker": ["gw0", "gw1"],
}


def markdown_header(directory: Path) -> str:
    """The Markdown report down to its first section: the verdict and the metadata the tests added."""
    return (directory / "ulp-drift.md").read_text(encoding="utf-8").split("### By dtype", 1)[0]


def test_run_metadata_crosses_xdist_into_json_and_markdown(report_project: pytest.Pytester) -> None:
    report_project.makepyfile(test_metadata=METADATA_TESTS)
    result = report_project.runpytest_subprocess("-n", "2", "test_metadata.py", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.OK
    metadata = json.loads((report_project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert metadata[FROM_TESTS] == METADATA_OF_TWO_WORKERS
    assert "kernel_sha256" in metadata and metadata["xdist_workers"] == ["gw0", "gw1"]
    header = markdown_header(report_project.path / "out")
    assert "\nimplementation: dsv41_rope.kernel\n" in header
    assert "\nworker: gw0, gw1\n" in header
    assert "| contraction variant | value |" in header
    assert "| gw0 (fake device) | first/first; in kernel |" in header
    assert "| gw1 (fake device) | first/first; in kernel |" in header

    assert report_project.runpytest("test_metadata.py", "--ulp-report", "serial").ret == pytest.ExitCode.OK
    serial = json.loads((report_project.path / "serial" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert serial[FROM_TESTS] == {
        "contraction variant": {"serial (fake device)": "first/first; in kernel"},
        "implementation": "dsv41_rope.kernel",
        "worker": "serial",
    }


def test_run_metadata_of_a_worker_that_dies_is_kept(report_project: pytest.Pytester) -> None:
    # Round-robin over two workers: one runs test_one, then dies in the third test, before sending its final output.
    report_project.makepyfile(test_metadata=METADATA_TESTS + "\n\ndef test_three_dies():\n    os._exit(3)\n")
    result = report_project.runpytest_subprocess("-n", "2", "test_metadata.py", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    metadata = json.loads((report_project.path / "out" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert len(metadata["workers_without_data"]) == 1
    assert metadata[FROM_TESTS] == METADATA_OF_TWO_WORKERS


def test_add_run_metadata_checks_its_arguments(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure("-p", "dsv41_rope.report.pytest_hooks")
    with pytest.raises(ValueError, match="non-empty string key"):
        add_run_metadata(config, "", "first/first")
    with pytest.raises(TypeError, match="cannot store a object"):
        add_run_metadata(config, "variant", object())
    with pytest.raises(TypeError, match="a set is not"):
        add_run_metadata(config, "devices", {"cuda:0"})
    # An installed suite's entry point loads the plugin in every session; blocked, it is not active.
    without_plugin = pytester.parseconfigure("-p", "no:dsv41_rope")
    with pytest.raises(RuntimeError, match="plugin is not active"):
        add_run_metadata(without_plugin, "variant", "first/first")


def test_added_metadata_merges_the_same_in_any_order_and_grouping() -> None:
    assert merge_values(["first/first", "first/first"]) == "first/first"
    assert merge_values(["b", "a", "b"]) == ["a", "b"]
    assert merge_values([10, 2, 2.5]) == [2, 2.5, 10]
    assert merge_values(["a", ["a", "b"]]) == ["a", "b"]  # a list stands for several values
    assert merge_values([["a"]]) == "a"
    assert merge_values([{"cuda:0": "x"}, {"cuda:1": "y"}, {"cuda:0": "z"}]) == {"cuda:0": ["x", "z"], "cuda:1": "y"}
    parts = [{"variant": "a", "devices": {"cuda:0": 1}}, {"variant": "b"}, {"variant": "a", "devices": {"cuda:1": 2}}]
    whole = merge_added(parts)
    assert whole == {"devices": {"cuda:0": 1, "cuda:1": 2}, "variant": ["a", "b"]}
    assert merge_added([merge_added(parts[:2]), parts[2]]) == whole
    assert merge_added([parts[2], merge_added([parts[1], parts[0]])]) == whole


def test_merge_combines_the_metadata_shards_added(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def shard(name: str, added: dict) -> str:
        case = CaseRecord(
            nodeid=f"t.py::test_{name}",
            comparison="fused-vs-eager",
            case_id="",
            outcome="passed",
            dtype="float32",
            backend="triton",
            device="cpu",
            elements=8,
            mismatches=0,
        )
        report = Report(cases={case.key: case}, metadata={"created": name, FROM_TESTS: added})
        return str(report.write_json(tmp_path / name / "ulp-drift.json"))

    shards = [
        shard("a", {"contraction variant": {"cuda:0 (NVIDIA H200)": "first/first"}, "runner": "a", "judged": "impl"}),
        shard("b", {"contraction variant": {"cuda:1 (NVIDIA H200)": "second/first"}, "runner": "b", "judged": "impl"}),
        shard("c", {"runner": ["a", "c"]}),
        shard("d", {}),
    ]
    assert merge_cli.main([str(tmp_path / "merged"), *shards]) == 0
    capsys.readouterr()
    merged = json.loads((tmp_path / "merged" / "ulp-drift.json").read_text(encoding="utf-8"))["metadata"]
    assert merged[FROM_TESTS] == {
        "contraction variant": {"cuda:0 (NVIDIA H200)": "first/first", "cuda:1 (NVIDIA H200)": "second/first"},
        "judged": "impl",
        "runner": ["a", "b", "c"],
    }
    assert [shard_metadata["source"] for shard_metadata in merged["shards"]] == shards
    header = markdown_header(tmp_path / "merged")
    assert "\njudged: impl\n" in header and "\nrunner: a, b, c\n" in header
    assert "| cuda:1 (NVIDIA H200) | second/first |" in header
