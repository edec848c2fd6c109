"""float32 -> bfloat16/float16 rounding and exact widening, against torch's CPU conversions."""

import numpy as np
import pytest
import torch

from dsv41_rope.oracle.rounding import CANONICAL_NAN_BITS, SUPPORTED_DTYPES, bits, round_to_dtype, widen_to_float32

NARROW_DTYPES = [torch.bfloat16, torch.float16]


def _bits16(tensor: torch.Tensor) -> np.ndarray:
    return bits(tensor).numpy().view(np.uint16)


def _dense_patterns(dtype: torch.dtype) -> np.ndarray:
    """Every sign and exponent, times mantissas at and around each rounding point.

    For every possible number of dropped bits (fixed for bfloat16, 13 to 24 for float16 subnormals) the low part is
    zero, one, just below the half, the exact half (a tie), just above it, or all ones, and the kept part is even,
    odd, or all ones (so rounding up carries into the exponent).
    """
    dropped = [16] if dtype == torch.bfloat16 else range(13, 25)
    mantissas = []
    for width in dropped:
        half = 1 << (width - 1)
        lows = [0, 1, half - 1, half, half + 1, (1 << width) - 1]
        kept_mask = ((1 << 23) - 1) >> width << width
        unit = 1 << width
        highs = [0, unit, 2 * unit, 3 * unit, kept_mask, kept_mask & ~unit, 0x5A5A5A >> width << width]
        mantissas.extend((high | low) & 0x7FFFFF for high in highs for low in lows)
    mantissas = np.unique(np.array(mantissas, dtype=np.uint32))
    sign_exponent = np.arange(512, dtype=np.uint32) << 23
    return (sign_exponent[:, None] | mantissas[None, :]).reshape(-1)


@pytest.mark.parametrize("dtype", NARROW_DTYPES)
def test_dense_patterns_match_torch(dtype):
    bits = _dense_patterns(dtype)
    values = bits.view(np.float32)
    finite_or_inf = ~np.isnan(values)
    ours = _bits16(round_to_dtype(values, dtype))
    theirs = _bits16(torch.from_numpy(values).to(dtype))
    differ = np.flatnonzero((ours != theirs) & finite_or_inf)
    assert not differ.size, (
        f"{differ.size} mismatches; first input 0x{int(bits[differ[0]]):08X} -> 0x{int(ours[differ[0]]):04X}, "
        f"torch 0x{int(theirs[differ[0]]):04X}"
    )
    assert bits.size > 20_000


@pytest.mark.parametrize("dtype", NARROW_DTYPES)
def test_random_patterns_match_torch(dtype):
    bits = np.random.default_rng(5).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    ours = _bits16(round_to_dtype(values, dtype))
    theirs = _bits16(torch.from_numpy(values).to(dtype))
    assert np.array_equal(ours[~np.isnan(values)], theirs[~np.isnan(values)])


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_every_nan_becomes_canonical(dtype):
    rng = np.random.default_rng(6)
    payloads = np.concatenate([[1, 0x400000, 0x7FFFFF, 0x3FFFFF], rng.integers(1, 1 << 23, 1000)]).astype(np.uint32)
    nans = np.concatenate([0x7F800000 | payloads, 0xFF800000 | payloads]).astype(np.uint32)
    result = round_to_dtype(nans.view(np.float32), dtype)
    mask = (1 << (8 * result.element_size())) - 1
    assert set((bits(result).to(torch.int64) & mask).tolist()) == {CANONICAL_NAN_BITS[dtype]}


@pytest.mark.parametrize(
    ("dtype", "value", "expected_bits"),
    [
        (torch.bfloat16, 1.0 + 2.0**-8, 0x3F80),  # tie, kept part even: down
        (torch.bfloat16, 1.0 + 3 * 2.0**-8, 0x3F82),  # tie, kept part odd: up to even
        (torch.bfloat16, 1.0 + 2.0**-8 + 2.0**-23, 0x3F81),  # just above a tie
        (torch.bfloat16, 3.3895314e38, 0x7F7F),  # largest finite bfloat16
        (torch.bfloat16, 3.3961775e38, 0x7F80),  # 0x7F7F8000: tie above it, kept part odd: up to infinity
        (torch.bfloat16, 3.3961773e38, 0x7F7F),  # one float32 ulp below that tie
        (torch.bfloat16, -(2.0**-133), 0x8001),  # smallest subnormal, negative
        (torch.bfloat16, 2.0**-134, 0x0000),  # half the smallest subnormal: tie to zero
        (torch.float16, 65504.0, 0x7BFF),
        (torch.float16, 65519.996, 0x7BFF),  # just below the overflow threshold
        (torch.float16, 65520.0, 0x7C00),  # the threshold itself is a tie to even: infinity
        (torch.float16, 2.0**-25, 0x0000),  # half the smallest subnormal
        (torch.float16, 2.0**-25 + 2.0**-40, 0x0001),
        (torch.float16, 3 * 2.0**-25, 0x0002),  # tie between subnormals 1 and 2: even
        (torch.float16, 2.0**-14 - 2.0**-25, 0x0400),  # rounds up into the smallest normal
        (torch.float16, -1e-30, 0x8000),
    ],
)
def test_hand_picked_roundings(dtype, value, expected_bits):
    result = round_to_dtype(np.array([value], dtype=np.float32), dtype)
    assert int(_bits16(result)[0]) == expected_bits


@pytest.mark.parametrize("dtype", NARROW_DTYPES)
def test_widen_is_exact_for_every_16_bit_pattern(dtype):
    patterns = torch.from_numpy(np.arange(1 << 16, dtype=np.uint16).view(np.int16)).view(dtype)
    widened = widen_to_float32(patterns)
    nan = torch.isnan(patterns)
    assert torch.equal(bits(widened[~nan]), bits(patterns[~nan].float()))
    assert bool(torch.isnan(widened[nan]).all())
    # NaN payloads survive: the mantissa moves up unchanged, so narrowing the bits back recovers them.
    shift = 16 if dtype == torch.bfloat16 else 13
    payload = (widened[nan].view(torch.int32).to(torch.int64) >> shift) & ((1 << (23 - shift)) - 1)
    assert torch.equal(payload, patterns[nan].view(torch.int16).to(torch.int64) & ((1 << (23 - shift)) - 1))


@pytest.mark.parametrize("dtype", NARROW_DTYPES)
def test_round_trip_of_every_non_nan_16_bit_pattern(dtype):
    patterns = torch.from_numpy(np.arange(1 << 16, dtype=np.uint16).view(np.int16)).view(dtype)
    nan = torch.isnan(patterns)
    back = round_to_dtype(widen_to_float32(patterns), dtype)
    assert torch.equal(bits(back[~nan]), bits(patterns[~nan]))


def test_widen_accepts_strided_float32_and_copies():
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    widened = widen_to_float32(values)
    assert widened.is_contiguous() and torch.equal(widened, values)
    widened[0, 0] = 99
    assert values[0, 0] == 0


def test_round_to_dtype_rejects_bad_inputs():
    with pytest.raises(TypeError, match="float32"):
        round_to_dtype(np.ones(3), torch.bfloat16)
    with pytest.raises(TypeError, match="unsupported dtype"):
        round_to_dtype(np.ones(3, np.float32), torch.float64)
    with pytest.raises(TypeError):
        widen_to_float32(torch.ones(3, dtype=torch.float64))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", NARROW_DTYPES)
def test_exhaustive_float32_sweep_matches_torch(dtype):
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        bits = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32)
        values = bits.view(np.float32)
        keep = ~np.isnan(values)
        ours = _bits16(round_to_dtype(values, dtype))
        theirs = _bits16(torch.from_numpy(values).to(dtype))
        differ = np.flatnonzero((ours != theirs) & keep)
        assert not differ.size, f"first mismatch at input 0x{int(bits[differ[0]]):08X}"
        assert np.all(ours[~keep] == CANONICAL_NAN_BITS[dtype])
