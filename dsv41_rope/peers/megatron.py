"""Megatron-core 0.19.2: the interleaved ``apply_rotary_pos_emb`` and the fused (Triton) MLA query rotary.

Both are imported from the installed ``megatron-core`` (Python 3.12+; its wheel's one extension is for datasets);
their import chain needs torch, numpy and packaging, and warns that Transformer Engine and Apex are missing, whose
absence it survives. Its Transformer Engine path (``apply_rope_fusion=True``: ``fused_apply_rotary_pos_emb``) needs
``transformer_engine`` and is not adapted. Megatron-core has no DeepSeek V4 model, so tables are float32.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_as_3d, join_copied_channels, rotary_width
from dsv41_rope.peers.loading import Pin, import_installed

__all__ = [
    "APPLY_ROPE_MEGATRON_FUSED_MLA_REPRO",
    "APPLY_ROPE_MEGATRON_INTERLEAVED_REPRO",
    "MEGATRON_CORE",
    "apply_rope_megatron_fused_mla",
    "apply_rope_megatron_interleaved",
    "interleaved_config",
    "load_fused_mla_rope",
    "load_rope_utils",
]

MEGATRON_CORE = Pin("megatron-core", "0.19.2")


@functools.cache
def load_rope_utils() -> types.ModuleType:
    """``megatron.core.models.common.embeddings.rope_utils``, from the installed distribution."""
    return import_installed("megatron.core.models.common.embeddings.rope_utils", MEGATRON_CORE)


@functools.cache
def load_fused_mla_rope() -> types.ModuleType:
    """``megatron.core.fusions.fused_mla_yarn_rope_apply``, from the installed distribution."""
    return import_installed("megatron.core.fusions.fused_mla_yarn_rope_apply", MEGATRON_CORE)


@functools.cache
def interleaved_config() -> object:
    """A ``TransformerConfig`` with ``rotary_interleaved=True`` and the unfused path (``apply_rope_fusion=False``)."""
    config = import_installed("megatron.core.transformer.transformer_config", MEGATRON_CORE)
    return config.TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=1, rotary_interleaved=True, apply_rope_fusion=False
    )


class _SingleRankGroup:
    """The context-parallel group of a run without context parallelism (one rank): ``apply_rotary_pos_emb`` asks
    Megatron's global parallel state for one when given none, which asserts it was initialized; the sequences'
    layout used here (``sbhd``) never uses it."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def apply_rope_megatron_interleaved(
    values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False
) -> torch.Tensor:
    """Megatron's ``apply_rotary_pos_emb(t, freqs, config, cu_seqlens=None, mscale=1.0, cp_group=None,
    mla_rotary_interleaved=False)`` with ``config.rotary_interleaved=True``.

    It rotates the FIRST ``freqs.shape[-1]`` channels of ``t`` (``[seq, batch, heads, dim]``, sequence first) and
    concatenates the rest after them, so it is handed the last ``2P`` channels, transposed to sequence-first (3-D
    values get a heads dimension of 1), and the leading channels go back in front. ``freqs`` are angles, not a
    table: ``[S or 1, B or 1, 1, 2P]``, each pair's angle twice in a row, as Megatron's ``RotaryEmbedding`` lays
    them for ``rotary_interleaved`` (``stack((freqs, freqs), -1)``), float32; the peer takes ``torch.cos``/
    ``torch.sin`` of them and casts those to ``t``'s dtype. The conjugate: it has no flag, so the angles are negated.
    """
    rope_utils = load_rope_utils()
    width = rotary_width(angles)
    block = values[..., values.shape[-1] - width :]
    sequence_first = (block if values.dim() == 4 else block.unsqueeze(2)).transpose(0, 1)
    freqs = angles_as_3d(angles).repeat_interleave(2, dim=-1).transpose(0, 1).unsqueeze(2)
    rotated = rope_utils.apply_rotary_pos_emb(
        sequence_first, -freqs if inverse else freqs, interleaved_config(), cp_group=_SingleRankGroup()
    ).transpose(0, 1)
    return join_copied_channels(values, rotated if values.dim() == 4 else rotated.squeeze(2))


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_MEGATRON_INTERLEAVED_REPRO = """\
import types
from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
from megatron.core.transformer.transformer_config import TransformerConfig
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=1, rotary_interleaved=True,
                           apply_rope_fusion=False)
width = 2 * angles.shape[-1]
block = values[..., values.shape[-1] - width :]  # it rotates the FIRST freqs.shape[-1] channels
t = (block if values.dim() == 4 else block.unsqueeze(2)).transpose(0, 1)  # [S, B, H, 2P], sequence first
freqs = angles.repeat_interleave(2, dim=-1).transpose(0, 1).unsqueeze(2)  # [S, B, 1, 2P]: each angle twice
one_rank = types.SimpleNamespace(size=lambda: 1, rank=lambda: 0)  # no context parallelism
got = apply_rotary_pos_emb(t, -freqs if inverse else freqs, config, cp_group=one_rank).transpose(0, 1)
got = torch.cat((values[..., : values.shape[-1] - width], got.reshape(block.shape)), dim=-1)
"""


def apply_rope_megatron_fused_mla(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """Megatron's fused MLA query rotary, ``fused_apply_mla_rope_for_q(t, cos, sin, qk_head_dim, emb_dim,
    cu_seqlens_q=None, cp_rank=0, cp_size=1, rotary_interleaved=False)`` (a Triton kernel, in place).

    ``t`` is a sequence-first copy of ``values`` (``[S, B, H, C]``; 3-D values get a heads dimension of 1) with
    ``qk_head_dim = C - 2P`` leading channels left alone and ``emb_dim = 2P`` rotated. It reads adjacent pairs and
    writes their real parts to the first half of the block and the imaginary parts to the second (MLA's layout,
    ``mla_rotary_interleaved``), which the result shows. Tables: ``cos``/``sin`` ``[S, 1, 1, 2P]`` of
    ``cat((angles, angles), -1)`` (the YaRN rotary's non-interleaved ``emb``), float32 (Megatron's MLA casts them to
    the activations' dtype; it has no DeepSeek V4 model); one table for the whole batch, so angles that differ
    across the batch cannot be handed over. The conjugate: it has no flag, so ``sin`` is negated. It needs
    ``emb_dim // 2`` a power of two and ``emb_dim`` a multiple of 4.

    Raises:
        ValueError: angles with a batch dimension over 1 (the peer takes one table for all sequences).
    """
    table = angles_as_3d(angles)
    if table.shape[0] != 1:
        raise ValueError(
            f"fused_apply_mla_rope_for_q takes one cos/sin table [S, 1, 1, 2P] for the whole batch; angles of shape "
            f"{tuple(angles.shape)} differ across the batch"
        )
    fused = load_fused_mla_rope()
    width = rotary_width(angles)
    doubled = torch.cat((table[0],) * 2, dim=-1).expand(values.shape[1], -1)[:, None, None, :]
    cos, sin = doubled.cos(), doubled.sin()
    sequence_first = (values if values.dim() == 4 else values.unsqueeze(2)).transpose(0, 1).contiguous()
    rotated = fused.fused_apply_mla_rope_for_q(
        sequence_first, cos, -sin if inverse else sin, values.shape[-1] - width, width
    ).transpose(0, 1)
    return rotated if values.dim() == 4 else rotated.squeeze(2)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_MEGATRON_FUSED_MLA_REPRO = """\
from megatron.core.fusions.fused_mla_yarn_rope_apply import fused_apply_mla_rope_for_q
if angles.shape[0] != 1:
    raise ValueError("fused_apply_mla_rope_for_q takes one cos/sin table [S, 1, 1, 2P] for the whole batch")
width = 2 * angles.shape[-1]
doubled = torch.cat((angles[0],) * 2, dim=-1).expand(values.shape[1], -1)[:, None, None, :]  # float32 [S, 1, 1, 2P]
cos, sin = doubled.cos(), doubled.sin()
sequence_first = (values if values.dim() == 4 else values.unsqueeze(2)).transpose(0, 1).contiguous()
got = fused_apply_mla_rope_for_q(sequence_first, cos, -sin if inverse else sin, values.shape[-1] - width, width)
got = got.transpose(0, 1) if values.dim() == 4 else got.transpose(0, 1).squeeze(2)
"""
