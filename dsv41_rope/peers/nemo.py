"""NeMo Automodel 0.7.0: its released fused kernel ``apply_rope_triton`` and its DeepSeek V4 model's eager rotary.

Both are imported from the installed ``nemo-automodel``. The kernel's module is light itself (torch, triton and
``nemo_automodel.shared.import_utils``), but its package's ``nemo_automodel/components/models/common/__init__.py``
imports ``common/utils.py``, which imports ``transformers``: the import chain needs ``transformers`` installed (the
GPU runner's 5.17.0 does; 0.7.0 pins 5.18.0 for its models). The DeepSeek V4 layers import the same package.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_as_3d, angles_per_token, rotary_width
from dsv41_rope.peers.loading import Pin, import_installed

__all__ = [
    "APPLY_ROPE_NEMO_DSV4_REPRO",
    "APPLY_ROPE_NEMO_TRITON_REPRO",
    "NEMO_AUTOMODEL",
    "apply_rope_nemo_dsv4",
    "apply_rope_nemo_triton",
    "load_dsv4_layers",
    "load_rope_triton",
]

NEMO_AUTOMODEL = Pin("nemo-automodel", "0.7.0")


@functools.cache
def load_rope_triton() -> types.ModuleType:
    """``nemo_automodel.components.models.common.rope_triton``, from the installed distribution."""
    return import_installed("nemo_automodel.components.models.common.rope_triton", NEMO_AUTOMODEL)


@functools.cache
def load_dsv4_layers() -> types.ModuleType:
    """``nemo_automodel.components.models.deepseek_v4.layers``, from the installed distribution."""
    return import_installed("nemo_automodel.components.models.deepseek_v4.layers", NEMO_AUTOMODEL)


def apply_rope_nemo_triton(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """NeMo Automodel's ``apply_rope_triton(values, angles, *, inverse=False)``, the contract's own signature.

    Its frequencies are its own ``torch.polar`` of the float32 angles. The angles are expanded (a view) to
    ``[B, S, P]``: it raises on any other shape (it checks ``angles.shape[:2] == values.shape[:2]``). The conjugate is
    its ``inverse=``. Off CUDA (the interpreter included) it runs its eager fallback, not its Triton kernel.
    """
    peer = load_rope_triton()
    return peer.apply_rope_triton(values, angles_per_token(values, angles), inverse=inverse)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_NEMO_TRITON_REPRO = """\
from nemo_automodel.components.models.common.rope_triton import apply_rope_triton
per_token = angles.expand(values.shape[0], values.shape[1], -1)  # it rejects broadcast angles
got = apply_rope_triton(values, per_token, inverse=inverse)
"""


def apply_rope_nemo_dsv4(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """NeMo Automodel's DeepSeek V4 eager rotary, ``_apply_partial_rope_interleaved(x, cos, sin, rope_head_dim)``
    (``deepseek_v4/layers.py``), called as its attention calls it.

    Tables: ``DeepseekV4RotaryEmbedding.forward`` duplicates the angles (``cat((freqs, freqs), -1)``, width ``2P``;
    the peer reads the first half), takes ``.cos()``/``.sin()`` in float32 and casts them to the activations' dtype
    (``x.dtype``: ``values``' dtype here), after a multiply by ``attention_scaling``, 1.0 for both of DSV4's ropes.
    Layout: the model rotates queries as ``[B, H, S, D]`` with tables ``[B, S, 2P]`` (the peer inserts the head
    dimension at 1), so 4-D values go in transposed and come back transposed, and 3-D values get a head dimension
    of 1 there, as its compressor's ``unsqueeze(1)``; the tables keep three dimensions (the peer would insert its
    head dimension in the wrong place of a 1-D or 2-D table). The conjugate is the model's inverse call site's:
    ``(cos, -sin)``.
    """
    layers = load_dsv4_layers()
    doubled = torch.cat((angles_as_3d(angles),) * 2, dim=-1)
    cos, sin = doubled.cos().to(values.dtype), doubled.sin().to(values.dtype)
    if inverse:
        sin = -sin
    # [B, S, H, C] -> [B, H, S, C] as the model's queries; [B, S, C] -> [B, 1, S, C] as its compressed keys
    heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)
    rotated = layers._apply_partial_rope_interleaved(heads_first, cos, sin, rotary_width(angles))
    return rotated.transpose(1, 2) if values.dim() == 4 else rotated.squeeze(1)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got.
APPLY_ROPE_NEMO_DSV4_REPRO = """\
from nemo_automodel.components.models.deepseek_v4.layers import _apply_partial_rope_interleaved
doubled = torch.cat((angles, angles), dim=-1)  # DeepseekV4RotaryEmbedding: cat((freqs, freqs)), cast to x's dtype
cos, sin = doubled.cos().to(values.dtype), doubled.sin().to(values.dtype)
heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)  # [B, H, S, C] as the model's
got = _apply_partial_rope_interleaved(heads_first, cos, -sin if inverse else sin, 2 * angles.shape[-1])
got = got.transpose(1, 2) if values.dim() == 4 else got.squeeze(1)
"""
