"""Fixtures of the conformance suites: the device this worker runs on and the kernel module under test; and the
hypothesis profiles of the generated-layout tests."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from conformance import backend
from conformance.plugin import add_run_metadata

# Hypothesis profiles for conformance/test_generated_layouts.py, chosen with `--hypothesis-profile NAME`
# (docs/conformance.md). Examples per shard (12 shards: dtype x rank x direction); no deadline and no timing health
# check, since the interpreter's timings vary with the machine's load; no explain phase, whose "lines only failing
# cases run" are those that print the failing case's reproduction.
PHASES = tuple(phase for phase in Phase if phase is not Phase.explain)
# ci (the default): the same examples every run (a fixed seed per shard), no example database written anywhere.
settings.register_profile(
    "ci",
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=False,
    phases=PHASES,
)
# gpu: the same, with five times the examples (a CUDA kernel call costs microseconds, not the interpreter's 20 ms).
settings.register_profile("gpu", parent=settings.get_profile("ci"), max_examples=500)
# thorough: long local runs; new random examples each run, failures kept in .hypothesis/ (git-ignored) and replayed.
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=PHASES,
)
if settings.get_current_profile_name() == "default":  # --hypothesis-profile, when given, is loaded after this
    settings.load_profile("ci")


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
