"""Frequencies: the kernel's own cos/sin equal ``torch.polar(ones, angles)``; both sources give eager's bits.

On a GPU the forward is one launch: cos/sin are computed in the kernel from the float32 angles (libdevice, with
``sin x = x`` for subnormal x, where Triton's flush-to-zero libdevice would give 0), wherever calibration finds them
equal to torch.polar's. The exhaustive test below proves that for every one of the 2**32 float32 angles on the device
under test. Either source can be forced with ``DSV41_ROPE_FREQUENCIES``; both run a slice of the case matrix. Under
the interpreter the in-kernel source is numpy's cos/sin, which the oracle is fed in turn.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import Case
from dsv41_rope.harness import backend

SLICE = [
    Case("bf16", "query", "contiguous", False, "normal", small=True),
    Case("fp32", "batch3", "transposed", True, "huge-angles", per_batch_angles=True, small=True),
    Case("fp16", "odd-channels", "padded-rows", True, "special", small=True),
    Case("fp32", "window-kv", "contiguous", False, "huge-angles", small=True),
]
CHUNK = 2**28  # angles per step of the exhaustive test: 1 GiB of angles, a few GiB in flight


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in SLICE])
@pytest.mark.parametrize("source", ["in-kernel", "table"])
def test_forced_frequency_source_gives_the_reference_bits(case, source, device, rope, ulp_drift, monkeypatch):
    monkeypatch.setenv(rope.FREQUENCIES_VARIABLE, source)
    assert rope.settings(device).in_kernel_frequencies == (source == "in-kernel")
    prefix = f"frequencies-{source}-"
    checks.forward_matches_reference(case, device, rope, ulp_drift, prefix=prefix, eager_on_gpu=False)
    checks.gradient_is_conjugate_rotation(case, device, rope, ulp_drift, prefix=prefix)
    if device.type == "cuda":
        checks.forward_matches_eager(case, device, rope, ulp_drift, prefix=prefix)


def test_kernel_cos_sin_on_the_calibration_angles(rope, device, monkeypatch, ulp_drift):
    """The kernel's cos/sin of the calibration's sample (specials, subnormals, every exponent, RoPE angles) equal
    the reference: torch.polar on a GPU, numpy's cos/sin (with ``sin x = x`` below the normal range) under the
    interpreter."""
    monkeypatch.setenv(rope.FREQUENCIES_VARIABLE, "in-kernel")
    angles = rope.frequency_probe_angles(device)
    expected = torch.view_as_real(checks.kernel_frequencies_of(angles, rope))
    case = Case("fp32", "index-keys", "contiguous", False, "huge-angles", small=True)
    checks.assert_bits(
        ulp_drift, "kernel-cos-sin-vs-reference", case, device, rope.kernel_frequencies(angles), expected
    )


@pytest.mark.gpu
def test_kernel_cos_sin_equal_torch_polar_for_every_float32_angle(rope, gpu, ulp_drift):
    """All 2**32 float32 bit patterns, in chunks: cos and sin bits equal torch.polar's (NaNs included)."""
    differences, first = 0, None
    for start in range(0, 2**32, CHUNK):
        bits = torch.arange(start, start + CHUNK, dtype=torch.int64, device=gpu).to(torch.int32)
        angles = bits.view(torch.float32)
        polar = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
        differ = (rope.kernel_frequencies(angles).view(torch.int32) != polar.view(torch.int32)).any(-1)
        count = int(differ.sum())
        if count and first is None:
            first = int(bits[differ][0]) & 0xFFFFFFFF
        differences += count
        del bits, angles, polar, differ
    if ulp_drift is not None:
        ulp_drift.record(
            comparison="kernel-cos-sin-vs-polar",
            dtype="fp32",
            backend=backend.name(),
            device=str(gpu),
            elements=2**32,
            mismatches=differences,
            detail=f"every float32 angle; first differing angle bits 0x{first:08X}" if first is not None else "",
        )
    assert differences == 0, (
        f"{differences} of 2**32 angles: kernel cos/sin differ from torch.polar, first 0x{first:08X}"
    )


def test_interpreter_frequencies_are_numpy_float32(rope, device):
    if device.type != "cpu":
        pytest.skip("the interpreter's in-kernel source")
    angles = torch.tensor([0.5, -3.0, 1e-40, -0.0, 1e30], dtype=torch.float32)
    pairs = rope.kernel_frequencies(angles).numpy()
    array = angles.numpy()
    assert np.array_equal(pairs[:, 0].view(np.int32), np.cos(array).view(np.int32))
    assert pairs[2, 1].view(np.int32) == array[2].view(np.int32), "sin x = x for a subnormal x"
    assert pairs[3, 1].view(np.int32) == array[3].view(np.int32), "sin(-0) = -0"
