"""SGLang 0.5.23's DeepSeek V4 Triton rotary: the three kernels behind ``apply_rotary_emb_triton`` in
``sglang/kernels/ops/attention/dsv4/rope.py``, one adapter each.

``apply_rotary_emb_triton(x, freqs_cis, positions=None, inverse=False)`` rotates ``x`` (``[tokens, rope_dim]`` or
``[tokens, heads, rope_dim]``, the rotary slice of the model's tensor) in place by ``freqs_cis[positions]``
(complex64, ``[positions, rope_dim // 2]``) and picks its kernel by a module-level switch, ``set_batched_rope``:

* off (the default; the XPU path): ``apply_rotary_emb_triton_kernel``, one program per token (and head);
* on (DeepSeek V4 turns it on on ROCm): ``apply_rotary_emb_triton_kernel_batched`` for 2-D ``x`` and
  ``apply_rotary_emb_flat_kernel`` for 3-D ``x``. The flat kernel walks ``next_power_of_2(rope_dim)`` columns
  under the row mask alone: past a rotary width that is not a power of two it reads, rotates and writes the next
  row's leading channels (sglang#35096).

The model (``srt/models/deepseek_v4.py``) reaches these through ``fused_rope_inplace`` on ROCm and XPU; on CUDA that
function runs a JIT-compiled CUDA kernel instead (``jit_kernel/deepseek_v4``), not adapted here. The module is
loaded by its path from the installed distribution: importing ``sglang`` runs the server stack's ``__init__``,
while the file itself imports only torch and triton.
"""

from __future__ import annotations

import functools
import types

import torch

from dsv41_rope.peers.broadcast import angles_per_token, rotary_width
from dsv41_rope.peers.loading import Pin, load_distribution_file

__all__ = [
    "APPLY_ROPE_SGLANG_BATCHED_REPRO",
    "APPLY_ROPE_SGLANG_FLAT_REPRO",
    "APPLY_ROPE_SGLANG_PER_TOKEN_REPRO",
    "ROPE_FILE",
    "SGLANG",
    "apply_rope_sglang_batched",
    "apply_rope_sglang_flat",
    "apply_rope_sglang_per_token",
    "load_dsv4_rope",
]

SGLANG = Pin("sglang", "0.5.23")
ROPE_FILE = "sglang/kernels/ops/attention/dsv4/rope.py"


@functools.cache
def load_dsv4_rope() -> types.ModuleType:
    """SGLang's ``dsv4/rope.py``, loaded by path from the installed distribution (no ``sglang/__init__``)."""
    return load_distribution_file(SGLANG, ROPE_FILE, "dsv41_rope_peer_sglang_dsv4_rope")


def _rotate_copy(
    values: torch.Tensor, angles: torch.Tensor, inverse: bool, *, batched: bool, rows: str
) -> torch.Tensor:
    """A copy of ``values`` whose rotary slice SGLang's ``apply_rotary_emb_triton`` rotated in place.

    ``rows`` is how the slice is handed over: ``"tokens"`` as the model does (``[tokens, rope_dim]`` for 3-D values,
    ``[tokens, heads, rope_dim]`` for 4-D), ``"heads"`` always with a heads dimension (``[tokens, 1, rope_dim]`` for
    3-D values), ``"flat"`` always 2-D (``[tokens * heads, rope_dim]``, a position per row).
    """
    rope = load_dsv4_rope()
    width = rotary_width(angles)
    tokens = values.shape[0] * values.shape[1]
    heads = values.shape[2] if values.dim() == 4 else 1
    channels = values.shape[-1]
    # The peer works in place, so it gets a copy, in a buffer that runs on past the tensor: the flat kernel's tile
    # (the next power of two of the width, at least 2) overruns each row by less than max(width, 2) elements, and
    # the last row's overrun lands there, not in another allocation (what it writes inside the tensor stays).
    spare = max(width, 2)
    buffer = values.new_empty(values.numel() + spare)
    output = buffer[: values.numel()].view(values.shape)
    output.copy_(values)
    if rows == "flat":
        shape: tuple[int, ...] = (tokens * heads, channels)
    elif rows == "heads" or values.dim() == 4:
        shape = (tokens, heads, channels)
    else:
        shape = (tokens, channels)
    rotary = output.view(shape)[..., channels - width :]
    # precompute_freqs_cis: torch.polar of the float32 angles, complex64, one row per position; the flat kernel
    # reads the table past its rows alike, so it too lies in a buffer with a spare tail (zeros)
    table = angles_per_token(values, angles).reshape(tokens, -1)
    frequencies = torch.polar(torch.ones_like(table), table)
    freqs_buffer = frequencies.new_zeros(frequencies.numel() + spare)
    freqs_cis = freqs_buffer[: frequencies.numel()].view(frequencies.shape).copy_(frequencies)
    positions = torch.arange(tokens, device=values.device)
    if rows == "flat":
        positions = positions.repeat_interleave(heads)
    previous = rope._USE_BATCHED_ROPE
    rope.set_batched_rope(batched)
    try:
        rope.apply_rotary_emb_triton(rotary, freqs_cis, positions=positions, inverse=inverse)
    finally:
        rope.set_batched_rope(previous)
    return output


# The first lines of each kernel's standalone reproduction (registry's convention): the file, by its path, as
# load_dsv4_rope loads it; then, for the kernels that stay inside their rows, a contiguous copy and the table.
_LOAD_FILE = """\
import importlib.metadata, importlib.util
path = importlib.metadata.distribution("sglang").locate_file("sglang/kernels/ops/attention/dsv4/rope.py")
spec = importlib.util.spec_from_file_location("sglang_dsv4_rope", path)  # by path: sglang/__init__ starts a server
spec.loader.exec_module(rope := importlib.util.module_from_spec(spec))
"""
_COPY_AND_TABLE = """\
got = values.clone(memory_format=torch.contiguous_format)  # the kernel works in place
table = angles.expand(*values.shape[:2], -1).flatten(0, 1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # precompute_freqs_cis: complex64, one row per position
"""


def apply_rope_sglang_per_token(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """SGLang's ``apply_rotary_emb_triton_kernel`` (batched switch off), handed the rotary slice as the model hands
    it: ``[tokens, heads, rope_dim]`` (``[tokens, rope_dim]`` for one head), ``freqs_cis`` complex64 from
    ``torch.polar`` with ``positions`` indexing it; the conjugate is its ``inverse=``. No backward."""
    return _rotate_copy(values, angles, inverse, batched=False, rows="tokens")


APPLY_ROPE_SGLANG_PER_TOKEN_REPRO = (
    _LOAD_FILE
    + _COPY_AND_TABLE
    + """\
rows = got.view(len(freqs_cis), *values.shape[2:])[..., values.shape[-1] - 2 * angles.shape[-1] :]
rope.set_batched_rope(False)  # the default: apply_rotary_emb_triton_kernel
rope.apply_rotary_emb_triton(rows, freqs_cis, positions=torch.arange(len(rows), device=values.device), inverse=inverse)
"""
)


def apply_rope_sglang_batched(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """SGLang's ``apply_rotary_emb_triton_kernel_batched`` (batched switch on, 2-D ``x``): the rotary slice as
    ``[tokens * heads, rope_dim]`` rows, each with its token's position; otherwise as the per-token adapter."""
    return _rotate_copy(values, angles, inverse, batched=True, rows="flat")


APPLY_ROPE_SGLANG_BATCHED_REPRO = (
    _LOAD_FILE
    + _COPY_AND_TABLE
    + """\
rows = got.view(-1, values.shape[-1])[..., values.shape[-1] - 2 * angles.shape[-1] :]  # 2-D x: one row per head
positions = torch.arange(len(freqs_cis), device=values.device).repeat_interleave(len(rows) // len(freqs_cis))
rope.set_batched_rope(True)  # 2-D x: apply_rotary_emb_triton_kernel_batched
rope.apply_rotary_emb_triton(rows, freqs_cis, positions=positions, inverse=inverse)
"""
)


def apply_rope_sglang_flat(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """SGLang's ``apply_rotary_emb_flat_kernel`` (batched switch on, 3-D ``x``): the rotary slice as
    ``[tokens, heads, rope_dim]`` (``[tokens, 1, rope_dim]`` for 3-D values); otherwise as the per-token adapter.
    For a rotary width that is not a power of two the kernel overwrites the next row's leading channels, which the
    result shows. With zero pairs its unmasked load goes through the empty slice's pointer, which PyTorch gives as
    null: the process dies (on a GPU, the CUDA context)."""
    return _rotate_copy(values, angles, inverse, batched=True, rows="heads")


APPLY_ROPE_SGLANG_FLAT_REPRO = (
    _LOAD_FILE
    + """\
# the copy (it works in place) and the table each have a spare row after them: the kernel's tile runs past a row
got = values.new_empty(values.numel() + values.shape[-1])[: values.numel()].view(values.shape).copy_(values)
table = angles.expand(*values.shape[:2], -1).flatten(0, 1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # precompute_freqs_cis: complex64, one row per position
freqs_cis = torch.cat((freqs_cis, torch.zeros_like(freqs_cis[:1])))[:-1]  # zeros: the last token's heads read them
rows = got.view(len(freqs_cis), -1, values.shape[-1])[..., values.shape[-1] - 2 * angles.shape[-1] :]
rope.set_batched_rope(True)  # 3-D x: apply_rotary_emb_flat_kernel
rope.apply_rotary_emb_triton(rows, freqs_cis, positions=torch.arange(len(rows), device=values.device), inverse=inverse)
"""
)
