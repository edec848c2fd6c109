"""This machine's CUDA found without importing torch (`dsv41_rope.harness.devices`), and xdist's controller, which only
hands tests out, never importing torch: each python start that imports it takes 3-7 s on the H200 (docs/ci.md)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dsv41_rope.harness import devices

ROOT = Path(__file__).resolve().parents[1]


def _python(
    *arguments: str, first_on_path: Path, timeout: float = 120, **environment: str
) -> subprocess.CompletedProcess[str]:
    """Runs a fresh python with `arguments` from the repository root, `first_on_path` before the repository on its
    path and `environment` added to this process's (outside any xdist worker's identity)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(first_on_path), str(ROOT)]), **environment}
    environment.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("cuda: Optional[str] = '13.0'", "13.0"),
        ('cuda = "12.4"', "12.4"),
        ("cuda: Optional[str] = None", None),
        ("hip: Optional[str] = None", None),
    ],
)
def test_torchs_build_is_read_from_its_version_file_without_importing_it(
    tmp_path: Path, assignment: str, expected: str | None
) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('imported torch')\n")
    (fake / "version.py").write_text(
        f"from typing import Optional\n__version__ = '2.11.0+cu130'\ngit_version = 'abc'\n{assignment}\n"
    )
    done = _python(
        "-c",
        "import json, sys\nfrom dsv41_rope.harness import devices, provenance\n"
        "print(json.dumps([devices.torch_version(), devices.torch_cuda_version(), provenance.versions()['torch'],"
        " 'torch' in sys.modules]))",
        first_on_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    version, cuda, recorded, imported = json.loads(done.stdout)
    assert (version, cuda, recorded, imported) == ("2.11.0+cu130", expected, "2.11.0+cu130", False), assignment


def test_torchs_build_is_the_imported_torchs() -> None:
    assert (devices.torch_version(), devices.torch_cuda_version()) == (torch.__version__, torch.version.cuda)


class FakeDriver:
    """A CUDA driver's five calls, answering for `gpus` (name, bytes) or failing one call with `error`."""

    def __init__(self, gpus: list[tuple[str, int]], failing: str = "", error: int = 100) -> None:
        self.gpus, self.failing, self.error = gpus, failing, error

    def _result(self, call: str) -> int:
        return self.error if call == self.failing else 0

    def cuInit(self, flags: int) -> int:  # noqa: N802 (the driver's names)
        return self._result("cuInit")

    def cuDeviceGetCount(self, count) -> int:  # noqa: N802
        count._obj.value = len(self.gpus)
        return self._result("cuDeviceGetCount")

    def cuDeviceGet(self, handle, index: int) -> int:  # noqa: N802
        handle._obj.value = 100 + index
        return self._result("cuDeviceGet")

    def cuDeviceGetName(self, buffer, size: int, handle: ctypes.c_int) -> int:  # noqa: N802
        buffer.value = self.gpus[handle.value - 100][0].encode()
        return self._result("cuDeviceGetName")

    def cuDeviceTotalMem_v2(self, memory, handle: ctypes.c_int) -> int:  # noqa: N802
        memory._obj.value = self.gpus[handle.value - 100][1]
        return self._result("cuDeviceTotalMem_v2")


def test_the_driver_lists_each_device_with_its_cuda_index_name_and_memory() -> None:
    driver = FakeDriver([("NVIDIA H200", 150_000_000_000), ("NVIDIA H100 80GB HBM3", 85_000_000_000)])
    assert devices.listed_devices(driver) == (
        devices.CudaDevice(0, "NVIDIA H200", 150_000_000_000),
        devices.CudaDevice(1, "NVIDIA H100 80GB HBM3", 85_000_000_000),
    )


@pytest.mark.parametrize(
    "failing", ["cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceTotalMem_v2"]
)
def test_a_driver_that_fails_lists_no_devices(failing: str) -> None:
    assert devices.listed_devices(FakeDriver([("NVIDIA H200", 1 << 37)], failing=failing)) == ()


def test_a_driver_missing_a_call_lists_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices.ctypes, "CDLL", lambda name: object())  # a library without the driver's calls
    devices.driver_devices.cache_clear()
    try:
        assert devices.driver_devices() == ()
    finally:
        devices.driver_devices.cache_clear()


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device: compares the driver's list with torch's"
)
def test_the_driver_lists_what_torch_sees() -> None:
    torch_sees = tuple(
        devices.CudaDevice(i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory)
        for i in range(torch.cuda.device_count())
    )
    assert devices.driver_devices() == torch_sees
    assert devices.cuda_usable()


def test_the_xdist_controller_imports_no_torch(tmp_path: Path) -> None:
    """A run over an xdist worker: the controller (root conftest, the suite's conftest and plugins, `-n auto`'s hook,
    the header) loads no torch, triton, oracle or kernel; the worker runs the test."""
    (tmp_path / "controller_modules.py").write_text(
        "import json, os, sys\n"
        "def pytest_sessionfinish(session):\n"
        "    if not hasattr(session.config, 'workerinput'):\n"
        "        heavy = [m for m in ('torch', 'triton', 'oracle', 'dsv41_rope.kernel') if m in sys.modules]\n"
        "        with open(os.environ['CONTROLLER_MODULES'], 'w') as out:\n"
        "            json.dump(heavy, out)\n"
    )
    record = tmp_path / "heavy.json"
    done = _python(
        "-m",
        "pytest",
        "-n",
        "1",
        "-p",
        "controller_modules",
        "-p",
        "no:cacheprovider",
        "dsv41_rope/conformance/kernel_self_tests/test_dispatch.py",
        "-k",
        "test_output_is_new_contiguous_storage",
        "--ulp-report",
        str(tmp_path / "report"),
        first_on_path=tmp_path,
        timeout=300,
        CONTROLLER_MODULES=str(record),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "dsv41-rope: kernel backend" in done.stdout, done.stdout[-3000:]
    heavy = json.loads(record.read_text())
    assert heavy == [], f"xdist's controller imported {heavy}"
