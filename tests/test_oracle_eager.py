"""The eager-path emulation: hand-computed cases, layouts, the fma pattern, and the backward's canonicalization."""

import math

import mpmath
import numpy as np
import pytest
import torch

from dsv41_rope.oracle import truth, ulp
from dsv41_rope.oracle.eager import apply_rope, apply_rope_backward, complex_multiply
from dsv41_rope.oracle.rounding import INTEGER_VIEW, SUPPORTED_DTYPES, bits, unsigned_bits, widen_to_float32

CANONICAL_NAN = {torch.bfloat16: 0x7FFF, torch.float16: 0x7FFF, torch.float32: 0x7FFFFFFF}
SIGN_BIT = {torch.bfloat16: 0x8000, torch.float16: 0x8000, torch.float32: 0x80000000}


def _frequencies(angles: torch.Tensor) -> torch.Tensor:
    return torch.polar(torch.ones_like(angles), angles)


def _inputs(dtype, shape=(2, 5, 3, 12), pairs=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    values = (torch.randn(shape, generator=generator) * 4).to(dtype)
    angles = torch.rand((shape[0], shape[1], pairs), generator=generator) * 200 - 100
    return values, angles


def _torch_cpu_eager(values, frequencies, inverse=False):
    """The eager formula run by PyTorch on the CPU: no fma, so close to the GPU but not a bit reference."""
    pairs = frequencies.shape[-1]
    rotary = values[..., -2 * pairs :].float()
    complex_pairs = torch.view_as_complex(rotary.reshape(*rotary.shape[:-1], pairs, 2))
    factor = frequencies.conj() if inverse else frequencies
    if values.ndim == 4:
        factor = factor.unsqueeze(2)
    out = values.clone()
    out[..., -2 * pairs :] = torch.view_as_real(complex_pairs * factor).flatten(-2).to(values.dtype)
    return out


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_angle_zero_is_identity(dtype):
    values, _ = _inputs(dtype)
    values.view(INTEGER_VIEW[dtype])[0, 0, 0, 0] = 0x7FC1 if dtype != torch.float32 else 0x7FC00001
    out = apply_rope(values, _frequencies(torch.zeros(2, 5, 4)))
    assert torch.equal(bits(out), bits(values))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
@pytest.mark.parametrize("inverse", [False, True])
def test_quarter_turn_swaps_the_pair(dtype, inverse):
    values, _ = _inputs(dtype, shape=(1, 3, 6))
    exact_quarter = torch.zeros(1, 3, 3, 2)
    exact_quarter[..., 1] = 1.0  # cos = 0, sin = 1 exactly
    out = apply_rope(values, exact_quarter, inverse=inverse)
    x0, x1 = values[..., 0::2], values[..., 1::2]
    expected = torch.stack((x1, -x0) if inverse else (-x1, x0), dim=-1).flatten(-2)
    assert torch.equal(bits(out), bits(expected))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_polar_of_half_pi_rounds_to_the_swap(dtype):
    # cos(float32(pi/2)) is -4.4e-8, far below half an ulp of the swapped component for these values.
    values, _ = _inputs(dtype, shape=(1, 64, 8))
    out = apply_rope(values, _frequencies(torch.full((1, 64, 4), math.pi / 2)))
    x0, x1 = values[..., 0::2], values[..., 1::2]
    assert torch.equal(bits(out), bits(torch.stack((-x1, x0), dim=-1).flatten(-2)))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_inverse_undoes_forward_within_rounding(dtype):
    values, angles = _inputs(dtype)
    frequencies = _frequencies(angles)
    back = apply_rope(apply_rope(values, frequencies), frequencies, inverse=True)
    original = widen_to_float32(values).double()
    error = ulp.normwise_error(back[..., -8:], original[..., -8:])
    # Each narrowing is within half an ulp per component; the rotation between them turns the first error vector,
    # so one component can carry up to sqrt(2)/2 of it: 0.5 + 0.71 plus float32 noise.
    bound = 1.25 if dtype != torch.float32 else 4.0
    assert float(error.max()) <= bound
    assert torch.equal(bits(back[..., :4]), bits(values[..., :4]))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_transposed_view_equals_contiguous_copy(dtype):
    values, _ = _inputs(dtype, shape=(2, 3, 5, 12))  # [batch, heads, sequence, channels]
    view = values.transpose(1, 2)  # [batch, sequence, heads, channels], not contiguous
    frequencies = _frequencies(torch.rand(2, 5, 4, generator=torch.Generator().manual_seed(9)) * 100)
    out = apply_rope(view, frequencies)
    assert out.is_contiguous() and out.shape == view.shape
    assert torch.equal(bits(out), bits(apply_rope(view.contiguous(), frequencies)))
    grad = apply_rope_backward(view, frequencies)
    assert torch.equal(bits(grad), bits(apply_rope_backward(view.contiguous(), frequencies)))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_broadcast_frequencies(dtype):
    values, angles = _inputs(dtype, shape=(3, 5, 2, 10))
    shared = _frequencies(angles[:1])  # [1, S, P] with B = 3
    expected = apply_rope(values, shared.expand(3, 5, 4).contiguous())
    assert torch.equal(bits(apply_rope(values, shared)), bits(expected))
    assert torch.equal(bits(apply_rope(values, shared[0])), bits(expected))  # [S, P]
    assert torch.equal(bits(apply_rope(values, torch.view_as_real(shared))), bits(expected))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_three_dimensional_values(dtype):
    values, angles = _inputs(dtype, shape=(2, 5, 10))
    frequencies = _frequencies(angles)
    out = apply_rope(values, frequencies)
    per_head = apply_rope(values.unsqueeze(2), frequencies).squeeze(2)
    assert torch.equal(bits(out), bits(per_head))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_close_to_torch_cpu_eager(dtype):
    values, angles = _inputs(dtype, shape=(4, 64, 4, 24), pairs=8, seed=1)
    frequencies = _frequencies(angles)
    for inverse in (False, True):
        distance = ulp.distance(
            apply_rope(values, frequencies, inverse=inverse), _torch_cpu_eager(values, frequencies, inverse)
        )
        assert int(distance.max()) <= 1
        assert float((distance == 0).double().mean()) > 0.99


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_accuracy_against_float64_truth(dtype):
    # The frequencies are float32 cos/sin from CPU torch.polar. With them within an ulp, the float32 result is off by
    # less than sqrt(2) + 2 float32 ulps of the pair magnitude; narrowing adds at most half a (much larger) ulp.
    values, angles = _inputs(dtype, shape=(2, 256, 4, 24), pairs=8, seed=2)
    out = apply_rope(values, _frequencies(angles))
    error = ulp.normwise_error(out[..., -16:], truth.apply_rope(values, angles)[..., -16:])
    bound = 3.5 if dtype == torch.float32 else 0.5 + 2.0**-10
    assert float(error.max()) <= bound


def _mp_round24(operation, *operands) -> float:
    return float(operation(*operands, prec=24, rounding="n"))


def _patterns(x0: float, x1: float, c: float, s: float) -> dict[str, tuple[float, float]]:
    """Three float32 contractions of the complex product, each rounded exactly with mpmath (normal range only)."""
    exact = mpmath.fmul

    def product(a, b):
        return _mp_round24(mpmath.fmul, a, b)

    return {
        "fused_first": (
            _mp_round24(mpmath.fsub, exact(x0, c, exact=True), product(x1, s)),
            _mp_round24(mpmath.fadd, exact(x0, s, exact=True), product(x1, c)),
        ),
        "fused_second": (
            _mp_round24(mpmath.fsub, product(x0, c), exact(x1, s, exact=True)),
            _mp_round24(mpmath.fadd, product(x0, s), exact(x1, c, exact=True)),
        ),
        "unfused": (
            _mp_round24(mpmath.fsub, product(x0, c), product(x1, s)),
            _mp_round24(mpmath.fadd, product(x0, s), product(x1, c)),
        ),
    }


def test_float32_results_follow_the_fused_first_pattern():
    generator = torch.Generator().manual_seed(3)
    count = 3000
    values = torch.randn(1, count, 2, generator=generator)
    frequencies = _frequencies(torch.rand(1, count, 1, generator=generator) * 20 - 10)
    out = apply_rope(values, frequencies).reshape(-1, 2).tolist()
    x = values.reshape(-1, 2).tolist()
    cs = torch.view_as_real(frequencies).reshape(-1, 2).tolist()
    discriminating = 0
    for (x0, x1), (c, s), result in zip(x, cs, out, strict=True):
        expected = _patterns(x0, x1, c, s)
        assert tuple(result) == expected["fused_first"], (x0, x1, c, s)
        for k in range(2):
            others = {expected["fused_second"][k], expected["unfused"][k]}
            discriminating += expected["fused_first"][k] not in others
    # Inputs on which fusing the second product (or nothing) would give another answer must actually occur.
    assert discriminating > 100


def test_hand_computed_fma_case():
    # x0 * c = 1 + 2^-22 + 2^-46 exactly and RN(x1 * s) = 1 + 2^-22: the fused-first real part keeps the 2^-46,
    # while rounding x0 * c first (fusing the second product, or nothing) cancels to exactly 0.
    x0 = c = 1 + 2.0**-23
    x1, s = 1.0, 1 + 2.0**-22
    values = torch.tensor([[[x0, x1]]], dtype=torch.float32)
    out = apply_rope(values, torch.tensor([[[[c, s]]]], dtype=torch.float32))
    assert out[0, 0, 0].item() == 2.0**-46
    real, _ = complex_multiply(*(np.float32(v) for v in (x0, x1, c, s)))
    assert float(real) == 2.0**-46


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_nan_handling_forward(dtype):
    values, angles = _inputs(dtype, shape=(1, 2, 8))
    integer = values.view(INTEGER_VIEW[dtype])
    payload = 0x7FC1 if dtype != torch.float32 else 0x7FC00001
    integer[0, 0, 0] = payload  # copied channel: bit copy keeps the payload
    integer[0, 0, 4] = payload  # rotary channel: arithmetic makes it canonical
    out = unsigned_bits(apply_rope(values, _frequencies(angles[..., :2])))
    assert int(out[0, 0, 0]) == payload
    assert int(out[0, 0, 4]) == int(out[0, 0, 5]) == CANONICAL_NAN[dtype]


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
@pytest.mark.parametrize("inverse", [False, True])
def test_backward_rotates_by_the_conjugate(dtype, inverse):
    grad, angles = _inputs(dtype, seed=4)
    frequencies = _frequencies(angles)
    result = apply_rope_backward(grad, frequencies, inverse=inverse)
    expected = apply_rope(grad, frequencies, inverse=not inverse)
    assert torch.equal(bits(result), bits(expected))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_backward_canonicalizes_zeros_and_nans_everywhere(dtype):
    grad = torch.tensor([[[1.0, -0.0, 0.0, 2.0, -0.0, -0.0, 3.0, -4.0]]], dtype=dtype)
    integer = grad.view(INTEGER_VIEW[dtype])
    negative_payload_nan = 0xFFC1 - 0x10000 if dtype != torch.float32 else -0x3FFFFF  # 0xFFC1 / 0xFFC00001
    integer[0, 0, 3] = negative_payload_nan  # copied channel
    integer[0, 0, 6] = negative_payload_nan  # rotary channel
    frequencies = _frequencies(torch.zeros(1, 1, 2))  # angle 0: the backward's conjugate has sine -0
    out = unsigned_bits(apply_rope_backward(grad, frequencies))[0, 0].tolist()
    nan = CANONICAL_NAN[dtype]
    one = unsigned_bits(torch.tensor(1.0, dtype=dtype)).item()
    assert out[:4] == [one, 0, 0, nan]
    assert out[4:6] == [0, 0]
    assert out[6:] == [nan, nan]
    assert not any(pattern == SIGN_BIT[dtype] for pattern in out)


@pytest.mark.parametrize(
    ("values", "frequencies", "error", "match"),
    [
        (torch.zeros(2, 4, 8, dtype=torch.float64), torch.zeros(2, 4, 2, 2), TypeError, "float64"),
        (torch.zeros(4, 8), torch.zeros(4, 2, 2), ValueError, r"got shape \[4, 8\]"),
        (torch.zeros(2, 4, 8), torch.zeros(2, 4, 2, dtype=torch.complex128), TypeError, "complex128"),
        (torch.zeros(2, 4, 8), torch.zeros(2, 4, 5, 2), ValueError, "5 rotary pairs"),
        (torch.zeros(2, 4, 8), torch.zeros(3, 4, 2, 2), ValueError, r"do not broadcast.*\[2, 4, 2\]"),
        (torch.zeros(2, 4, 8), torch.zeros(2, 4, 2, 3), ValueError, "view_as_real"),
        ("values", torch.zeros(2, 4, 2, 2), TypeError, "torch.Tensor"),
    ],
)
def test_input_validation(values, frequencies, error, match):
    with pytest.raises(error, match=match):
        apply_rope(values, frequencies)
    with pytest.raises(error, match=match):
        apply_rope_backward(values, frequencies)
