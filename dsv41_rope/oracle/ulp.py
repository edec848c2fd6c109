"""Ulp distances, bit comparisons and error statistics for bfloat16, float16 and float32 tensors.

Policies, shared by every function here:

- ``+0`` and ``-0`` are equal (distance 0, error 0); :func:`compare_bits` still counts them separately.
- NaN against NaN is a match whatever the payloads; NaN against a number is infinitely far
  (:data:`INFINITE_DISTANCE` for integer distances, ``inf`` for fractional errors).
- Fractional errors follow LLVM libc's convention: the deviation from an unrounded float64 truth divided by the ulp
  of the truth in the tested dtype, subnormal-aware (below the smallest normal the ulp is the smallest subnormal),
  so ``<= 0.5`` means correctly rounded. Infinite results equal to an infinite truth have error 0; an infinite result
  for a finite truth at or beyond the dtype's overflow threshold (max finite + half an ulp, same sign) is a correctly
  rounded overflow and counts 0.5; any other infinite result or truth against a finite one is ``inf``.
- Integer distances are computed with int64 (no overflow for 16- and 32-bit formats); numpy's ``nulp_diff`` is not
  used (int32 overflow, no bfloat16).
"""

import dataclasses
import math

import numpy as np
import torch

from dsv41_rope.oracle.rounding import bits, unsigned_bits, widen_to_float32

INFINITE_DISTANCE = torch.iinfo(torch.int64).max

# Bucket edges in ulps. Bucket 0 counts errors equal to 0; bucket i > 0 counts edges[i-1] < error <= edges[i]. The
# edges never change, so histograms from different runs merge by summing.
HISTOGRAM_EDGES: tuple[float, ...] = (0.0, 0.5, *(float(2**k) for k in range(21)), math.inf)


@dataclasses.dataclass(frozen=True)
class _Format:
    bits: int
    precision: int  # significand bits, implicit bit included
    min_exponent: int  # exponent of the smallest normal
    max_exponent: int  # exponent of the largest finite binade


_FORMATS = {
    torch.bfloat16: _Format(16, 8, -126, 127),
    torch.float16: _Format(16, 11, -14, 15),
    torch.float32: _Format(32, 24, -126, 127),
}


def _format_of(tensor: torch.Tensor, name: str) -> _Format:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in _FORMATS:
        raise TypeError(f"{name} must be bfloat16, float16 or float32, got {tensor.dtype}")
    return _FORMATS[tensor.dtype]


def _check_pair(actual: torch.Tensor, expected: torch.Tensor) -> _Format:
    fmt = _format_of(actual, "actual")
    _format_of(expected, "expected")
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise ValueError(
            f"tensors must match in dtype and shape: {actual.dtype}{list(actual.shape)} vs "
            f"{expected.dtype}{list(expected.shape)}"
        )
    return fmt


def _ordered_keys(patterns: torch.Tensor, fmt: _Format) -> torch.Tensor:
    """Map sign-magnitude patterns to integers that increase with the value, both zeros at 0."""
    magnitude = patterns & ((1 << (fmt.bits - 1)) - 1)
    return torch.where(patterns >> (fmt.bits - 1) == 1, -magnitude, magnitude)


def distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Number of representable values between ``a`` and ``b``, elementwise.

    ``+0``/``-0`` are at distance 0, NaN vs NaN is 0, NaN vs a number is :data:`INFINITE_DISTANCE`, and the largest
    finite value is one ulp from infinity.

    Args:
        a: bfloat16, float16 or float32 tensor.
        b: tensor of the same dtype and shape.

    Returns:
        int64 CPU tensor of the same shape.

    Raises:
        TypeError: unsupported dtype. ValueError: dtype or shape differ.
    """
    fmt = _check_pair(a, b)
    return _distance_on_device(a, b, fmt).cpu().reshape(a.shape)


def _distance_on_device(a: torch.Tensor, b: torch.Tensor, fmt: _Format) -> torch.Tensor:
    """:func:`distance` of flattened ``a`` and ``b``, as int64 on their own device."""
    keys_a = _ordered_keys(unsigned_bits(a).reshape(-1), fmt)
    keys_b = _ordered_keys(unsigned_bits(b).reshape(-1), fmt)
    result = (keys_a - keys_b).abs()
    nan_a = torch.isnan(a.detach()).reshape(-1)
    nan_b = torch.isnan(b.detach()).reshape(-1)
    return torch.where(nan_a & nan_b, 0, torch.where(nan_a | nan_b, INFINITE_DISTANCE, result))


@dataclasses.dataclass(frozen=True)
class BitDifferences:
    """Outcome of a bit-for-bit comparison.

    Attributes:
        elements: number of elements compared.
        mismatches: elements whose bits differ for a reason other than the sign of a zero or a NaN payload.
        nan_bit_differences: elements where both are NaN with different bit patterns.
        signed_zero_differences: elements where one is +0 and the other -0.
        max_distance: largest :func:`distance` over the real mismatches (0 when there are none;
            :data:`INFINITE_DISTANCE` when a NaN meets a number).
        first_mismatch_index: flat row-major index of the first real mismatch, or None.
        first_nan_bit_index: flat row-major index of the first NaN-bit difference, or None.
        first_signed_zero_index: flat row-major index of the first signed-zero difference, or None.
    """

    elements: int
    mismatches: int
    nan_bit_differences: int
    signed_zero_differences: int
    max_distance: int
    first_mismatch_index: int | None
    first_nan_bit_index: int | None = None
    first_signed_zero_index: int | None = None


def compare_bits(actual: torch.Tensor, expected: torch.Tensor) -> BitDifferences:
    """Compare two tensors bit for bit and classify the differences.

    Works on the tensors' own device (a GPU suite compares full-size tensors without copying them to the host) and
    in their own integer width; distances are computed in int64 a chunk at a time, only in chunks holding a mismatch.

    Args:
        actual: bfloat16, float16 or float32 tensor, any strides (compared in row-major order).
        expected: tensor of the same dtype, shape and device.

    Returns:
        The counts, see :class:`BitDifferences`.

    Raises:
        TypeError: unsupported dtype. ValueError: dtype, shape or device differ.
    """
    fmt = _check_pair(actual, expected)
    if actual.device != expected.device:
        raise ValueError(f"tensors must be on one device: {actual.device} vs {expected.device}")
    flat_actual = actual.detach().contiguous().reshape(-1)
    flat_expected = expected.detach().contiguous().reshape(-1)
    bits_actual = bits(flat_actual)
    bits_expected = bits(flat_expected)
    differ = bits_actual != bits_expected
    if not bool(differ.any()):
        return BitDifferences(flat_actual.numel(), 0, 0, 0, 0, None)
    both_nan = torch.isnan(flat_actual) & torch.isnan(flat_expected)
    magnitude_mask = (1 << (fmt.bits - 1)) - 1
    both_zero = ((bits_actual & magnitude_mask) == 0) & ((bits_expected & magnitude_mask) == 0)
    real = differ & ~both_nan & ~both_zero
    nan_bits, signed_zeros = differ & both_nan, differ & both_zero
    mismatches = int(real.sum())
    return BitDifferences(
        elements=flat_actual.numel(),
        mismatches=mismatches,
        nan_bit_differences=int(nan_bits.sum()),
        signed_zero_differences=int(signed_zeros.sum()),
        max_distance=_max_distance(flat_actual, flat_expected, real, fmt) if mismatches else 0,
        first_mismatch_index=_first_index(real),
        first_nan_bit_index=_first_index(nan_bits),
        first_signed_zero_index=_first_index(signed_zeros),
    )


# Elements a step of _max_distance widens to int64 at once: 128 MiB per widened tensor.
_DISTANCE_CHUNK = 2**24


def _max_distance(actual: torch.Tensor, expected: torch.Tensor, where: torch.Tensor, fmt: _Format) -> int:
    """The largest :func:`distance` between flat ``actual`` and ``expected`` over the elements ``where`` marks, on the
    tensors' own device and in chunks: a wrong kernel differs everywhere, and copying every mismatch of a full-size
    tensor to the host took seconds per comparison."""
    largest = 0
    for start in range(0, actual.numel(), _DISTANCE_CHUNK):
        chunk = slice(start, start + _DISTANCE_CHUNK)
        marked = where[chunk]
        if bool(marked.any()):
            gap = _distance_on_device(actual[chunk], expected[chunk], fmt)
            largest = max(largest, int(torch.where(marked, gap, 0).max()))
    return largest


def _first_index(mask: torch.Tensor) -> int | None:
    """The flat index of the first true element of a flat boolean tensor, or None (argmax returns the first of equal
    maxima; nonzero would list every true element)."""
    if not bool(mask.any()):
        return None
    return int(torch.argmax(mask.to(torch.uint8)))


def _ulp(magnitude: np.ndarray, fmt: _Format) -> np.ndarray:
    """Ulp in ``fmt`` of non-negative finite float64 magnitudes, with an unbounded exponent above the range.

    Zero and everything below the smallest normal get the smallest subnormal as their ulp.
    """
    _, exponent = np.frexp(magnitude)
    binade = np.where(magnitude > 0, np.maximum(exponent.astype(np.int64) - 1, fmt.min_exponent), fmt.min_exponent)
    return np.ldexp(1.0, binade - (fmt.precision - 1))


def _widened(x: torch.Tensor, truth: torch.Tensor) -> tuple[_Format, np.ndarray, np.ndarray]:
    fmt = _format_of(x, "x")
    if not isinstance(truth, torch.Tensor) or truth.dtype != torch.float64:
        found = truth.dtype if isinstance(truth, torch.Tensor) else type(truth).__name__
        raise TypeError(f"truth must be a float64 tensor, got {found}")
    if x.shape != truth.shape:
        raise ValueError(f"x {list(x.shape)} and truth {list(truth.shape)} must have the same shape")
    return fmt, widen_to_float32(x).numpy().astype(np.float64), truth.detach().cpu().contiguous().numpy()


def _apply_special_policy(
    errors: np.ndarray, x: np.ndarray, truth: np.ndarray, fmt: _Format, scale_finite: np.ndarray
) -> np.ndarray:
    """Overwrite ``errors`` where x or truth is not finite, per the module policy.

    ``scale_finite`` marks elements whose ulp scale is finite and nonzero; elsewhere (zero or infinite pair
    magnitude) only exact equality scores 0.
    """
    overflow_threshold = math.ldexp(2.0 - 2.0**-fmt.precision, fmt.max_exponent)
    x_nan, truth_nan = np.isnan(x), np.isnan(truth)
    equal = (x == truth) | (x_nan & truth_nan)
    correct_overflow = np.isinf(x) & np.isfinite(truth) & (np.abs(truth) >= overflow_threshold) & (x * truth > 0)
    special = ~np.isfinite(x) | ~np.isfinite(truth) | ~scale_finite
    errors = np.where(special, np.inf, errors)
    errors = np.where(correct_overflow, 0.5, errors)
    return np.where(equal, 0.0, errors)


def error(x: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Fractional ulp error of ``x`` against an unrounded float64 truth, in ``x``'s dtype, elementwise.

    Args:
        x: bfloat16, float16 or float32 tensor.
        truth: float64 tensor of the same shape.

    Returns:
        float64 CPU tensor of the same shape; 0.5 means correctly rounded. See the module policy for NaN/inf.

    Raises:
        TypeError: unsupported dtype. ValueError: shapes differ.
    """
    fmt, x64, t64 = _widened(x, truth)
    with np.errstate(all="ignore"):
        finite_truth = np.where(np.isfinite(t64), np.abs(t64), 0.0)
        errors = np.abs(x64 - t64) / _ulp(finite_truth, fmt)
        errors = _apply_special_policy(errors, x64, t64, fmt, np.ones_like(errors, dtype=bool))
    return torch.from_numpy(errors)


def normwise_error(x: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Error of each element of interleaved pairs in ulps (in ``x``'s dtype) of the pair's magnitude.

    For the pair ``(t0, t1)`` in the last dimension, element ``i`` scores ``|x_i - t_i| / ulp(hypot(t0, t1))``. A
    rotation's elementwise error is unbounded when ``t_i`` cancels to nearly zero; measured against the pair's
    magnitude it stays bounded. A zero or infinite magnitude scores 0 for equal elements and ``inf`` otherwise.

    Args:
        x: bfloat16, float16 or float32 tensor whose last dimension holds pairs (x0, x1, x0, x1, ...).
        truth: float64 tensor of the same shape.

    Returns:
        float64 CPU tensor of the same shape.

    Raises:
        TypeError: unsupported dtype. ValueError: shapes differ or the last dimension is odd.
    """
    fmt, x64, t64 = _widened(x, truth)
    if x64.ndim == 0 or x64.shape[-1] % 2:
        raise ValueError(f"the last dimension must hold pairs (even length), got shape {list(x.shape)}")
    with np.errstate(all="ignore"):
        pairs = t64.reshape(*t64.shape[:-1], -1, 2)
        magnitude = np.repeat(np.hypot(pairs[..., 0], pairs[..., 1]), 2, axis=-1)
        scale_finite = np.isfinite(magnitude) & (magnitude > 0)
        errors = np.abs(x64 - t64) / _ulp(np.where(scale_finite, magnitude, 1.0), fmt)
        errors = _apply_special_policy(errors, x64, t64, fmt, scale_finite)
    return torch.from_numpy(errors)


def _as_flat_errors(errors: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(errors, torch.Tensor):
        errors = errors.detach().cpu().to(torch.float64).numpy()
    flat = np.asarray(errors, dtype=np.float64).reshape(-1)
    if np.isnan(flat).any() or (flat < 0).any():
        raise ValueError("errors must be non-negative and not NaN (error() maps NaN cases to 0 or inf)")
    return flat


def histogram(errors: torch.Tensor | np.ndarray) -> list[int]:
    """Count errors into the fixed buckets of :data:`HISTOGRAM_EDGES`.

    Args:
        errors: non-negative errors in ulps, any shape; ``inf`` is allowed.

    Returns:
        ``len(HISTOGRAM_EDGES)`` counts: ``[0]`` counts exact zeros, ``[i]`` counts ``edges[i-1] < e <= edges[i]``.

    Raises:
        ValueError: an error is negative or NaN.
    """
    flat = _as_flat_errors(errors)
    buckets = np.searchsorted(np.asarray(HISTOGRAM_EDGES), flat, side="left")
    return [int(count) for count in np.bincount(buckets, minlength=len(HISTOGRAM_EDGES))]


def summarize(errors: torch.Tensor | np.ndarray) -> dict:
    """Summary statistics of ulp errors as plain, JSON-serializable Python values.

    ``max``, ``mean`` and ``p99`` (nearest rank) are floats and may be ``float('inf')``, which ``json.dumps`` writes
    as ``Infinity`` (strict parsers need ``allow_nan``); for an empty input they are None and
    ``correctly_rounded_fraction`` is None. ``count`` and ``histogram`` merge across runs by summing; ``max`` by
    taking the maximum; ``mean`` weighted by ``count``; ``p99`` does not merge.

    Args:
        errors: non-negative errors in ulps, any shape.

    Returns:
        Dict with keys ``count``, ``max``, ``mean``, ``p99``, ``correctly_rounded_fraction`` (error <= 0.5) and
        ``histogram`` (see :func:`histogram`).

    Raises:
        ValueError: an error is negative or NaN.
    """
    flat = _as_flat_errors(errors)
    count = int(flat.size)
    if count == 0:
        return {
            "count": 0,
            "max": None,
            "mean": None,
            "p99": None,
            "correctly_rounded_fraction": None,
            "histogram": histogram(flat),
        }
    return {
        "count": count,
        "max": float(flat.max()),
        "mean": float(flat.mean()),
        "p99": float(np.quantile(flat, 0.99, method="inverted_cdf")),
        "correctly_rounded_fraction": float(np.count_nonzero(flat <= 0.5) / count),
        "histogram": histogram(flat),
    }
