"""The public entry points: :func:`apply_rope_triton` (out of place, differentiable) and :func:`apply_rope_triton_`
(in place), drop-ins for the eager ``_apply_rope(values, angles, *, inverse=False)``."""

from __future__ import annotations

import torch

from .eager_path import apply_rope_eager
from .inputs import check_in_place, check_inputs, uses_fused_kernel
from .operators import FusedRope, rotate_in_place, rotate_out_of_place
from .runtime import HAVE_TRITON

if HAVE_TRITON:
    from .operators import rotate_in_place_op

__all__ = ["apply_rope_triton", "apply_rope_triton_"]


def apply_rope_triton(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Rotary embedding of the last ``2 * angles.shape[-1]`` channels, bit-identical to the eager path.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``; any strides.
        angles: ``[batch or 1, sequence or 1, pairs]`` (for 3-D values also ``[sequence, pairs]`` or ``[pairs]``);
            any strides.
        inverse: rotate by ``exp(-i * angles)``.

    Returns:
        A new contiguous tensor: ``values`` with its last ``2 * pairs`` channels rotated as adjacent complex pairs.

    Raises:
        TypeError: non-tensor inputs, a non-bool ``inverse``, non-floating values, or angles not float32/float64.
        ValueError: wrong ranks, ``pairs == 0`` or ``2 * pairs > channels``, angles that do not broadcast to the
            rotary pairs without enlarging ``values``, or inputs on different devices.
    """
    check_inputs(values, angles, inverse)
    if not uses_fused_kernel(values, angles):
        return apply_rope_eager(values, angles, inverse=inverse)
    if values.requires_grad and torch.is_grad_enabled():
        return FusedRope.apply(values, angles, inverse)
    return rotate_out_of_place(values, angles, inverse)  # no gradient wanted: no autograd machinery


def apply_rope_triton_(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """In-place rotary embedding: rotates ``values[..., -2 * pairs:]`` and returns ``values``, bit for bit as
    :func:`apply_rope_triton` and the eager path give the rotated channels. The other channels are neither read nor
    written. For callers that own the tensor and need no gradient (inference, an indexer under ``no_grad``).

    Args:
        values: as for :func:`apply_rope_triton`; written through its own strides (views of longer buffers and the
            transposed attention output included). Must not need a gradient, nor overlap itself in memory.
        angles: as for :func:`apply_rope_triton`; must not share memory with ``values``.
        inverse: rotate by ``exp(-i * angles)``.

    Returns:
        ``values``, its version counter bumped.

    Raises:
        TypeError, ValueError: as :func:`apply_rope_triton`.
        RuntimeError: ``values`` requires grad while grad mode is on, overlaps itself, or shares memory with
            ``angles``. Nothing is written then.
    """
    check_inputs(values, angles, inverse)
    check_in_place(values, angles)
    if torch.compiler.is_compiling() and HAVE_TRITON:
        rotate_in_place_op(values, angles, inverse)
    else:
        rotate_in_place(values, angles, inverse)
    return values
