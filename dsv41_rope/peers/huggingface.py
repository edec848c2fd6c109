"""Hugging Face transformers' DeepSeek V4 rotary: ``apply_rotary_pos_emb`` of ``models/deepseek_v4``.

DeepSeek V4 first ships in transformers 5.8.0 (5.7.0 has no ``models/deepseek_v4``); its ``rotate_half``,
``apply_rotary_pos_emb`` and ``DeepseekV4RotaryEmbedding.forward`` are the same text in 5.8.0 and 5.17.0, the
version the GPU runner has installed, which is pinned. Its pairs are interleaved: ``rotate_half`` there is
``stack((-x[1::2], x[0::2]), -1).flatten(-2)`` on ``cos``/``sin`` widened by ``repeat_interleave(2)``, not
Llama's halves.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_as_3d
from dsv41_rope.peers.loading import Pin, import_installed

__all__ = ["APPLY_ROPE_HF_DSV4_REPRO", "TRANSFORMERS", "apply_rope_hf_dsv4", "load_modeling"]

TRANSFORMERS = Pin("transformers", "5.17.0")


@functools.cache
def load_modeling() -> types.ModuleType:
    """``transformers.models.deepseek_v4.modeling_deepseek_v4``, from the installed distribution."""
    return import_installed("transformers.models.deepseek_v4.modeling_deepseek_v4", TRANSFORMERS)


def apply_rope_hf_dsv4(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """transformers' ``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)`` as ``DeepseekV4Attention`` calls it.

    Tables: ``DeepseekV4RotaryEmbedding.forward`` returns half-width ``cos``/``sin`` (``[B, S, P]``, one per pair,
    no duplication): ``freqs.cos()``/``.sin()`` in float32, times ``attention_scaling`` (1.0 for the default rope;
    YaRN's magnitude factor is the model's, not the rotation's, and is left out), cast to ``x.dtype``, the
    activations' dtype (``values``' here). Layout: the attention rotates ``[B, H, S, D]`` and the peer inserts the
    head dimension of the tables at ``unsqueeze_dim=1``, so 4-D values go in transposed and come back transposed;
    3-D values get a head dimension of 1 there (its compressors' ``unsqueeze(1)`` ... ``squeeze(1)``). The
    conjugate is the model's inverse call site's: ``(cos, -sin)``.
    """
    modeling = load_modeling()
    table = angles_as_3d(angles)
    cos, sin = table.cos().to(values.dtype), table.sin().to(values.dtype)
    if inverse:
        sin = -sin
    # [B, S, H, C] -> [B, H, S, C] as the attention's queries; [B, S, C] -> [B, 1, S, C] as its compressed keys
    heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)
    rotated = modeling.apply_rotary_pos_emb(heads_first, cos, sin)
    return rotated.transpose(1, 2) if values.dim() == 4 else rotated.squeeze(1)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_HF_DSV4_REPRO = """\
from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb
cos, sin = angles.cos().to(values.dtype), angles.sin().to(values.dtype)  # as DeepseekV4RotaryEmbedding: x's dtype
heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)  # [B, H, S, C] as the attention's
got = apply_rotary_pos_emb(heads_first, cos, -sin if inverse else sin)
got = got.transpose(1, 2) if values.dim() == 4 else got.squeeze(1)
"""
