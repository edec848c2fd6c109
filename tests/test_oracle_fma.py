"""fma32 and multiply32 against exact integer arithmetic, on random and adversarial float32 triples."""

import math
from fractions import Fraction

import numpy as np
import pytest

from dsv41_rope.oracle.fma import FLOAT32_CANONICAL_NAN_BITS, fma32, multiply32

SEED = 20260412
FLOAT32_MAX_FINITE_BITS = 0x7F7FFFFF


def _dyadic(value: float) -> tuple[int, int]:
    """``value == numerator * 2**exponent`` exactly, for a finite float (24-bit float32 significands suffice)."""
    mantissa, exponent = math.frexp(value)
    return int(math.ldexp(mantissa, 24)), exponent - 24


def _round_dyadic_to_float32(numerator: int, exponent: int) -> float:
    """Round ``numerator * 2**exponent`` (nonzero) to float32, nearest-even, with subnormals and overflow."""
    negative, magnitude = numerator < 0, abs(numerator)
    binade = magnitude.bit_length() - 1 + exponent
    quantum = max(binade, -126) - 23
    if quantum > exponent:
        shift = quantum - exponent
        significand = magnitude >> shift
        remainder = magnitude - (significand << shift)
        half = 1 << (shift - 1)
        if remainder > half or (remainder == half and significand & 1):
            significand += 1
    else:
        significand = magnitude << (exponent - quantum)
    if significand and significand.bit_length() - 1 + quantum >= 128:
        result = math.inf
    else:
        result = math.ldexp(significand, quantum)
    return -result if negative else result


def exact_fma32(a: float, b: float, c: float) -> np.float32:
    """Exact ``a * b + c`` rounded once to float32, via Python integers scaled by powers of two."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return np.float32(a * b + c)
    numerator_ab, exponent_ab = _dyadic(a)
    numerator_b, exponent_b = _dyadic(b)
    numerator_ab, exponent_ab = numerator_ab * numerator_b, exponent_ab + exponent_b
    numerator_c, exponent_c = _dyadic(c)
    exponent = min(exponent_ab, exponent_c)
    numerator = (numerator_ab << (exponent_ab - exponent)) + (numerator_c << (exponent_c - exponent))
    if numerator == 0:
        product_negative_zero = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
        return np.float32(-0.0 if product_negative_zero and math.copysign(1.0, c) < 0 else 0.0)
    return np.float32(_round_dyadic_to_float32(numerator, exponent))


def fraction_fma32(a: float, b: float, c: float) -> np.float32:
    """The same rounding fed by ``fractions.Fraction`` arithmetic, to cross-check the integer path."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return exact_fma32(a, b, c)
    denominator_exponent = exact.denominator.bit_length() - 1
    assert exact.denominator == 1 << denominator_exponent
    return np.float32(_round_dyadic_to_float32(exact.numerator, -denominator_exponent))


def _expected(a: np.ndarray, b: np.ndarray, c: np.ndarray, reference=exact_fma32) -> np.ndarray:
    expected = np.array(
        [reference(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True)], dtype=np.float32
    )
    np.putmask(expected.view(np.uint32), np.isnan(expected), np.uint32(FLOAT32_CANONICAL_NAN_BITS))
    return expected


def _assert_bits_equal(result: np.ndarray, expected: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    differ = np.flatnonzero(result.view(np.uint32) != expected.view(np.uint32))
    if differ.size:
        i = differ[0]
        bits = [f"0x{int(v.view(np.uint32)):08X}" for v in (a[i], b[i], c[i], result[i], expected[i])]
        pytest.fail(
            f"{differ.size} of {result.size} differ; first at {i}: a={bits[0]} ({a[i]!r}) b={bits[1]} ({b[i]!r}) "
            f"c={bits[2]} ({c[i]!r}) -> fma32 {bits[3]} ({result[i]!r}), exact {bits[4]} ({expected[i]!r})"
        )


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _finite_random_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    magnitude = rng.integers(0, FLOAT32_MAX_FINITE_BITS + 1, n, dtype=np.uint32)
    return _from_bits(magnitude | (rng.integers(0, 2, n, dtype=np.uint32) << 31))


def _scaled(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """Random full-precision significands times 2**k with k uniform in [low, high)."""
    significand = rng.uniform(1.0, 2.0, n) * rng.choice([-1.0, 1.0], n)
    return np.ldexp(significand, rng.integers(low, high, n)).astype(np.float32)


def _triples_uniform_bits(rng):
    return tuple(_finite_random_bits(rng, 30_000) for _ in range(3))


def _triples_moderate(rng):
    return tuple(_scaled(rng, 20_000, -20, 20) for _ in range(3))


def _triples_cancellation(rng):
    a, b = _scaled(rng, 20_000, -30, 30), _scaled(rng, 20_000, -30, 30)
    c = -multiply32(a, b)
    # A few ulps off the rounded product as well: the exact result is then the product's error plus those ulps.
    steps = rng.integers(-3, 4, a.size)
    c = (c.view(np.int32) + steps.astype(np.int32)).view(np.float32)
    return a, b, c


def _triples_subnormal_results(rng):
    a = _scaled(rng, 15_000, -80, -60)
    b = _scaled(rng, 15_000, -90, -60)
    c_bits = rng.integers(0, 1 << 24, a.size, dtype=np.uint32) | (rng.integers(0, 2, a.size, dtype=np.uint32) << 31)
    c = np.where(rng.random(a.size) < 0.5, _from_bits(c_bits), np.float32(0.0)).astype(np.float32)
    return a, b, c


def _triples_overflow(rng):
    a = _scaled(rng, 10_000, 60, 66)
    b = _scaled(rng, 10_000, 60, 66)
    c = np.where(rng.random(a.size) < 0.5, np.float32(3.4028235e38), np.float32(-3.4028235e38))
    c = c * rng.uniform(0.5, 1.0, a.size).astype(np.float32)
    return a, b, c.astype(np.float32)


def _triples_ties(rng):
    """Products that sit exactly on a float32 midpoint, with c = 0, a tiny nudge either way, or an aligned addend.

    A 12-bit and a 13-bit odd significand multiply to at most 25 bits; keeping products of exactly 25 bits makes
    the lowest one the half-ulp bit. The nudge (far below float64's resolution at the product) makes the float64
    sum land exactly on the midpoint, the double-rounding trap that round-to-odd must avoid.
    """
    n = 60_000
    left = rng.integers(1 << 11, 1 << 12, n) | 1
    right = rng.integers(1 << 12, 1 << 13, n) | 1
    keep = (left * right) >= (1 << 24)
    left, right = left[keep][:15_000], right[keep][:15_000]
    scale = rng.integers(-20, 20, left.size)
    a = np.ldexp(left.astype(np.float64), scale - 11).astype(np.float32)
    b = np.ldexp(right.astype(np.float64), -12).astype(np.float32) * rng.choice([-1, 1], left.size).astype(np.float32)
    product = a.astype(np.float64) * b.astype(np.float64)
    kind = rng.integers(0, 4, left.size)
    nudge = np.ldexp(np.abs(product), -60 - rng.integers(0, 30, left.size)) * rng.choice([-1.0, 1.0], left.size)
    aligned = np.ldexp(np.floor(rng.uniform(-64, 64, left.size)), np.frexp(product)[1] - 10)
    c = np.select([kind == 0, kind == 1, kind == 2], [0.0, nudge, aligned], -product * 0.5).astype(np.float32)
    return a, b, c


def _triples_subnormal_ties(rng):
    """Exact midpoints between subnormals: an odd multiple of 2^-150, plus or minus a subnormal addend."""
    n = 10_000
    odd = (rng.integers(0, 1 << 10, n) * 2 + 1).astype(np.float64)
    a = np.ldexp(odd, -75).astype(np.float32)
    b = np.full(n, np.ldexp(1.0, -75), dtype=np.float32)
    c = _from_bits(rng.integers(0, 1 << 12, n, dtype=np.uint32) | (rng.integers(0, 2, n, dtype=np.uint32) << 31))
    c = np.where(rng.random(n) < 0.3, np.float32(0.0), c).astype(np.float32)
    return a, b, c


CATEGORIES = {
    "uniform_bits": _triples_uniform_bits,
    "moderate": _triples_moderate,
    "cancellation": _triples_cancellation,
    "subnormal_results": _triples_subnormal_results,
    "overflow": _triples_overflow,
    "ties": _triples_ties,
    "subnormal_ties": _triples_subnormal_ties,
}


@pytest.mark.parametrize("category", CATEGORIES)
def test_fma32_matches_exact_integer_arithmetic(category):
    rng = np.random.default_rng([SEED, list(CATEGORIES).index(category)])
    a, b, c = CATEGORIES[category](rng)
    _assert_bits_equal(fma32(a, b, c), _expected(a, b, c), a, b, c)


def test_adversarial_categories_reach_their_regimes():
    rng = np.random.default_rng(SEED)
    total = sum(CATEGORIES[name](np.random.default_rng([SEED, i]))[0].size for i, name in enumerate(CATEGORIES))
    assert total >= 100_000
    a, b, c = _triples_subnormal_results(rng)
    assert np.mean(np.abs(fma32(a, b, c)) < np.float32(2.0**-126)) > 0.5
    a, b, c = _triples_overflow(rng)
    assert np.mean(np.isinf(fma32(a, b, c))) > 0.1
    a, b, c = _triples_ties(rng)
    exact_ties = (c == 0) & (multiply32(a, b) != a.astype(np.float64) * b.astype(np.float64))
    assert exact_ties.sum() > 1_000


def test_integer_reference_agrees_with_fractions():
    rng = np.random.default_rng([SEED, 99])
    parts = [CATEGORIES[name](rng) for name in CATEGORIES]
    a, b, c = (np.concatenate([part[k][:700] for part in parts]) for k in range(3))
    fractions = _expected(a, b, c, reference=fraction_fma32)
    _assert_bits_equal(_expected(a, b, c), fractions, a, b, c)


SPECIALS = np.array(
    [0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45],
    dtype=np.float32,
)


def test_fma32_special_values_follow_ieee():
    a, b, c = (grid.reshape(-1) for grid in np.meshgrid(SPECIALS, SPECIALS, SPECIALS, indexing="ij"))
    _assert_bits_equal(fma32(a, b, c), _expected(a, b, c), a, b, c)


@pytest.mark.parametrize(
    ("a", "b", "c"),
    [(np.inf, 0.0, 1.0), (0.0, -np.inf, 1.0), (np.inf, 1.0, -np.inf), (np.nan, 1.0, 1.0), (1.0, 1.0, -np.nan)],
)
def test_fma32_nan_results_are_canonical(a, b, c):
    result = fma32(np.float32(a), np.float32(b), np.float32(c))
    assert int(result.view(np.uint32)) == FLOAT32_CANONICAL_NAN_BITS


@pytest.mark.parametrize(
    ("a", "b", "c", "negative"),
    [(0.0, 1.0, -0.0, False), (-0.0, 1.0, -0.0, True), (-0.0, -1.0, -0.0, False), (1.0, 1.0, -1.0, False)],
)
def test_fma32_exact_zero_sign(a, b, c, negative):
    result = fma32(np.float32(a), np.float32(b), np.float32(c))
    assert result == 0 and bool(np.signbit(result)) == negative


def test_fma32_broadcasts():
    a = np.float32(3.0)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = np.ones(3, dtype=np.float32)
    assert np.array_equal(fma32(a, b, c), 3 * b + 1)


def test_fma32_rejects_other_dtypes():
    with pytest.raises(TypeError, match="float32"):
        fma32(np.ones(2), np.ones(2, np.float32), np.ones(2, np.float32))


def test_multiply32_is_correctly_rounded_with_canonical_nan():
    rng = np.random.default_rng([SEED, 7])
    a = np.concatenate([_finite_random_bits(rng, 20_000), _scaled(rng, 20_000, -75, -60), SPECIALS])
    b = np.concatenate([_finite_random_bits(rng, 20_000), _scaled(rng, 20_000, -80, -60), SPECIALS[::-1]])
    c = np.full(a.shape, -0.0, dtype=np.float32)
    _assert_bits_equal(multiply32(a, b), _expected(a, b, c), a, b, c)
