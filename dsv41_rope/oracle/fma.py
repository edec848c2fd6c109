"""Exact float32 arithmetic emulated with vectorized numpy: a fused multiply-add and a plain product.

The GPU computes RoPE with one fused multiply-add per output channel, so the oracle needs an fma that rounds exactly
once, like the hardware. numpy has no float32 fma, so :func:`fma32` builds one from float64 pieces:

1. The product of two float32 values has at most 48 significant bits and an exponent within float64's normal range,
   so ``a * b`` in float64 is exact.
2. An error-free TwoSum splits ``a * b + c`` into ``total + error`` exactly (no float64 overflow or underflow is
   possible for float32 operands).
3. ``total`` is then rounded to odd (truncate toward zero and set the last bit when ``error`` is not zero). A value
   rounded to odd with 53 bits, at least two more than float32's 24, rounds to nearest-even in float32 exactly as
   the unrounded sum would, subnormal float32 results included, so the final float64 -> float32 cast is correct.

Every NaN produced is the canonical CUDA NaN, bit pattern 0x7FFFFFFF.
"""

import numpy as np

FLOAT32_CANONICAL_NAN_BITS = 0x7FFFFFFF


def canonicalize_nan32(values: np.ndarray) -> np.ndarray:
    """Replace every NaN in a float32 array by the canonical CUDA NaN (0x7FFFFFFF), in place.

    Args:
        values: float32 array; modified in place.

    Returns:
        ``values``, for chaining.
    """
    np.putmask(values.view(np.uint32), np.isnan(values), np.uint32(FLOAT32_CANONICAL_NAN_BITS))
    return values


def _as_float32(name: str, value: np.ndarray | np.floating) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.float32:
        raise TypeError(f"{name} must be float32 (a silent cast would round it), got {array.dtype}")
    return array


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded float32 ``a * b + c`` with a single rounding (round to nearest, ties to even).

    IEEE semantics for special values: ``inf * 0`` and ``inf - inf`` give NaN, NaN inputs give NaN, and every
    NaN result is canonical (0x7FFFFFFF). Subnormal inputs and results are kept; results beyond the float32 range
    round to infinity. An exact zero sum is ``+0`` unless both ``a * b`` and ``c`` are ``-0``.

    Args:
        a: float32 array, broadcastable with ``b`` and ``c``.
        b: float32 array.
        c: float32 array.

    Returns:
        A new float32 array of the broadcast shape.

    Raises:
        TypeError: an operand is not float32.
    """
    a, b, c = _as_float32("a", a), _as_float32("b", b), _as_float32("c", c)
    with np.errstate(all="ignore"):
        product = np.multiply(a, b, dtype=np.float64)
        addend = c.astype(np.float64)
        total = np.asarray(product + addend)
        # TwoSum (no ordering precondition): total + error == product + addend exactly for finite operands.
        addend_part = total - product
        product_part = total - addend_part
        error = (product - product_part) + (addend - addend_part)
        # Comparisons are False for a NaN error (infinite or NaN total), which leaves those totals untouched.
        inexact = (error < 0) | (error > 0)
        rounded_away = ((error < 0) & (total > 0)) | ((error > 0) & (total < 0))
        # Sign-magnitude bits: subtracting one from the int64 pattern steps the magnitude toward zero for
        # either sign, and the two float64 neighbours of the exact sum differ by one in that pattern.
        odd_bits = (total.view(np.int64) - rounded_away) | inexact
        result = odd_bits.view(np.float64).astype(np.float32)
    return canonicalize_nan32(np.asarray(result))


def multiply32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Correctly rounded float32 product ``a * b`` (round to nearest, ties to even), NaN canonical.

    numpy's float32 multiply is IEEE (no flush to zero), so only the NaN bit pattern needs fixing.

    Args:
        a: float32 array, broadcastable with ``b``.
        b: float32 array.

    Returns:
        A new float32 array of the broadcast shape.

    Raises:
        TypeError: an operand is not float32.
    """
    a, b = _as_float32("a", a), _as_float32("b", b)
    with np.errstate(all="ignore"):
        result = np.asarray(np.multiply(a, b, dtype=np.float32))
    return canonicalize_nan32(result)
