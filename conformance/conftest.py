"""Fixtures of the conformance suites: the device this worker runs on and the kernel module under test."""

from __future__ import annotations

import types

import pytest
import torch

from conformance import backend
from conformance.plugin import add_run_metadata


@pytest.fixture(scope="session")
def device() -> torch.device:
    """This worker's device: its GPU (xdist worker i -> GPU i mod k), or the CPU under the interpreter."""
    return backend.device()


@pytest.fixture(scope="session")
def rope(request: pytest.FixtureRequest, device: torch.device) -> types.ModuleType:
    """``impl.rope_triton``, once the backend can run it bit-exactly; otherwise the test is skipped, saying why.

    The report's metadata records, per device, how the kernel reproduces that device's eager path: the calibrated
    contraction variant and frequency source (``kernel calibration``)."""
    from impl import rope_triton

    if not rope_triton.HAVE_TRITON:
        pytest.skip("triton is not installed: the fused kernel cannot run")
    problem = backend.interpreter_fma_problem()
    if problem:
        pytest.skip(problem)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else backend.name()
    settings = rope_triton.settings(device)
    add_run_metadata(request.config, "kernel calibration", {f"{device} ({where})": settings.describe()})
    return rope_triton


@pytest.fixture(scope="session")
def gpu(device: torch.device) -> torch.device:
    """The CUDA device, for comparisons with PyTorch's own eager CUDA path; skipped on CPU runs, saying why."""
    if device.type != "cuda":
        pytest.skip("needs a CUDA device")
    return device
