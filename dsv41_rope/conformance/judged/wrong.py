"""Deliberately wrong RoPE implementations, for the suite to catch: each is the project's kernel with one defect built
around it, so that a test it fails fails for that defect alone.

Judge one with ``--rope-impl dsv41_rope.conformance.judged.wrong:FUNCTION``; ``python -m dsv41_rope.conformance.judged``
runs them all on a slice of the suite, and ``tests/test_judged_implementations.py`` asserts which tests and comparisons
each fails.
"""

from __future__ import annotations

import torch

from dsv41_rope import kernel as kernel

__all__ = ["backward_without_conjugate", "canonical_nan_copies", "product_in_bf16", "rotates_leading_channels"]


def rotates_leading_channels(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Rotates the first ``2 * pairs`` channels and copies the others: the channels are rolled around the kernel."""
    rotary = 2 * angles.shape[-1]
    return kernel.apply_rope_triton(values.roll(rotary, -1), angles, inverse=inverse).roll(-rotary, -1)


class _ProductInBf16(torch.autograd.Function):
    """The kernel's output with its rotary channels recomputed in BF16 arithmetic (each product and sum rounded to
    BF16 instead of one float32 fma rounded once); the backward is the kernel's."""

    @staticmethod
    def forward(ctx: object, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
        ctx.save_for_backward(angles)
        ctx.inverse = inverse
        output = kernel.apply_rope_triton(
            values, angles, inverse=inverse
        )  # checks the inputs, copies the other channels
        rotary = 2 * angles.shape[-1]
        pairs = values[..., -rotary:].unflatten(-1, (-1, 2)).to(torch.bfloat16)
        frequencies = torch.polar(torch.ones_like(angles), angles)
        if values.dim() == 4:
            frequencies = frequencies.unsqueeze(2)
        cos = frequencies.real.to(torch.bfloat16)
        sin = (-frequencies.imag if inverse else frequencies.imag).to(torch.bfloat16)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        output[..., -rotary:] = rotated.to(values.dtype)
        return output

    @staticmethod
    def backward(ctx: object, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (angles,) = ctx.saved_tensors
        return kernel.apply_rope_triton(grad_output, angles, inverse=not ctx.inverse), None, None


def product_in_bf16(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """The complex product computed in BF16 arithmetic; the copied channels and the backward are the kernel's."""
    return _ProductInBf16.apply(values, angles, inverse)


class _BackwardWithoutConjugate(torch.autograd.Function):
    """The kernel's forward; a backward that rotates the gradient by the angle itself, not by its conjugate."""

    @staticmethod
    def forward(ctx: object, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
        ctx.save_for_backward(angles)
        ctx.inverse = inverse
        return kernel.apply_rope_triton(values, angles, inverse=inverse)

    @staticmethod
    def backward(ctx: object, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (angles,) = ctx.saved_tensors
        return kernel.apply_rope_triton(grad_output, angles, inverse=ctx.inverse), None, None


def backward_without_conjugate(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """The kernel's forward, with a backward that lost the conjugate."""
    return _BackwardWithoutConjugate.apply(values, angles, inverse)


def canonical_nan_copies(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """The kernel's output, with every NaN of the copied channels replaced by the dtype's default NaN (its payload
    lost). The replacement writes the data alone, so the gradient stays the kernel's."""
    output = kernel.apply_rope_triton(values, angles, inverse=inverse)
    copied = output.detach()[..., : output.shape[-1] - 2 * angles.shape[-1]]
    copied.masked_fill_(copied.isnan(), float("nan"))
    return output
