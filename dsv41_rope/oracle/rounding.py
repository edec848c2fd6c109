"""Bit-exact conversions between float32 and the storage dtypes (bfloat16, float16, float32).

Narrowing follows what the GPU does when the eager path calls ``.to(dtype)`` on a float32 result: round to nearest,
ties to even, subnormals kept, overflow to infinity, and every NaN replaced by the canonical CUDA NaN (0x7FFF for
both 16-bit types, 0x7FFFFFFF for float32). The arithmetic is done on integer bit patterns so that no library
conversion is trusted; the self-tests compare it with torch's CPU ``.to()`` on all non-NaN inputs.

Widening is exact for all three dtypes and keeps NaN payloads (it is a pure re-encoding of the same value).
"""

from collections.abc import Callable

import numpy as np
import torch

from dsv41_rope.oracle.fma import FLOAT32_CANONICAL_NAN_BITS, canonicalize_nan32

CANONICAL_NAN_BITS = {
    torch.bfloat16: 0x7FFF,
    torch.float16: 0x7FFF,
    torch.float32: FLOAT32_CANONICAL_NAN_BITS,
}
SUPPORTED_DTYPES = tuple(CANONICAL_NAN_BITS)
# The integer dtype of the same width as each supported dtype: a view through it reads or writes bit patterns.
INTEGER_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}

_FLOAT32_MAGNITUDE_MASK = 0x7FFFFFFF
_FLOAT32_EXPONENT_MASK = 0x7F800000
_FLOAT16_INFINITY = 0x7C00
# A float32 exponent field of 113 is 2^-14, float16's smallest normal binade (float16 exponent field 1).
_FLOAT16_REBIAS = (127 - 15) << 23
# Elements per block of the bit-twiddling passes: large enough to amortize numpy overhead, small enough for cache.
_BLOCK = 1 << 14


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns, for comparing bit for bit (``torch.equal(bits(a), bits(b))``).

    Args:
        tensor: any tensor, any strides and device.

    Returns:
        A detached contiguous tensor on the same device: for bfloat16, float16 and float32 a view of its bits as the
        integer of the same width (:data:`INTEGER_VIEW`), so NaN payloads and the signs of zeros count; any other dtype
        unchanged. It may alias ``tensor``: clone it to keep a snapshot.
    """
    tensor = tensor.detach().contiguous()
    integer = INTEGER_VIEW.get(tensor.dtype)
    return tensor if integer is None else tensor.view(integer)


def unsigned_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a bfloat16, float16 or float32 tensor as non-negative int64 (``0 .. 2**width - 1``), the
    sign bit a magnitude like any other (a signed view would read it as negative)."""
    return bits(tensor).to(torch.int64) & ((1 << 8 * tensor.element_size()) - 1)


def _float32_bits(values: np.ndarray | torch.Tensor) -> np.ndarray:
    """Bit patterns of a float32 array or tensor as uint32 (read only; may alias the input)."""
    if isinstance(values, torch.Tensor):
        if values.dtype != torch.float32:
            raise TypeError(f"expected a float32 tensor, got {values.dtype}")
        values = values.detach().cpu().contiguous().numpy()
    array = np.asarray(values)
    if array.dtype != np.float32:
        raise TypeError(f"expected a float32 array, got {array.dtype}")
    return np.ascontiguousarray(array).view(np.uint32)


def _shift_right_to_nearest_even(bits: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """``bits / 2**shift`` rounded to nearest, ties to even, for uint32 ``bits`` and ``1 <= shift <= 31``.

    Callers keep ``bits + 2**(shift - 1)`` below 2**32, so the possible carry into the next bit cannot wrap.
    """
    shift = np.asarray(shift, dtype=np.uint32)
    quotient = bits >> shift
    remainder = bits - (quotient << shift)
    half = np.left_shift(np.uint32(1), shift - np.uint32(1))
    round_up = (remainder > half) | ((remainder == half) & ((quotient & np.uint32(1)) == 1))
    return quotient + round_up.astype(np.uint32)


def _narrow_blockwise(
    values: np.ndarray | torch.Tensor, narrow_block: Callable[[np.ndarray], np.ndarray], dtype: torch.dtype
) -> torch.Tensor:
    """Apply a uint32 -> 16-bit pattern rounding in cache-sized blocks (whole-array passes are ~10x slower)."""
    bits = _float32_bits(values)
    flat = bits.reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint16)
    for start in range(0, flat.size, _BLOCK):
        out[start : start + _BLOCK] = narrow_block(flat[start : start + _BLOCK])
    return torch.from_numpy(out.view(np.int16).reshape(bits.shape)).view(dtype)


def _bfloat16_block(bits: np.ndarray) -> np.ndarray:
    # bfloat16 is float32 with the low 16 mantissa bits dropped, so rounding the magnitude's pattern as an integer
    # carries correctly into the exponent (up to infinity) and treats subnormals like any other value.
    magnitude = bits & np.uint32(_FLOAT32_MAGNITUDE_MASK)
    rounded = _shift_right_to_nearest_even(magnitude, 16) | ((bits >> np.uint32(16)) & np.uint32(0x8000))
    rounded[magnitude > _FLOAT32_EXPONENT_MASK] = CANONICAL_NAN_BITS[torch.bfloat16]
    return rounded


def round_to_bfloat16(values: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Round float32 to bfloat16: nearest-even, subnormals kept, overflow to infinity, NaN -> 0x7FFF.

    Args:
        values: float32 array or tensor, any shape.

    Returns:
        A new contiguous CPU bfloat16 tensor of the same shape.
    """
    return _narrow_blockwise(values, _bfloat16_block, torch.bfloat16)


def _float16_block(bits: np.ndarray) -> np.ndarray:
    magnitude = bits & np.uint32(_FLOAT32_MAGNITUDE_MASK)
    exponent_field = magnitude >> np.uint32(23)
    is_normal = exponent_field >= 113
    # Normal float16 range: re-bias the exponent and drop 13 mantissa bits; a carry out of the mantissa lands in
    # the exponent, and anything at or past the float16 infinity pattern overflows. (Below that range the unsigned
    # subtraction wraps; those lanes are discarded.)
    with np.errstate(over="ignore"):
        rebiased = magnitude - np.uint32(_FLOAT16_REBIAS)
    normal = np.minimum(_shift_right_to_nearest_even(rebiased & np.uint32(0x7FFFFFFF), 13), _FLOAT16_INFINITY)
    # Below 2^-14 the result counts multiples of 2^-24: significand * 2^(e - 150) / 2^-24 = significand >> (126 - e).
    # Any shift of 26 or more rounds to zero (significand < 2^24), so clamping keeps the shifts in range.
    significand = np.where(exponent_field > 0, (magnitude & np.uint32(0x7FFFFF)) | np.uint32(0x800000), magnitude)
    subnormal_shift = np.clip(126 - exponent_field.astype(np.int64), 14, 26)
    subnormal = _shift_right_to_nearest_even(significand, subnormal_shift)
    rounded = np.where(is_normal, normal, subnormal) | ((bits >> np.uint32(16)) & np.uint32(0x8000))
    rounded[magnitude > _FLOAT32_EXPONENT_MASK] = CANONICAL_NAN_BITS[torch.float16]
    return rounded


def round_to_float16(values: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Round float32 to float16: nearest-even, subnormals kept, overflow to infinity, NaN -> 0x7FFF.

    Args:
        values: float32 array or tensor, any shape.

    Returns:
        A new contiguous CPU float16 tensor of the same shape.
    """
    return _narrow_blockwise(values, _float16_block, torch.float16)


def round_to_dtype(values: np.ndarray | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float32 values to ``dtype`` as the GPU's ``.to(dtype)`` does, with canonical NaN.

    Args:
        values: float32 array or tensor, any shape.
        dtype: ``torch.bfloat16``, ``torch.float16`` or ``torch.float32`` (the last only canonicalizes NaN).

    Returns:
        A new contiguous CPU tensor of ``dtype`` and the same shape.

    Raises:
        TypeError: ``dtype`` is not one of the three supported dtypes or ``values`` is not float32.
    """
    if dtype == torch.bfloat16:
        return round_to_bfloat16(values)
    if dtype == torch.float16:
        return round_to_float16(values)
    if dtype == torch.float32:
        return torch.from_numpy(canonicalize_nan32(_float32_bits(values).copy().view(np.float32)))
    raise TypeError(f"unsupported dtype {dtype}; expected one of {SUPPORTED_DTYPES}")


def widen_to_float32(values: torch.Tensor) -> torch.Tensor:
    """Widen a bfloat16, float16 or float32 tensor to float32 exactly (NaN payloads kept).

    Args:
        values: tensor of a supported dtype, any shape, strides and device.

    Returns:
        A new contiguous CPU float32 tensor of the same shape.

    Raises:
        TypeError: ``values`` is not a tensor of a supported dtype.
    """
    if not isinstance(values, torch.Tensor) or values.dtype not in SUPPORTED_DTYPES:
        found = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"expected a tensor of dtype {SUPPORTED_DTYPES}, got {found}")
    values = values.detach().cpu()
    if values.dtype == torch.float32:
        return values.contiguous().clone()
    bits = values.contiguous().view(torch.int16).numpy().view(np.uint16)
    widened = np.empty(bits.shape, dtype=np.uint32)
    flat_bits, flat_widened = bits.reshape(-1), widened.reshape(-1)
    widen_block = _widen_bfloat16_block if values.dtype == torch.bfloat16 else _widen_float16_block
    for start in range(0, flat_bits.size, _BLOCK):
        flat_widened[start : start + _BLOCK] = widen_block(flat_bits[start : start + _BLOCK].astype(np.uint32))
    return torch.from_numpy(widened.view(np.float32))


def _widen_bfloat16_block(bits: np.ndarray) -> np.ndarray:
    return bits << np.uint32(16)


def _widen_float16_block(bits: np.ndarray) -> np.ndarray:
    sign = (bits & np.uint32(0x8000)) << np.uint32(16)
    exponent_field = (bits >> np.uint32(10)) & np.uint32(0x1F)
    mantissa = bits & np.uint32(0x3FF)
    # Normal and special values: re-bias the exponent (inf/NaN keep the all-ones field) and move the mantissa up.
    rebiased = np.where(exponent_field == 0x1F, np.uint32(0xFF), exponent_field + np.uint32(127 - 15))
    normal = (rebiased << np.uint32(23)) | (mantissa << np.uint32(13))
    # Subnormals (mantissa * 2^-24) are normal in float32: an exact int -> float cast and power-of-two scaling.
    subnormal = (mantissa.astype(np.float32) * np.float32(2.0**-24)).view(np.uint32)
    return np.where(exponent_field == 0, subnormal, normal) | sign
