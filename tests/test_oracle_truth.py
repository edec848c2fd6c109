"""The float64 truth against mpmath, on random and adversarial samples, with the bound proved in
dsv41_rope.oracle.truth."""

import math

import mpmath
import numpy as np
import pytest
import torch

from dsv41_rope.oracle.rounding import SUPPORTED_DTYPES, widen_to_float32
from dsv41_rope.oracle.truth import NORMWISE_BOUND_ULPS, apply_rope, apply_rope_mpmath, certify

SAMPLES = 1500
ANGLE_LIMIT = 1.0e7


def _quarter_turn_angles() -> np.ndarray:
    """Every positive float32 angle below 1e7 within 1e-6 of a multiple of pi/2, closest first.

    The candidates are the float32 nearest each multiple k * pi/2 and its two neighbours. The float64 multiple is off
    by under 1e-9, far inside the 1e-6 filter; the final distance is min(|cos|, |sin|) in float64.
    """
    multiples = np.arange(1, int(ANGLE_LIMIT / (math.pi / 2)), dtype=np.float64) * (math.pi / 2)
    nearest = multiples.astype(np.float32)
    close = []
    for candidate in (nearest, np.nextafter(nearest, np.float32(0)), np.nextafter(nearest, np.float32(np.inf))):
        close.append(candidate[np.abs(candidate.astype(np.float64) - multiples) < 1e-6])
    close = np.unique(np.concatenate(close)).astype(np.float64)
    distance = np.minimum(np.abs(np.cos(close)), np.abs(np.sin(close)))
    return close[np.argsort(distance, kind="stable")].astype(np.float32)


@pytest.fixture(scope="module")
def quarter_turns() -> np.ndarray:
    return _quarter_turn_angles()


def _values(rng: np.random.Generator, dtype: torch.dtype, kind: str) -> torch.Tensor:
    info = torch.finfo(dtype)
    shape = (1, SAMPLES, 2)
    if kind == "normal":
        return torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    sign = torch.from_numpy(rng.choice([-1.0, 1.0], shape))
    if kind == "near_max":
        return (torch.from_numpy(rng.uniform(0.5, 1.0, shape)) * info.max * sign).to(dtype)
    smallest_subnormal = info.smallest_normal * info.eps  # eps = 2^(1 - precision)
    return (torch.from_numpy(rng.integers(1, 4, shape)).double() * smallest_subnormal * sign).to(dtype)


def _angles(rng: np.random.Generator, kind: str, quarter_turns: np.ndarray) -> torch.Tensor:
    if kind == "small":
        angles = rng.uniform(-2 * math.pi, 2 * math.pi, SAMPLES)
    elif kind == "huge":
        angles = rng.uniform(-ANGLE_LIMIT, ANGLE_LIMIT, SAMPLES)
    else:
        # Every float32 within 1e-6 of a quarter turn up to 1e7 (a few hundred), then small multiples nudged by
        # at most 1e-6, where float32 is fine enough to land that close.
        small = rng.integers(1, 64, SAMPLES - quarter_turns.size) * (math.pi / 2) + rng.uniform(
            -1e-6, 1e-6, SAMPLES - quarter_turns.size
        )
        angles = np.concatenate([quarter_turns, small]) * rng.choice([-1.0, 1.0], SAMPLES)
    return torch.from_numpy(angles.astype(np.float32).reshape(1, SAMPLES, 1))


VALUE_KINDS = ["normal", "near_max", "min_subnormal"]
ANGLE_KINDS = ["small", "huge", "quarter_turn"]


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
@pytest.mark.parametrize("value_kind", VALUE_KINDS)
@pytest.mark.parametrize("angle_kind", ANGLE_KINDS)
def test_float64_truth_is_within_the_proved_bound(dtype, value_kind, angle_kind, quarter_turns):
    rng = np.random.default_rng(
        [SUPPORTED_DTYPES.index(dtype), VALUE_KINDS.index(value_kind), ANGLE_KINDS.index(angle_kind)]
    )
    values = _values(rng, dtype, value_kind)
    angles = _angles(rng, angle_kind, quarter_turns)
    assert bool(torch.isfinite(values).all())
    inverse = bool(rng.integers(0, 2))
    deviation = certify(values, angles, inverse=inverse)
    # Measured at most ~1.7 on these samples; the proof allows 4 when libm's cos/sin are within one ulp.
    assert deviation <= NORMWISE_BOUND_ULPS


def test_quarter_turn_sample_is_adversarial(quarter_turns):
    assert 100 < quarter_turns.size < SAMPLES
    assert int(np.count_nonzero(quarter_turns > 1.0e6)) > 10
    closest = float(quarter_turns[0])
    assert min(abs(math.cos(closest)), abs(math.sin(closest))) < 1e-8


@pytest.mark.parametrize("angle_kind", ANGLE_KINDS)
def test_libm_cos_sin_within_one_ulp(angle_kind, quarter_turns):
    """The proof's premise: numpy's float64 cos and sin are within one ulp, even for huge arguments."""
    rng = np.random.default_rng([7, ANGLE_KINDS.index(angle_kind)])
    angles = _angles(rng, angle_kind, quarter_turns).reshape(-1).numpy().astype(np.float64)
    worst = 0.0
    with mpmath.workprec(160):
        for angle, cos, sin in zip(angles, np.cos(angles), np.sin(angles), strict=True):
            for computed, exact in ((cos, mpmath.cos(angle)), (sin, mpmath.sin(angle))):
                ulp = math.ulp(float(exact))
                worst = max(worst, float(abs(mpmath.mpf(computed) - exact) / ulp))
    assert worst <= 1.0


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_mpmath_path_agrees_and_copies_exactly(dtype):
    rng = np.random.default_rng(11)
    values = torch.from_numpy(rng.standard_normal((2, 3, 2, 10))).to(dtype)
    angles = torch.from_numpy(rng.uniform(-1e5, 1e5, (2, 3, 3)).astype(np.float32))
    truth = apply_rope(values, angles)
    precise = apply_rope_mpmath(values, angles)
    widened = widen_to_float32(values).double()
    assert torch.equal(truth[..., :4], widened[..., :4]) and torch.equal(precise[..., :4], widened[..., :4])
    pairs = widened[..., 4:].reshape(2, 3, 2, 3, 2)
    magnitude = torch.hypot(pairs[..., 0], pairs[..., 1]).repeat_interleave(2, dim=-1)
    # Truth within the bound of the exact value, mpmath's float64 within half an ulp of it.
    limit = (NORMWISE_BOUND_ULPS + 0.5) * 2.0 ** (torch.floor(torch.log2(magnitude)) - 52)
    assert bool(((truth[..., 4:] - precise[..., 4:]).abs() <= limit).all())


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_hand_computed_cases(dtype):
    values = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [-1.5, 0.5, 0.25, -8.0]]], dtype=dtype)
    identity = apply_rope(values, torch.zeros(1, 2, 1))
    assert torch.equal(identity, widen_to_float32(values).double())
    angles = torch.tensor([[[0.5], [-3.0]]])
    forward = apply_rope(values, angles, inverse=True)
    assert torch.equal(forward, apply_rope(values, -angles))
    c, s = math.cos(0.5), math.sin(0.5)
    assert forward[0, 0, 2:].tolist() == [3.0 * c + 4.0 * s, -3.0 * s + 4.0 * c]


def test_layouts_and_broadcasting():
    rng = np.random.default_rng(12)
    values = torch.from_numpy(rng.standard_normal((3, 4, 5, 8))).to(torch.bfloat16)  # [batch, heads, seq, ch]
    view = values.transpose(1, 2)
    angles = torch.from_numpy(rng.uniform(-50, 50, (1, 5, 3)).astype(np.float32))
    expected = apply_rope(view.contiguous(), angles.expand(3, 5, 3).contiguous())
    assert torch.equal(apply_rope(view, angles), expected)
    assert torch.equal(apply_rope(view, angles[0]), expected)
    three_d = apply_rope(view[:, :, 0], angles)
    assert torch.equal(three_d, expected[:, :, 0])


@pytest.mark.parametrize(
    ("values", "angles", "error", "match"),
    [
        (torch.zeros(1, 2, 4, dtype=torch.float64), torch.zeros(1, 2, 2), TypeError, "values"),
        (torch.zeros(1, 2, 4), torch.zeros(1, 2, 2, dtype=torch.float64), TypeError, "angles"),
        (torch.zeros(2, 4), torch.zeros(2, 2), ValueError, r"\[2, 4\]"),
        (torch.zeros(1, 2, 4), torch.zeros(1, 2, 3), ValueError, "3 rotary pairs"),
        (torch.zeros(1, 2, 4), torch.zeros(1, 3, 2), ValueError, "do not broadcast"),
    ],
)
def test_input_validation(values, angles, error, match):
    with pytest.raises(error, match=match):
        apply_rope(values, angles)


def test_certify_rejects_non_finite_and_low_precision():
    values = torch.tensor([[[1.0, math.inf]]])
    with pytest.raises(ValueError, match="finite"):
        certify(values, torch.zeros(1, 1, 1))
    with pytest.raises(ValueError, match="precision"):
        certify(torch.ones(1, 1, 2), torch.zeros(1, 1, 1), precision=53)
