"""The eager path: Automodel's ``_apply_rope`` step for step, which the kernel reproduces and falls back to."""

from __future__ import annotations

import torch

__all__ = ["apply_rope_eager", "rotate_in_place_eagerly"]


def apply_rope_eager(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """The eager reference: Automodel's ``_apply_rope`` (``deepseek_v41/attention.py``), step for step.

    Every step is kept, ``.contiguous()`` included: which CUDA kernel PyTorch runs for the complex multiply (and for
    its backward) depends on its operands' layout, so for FP32 values, where ``.float()`` is a no-op, skipping the
    copy would hand the multiply a strided view and could change the path the bits come from. One step is added:
    a rotary block at an odd storage offset, which Automodel's code cannot view as complex, is copied first.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``.
        angles: ``[batch or 1, sequence, pairs]``, broadcastable against the rotary block's pairs.
        inverse: rotate by the conjugate.

    Returns:
        A new contiguous tensor: ``values`` with its last ``2 * pairs`` channels rotated.
    """
    rotary_dim = angles.shape[-1] * 2
    pairs = values[..., -rotary_dim:].float().unflatten(-1, (-1, 2)).contiguous()
    if pairs.storage_offset() % 2:
        # FP32 rows of an odd channel count under leading size-1 dimensions: the block is contiguous, so nothing
        # was copied, but it starts mid-complex-element, where view_as_complex refuses (Automodel's code raises).
        pairs = pairs.clone(memory_format=torch.contiguous_format)
    complex_pairs = torch.view_as_complex(pairs)
    frequencies = torch.polar(torch.ones_like(angles), angles)
    if values.dim() == 4:
        frequencies = frequencies.unsqueeze(2)
    if inverse:
        frequencies = frequencies.conj()
    rotated = torch.view_as_real(complex_pairs * frequencies).flatten(-2).to(values.dtype)
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., -rotary_dim:] = rotated
    return output


def rotate_in_place_eagerly(values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> None:
    """The in-place fallback: the eager path's rotated channels, written into ``values``' rotary block."""
    rotary = values[..., -2 * angles.shape[-1] :]
    rotary.copy_(apply_rope_eager(rotary, angles, inverse=inverse))
