"""Bit-exact CPU emulation of PyTorch's eager CUDA RoPE, forward and autograd backward.

The eager path being emulated, for values ``[B, S, C]`` or ``[B, S, H, C]`` and complex64 frequencies ``[B, S, P]``
(``torch.polar`` of the angles, computed on the GPU and handed to the oracle as given)::

    pairs = torch.view_as_complex(values[..., -2P:].float().reshape(..., P, 2))
    rotated = pairs * frequencies            # frequencies.unsqueeze(2) for 4-D values, .conj() when inverse
    out = values.clone(); out[..., -2P:] = torch.view_as_real(rotated).flatten(-2).to(values.dtype)

Each step is reproduced bit for bit: exact widening, the CUDA complex multiply with its fma contraction
(:func:`complex_multiply`, in each of the three variants a CUDA build may use), round-to-nearest-even narrowing with
canonical NaN, and a plain bit copy of the first ``C - 2P`` channels (NaN payloads kept). The backward adds
autograd's accumulation of two partial gradients (:func:`accumulate_partial_gradients`). Nothing here is shared
with the kernel under test.
"""

from collections.abc import Callable

import numpy as np
import torch

from dsv41_rope.oracle.fma import canonicalize_nan32, fma32, multiply32
from dsv41_rope.oracle.rounding import INTEGER_VIEW, SUPPORTED_DTYPES, round_to_dtype, widen_to_float32

# Pairs per chunk: bounds the float64 temporaries of fma32 to a few tens of MB.
_PAIRS_PER_CHUNK = 1 << 19


CONTRACTIONS = ("first", "second", "none")
# What nvcc made of c10::complex<float>'s multiply in torch 2.11.0+cu130 on the H200 (the default everywhere).
H200_CONTRACTION = ("first", "first")


def _contracted(first_a, first_b, second_a, second_b, sign: int, variant: str) -> np.ndarray:
    """``first_a * first_b + sign * second_a * second_b`` in float32, contracted as ``variant`` says."""
    with np.errstate(all="ignore"):  # inf * 0 and inf - inf give NaN on purpose, as on the GPU
        if variant == "first":
            return fma32(first_a, first_b, sign * multiply32(second_a, second_b))
        if variant == "second":
            return fma32(np.float32(sign) * second_a, second_b, multiply32(first_a, first_b))
        if variant == "none":
            total = np.asarray(multiply32(first_a, first_b) + np.float32(sign) * multiply32(second_a, second_b))
            return canonicalize_nan32(total)
    raise ValueError(f"unknown contraction variant {variant!r}: expected one of {', '.join(CONTRACTIONS)}")


def complex_multiply(
    x0: np.ndarray,
    x1: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    contraction: tuple[str, str] = H200_CONTRACTION,
) -> tuple[np.ndarray, np.ndarray]:
    """``(x0 + i*x1) * (cos + i*sin)`` in float32 exactly as a CUDA build's ``c10::complex<float>`` multiply rounds it.

    ``c10::complex`` computes ``real = x0*cos - x1*sin`` and ``imag = x0*sin + x1*cos``; which product nvcc fuses
    into an fma is its choice when PyTorch is built, so each part takes a variant: ``first`` (the first product fused,
    the second rounded), ``second`` (the other way round) or ``none`` (both rounded, then added). The H200 build of
    torch 2.11.0+cu130 is ``first/first``::

        real = fma(x0, cos, -RN(x1 * sin))
        imag = fma(x0, sin,  RN(x1 * cos))

    Evidence: 26M complex products on the H200 match it with 0 mismatches
    (``docs/decisions/0001-eager-contraction-by-calibration.md``). A conjugate factor only negates ``sin`` (pass
    ``-sin``). PyTorch's CPU complex multiply is no bit reference: it is unfused for whole vectors and rounds some tail
    elements differently.

    Args:
        x0: float32 real parts, broadcastable with the other operands.
        x1: float32 imaginary parts.
        cos: float32 real parts of the factor.
        sin: float32 imaginary parts of the factor.
        contraction: the variant of ``(real, imag)``, each one of ``CONTRACTIONS``.

    Returns:
        ``(real, imag)`` float32 arrays of the broadcast shape, NaN canonical.

    Raises:
        ValueError: an unknown variant.
    """
    real_variant, imag_variant = contraction
    real = _contracted(x0, cos, x1, sin, -1, real_variant)
    imag = _contracted(x0, sin, x1, cos, +1, imag_variant)
    return real, imag


def eager_multiply(
    contraction_of_size: Callable[[int], tuple[str, str]],
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A stand-in for a device's eager complex multiply, of known contraction: :func:`complex_multiply` in the variant
    ``contraction_of_size(numel)`` picks (so one variant for whole vectors and another for short tensors can be
    modelled). Calibration tests hand it to ``dsv41_rope.kernel.calibrate(multiply=...)``.

    Args:
        contraction_of_size: the variant for a product of that many complex elements.

    Returns:
        ``multiply(values, factors)``: complex64 ``values * factors`` (factors broadcast, a conjugate view resolved),
        on ``values``' device.
    """

    def multiply(values: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
        factors = factors.resolve_conj().expand(values.shape)
        x = torch.view_as_real(values.contiguous()).cpu().numpy()
        f = torch.view_as_real(factors.contiguous()).cpu().numpy()
        real, imag = complex_multiply(x[..., 0], x[..., 1], f[..., 0], f[..., 1], contraction_of_size(values.numel()))
        return torch.complex(torch.from_numpy(real), torch.from_numpy(imag)).to(values.device)

    return multiply


def accumulate_partial_gradients(copied_part: torch.Tensor, rotary_part: torch.Tensor) -> torch.Tensor:
    """Sum autograd's two partial gradients of ``values`` with the GPU's elementwise add in the tensor dtype.

    ``values`` reaches the output along two paths (the clone that supplies the copied channels, and the slice that
    is rotated), so autograd materializes two zero-filled gradients of the full shape, one holding the copied
    channels and one the rotary channels, and adds them. Each element is then ``g + 0``: exact, except that
    ``-0 + 0`` is ``+0`` and CUDA's add canonicalizes NaN, so the whole gradient loses its negative zeros and NaN
    payloads. This function models that add (widen to float32, IEEE add, round to nearest-even with canonical NaN),
    so that it is the one place to change if the GPU shows a different accumulation.

    Args:
        copied_part: full-shape gradient with the rotary channels zero.
        rotary_part: full-shape gradient with the copied channels zero, same dtype and shape.

    Returns:
        A new contiguous CPU tensor of the same dtype and shape.
    """
    total = widen_to_float32(copied_part) + widen_to_float32(rotary_part)
    return round_to_dtype(total, copied_part.dtype)


def _check_values(values: torch.Tensor, name: str) -> None:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be bfloat16, float16 or float32, got {values.dtype}")
    if values.ndim not in (3, 4):
        raise ValueError(
            f"{name} must be [batch, sequence, channels] or [batch, sequence, heads, channels], "
            f"got shape {list(values.shape)}"
        )


def _cos_sin(frequencies: torch.Tensor, values: torch.Tensor, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Split frequencies into float32 cos/sin arrays broadcast to ``[B, S, P]`` (``[B, S, 1, P]`` for 4-D values)."""
    if not isinstance(frequencies, torch.Tensor):
        raise TypeError(f"frequencies must be a torch.Tensor, got {type(frequencies).__name__}")
    if frequencies.dtype == torch.complex64:
        frequencies = torch.view_as_real(frequencies.detach().cpu().resolve_conj())
    elif frequencies.dtype == torch.float32:
        if frequencies.ndim == 0 or frequencies.shape[-1] != 2:
            raise ValueError(
                f"float32 frequencies must be view_as_real of complex64, [..., pairs, 2]; got {list(frequencies.shape)}"
            )
    else:
        raise TypeError(f"frequencies must be complex64 or its view_as_real (float32), got {frequencies.dtype}")
    frequencies = frequencies.detach().cpu()
    if frequencies.ndim < 2 or frequencies.ndim > 4:
        raise ValueError(
            f"frequencies must be broadcastable to [batch, sequence, pairs]; got {list(frequencies.shape)}"
        )
    pairs = frequencies.shape[-2]
    channels = values.shape[-1]
    if pairs < 1 or 2 * pairs > channels:
        raise ValueError(
            f"frequencies hold {pairs} rotary pairs, but {name} {list(values.shape)} has {channels} channels "
            f"(need 1 <= pairs and 2 * pairs <= channels)"
        )
    target = (values.shape[0], values.shape[1], pairs, 2)
    try:
        frequencies = torch.broadcast_to(frequencies, target)
    except RuntimeError as exc:
        raise ValueError(
            f"frequencies {list(frequencies.shape[:-1])} (complex) do not broadcast to [batch, sequence, pairs] = "
            f"{list(target[:-1])} for {name} {list(values.shape)}"
        ) from exc
    if values.ndim == 4:
        frequencies = frequencies.unsqueeze(2)
    array = frequencies.numpy()
    return array[..., 0], array[..., 1]


def _rotate(
    values: torch.Tensor, frequencies: torch.Tensor, sine_sign: int, name: str, contraction: tuple[str, str]
) -> torch.Tensor:
    """Rotary channels of ``values`` multiplied by ``cos + i * sine_sign * sin``, narrowed to the dtype."""
    _check_values(values, name)
    cos, sin = _cos_sin(frequencies, values, name)
    if sine_sign < 0:
        # Negating the imaginary part is all a conjugate does; -(+0) = -0 matters for signed-zero results.
        sin = -sin
    pairs = cos.shape[-1]
    rotary = widen_to_float32(values[..., values.shape[-1] - 2 * pairs :]).numpy()
    rotary = rotary.reshape(*rotary.shape[:-1], pairs, 2)
    result = np.empty_like(rotary)
    # Chunk along the sequence so the float64 temporaries stay small; frequencies broadcast within each chunk.
    pairs_per_position = rotary[:, :1].size // 2
    step = max(1, _PAIRS_PER_CHUNK // max(1, pairs_per_position))
    for start in range(0, rotary.shape[1], step):
        window = slice(start, start + step)
        chunk = rotary[:, window]
        result[:, window, ..., 0], result[:, window, ..., 1] = complex_multiply(
            chunk[..., 0], chunk[..., 1], cos[:, window], sin[:, window], contraction
        )
    return round_to_dtype(result.reshape(*rotary.shape[:-2], 2 * pairs), values.dtype)


def _assemble(values: torch.Tensor, rotated: torch.Tensor) -> torch.Tensor:
    """Contiguous copy of ``values`` (a bit copy, NaN payloads kept) with its last channels replaced by ``rotated``."""
    integer = INTEGER_VIEW[values.dtype]
    out = torch.empty(values.shape, dtype=values.dtype)
    out.view(integer).copy_(values.detach().cpu().view(integer))
    out.view(integer)[..., values.shape[-1] - rotated.shape[-1] :] = rotated.view(integer)
    return out


def apply_rope(
    values: torch.Tensor,
    frequencies: torch.Tensor,
    *,
    inverse: bool = False,
    contraction: tuple[str, str] = H200_CONTRACTION,
) -> torch.Tensor:
    """Bits of PyTorch's eager CUDA RoPE forward.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, bfloat16, float16 or
            float32, any strides and device (computed on the CPU).
        frequencies: complex64 ``torch.polar(ones, angles)`` broadcastable to ``[batch, sequence, pairs]``, or its
            ``torch.view_as_real`` (float32 ``[..., pairs, 2]``); ``pairs`` is read from it. It is broadcast to
            ``[batch, sequence, pairs]`` first and shared by all heads.
        inverse: rotate by the conjugate (``exp(-i * angle)``).
        contraction: the CUDA build's contraction variant of ``(real, imag)``; see :func:`complex_multiply`.

    Returns:
        New contiguous CPU tensor of ``values``' dtype and shape: the first ``channels - 2 * pairs`` channels are
        bit copies, the last ``2 * pairs`` are the rotated pairs rounded as the GPU rounds them.

    Raises:
        TypeError: a tensor has an unsupported type or dtype.
        ValueError: shapes do not fit (rank, ``2 * pairs > channels``, non-broadcastable frequencies).
    """
    rotated = _rotate(values, frequencies, -1 if inverse else 1, "values", contraction)
    return _assemble(values, rotated)


def apply_rope_backward(
    grad_output: torch.Tensor,
    frequencies: torch.Tensor,
    *,
    inverse: bool = False,
    contraction: tuple[str, str] = H200_CONTRACTION,
) -> torch.Tensor:
    """Bits of the gradient of ``values`` that PyTorch's eager CUDA autograd computes for :func:`apply_rope`.

    The rotary channels of ``grad_output`` are multiplied by the conjugate of the forward's factor (``-sin`` for a
    forward rotation, ``+sin`` for an inverse one) with the same fma pattern and narrowed to the dtype; the copied
    channels pass through; then :func:`accumulate_partial_gradients` adds the two partial gradients, which turns
    every ``-0`` into ``+0`` and every NaN into the canonical NaN across the whole gradient.

    Args:
        grad_output: upstream gradient, same layout rules and dtypes as ``values`` in :func:`apply_rope`.
        frequencies: as in :func:`apply_rope`.
        inverse: the forward was called with ``inverse=True``.
        contraction: as in :func:`apply_rope`.

    Returns:
        New contiguous CPU tensor of ``grad_output``'s dtype and shape.

    Raises:
        TypeError: a tensor has an unsupported type or dtype.
        ValueError: shapes do not fit.
    """
    rotated = _rotate(grad_output, frequencies, 1 if inverse else -1, "grad_output", contraction)
    integer = INTEGER_VIEW[grad_output.dtype]
    channels = grad_output.shape[-1]
    rotary_start = channels - rotated.shape[-1]
    copied_part = torch.zeros(grad_output.shape, dtype=grad_output.dtype)
    copied_part.view(integer)[..., :rotary_start] = grad_output.detach().cpu().view(integer)[..., :rotary_start]
    rotary_part = torch.zeros(grad_output.shape, dtype=grad_output.dtype)
    rotary_part.view(integer)[..., rotary_start:] = rotated.view(integer)
    return accumulate_partial_gradients(copied_part, rotary_part)
