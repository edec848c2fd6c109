"""Input checks: a clear error for every input the eager path rejects, and which valid inputs the kernel runs."""

from __future__ import annotations

import torch

from .configs import MAX_ROWS
from .runtime import HAVE_TRITON, INTERPRETED

__all__ = [
    "FUSED_DTYPES",
    "check_in_place",
    "check_inputs",
    "check_no_shared_memory",
    "describe",
    "uses_fused_kernel",
]

FUSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def describe(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')} on {tensor.device}"


def check_inputs(values: object, angles: object, inverse: object) -> None:
    """Raise a clear error for every input the eager path rejects (or accepts only by accident of slicing)."""
    if not isinstance(values, torch.Tensor) or not isinstance(angles, torch.Tensor):
        raise TypeError(f"values and angles must be tensors, got {type(values).__name__} and {type(angles).__name__}")
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
    if values.dim() not in (3, 4):
        raise ValueError(
            f"values must be [batch, sequence, channels] or [batch, sequence, heads, channels], got {describe(values)}"
        )
    if not values.is_floating_point():
        raise TypeError(f"values must be a floating-point tensor, got {describe(values)}")
    if angles.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"angles must be float32 or float64 (torch.polar's dtypes), got {describe(angles)}")
    if values.device != angles.device:
        raise ValueError(f"values and angles must be on one device, got {describe(values)} and {describe(angles)}")
    if angles.dim() == 0:
        raise ValueError(f"angles must have a last dimension of rotary pairs, got {describe(angles)}")
    pairs, channels = angles.shape[-1], values.shape[-1]
    if pairs == 0 or 2 * pairs > channels:
        raise ValueError(
            f"angles' last dimension is the number of rotary pairs and must satisfy 1 <= 2 * pairs <= channels; "
            f"got pairs={pairs} for values {describe(values)}, angles {describe(angles)}"
        )
    rotary_shape = (*values.shape[:-1], pairs)
    frequency_shape = list(angles.shape)
    if values.dim() == 4:
        if angles.dim() < 2:
            raise ValueError(
                f"angles for 4-D values must be [batch, sequence, pairs], got {describe(angles)} "
                f"for values {describe(values)}"
            )
        frequency_shape.insert(2, 1)  # the eager path unsqueezes the heads dimension
    if not _broadcasts_to(frequency_shape, rotary_shape):
        raise ValueError(
            f"angles {describe(angles)} do not broadcast to the rotary pairs {rotary_shape} of values "
            f"{describe(values)}: expected angles [batch or 1, sequence or 1, {pairs}]"
        )


def _broadcasts_to(shape: list[int], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without enlarging it (``torch.broadcast_shapes`` costs ~10 us)."""
    return len(shape) <= len(target) and all(
        size == wanted or size == 1 for size, wanted in zip(reversed(shape), reversed(target), strict=False)
    )


def check_in_place(values: torch.Tensor, angles: torch.Tensor) -> None:
    """Refuse what PyTorch's own in-place operations refuse, before anything is written."""
    if values.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            f"apply_rope_triton_ rotates in place without recording a gradient, but values {describe(values)} "
            "require grad: call apply_rope_triton (out of place) for training, or this under torch.no_grad()"
        )
    if any(size > 1 and stride == 0 for size, stride in zip(values.shape, values.stride(), strict=True)):
        raise RuntimeError(
            f"unsupported operation: more than one element of values {describe(values)} (strides "
            f"{values.stride()}) refers to a single memory location; clone() it before rotating in place"
        )


def check_no_shared_memory(values: torch.Tensor, angles: torch.Tensor) -> None:
    """Refuse angles that live in the memory the in-place rotation writes (checked where data pointers exist:
    eagerly, or when the compiled operator runs)."""
    if values.numel() == 0 or angles.numel() == 0:
        return
    if values.untyped_storage().data_ptr() != angles.untyped_storage().data_ptr():
        return

    def extent(t: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (values_start, values_end), (angles_start, angles_end) = extent(values), extent(angles)
    if values_start < angles_end and angles_start < values_end:
        raise RuntimeError(
            f"angles {describe(angles)} share memory with values {describe(values)}, which the in-place rotation "
            "would overwrite while reading them; clone() the angles"
        )


def uses_fused_kernel(values: torch.Tensor, angles: torch.Tensor) -> bool:
    """Whether :func:`apply_rope_triton` runs the kernel for these (valid) inputs rather than the eager path (a CUDA
    device whose calibration found no contraction variant runs the eager path too, inside the launch)."""
    on_kernel_device = values.is_cuda or (INTERPRETED and values.device.type == "cpu")
    indexable_angles = angles.dim() == 3 or (values.dim() == 3 and angles.dim() in (1, 2))
    return (
        values.numel() // max(values.shape[-1], 1) <= MAX_ROWS
        and HAVE_TRITON
        and on_kernel_device
        and values.dtype in FUSED_DTYPES
        and angles.dtype == torch.float32
        and not (angles.requires_grad and torch.is_grad_enabled())
        and indexable_angles
    )
