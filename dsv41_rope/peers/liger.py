"""Liger-Kernel 0.8.5's Llama 4 rotary: ``LigerLlama4RopeFunction`` of ``liger_kernel/ops/llama4_rope.py``.

``LigerLlama4RopeFunction.apply(q, k, freqs_cis, BLOCK_SIZE=None) -> (q, k)`` rotates all channels of ``q`` and
``k`` (``[batch, seq, heads, head_dim]``) as interleaved pairs by complex ``freqs_cis``, in place on
``q.to(dtype).contiguous()`` (so on ``q`` itself when it is contiguous already), with a backward that rotates by the
conjugate (its ``llama4_rope_forward(..., imag_sign=-1.0)``). ``freqs_cis`` is flattened to rows and cut to the
first ``seq`` of them: one table for the whole batch, indexed by position. Liger has no DeepSeek V4 rotary (its
``apply_liger_kernel_to_deepseek_v4(rope=True)`` warns and skips); this is the interleaved complex rotary it has.
Imported from the installed distribution (its import chain needs only torch and triton).
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_as_3d, join_copied_channels, rotary_width
from dsv41_rope.peers.loading import Pin, import_installed

__all__ = ["APPLY_ROPE_LIGER_LLAMA4_REPRO", "LIGER_KERNEL", "apply_rope_liger_llama4", "load_llama4_rope"]

LIGER_KERNEL = Pin("liger-kernel", "0.8.5")


@functools.cache
def load_llama4_rope() -> types.ModuleType:
    """``liger_kernel.ops.llama4_rope``, from the installed distribution."""
    return import_installed("liger_kernel.ops.llama4_rope", LIGER_KERNEL)


def apply_rope_liger_llama4(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Liger's ``LigerLlama4RopeFunction.apply(q, k, freqs_cis)`` on the last ``2P`` channels.

    ``q`` is the rotary block ``values[..., -2P:]`` as it lies (3-D values get a heads dimension of 1); ``k`` has no
    heads, so the kernel's key branch runs for none. Table: complex64 ``torch.polar(ones, angles)``, as Hugging
    Face's Llama 4 builds the ``freqs_cis`` this function serves, ``[B or 1, S, P]`` (angles shared along the
    sequence are expanded to it; the peer reads the first ``S`` rows, so the batch's first table for every
    sequence). The conjugate: the function takes no flag (``imag_sign`` is internal to its ``llama4_rope_forward``,
    which has no backward), so the table is conjugated, ``freqs_cis.conj()``, resolved as its ``view_as_real`` needs.
    """
    llama4_rope = load_llama4_rope()
    width = rotary_width(angles)
    block = values[..., values.shape[-1] - width :]
    query = block if values.dim() == 4 else block.unsqueeze(2)
    key = query.new_empty(*query.shape[:2], 0, width)
    table = angles_as_3d(angles).expand(-1, values.shape[1], -1)
    freqs_cis = torch.polar(torch.ones_like(table), table)
    if inverse:
        freqs_cis = freqs_cis.conj().resolve_conj()
    rotated, _ = llama4_rope.LigerLlama4RopeFunction.apply(query, key, freqs_cis)
    return join_copied_channels(values, rotated if values.dim() == 4 else rotated.squeeze(2))


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_LIGER_LLAMA4_REPRO = """\
from liger_kernel.ops.llama4_rope import LigerLlama4RopeFunction
width = 2 * angles.shape[-1]
block = values[..., values.shape[-1] - width :]  # the last 2P channels, rotated in place when contiguous
query = block if values.dim() == 4 else block.unsqueeze(2)
table = angles.expand(-1, values.shape[1], -1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # as Hugging Face's Llama 4: complex64
freqs_cis = freqs_cis.conj().resolve_conj() if inverse else freqs_cis  # it takes no inverse flag
got, _ = LigerLlama4RopeFunction.apply(query, query.new_empty(*query.shape[:2], 0, width), freqs_cis)
got = torch.cat((values[..., : values.shape[-1] - width], got.reshape(block.shape)), dim=-1)
"""
