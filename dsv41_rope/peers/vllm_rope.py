"""vLLM 0.33.0's DeepSeek V4 rotary embedding: ``DeepseekV4ScalingRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py``), which ``build_deepseek_v4_rope``
(``vllm/models/deepseek_v4/common/rope.py``) makes through ``get_rope(..., is_neox_style=False)``.

It rotates the last ``rotary_dim`` channels as interleaved (GPT-J) pairs, takes ``inverse=`` (which negates the sine)
and keeps its ``cos_sin_cache`` in float32: ``[positions, rotary_dim]``, the cosines then the sines. Its
``forward_cuda`` calls ``torch.ops._C.rotary_embedding`` from ``vllm/_C_stable_libtorch.abi3.so``; its
``forward_hip`` calls ``forward_native`` without passing ``inverse`` on. vLLM's DeepSeek V4 attention hands only its
``cos_sin_cache`` to fused kernels that also normalize, quantize or fill the cache, none of them a rotation alone.

The module cannot be loaded by its path alone: it imports ``vllm.platforms`` and ``vllm.utils.flashinfer`` and
subclasses a ``CustomOp`` (``vllm.config``), so it needs the whole installed ``vllm`` and its dependencies, and the
wheel (336 MB, with the compiled ``_C``) is pinned to torch 2.14.0. This adapter imports it where vLLM is installed.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_per_token, rotary_width
from dsv41_rope.peers.loading import Pin, import_installed

__all__ = ["APPLY_ROPE_VLLM_DSV4_REPRO", "VLLM", "apply_rope_vllm_dsv4", "load_deepseek_scaling_rope"]

VLLM = Pin("vllm", "0.33.0")


@functools.cache
def load_deepseek_scaling_rope() -> types.ModuleType:
    """``vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope``, from the installed distribution."""
    return import_installed("vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope", VLLM)


def apply_rope_vllm_dsv4(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """vLLM's ``DeepseekV4ScalingRotaryEmbedding(positions, query, key=None, inverse=...)`` on a copy of ``values``.

    The module is made as ``build_deepseek_v4_rope`` makes a sliding-window layer's (no YaRN: ``scaling_factor``
    1.0, ``mscale`` 0), then its ``cos_sin_cache`` is replaced by the angles' table, built as its
    ``_compute_cos_sin_cache`` builds it: ``cat((freqs.cos(), freqs.sin()), -1)`` in float32, one row per token,
    indexed by ``positions``. Queries are ``[tokens, heads, head_size]``, one head for 3-D values (its native path
    inserts the tables' head dimension at -2, which a 2-D query would broadcast against its tokens).
    The conjugate is its ``inverse=``. On CUDA the op works in place (the copy is the result); natively it returns
    a new tensor.
    """
    module = load_deepseek_scaling_rope()
    tokens = values.shape[0] * values.shape[1]
    rope = module.DeepseekV4ScalingRotaryEmbedding(
        values.shape[-1],
        rotary_width(angles),
        tokens,
        10000.0,
        False,
        1.0,
        values.dtype,
        mscale=0,
        mscale_all_dim=0,
    )
    table = angles_per_token(values, angles).reshape(tokens, -1)
    rope.cos_sin_cache = torch.cat((table.cos(), table.sin()), dim=-1)
    heads = values.shape[2] if values.dim() == 4 else 1
    query = values.reshape(tokens, heads, values.shape[-1]).clone(memory_format=torch.contiguous_format)
    positions = torch.arange(tokens, device=values.device)
    rotated, _ = rope(positions, query, None, inverse=inverse)
    return rotated.view(values.shape)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got. Only checked
# against a fake (vLLM cannot be installed beside this project's torch), as the adapter is.
APPLY_ROPE_VLLM_DSV4_REPRO = """\
from vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope import DeepseekV4ScalingRotaryEmbedding
tokens, width = values.shape[0] * values.shape[1], 2 * angles.shape[-1]
# as build_deepseek_v4_rope makes a sliding-window layer's (no YaRN), then the angles' table as its cache
rope = DeepseekV4ScalingRotaryEmbedding(values.shape[-1], width, tokens, 10000.0, False, 1.0, values.dtype,
                                        mscale=0, mscale_all_dim=0)
table = angles.expand(values.shape[0], values.shape[1], -1).reshape(tokens, -1)
rope.cos_sin_cache = torch.cat((table.cos(), table.sin()), dim=-1)  # float32 [positions, 2P]: cosines, then sines
heads = values.shape[2] if values.dim() == 4 else 1
query = values.reshape(tokens, heads, values.shape[-1]).clone(memory_format=torch.contiguous_format)  # CUDA: in place
got, _ = rope(torch.arange(tokens, device=values.device), query, None, inverse=inverse)
got = got.view(values.shape)
"""
