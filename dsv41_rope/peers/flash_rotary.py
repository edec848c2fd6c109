"""flash-attention 2.8.3.post2's Triton rotary: ``apply_rotary`` of ``flash_attn/ops/triton/rotary.py``.

``apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None, interleaved=False, inplace=False,
conjugate=False)`` rotates the FIRST ``rotary_dim = 2 * cos.shape[-1]`` channels of ``x`` (``(batch, seqlen,
nheads, headdim)``, or ``(total_seqlen, nheads, headdim)`` with ``cu_seqlens``; any strides, ``headdim <= 256``)
and copies the rest; ``cos``/``sin`` are ``(seqlen_ro, rotary_dim / 2)``, one table for the whole batch, read
from row ``seqlen_offsets`` on (an int, or a tensor with one offset per sequence). It has no backward of its own
(``flash_attn.layers.rotary.ApplyRotaryEmb`` wraps it in one).

flash-attn is published as a source archive only, whose install compiles CUDA, and ``flash_attn/__init__`` imports
that extension; the file itself imports only torch and triton. So it is read straight out of the sdist
(``$DSV41_PEER_WHEELS/flash_attn-2.8.3.post2.tar.gz``, as tools/fetch_peer_wheels.sh saves it), checked against
its pinned SHA-256 (tools/fetch_flash_rotary.sh checks the same) and loaded by path; nothing is built.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_as_3d, join_copied_channels, rotary_width
from dsv41_rope.peers.loading import Pin, load_sdist_member

__all__ = [
    "APPLY_ROPE_FLASH_ATTENTION_REPRO",
    "FLASH_ATTN",
    "ROTARY_MEMBER",
    "ROTARY_SHA256",
    "apply_rope_flash_attention",
    "load_rotary",
]

FLASH_ATTN = Pin("flash-attn", "2.8.3.post2")
ROTARY_MEMBER = "flash_attn-2.8.3.post2/flash_attn/ops/triton/rotary.py"
ROTARY_SHA256 = "d2037e623854c702fb075784fe4292d4a89d6b9ac1ae33cab3d6788f8f94f240"


@functools.cache
def load_rotary() -> types.ModuleType:
    """``flash_attn/ops/triton/rotary.py``, read out of the flash-attn sdist and loaded by path."""
    return load_sdist_member(FLASH_ATTN, ROTARY_MEMBER, ROTARY_SHA256, "dsv41_rope_peer_flash_attn_rotary")


def apply_rope_flash_attention(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """flash-attention's ``apply_rotary(..., interleaved=True, conjugate=inverse)`` on the last ``2P`` channels.

    The rotary block ``values[..., -2P:]`` is handed over as it lies (a strided view; 3-D values get a heads
    dimension of 1), so the peer's ``rotary_dim`` is the whole of what it is given; the leading channels are put
    back in front. Tables: float32 ``angles.cos()``/``angles.sin()`` (flash-attention has no DeepSeek V4 model code;
    its ``RotaryEmbedding`` takes ``torch.cos``/``torch.sin`` of float32 frequencies), ``(S, P)`` for angles shared
    by the batch, else the batch's tables stacked ``(B * S, P)`` with ``seqlen_offsets`` ``b * S`` per sequence.
    The conjugate is its ``conjugate=``.
    """
    rotary = load_rotary()
    batch, sequence = values.shape[:2]
    width = rotary_width(angles)
    block = values[..., values.shape[-1] - width :]
    table = angles_as_3d(angles).expand(-1, sequence, -1)
    if table.shape[0] == 1:
        table, offsets = table[0], 0
    else:
        table = table.expand(batch, -1, -1).reshape(batch * sequence, -1)
        offsets = torch.arange(batch, device=values.device) * sequence
    rotated = rotary.apply_rotary(
        block if values.dim() == 4 else block.unsqueeze(2),
        table.cos(),
        table.sin(),
        seqlen_offsets=offsets,
        interleaved=True,
        conjugate=inverse,
    )
    return join_copied_channels(values, rotated if values.dim() == 4 else rotated.squeeze(2))


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got. The file is
# read out of the sdist in $DSV41_PEER_WHEELS, as load_rotary reads it (Triton reads a kernel's source from its file).
APPLY_ROPE_FLASH_ATTENTION_REPRO = """\
import importlib.util, os, tarfile, tempfile
member, folder = "flash_attn-2.8.3.post2/flash_attn/ops/triton/rotary.py", tempfile.mkdtemp()
with tarfile.open(os.path.join(os.environ["DSV41_PEER_WHEELS"], "flash_attn-2.8.3.post2.tar.gz")) as sdist:
    sdist.extract(member, folder, filter="data")  # flash_attn/__init__ needs its CUDA extension built
spec = importlib.util.spec_from_file_location("flash_attn_rotary", os.path.join(folder, member))
spec.loader.exec_module(rotary := importlib.util.module_from_spec(spec))
table = angles.expand(-1, values.shape[1], -1).reshape(-1, angles.shape[-1])  # one table: the batch's stacked
offsets = torch.arange(len(angles), device=values.device) * values.shape[1] if len(angles) > 1 else 0
block = values[..., values.shape[-1] - 2 * angles.shape[-1] :]  # it rotates the FIRST rotary_dim channels
got = rotary.apply_rotary(block if values.dim() == 4 else block.unsqueeze(2), table.cos(), table.sin(),
                          seqlen_offsets=offsets, interleaved=True, conjugate=inverse)
got = torch.cat((values[..., : values.shape[-1] - block.shape[-1]], got.reshape(block.shape)), dim=-1)
"""
