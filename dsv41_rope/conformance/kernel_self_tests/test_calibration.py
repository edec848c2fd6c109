"""Calibration: the kernel measures the device's eager contraction instead of hard-coding it.

Which product of ``c10::complex<float>``'s multiply nvcc fuses is decided when PyTorch is built, per architecture. The
kernel module runs the device's own eager multiply on crafted operands (a vectorized body, a tail, a short tensor, a
factor broadcast over heads, a conjugated factor) and keeps the contraction variant that reproduces every segment.
These tests feed it fake eager paths of known contraction, built from the oracle: it must find each of the nine
variants, and fall back to the eager path, warning once, when the eager path is not one uniform variant.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from dsv41_rope.oracle.eager import CONTRACTIONS, complex_multiply, eager_multiply
from dsv41_rope.oracle.rounding import bits

VARIANTS = list(itertools.product(CONTRACTIONS, repeat=2))


def _ids(contraction: tuple[str, str]) -> str:
    return "/".join(contraction)


def correctly_rounded_multiply(values: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """A fake eager multiply no variant reproduces: each part computed in float64 and rounded once."""
    return (values.to(torch.complex128) * factors.resolve_conj().to(torch.complex128)).to(torch.complex64)


@pytest.fixture
def calibrations(rope, monkeypatch):
    """The module's calibration cache and warning memory, emptied for this test and restored after it."""
    monkeypatch.setattr(rope.calibration, "CALIBRATIONS", {})
    monkeypatch.setattr(rope.calibration, "WARNED", set())
    monkeypatch.delenv(rope.CONTRACTION_VARIABLE, raising=False)
    return rope.calibration.CALIBRATIONS


@pytest.mark.parametrize("segment", ["vector-body", "body-and-tail", "short", "broadcast-over-heads", "conjugate"])
@pytest.mark.parametrize("part", [0, 1], ids=["real", "imag"])
def test_probe_tells_every_pair_of_variants_apart(rope, segment, part):
    """In every segment alone, each part's three variants give three different results on some element."""
    (_, values, factors) = next(entry for entry in rope.contraction_probe("cpu") if entry[0] == segment)
    factors = factors.resolve_conj().expand(values.shape)
    x = torch.view_as_real(values.contiguous()).numpy()
    f = torch.view_as_real(factors.contiguous()).numpy()
    results = {
        variant: complex_multiply(x[..., 0], x[..., 1], f[..., 0], f[..., 1], (variant, variant))[part].view(np.int32)
        for variant in CONTRACTIONS
    }
    for a, b in itertools.combinations(CONTRACTIONS, 2):
        assert (results[a] != results[b]).any(), f"{segment}: the probe cannot tell {a} from {b} in the {part} part"


@pytest.mark.parametrize("contraction", VARIANTS, ids=_ids)
def test_calibration_finds_the_variant_of_a_fake_eager_path(rope, device, contraction):
    calibration = rope.calibrate(device, multiply=eager_multiply(lambda numel: contraction))
    assert calibration.contraction == contraction, calibration.observed


def test_eager_path_with_another_tail_variant_is_not_uniform(rope, device):
    """A build whose partial last block contracts the other way: no variant matches every segment."""
    multiply = eager_multiply(lambda numel: ("first", "first") if numel % 512 == 0 else ("second", "first"))
    calibration = rope.calibrate(device, multiply=multiply)
    assert calibration.contraction is None
    assert "vector-body=first" in calibration.observed and "short=second" in calibration.observed


def test_eager_path_matching_no_variant_is_not_uniform(rope, device):
    calibration = rope.calibrate(device, multiply=correctly_rounded_multiply)
    assert calibration.contraction is None


def test_uncalibratable_device_runs_the_eager_path_with_one_warning(rope, device, calibrations, monkeypatch):
    multiply = eager_multiply(lambda numel: ("first", "first") if numel % 512 == 0 else ("second", "first"))
    calibrations[torch.device(device)] = rope.calibrate(device, multiply=multiply)
    launched = []
    monkeypatch.setattr(rope.operators, "launch_kernel", lambda *args, **kwargs: launched.append(args))
    values = torch.randn((2, 5, 3, 40), generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).to(device)
    angles = (torch.rand((1, 5, 8), generator=torch.Generator().manual_seed(2)) * 100).to(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = [rope.apply_rope_triton(values, angles, inverse=inverse) for inverse in (False, True)]
        in_place = values.clone()
        rope.apply_rope_triton_(in_place, angles)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "matches no single contraction variant" in messages[0], messages
    assert "short=second" in messages[0], "the warning says what the probe saw"
    assert not launched, "a kernel known to differ from eager was launched"
    for output, inverse in zip(outputs, (False, True), strict=True):
        expected = rope.apply_rope_eager(values, angles, inverse=inverse)
        assert torch.equal(bits(output), bits(expected))
    assert torch.equal(bits(in_place), bits(outputs[0]))


def test_calibration_is_cached_per_device(rope, device, calibrations, monkeypatch):
    if device.type != "cuda":
        pytest.skip("under the interpreter nothing is calibrated: the H200's variant is the default")
    first = rope.settings(device)
    probes = []
    monkeypatch.setattr(rope.calibration, "contraction_probe", lambda *args: probes.append(args))
    assert rope.settings(device) == first and not probes


@pytest.mark.parametrize("where", ["compiling", "capturing"])
def test_calibrate_refuses_inside_tracing_and_capture(rope, device, monkeypatch, where):
    if where == "compiling":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    elif device.type != "cuda":
        pytest.skip("CUDA-graph capture needs a CUDA device")
    else:
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="call dsv41_rope.kernel.calibrate"):
        rope.calibrate(device)


@pytest.mark.parametrize("text", ["first", "first/fused", "first/first/first", "none-none"])
def test_malformed_forced_variant_is_a_clear_error(rope, device, monkeypatch, text):
    monkeypatch.setenv(rope.CONTRACTION_VARIABLE, text)
    values = torch.zeros((1, 2, 4), device=device)
    with pytest.raises(ValueError, match=f"{rope.CONTRACTION_VARIABLE}=.*first, second, none"):
        rope.apply_rope_triton(values, torch.zeros((1, 2, 2), device=device))


def test_forced_frequency_source_must_be_known(rope, device, monkeypatch):
    monkeypatch.setenv(rope.FREQUENCIES_VARIABLE, "libdevice")
    with pytest.raises(ValueError, match="in-kernel, table"):
        rope.settings(device)


def test_forced_variant_wins(rope, device, monkeypatch):
    monkeypatch.setenv(rope.CONTRACTION_VARIABLE, "none/second")
    assert rope.settings(device).contraction == ("none", "second")
    assert rope.settings(device).source == "forced"


@pytest.mark.gpu
def test_the_device_calibrates_to_one_variant(rope, gpu):
    """The GPU under test runs the kernel: its eager multiply is one uniform variant (the report names it). Were it
    not, every fused-vs-eager test would compare eager with itself, so this fails instead of passing vacuously."""
    calibration = rope.calibrate(gpu)
    assert calibration.contraction is not None, calibration.observed
    assert calibration.contraction == rope.settings(gpu).contraction
