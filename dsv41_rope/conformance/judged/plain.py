"""Plain PyTorch RoPE implementations, written as a user would write one, with no Triton and nothing of the project's
kernel: one right, and three wrong with one defect each. On a CPU the suite holds them to the CPU's own eager path,
on a GPU to the GPU's (``dsv41_rope.conformance.references``): the right one passes on both, each wrong one fails for
its defect on both.

Judge one with ``--rope-impl dsv41_rope.conformance.judged.plain:FUNCTION`` (or ``dsv41-rope certify``);
``tests/test_judged_implementations.py`` asserts which tests and comparisons each fails.
"""

from __future__ import annotations

import torch

__all__ = ["forgets_the_conjugate", "nan_with_a_payload", "rope", "rotates_leading_channels"]

# A quiet NaN with a payload of its own (the low mantissa bit set), which no eager path emits for a NaN it computes.
_PAYLOAD_NAN_BITS = {torch.bfloat16: 0x7FC1, torch.float16: 0x7E01, torch.float32: 0x7FC00001}
_BIT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _rotated(rotary: torch.Tensor, angles: torch.Tensor, conjugate: bool, four_d: bool) -> torch.Tensor:
    """``rotary``'s adjacent pairs times ``exp(+-i * angles)``, a complex product in float32, in its dtype."""
    pairs = rotary.float().unflatten(-1, (-1, 2)).clone(memory_format=torch.contiguous_format)
    factors = torch.polar(torch.ones_like(angles), angles)
    if four_d:
        factors = factors.unsqueeze(2)
    if conjugate:
        factors = factors.conj()
    return torch.view_as_real(torch.view_as_complex(pairs) * factors).flatten(-2).to(rotary.dtype)


def rope(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """RoPE of the last ``2 * angles.shape[-1]`` channels as adjacent complex pairs; the others are copied. The
    rotated channels are written into a copy of the values (not concatenated: autograd then hands the complex view's
    backward a slice of the upstream gradient, which fails where that slice starts mid-pair)."""
    width = 2 * angles.shape[-1]
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., -width:] = _rotated(values[..., -width:], angles, inverse, values.dim() == 4)
    return output


def rotates_leading_channels(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Rotates the FIRST ``2 * pairs`` channels and copies the rest."""
    width = 2 * angles.shape[-1]
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., :width] = _rotated(values[..., :width], angles, inverse, values.dim() == 4)
    return output


def forgets_the_conjugate(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Rotates by ``exp(i * angles)`` whatever ``inverse`` says."""
    return rope(values, angles)


def nan_with_a_payload(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Right, except that every NaN of the rotated channels comes out with a payload of its own instead of the NaN
    eager emits."""
    output = rope(values, angles, inverse=inverse)
    width = 2 * angles.shape[-1]
    rotated = output.detach()[..., -width:]
    payload = torch.tensor(_PAYLOAD_NAN_BITS[values.dtype], dtype=_BIT_VIEW[values.dtype]).view(values.dtype)
    rotated.copy_(torch.where(rotated.isnan(), payload.to(rotated.device), rotated))
    return output
