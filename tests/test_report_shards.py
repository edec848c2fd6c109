"""Sharded runs: each shard records the whole selection and its group (pytest-split), the groups are the same on every
runner, and the shard merger proves the shards make up the whole run, or names what is missing, without a baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv41_rope.report import COMPLETENESS, SELECTION, SHARD, Report, digest, merge_cli

pytest_plugins = ["pytester"]

# Thirteen tests, twelve of which record a case; uneven durations make groups of different sizes.
SPLIT_TESTS = """
import pytest


@pytest.mark.parametrize("n", range(12))
def test_case(ulp_drift, n):
    ulp_drift.record(comparison="fused-vs-eager", dtype="float32", backend="triton", device="cpu", elements=8,
                     mismatches=0)


def test_without_record():
    pass
"""
NODEIDS = [f"test_split.py::test_case[{n}]" for n in range(12)] + ["test_split.py::test_without_record"]
DURATIONS = {nodeid: 1.0 + i for i, nodeid in enumerate(NODEIDS)}


@pytest.fixture
def split_project(report_project: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the thirteen tests and a pytest-split durations file for them."""
    report_project.makepyfile(test_split=SPLIT_TESTS)
    (report_project.path / ".test_durations").write_text(json.dumps(DURATIONS), encoding="utf-8")
    return report_project


def metadata_of(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["metadata"]


def run_shards(project: pytest.Pytester, splits: int, *args: str) -> list[str]:
    """Runs every group of a split in-process; returns the paths of the shards' reports."""
    paths = []
    for group in range(1, splits + 1):
        out = f"shard{group}"
        result = project.runpytest("--splits", str(splits), "--group", str(group), "--ulp-report", out, *args)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        paths.append(str(project.path / out / "ulp-drift.json"))
    return paths


def test_a_run_records_its_selection(split_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # An implementation named in the environment must import and take the suite's calls (the installed plugin stops
    # the run otherwise).
    split_project.mkpydir("my_rope")
    kernel = "def apply(values, angles, *, inverse=False):\n    return values.clone()\n"
    (split_project.path / "my_rope" / "kernels.py").write_text(kernel)
    split_project.syspathinsert()
    monkeypatch.setenv("DSV41_ROPE_IMPL", "my_rope.kernels:apply")
    assert split_project.runpytest("--ulp-report", "whole").ret == pytest.ExitCode.OK
    assert split_project.runpytest("-k", "not without", "--ulp-report", "sliced").ret == pytest.ExitCode.OK
    whole, sliced = (metadata_of(split_project.path / name / "ulp-drift.json") for name in ("whole", "sliced"))
    assert whole[SELECTION] == {"tests": 13, "sha256": digest(NODEIDS), "rope_impl": "my_rope.kernels:apply"}
    assert sliced[SELECTION]["tests"] == 12 and sliced[SELECTION]["sha256"] == digest(NODEIDS[:12])
    assert SHARD not in whole  # not split


def test_shards_record_the_unsplit_selection_and_their_group(split_project: pytest.Pytester) -> None:
    shards = [metadata_of(Path(path)) for path in run_shards(split_project, 3, "-k", "not without")]
    records = [shard[SHARD] for shard in shards]
    assert all(shard[SELECTION] == shards[0][SELECTION] for shard in shards)
    assert shards[0][SELECTION]["tests"] == 12  # the -k selection, captured before pytest-split deselected
    assert [record["group"] for record in records] == [1, 2, 3]
    assert all(record["splits"] == 3 and record["algorithm"] == "duration_based_chunks" for record in records)
    sizes = records[0]["group_tests"]
    assert sum(sizes) == 12 and len(set(sizes)) > 1  # uneven durations, uneven groups
    for record in records:
        assert record["group_tests"] == sizes and record["group_sha256"] == records[0]["group_sha256"]
        assert record["tests"] == sizes[record["group"] - 1]
        assert record["tests_sha256"] == record["group_sha256"][record["group"] - 1]


def test_a_shard_under_xdist_records_the_same_split(split_project: pytest.Pytester) -> None:
    serial = run_shards(split_project, 2)[1]
    result = split_project.runpytest_subprocess("-n", "2", "--splits", "2", "--group", "2", "--ulp-report", "xdist")
    assert result.ret == pytest.ExitCode.OK
    xdist = metadata_of(split_project.path / "xdist" / "ulp-drift.json")
    assert xdist[SHARD] == metadata_of(Path(serial))[SHARD]
    assert xdist[SELECTION] == metadata_of(Path(serial))[SELECTION]


def test_groups_are_the_same_on_every_runner(split_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    def groups(seed: str) -> list[list[str]]:
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        found = []
        for group in (1, 2, 3):
            result = split_project.runpytest_subprocess("--collect-only", "-q", "--splits", "3", "--group", str(group))
            found.append([line for line in result.stdout.lines if line.startswith("test_split.py::")])
        return found

    first = groups("1")
    assert first == groups("2")  # another process, another hash seed: the same groups
    assert sorted(nodeid for group in first for nodeid in group) == sorted(NODEIDS)
    assert all(first)


def test_merge_of_every_shard_is_the_whole_run(split_project: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    assert split_project.runpytest("--ulp-report", "whole").ret == pytest.ExitCode.OK
    shards = run_shards(split_project, 3)
    capsys.readouterr()
    assert (
        merge_cli.main([str(split_project.path / "merged"), *shards, "--expect-splits", "3"]) == merge_cli.EXIT_MERGED
    )
    output = capsys.readouterr().out
    merged = json.loads((split_project.path / "merged" / "ulp-drift.json").read_text(encoding="utf-8"))
    whole = json.loads((split_project.path / "whole" / "ulp-drift.json").read_text(encoding="utf-8"))
    assert merged["cases"] == whole["cases"]
    assert merged["metadata"][COMPLETENESS]["status"] == "complete"
    assert [row["group"] for row in merged["metadata"][COMPLETENESS]["shards"]] == ["1/3", "2/3", "3/3"]
    assert "shards: complete" in output and "ulp-drift verdict: PASS - 12 cases" in output


def test_merge_names_a_missing_or_repeated_group(split_project: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    shards = run_shards(split_project, 3)
    sizes = metadata_of(Path(shards[0]))[SHARD]["group_tests"]
    out = str(split_project.path / "merged")
    capsys.readouterr()
    assert merge_cli.main([out, shards[0], shards[2]]) == merge_cli.EXIT_INCOMPLETE
    output = capsys.readouterr().out
    assert f"cpu: group 2 of 3 missing: it should have held {sizes[1]} tests" in output
    assert "ulp-drift verdict: INCOMPLETE" in output
    markdown = (split_project.path / "merged" / "ulp-drift.md").read_text(encoding="utf-8")
    assert "Completeness: **incomplete**." in markdown and "group 2 of 3 missing" in markdown

    assert merge_cli.main([out, *shards, shards[0]]) == merge_cli.EXIT_INCOMPLETE
    assert f"cpu: group 1 of 3 given 2 times: {shards[0]}, {shards[0]}" in capsys.readouterr().out
    assert merge_cli.main([out, *shards, "--expect-splits", "4"]) == merge_cli.EXIT_INCONSISTENT
    assert "cpu: 4 shards expected, the reports were split into 3 groups" in capsys.readouterr().out


def test_merge_of_a_run_whose_worker_died_is_incomplete(
    split_project: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    split_project.makepyfile(test_crash="import os\n\ndef test_dies():\n    os._exit(3)\n")
    result = split_project.runpytest_subprocess("-n", "2", "--ulp-report", "crashed")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    crashed = str(split_project.path / "crashed" / "ulp-drift.json")
    assert metadata_of(Path(crashed))["workers_without_data"]
    capsys.readouterr()
    assert merge_cli.main([str(split_project.path / "merged"), crashed]) == merge_cli.EXIT_INCOMPLETE
    output = capsys.readouterr().out
    assert f"{crashed} (cpu): " in output and "no data from xdist workers gw" in output
    assert "ulp-drift verdict: INCOMPLETE" in output


def edited(path: str, target: Path, **metadata: object) -> str:
    """Writes a copy of a report whose metadata has the given fields changed; returns its path."""
    report = Report.load(path)
    report.metadata.update(metadata)
    return str(report.write_json(target))


@pytest.mark.parametrize(
    ("field", "first", "second", "message"),
    [
        ("kernel_sha256", None, "0123456789abcdef", "shards differ in kernel_sha256"),
        ("git_commit", "e" * 40, "f" * 40, "shards differ in git_commit"),
        ("torch", None, "2.99.0", "shards differ in torch (cpu)"),
        (
            "from_tests",
            {"implementation": "dsv41_rope.kernel"},
            {"implementation": "other_rope:apply"},
            "implementation",
        ),
        (SELECTION, None, {"tests": 11, "sha256": "feedfacefeedface", "rope_impl": None}, "shards differ in selection"),
    ],
    ids=["kernel", "commit", "build", "implementation", "selection"],
)
def test_merge_refuses_shards_of_different_runs(
    split_project: pytest.Pytester,
    capsys: pytest.CaptureFixture,
    field: str,
    first: object,
    second: object,
    message: str,
) -> None:
    shards = run_shards(split_project, 2)
    if first is not None:  # plant both where the run records nothing to differ from (no git, no implementation)
        shards[0] = edited(shards[0], split_project.path / "a.json", **{field: first})
    assert metadata_of(Path(shards[0]))[field] not in (None, second)
    shards[1] = edited(shards[1], split_project.path / "b.json", **{field: second})
    capsys.readouterr()
    assert merge_cli.main([str(split_project.path / "merged"), *shards]) == merge_cli.EXIT_INCONSISTENT
    output = capsys.readouterr().out
    assert message in output and "shards: inconsistent" in output


def test_devices_merge_apart_each_complete_on_its_own(
    split_project: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    shards = run_shards(split_project, 2)
    h200 = [edited(p, split_project.path / f"h200-{i}.json", gpu="cuda:0 NVIDIA H200") for i, p in enumerate(shards)]
    b200 = [
        edited(p, split_project.path / f"b200-{i}.json", gpu="cuda:0 NVIDIA B200, cuda:1 NVIDIA B200", torch="2.99.0")
        for i, p in enumerate(shards)
    ]
    out = split_project.path / "merged"
    capsys.readouterr()
    assert (
        merge_cli.main([str(out), *h200, *b200]) == merge_cli.EXIT_MERGED
    )  # another torch on another device is no mix
    merged = Report.load(out / "ulp-drift.json")
    assert len(merged.cases) == 24
    assert {record.device_name for record in merged.cases.values()} == {"NVIDIA B200", "NVIDIA H200"}
    assert "[NVIDIA H200] test_split.py::test_case[0]::fused-vs-eager" in merged.cases
    markdown = (out / "ulp-drift.md").read_text(encoding="utf-8")
    assert "| device | dtype | backend | comparison | cases |" in markdown
    assert "| NVIDIA B200 | float32 | triton | fused-vs-eager | 12 |" in markdown
    assert "| NVIDIA H200 | float32 | triton | fused-vs-eager | 12 |" in markdown

    # Each device's run must be whole on its own: B200's second group is missing.
    assert merge_cli.main([str(out), *h200, b200[0]]) == merge_cli.EXIT_INCOMPLETE
    assert "NVIDIA B200: group 2 of 2 missing" in capsys.readouterr().out


def test_a_single_device_baseline_gates_every_device(
    split_project: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    assert split_project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    shard = run_shards(split_project, 1)[0]
    h200 = edited(shard, split_project.path / "h200.json", gpu="cuda:0 NVIDIA H200")
    b200 = Report.load(shard)
    b200.metadata["gpu"] = "cuda:0 NVIDIA B200"
    drifted = b200.cases["test_split.py::test_case[3]::fused-vs-eager"]
    b200.cases[drifted.key] = type(drifted)(**{**drifted.__dict__, "mismatches": 2})
    b200_path = str(b200.write_json(split_project.path / "b200.json"))
    capsys.readouterr()
    baseline = ["--baseline", str(split_project.path / "base.json"), "--baseline-strict"]
    assert merge_cli.main([str(split_project.path / "merged"), h200, b200_path, *baseline]) == merge_cli.EXIT_REGRESSION
    output = capsys.readouterr().out
    assert "REGRESSION [NVIDIA B200] test_split.py::test_case[3]::fused-vs-eager" in output
    assert "baseline " in output and "1 regressed, 0 new, 0 missing" in output


def test_a_shard_that_does_not_run_its_recorded_group_stops(split_project: pytest.Pytester) -> None:
    # A plugin that drops a test after pytest-split chose the group: the shard could no longer be proven complete.
    split_project.makeconftest(
        """
        import pytest

        pytest_plugins = ["dsv41_rope.report.pytest_hooks"]


        @pytest.hookimpl(hookwrapper=True)
        def pytest_collection_modifyitems(items):
            yield
            items.pop()
        """
    )
    result = split_project.runpytest("--splits", "2", "--group", "1", "--ulp-report", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*this shard runs * tests that are not group 1 of the split recorded*"])
