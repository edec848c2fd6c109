"""The values and angles of each value regime: normal, large, tiny (subnormals), special (NaN payloads, infinities,
signed zeros, extremes) and exact ties of the final rounding; and RoPE angles, huge ones and subnormal ones."""

from __future__ import annotations

import math

import torch

from dsv41_rope.oracle.rounding import INTEGER_VIEW

__all__ = [
    "MANTISSA_BITS",
    "ROPE_BASE",
    "TIE_ANGLE",
    "huge_angles",
    "regime_values",
    "rope_angles",
    "subnormal_angles",
]

MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}
ROPE_BASE = 10000.0
# log2 of half an ulp of 1 in each dtype: a float32 result this far above a dtype value is an exact tie.
_HALF_ULP_EXPONENT = {torch.bfloat16: -8, torch.float16: -11, torch.float32: -24}
# The angle of the ties regime, whose cos and sin every faithful float32 cos/sin gives exactly: cos = 1, sin = 2**-13.
TIE_ANGLE = 2.0**-13


def regime_values(
    shape: tuple[int, ...], dtype: torch.dtype, regime: str, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Contiguous values of ``dtype`` drawn for ``regime``."""
    info = torch.finfo(dtype)
    normal = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    if regime in ("normal", "huge-angles"):
        return normal.to(dtype)
    if regime == "large":
        # Up to a quarter of the largest finite value: a rotated pair stays finite (|pair| <= max / 2**1.5).
        scale = torch.rand(shape, generator=generator, device=device) * 0.75 + 0.25
        return (normal.sign() * scale * (info.max / 4)).to(dtype)
    if regime == "tiny":
        # Subnormals and the smallest normals of the dtype, both signs.
        smallest = info.smallest_normal
        magnitude = torch.rand(shape, generator=generator, device=device) * 2 * smallest
        return (normal.sign() * magnitude).to(dtype)
    if regime == "special":
        return _special_values(normal.to(dtype), generator)
    if regime == "ties":
        return _tie_values(shape, dtype, generator, device)
    if regime == "subnormal-angles":
        return normal.to(dtype)
    raise ValueError(f"unknown regime {regime!r}")


def _tie_values(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Pairs ``(x0, x1)``, counted from the last channel, whose rotation by :data:`TIE_ANGLE` (cos 1, sin 2**-13)
    has a real part ``x0 -+ x1 * 2**-13`` exactly halfway between two neighbours of the dtype, in one direction or
    the other (x1's sign): ``x0 = +-2**e (1 + j ulp)`` with even and odd ``j``, ``|x1| * 2**-13`` half its ulp."""
    mantissa = MANTISSA_BITS[dtype]
    exponents = torch.randint(-4, 5, shape, generator=generator, device=device).double()
    steps = torch.randint(0, 2**mantissa, shape, generator=generator, device=device).double()
    signs = torch.randint(0, 2, (2, *shape), generator=generator, device=device).double() * 2 - 1
    x0 = signs[0] * torch.exp2(exponents) * (1 + steps * 2.0**-mantissa)
    x1 = signs[1] * torch.exp2(exponents + _HALF_ULP_EXPONENT[dtype] - math.log2(TIE_ANGLE))
    from_the_end = torch.arange(shape[-1] - 1, -1, -1, device=device)
    return torch.where(from_the_end % 2 == 1, x0, x1).to(dtype)


def _special_values(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mix NaNs (canonical and with payloads, both signs), +-inf, +-0, subnormals and extremes into normal values."""
    dtype, device = values.dtype, values.device
    info = torch.finfo(dtype)
    bits_dtype = INTEGER_VIEW[dtype]
    width = 16 if bits_dtype == torch.int16 else 32
    mantissa = MANTISSA_BITS[dtype]
    exponent_all_ones = ((1 << (width - 1 - mantissa)) - 1) << mantissa
    payload_nan = exponent_all_ones | 0b101  # a quiet-bit-clear payload: a signalling NaN
    quiet_nan = exponent_all_ones | (1 << (mantissa - 1)) | 0b11
    to_signed = lambda b: b - (1 << width) if b >= 1 << (width - 1) else b  # noqa: E731
    specials_bits = [
        to_signed(quiet_nan),
        to_signed(quiet_nan | (1 << (width - 1))),  # negative NaN
        to_signed(payload_nan),
        to_signed(exponent_all_ones),  # +inf
        to_signed(exponent_all_ones | (1 << (width - 1))),  # -inf
        0,
        to_signed(1 << (width - 1)),  # -0
        1,  # smallest subnormal
        to_signed((1 << (width - 1)) | 3),  # a negative subnormal
    ]
    extremes = torch.tensor([info.max, -info.max, info.smallest_normal], dtype=dtype, device=device)
    specials = torch.cat([torch.tensor(specials_bits, dtype=bits_dtype, device=device).view(dtype), extremes])
    flat = values.reshape(-1).clone()
    picks = torch.randint(0, 2 * len(specials), flat.shape, generator=generator, device=device)
    chosen = picks < len(specials)  # about half of the elements become special
    flat[chosen] = specials[picks[chosen]]
    return flat.view(values.shape)


def rope_angles(positions: torch.Tensor, pairs: int) -> torch.Tensor:
    """RoPE angles ``position * ROPE_BASE ** (-j / pairs)`` in float32, for float32 ``positions`` ``[..., 1]``."""
    inverse_frequencies = ROPE_BASE ** (-torch.arange(pairs, device=positions.device, dtype=torch.float32) / pairs)
    return positions * inverse_frequencies


def huge_angles(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """float32 angles of ``shape``: half up to 1e7 in magnitude, half within 1e-6 of a multiple of pi/2."""
    huge = (torch.rand(shape, generator=generator, device=device) * 2 - 1) * 1e7
    quarter_turns = torch.randint(-4000, 4000, shape, generator=generator, device=device)
    near_axes = (
        quarter_turns.double() * (math.pi / 2)
        + (torch.rand(shape, generator=generator, device=device, dtype=torch.float64) * 2 - 1) * 1e-6
    )
    pick = torch.rand(shape, generator=generator, device=device) < 0.5
    return torch.where(pick, huge, near_axes.float())


def subnormal_angles(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """float32 angles, most subnormal (both signs, smallest to largest), the rest +-0, the smallest normal and
    2**-13: where a cos/sin that flushes subnormals (``sin x = 0`` instead of ``x``) shows."""
    magnitude_bits = torch.randint(1, 0x00800000, shape, generator=generator, device=device, dtype=torch.int32)
    edges = torch.tensor([0x00000000, 0x00800000, 0x39000000, 0x00000001, 0x007FFFFF], device=device)
    pick = torch.randint(0, 3 * len(edges), shape, generator=generator, device=device)
    magnitude_bits = torch.where(pick < len(edges), edges[pick.clamp(max=len(edges) - 1)].int(), magnitude_bits)
    sign = torch.randint(0, 2, shape, generator=generator, device=device, dtype=torch.int32) << 31
    return (magnitude_bits | sign).view(torch.float32)
