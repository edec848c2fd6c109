"""N GPUs on one host: xdist worker ``gwN`` runs on GPU ``N mod k`` (`dsv41_rope.harness.backend`), and every case in
the report names the GPU that ran it, through xdist and through the shard merger. The GPUs are faked: no CUDA is
needed."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import torch

from dsv41_rope.harness import backend, devices, under_test
from dsv41_rope.report import checked_device, merge_cli
from tools import two_gpus

pytest_plugins = ["pytester"]


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch):
    """Returns a function that makes this process see `count` CUDA devices of `gib` GiB each, compiled (not
    interpreted) kernels: as torch sees them (the tests' processes) and as the driver lists them to a process that
    has not imported torch (`dsv41_rope.harness.devices`: xdist's controller)."""

    def fake(count: int, gib: int = 141) -> None:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        listed = tuple(devices.CudaDevice(i, "NVIDIA H200", gib * 2**30) for i in range(count))
        monkeypatch.setattr(devices, "driver_devices", lambda: listed)
        monkeypatch.setattr(devices, "torch_cuda_version", lambda: "13.0")

    return fake


@pytest.mark.parametrize(
    ("gpus", "worker", "expected"),
    [(4, "gw0", "cuda:0"), (4, "gw3", "cuda:3"), (4, "gw5", "cuda:1"), (3, "gw7", "cuda:1"), (1, "gw15", "cuda:0")],
)
def test_worker_n_runs_on_gpu_n_mod_k(
    fake_gpus, monkeypatch: pytest.MonkeyPatch, gpus: int, worker: str, expected: str
) -> None:
    fake_gpus(gpus)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert backend.name() == "cuda"
    assert str(backend.device()) == expected


def test_eight_workers_a_gpu_fill_every_gpu_evenly(fake_gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(8)
    per_gpu = collections.Counter()
    for worker in range(64):  # ./run's -n for 8 GPUs: 8 workers a GPU
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        per_gpu[str(backend.device())] += 1
    assert per_gpu == {f"cuda:{gpu}": 8 for gpu in range(8)}


def test_without_xdist_or_with_the_interpreter(fake_gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(4)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert str(backend.device()) == "cuda:0"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backend.name() == "interpreter" and str(backend.device()) == "cpu"


@pytest.mark.parametrize(
    ("gpus", "gib", "cores", "expected"),
    [(1, 141, 16, 16), (2, 141, 32, 32), (2, 141, 16, 16), (1, 80, 64, 8), (8, 141, 128, 128), (4, 80, 128, 32)],
)
def test_n_auto_takes_16_workers_a_large_gpu_with_the_cores_for_them_else_8(
    fake_gpus, monkeypatch: pytest.MonkeyPatch, gpus: int, gib: int, cores: int, expected: int
) -> None:
    fake_gpus(gpus, gib)
    monkeypatch.setattr(backend.os, "sched_getaffinity", lambda pid: set(range(cores)))
    workers = under_test.pytest_xdist_auto_num_workers(config=None)
    assert workers == expected, f"-n auto on {gpus} GPUs of {gib} GiB, {cores} cores: {workers} workers"


def test_n_auto_is_xdists_own_on_a_cpu(fake_gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(1)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert under_test.pytest_xdist_auto_num_workers(config=None) is None
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(devices, "driver_devices", lambda: ())  # no GPU the driver lists
    assert under_test.pytest_xdist_auto_num_workers(config=None) is None
    fake_gpus(1)
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(devices, "torch_cuda_version", lambda: None)  # a CPU build of torch
    assert under_test.pytest_xdist_auto_num_workers(config=None) is None


def test_a_case_names_the_device_that_ran_it() -> None:
    assert checked_device(torch.device("cuda", 3)) == "cuda:3"
    assert checked_device("cpu") == "cpu"
    for ambiguous in ("cuda", torch.device("cuda"), ""):
        with pytest.raises(ValueError, match="record its index"):
            checked_device(ambiguous)


# Tests that record where the backend puts them, and which worker ran them, on two faked GPUs.
FAKE_GPU_CONFTEST = """
import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2

pytest_plugins = ["dsv41_rope.report.pytest_hooks"]
"""
DEVICE_TESTS = """
import os

import pytest

from dsv41_rope.harness import backend


@pytest.mark.parametrize("n", range(12))
def test_case(ulp_drift, n):
    ulp_drift.record(comparison="fused-vs-eager", dtype="float32", backend=backend.name(), device=backend.device(),
                     elements=8, mismatches=0, detail=os.environ.get("PYTEST_XDIST_WORKER", "serial"))
"""


def test_reports_and_merges_keep_the_gpu_of_each_case(
    report_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    # When this test itself runs on an xdist worker, the serial inner run must not inherit the worker's name.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    report_project.makeconftest(FAKE_GPU_CONFTEST)
    report_project.makepyfile(test_devices=DEVICE_TESTS)
    for group, workers in ((1, ["-n", "3"]), (2, ["-p", "no:xdist"])):
        result = report_project.runpytest_subprocess(
            *workers, "--splits", "2", "--group", str(group), "--ulp-report", f"s{group}"
        )
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    shards = [str(report_project.path / f"s{group}" / "ulp-drift.json") for group in (1, 2)]
    xdist = json.loads(Path(shards[0]).read_text(encoding="utf-8"))["cases"]
    for case in xdist.values():
        assert case["device"] == f"cuda:{int(case['detail'].removeprefix('gw')) % 2}"
    assert {case["device"] for case in xdist.values()} == {"cuda:0", "cuda:1"}
    serial = json.loads(Path(shards[1]).read_text(encoding="utf-8"))["cases"]
    assert {case["device"] for case in serial.values()} == {"cuda:0"}
    # Which worker ran on which GPU, in the report's metadata and its Markdown.
    metadata = json.loads(Path(shards[0]).read_text(encoding="utf-8"))["metadata"]
    by_worker = {case["detail"]: case["device"] for case in xdist.values()}
    assert metadata["xdist_worker_devices"] == [
        f"{worker}: {by_worker[worker] if worker in by_worker else '-'}" for worker in metadata["xdist_workers"]
    ]
    markdown = (report_project.path / "s1" / "ulp-drift.md").read_text(encoding="utf-8")
    assert "xdist_worker_devices: " + ", ".join(metadata["xdist_worker_devices"]) in markdown

    capsys.readouterr()
    assert merge_cli.main([str(report_project.path / "merged"), *shards]) == merge_cli.EXIT_MERGED
    merged = json.loads((report_project.path / "merged" / "ulp-drift.json").read_text(encoding="utf-8"))["cases"]
    assert merged == {**xdist, **serial} and len(merged) == 12
    assert "cuda:0-1" in capsys.readouterr().out  # the devices column


@pytest.fixture
def torch_threads():
    """Restores PyTorch's thread count after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "workers", "expected"), [(16, 8, 2), (16, 16, 1), (2, 2, 1), (16, 32, 1), (32, 8, 4)]
)
def test_each_worker_takes_its_share_of_the_host_cores(
    monkeypatch: pytest.MonkeyPatch, torch_threads, cores: int, workers: int, expected: int
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    monkeypatch.setattr(backend.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert backend.share_host_cores() == expected
    assert torch.get_num_threads() == expected


@pytest.mark.parametrize(("workers", "omp_num_threads"), [("", None), ("1", None), ("8", "3")])
def test_host_threads_left_alone_outside_xdist_or_where_omp_num_threads_says(
    monkeypatch: pytest.MonkeyPatch, torch_threads, workers: str, omp_num_threads: str | None
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    if omp_num_threads is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp_num_threads)
    before = torch.get_num_threads()
    assert backend.share_host_cores() is None
    assert torch.get_num_threads() == before


def test_the_two_gpu_check_says_what_it_needs_on_a_host_without_two(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.device_count() >= 2:
        pytest.skip("this host has two GPUs: the check runs for real (tools/gpu_gate.sh, step two_gpus)")
    assert two_gpus.main() == 2
    assert "needs 2 CUDA devices" in capsys.readouterr().out
