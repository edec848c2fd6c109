"""The mathematical truth of RoPE, in float64, and its certification against mpmath.

:func:`apply_rope` rotates the exactly widened input values by the exact float32 angles: ``cos``/``sin`` are
evaluated in float64 by numpy (the platform libm, which reduces large arguments properly) and the rotation
``(x0*c - x1*s, x0*s + x1*c)`` is done in float64. The copied channels are the exact input values.

Bound, measured against the pair magnitude ``|x| = hypot(x0, x1)`` because a rotated component can cancel to
almost nothing while its absolute error does not (so an elementwise relative bound does not exist). With ``u =
2^-53`` and cos/sin within ``d`` of the exact values relatively, each component's error is at most
``(d + 2u)(1 + 2u) |x|``; since ``ulp64(|x|) > u |x|``, the error is below ``d/u + 2`` float64 ulps of ``|x|`` (plus
terms of order 2^-52). glibc documents at most 1 ulp for sin/cos (``d <= 2u``), which gives
:data:`NORMWISE_BOUND_ULPS` = 4; the libm measured on the development machine is within 0.52 ulp (``d <= 1.04u``,
bound 3.04), and :func:`certify` measured at most 1.66 ulps on random and adversarial samples (angles up to 1e7 in
magnitude and within 1e-6 of multiples of pi/2, values near each dtype's largest finite and smallest subnormal).
The float64 truth is therefore about 2^-51 relative to ``|x|``, far finer than the 2^-24 float32 resolution that it
judges.
"""

import mpmath
import numpy as np
import torch

from dsv41_rope.oracle.rounding import SUPPORTED_DTYPES, widen_to_float32

NORMWISE_BOUND_ULPS = 4.0


def _check_inputs(values: torch.Tensor, angles: torch.Tensor) -> None:
    if not isinstance(values, torch.Tensor) or values.dtype not in SUPPORTED_DTYPES:
        found = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"values must be a bfloat16, float16 or float32 tensor, got {found}")
    if values.ndim not in (3, 4):
        raise ValueError(
            f"values must be [batch, sequence, channels] or [batch, sequence, heads, channels], "
            f"got shape {list(values.shape)}"
        )
    if not isinstance(angles, torch.Tensor) or angles.dtype != torch.float32:
        found = angles.dtype if isinstance(angles, torch.Tensor) else type(angles).__name__
        raise TypeError(f"angles must be a float32 tensor, got {found}")
    if angles.ndim < 1 or angles.ndim > 3:
        raise ValueError(f"angles must be broadcastable to [batch, sequence, pairs], got shape {list(angles.shape)}")
    pairs, channels = angles.shape[-1], values.shape[-1]
    if pairs < 1 or 2 * pairs > channels:
        raise ValueError(
            f"angles hold {pairs} rotary pairs, but values {list(values.shape)} have {channels} channels "
            f"(need 1 <= pairs and 2 * pairs <= channels)"
        )


def _split(values: torch.Tensor, angles: torch.Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """Widened float64 values, float64 angles broadcast against the pairs, and the first rotary channel."""
    _check_inputs(values, angles)
    target = (values.shape[0], values.shape[1], angles.shape[-1])
    try:
        broadcast = torch.broadcast_to(angles.detach().cpu(), target)
    except RuntimeError as exc:
        raise ValueError(
            f"angles {list(angles.shape)} do not broadcast to [batch, sequence, pairs] = {list(target)}"
        ) from exc
    if values.ndim == 4:
        broadcast = broadcast.unsqueeze(2)
    widened = widen_to_float32(values).numpy().astype(np.float64)
    return widened, broadcast.numpy().astype(np.float64), values.shape[-1] - 2 * angles.shape[-1]


def apply_rope(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Float64 rotation of the exact input values by the exact float32 angles.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, bfloat16, float16 or
            float32, any strides and device.
        angles: float32 angles broadcastable to ``[batch, sequence, pairs]``; ``pairs`` is ``angles.shape[-1]``.
        inverse: rotate by ``-angle``.

    Returns:
        New contiguous CPU float64 tensor of ``values``' shape: copied channels exact, rotary channels within
        :data:`NORMWISE_BOUND_ULPS` float64 ulps of the pair magnitude from the exact rotation (finite inputs).

    Raises:
        TypeError: unsupported tensor type or dtype. ValueError: shapes do not fit.
    """
    widened, theta, start = _split(values, angles)
    cos = np.cos(theta)
    sin = -np.sin(theta) if inverse else np.sin(theta)
    rotary = widened[..., start:].reshape(*widened.shape[:-1], -1, 2)
    x0, x1 = rotary[..., 0], rotary[..., 1]
    with np.errstate(invalid="ignore", over="ignore"):
        rotated = np.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), axis=-1)
    widened[..., start:] = rotated.reshape(*rotated.shape[:-2], -1)
    return torch.from_numpy(widened)


def _mp_rotate(
    values: torch.Tensor, angles: torch.Tensor, inverse: bool, precision: int
) -> tuple[np.ndarray, list[tuple[mpmath.mpf, mpmath.mpf]], int]:
    """Widened values and, per pair in row-major order, the rotation evaluated with ``precision``-bit mpmath."""
    if precision < 64:
        raise ValueError(f"precision must be at least 64 bits to judge float64, got {precision}")
    widened, theta, start = _split(values, angles)
    rotary = widened[..., start:].reshape(*widened.shape[:-1], -1, 2)
    theta = np.broadcast_to(theta, rotary.shape[:-1]).reshape(-1)
    rotated = []
    with mpmath.workprec(precision):
        for x0, x1, angle in zip(rotary[..., 0].reshape(-1), rotary[..., 1].reshape(-1), theta, strict=True):
            cos, sin = mpmath.cos(angle), mpmath.sin(angle)
            if inverse:
                sin = -sin
            x0, x1 = mpmath.mpf(x0), mpmath.mpf(x1)
            rotated.append((x0 * cos - x1 * sin, x0 * sin + x1 * cos))
    return widened, rotated, start


def apply_rope_mpmath(
    values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False, precision: int = 200
) -> torch.Tensor:
    """High-precision rotation with mpmath, each element rounded once to float64; for samples (a Python loop).

    Args:
        values: as in :func:`apply_rope`.
        angles: as in :func:`apply_rope`.
        inverse: rotate by ``-angle``.
        precision: mpmath working precision in bits (at least 64).

    Returns:
        New contiguous CPU float64 tensor of ``values``' shape.

    Raises:
        TypeError: unsupported tensor type or dtype. ValueError: shapes do not fit or precision is too low.
    """
    widened, rotated, start = _mp_rotate(values, angles, inverse, precision)
    flat = np.array([float(component) for pair in rotated for component in pair], dtype=np.float64)
    widened[..., start:] = flat.reshape(*widened.shape[:-1], -1)
    return torch.from_numpy(widened)


def certify(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False, precision: int = 200) -> float:
    """Largest deviation of :func:`apply_rope` from mpmath, in float64 ulps of the pair magnitude.

    For every rotary element, ``|float64 truth - mpmath| / ulp64(hypot(x0, x1))``, with the difference and the
    magnitude evaluated in mpmath; pairs of magnitude 0 and the copied channels (exact) contribute 0. The module
    docstring proves the result is below :data:`NORMWISE_BOUND_ULPS`.

    Args:
        values: as in :func:`apply_rope`; every element must be finite.
        angles: as in :func:`apply_rope`; every element must be finite.
        inverse: rotate by ``-angle``.
        precision: mpmath working precision in bits (at least 64).

    Returns:
        The maximum deviation (0.0 for an all-zero input).

    Raises:
        TypeError: unsupported tensor type or dtype. ValueError: shapes do not fit, non-finite input, or precision
        too low.
    """
    if not bool(torch.isfinite(values).all()) or not bool(torch.isfinite(angles).all()):
        raise ValueError("certify needs finite values and angles")
    truth = apply_rope(values, angles, inverse=inverse)
    widened, rotated, start = _mp_rotate(values, angles, inverse, precision)
    truth_pairs = truth.numpy()[..., start:].reshape(-1, 2)
    input_pairs = widened[..., start:].reshape(-1, 2)
    worst = mpmath.mpf(0)
    with mpmath.workprec(precision):
        for (t0, t1), (x0, x1), (r0, r1) in zip(truth_pairs, input_pairs, rotated, strict=True):
            magnitude = mpmath.sqrt(mpmath.mpf(x0) ** 2 + mpmath.mpf(x1) ** 2)
            if magnitude == 0:
                continue
            _, exponent = mpmath.frexp(magnitude)
            ulp = mpmath.ldexp(1, max(exponent - 1, -1022) - 52)
            deviation = max(abs(mpmath.mpf(t0) - r0), abs(mpmath.mpf(t1) - r1)) / ulp
            worst = max(worst, deviation)
    return float(worst)
