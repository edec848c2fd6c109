"""``torch.compile`` of the eager reference: what a user gets who compiles Automodel's eager ``_apply_rope`` instead
of calling a kernel (the eager reference itself, ``dsv41_rope.kernel:apply_rope_eager``, is the control).

With ``fullgraph=True`` it does not compile: ``apply_rope_eager`` asks ``pairs.storage_offset()`` (its guard for a
rotary block at an odd offset, a step Automodel's ``_apply_rope`` lacks), which dynamo cannot put in a graph
("torch.* op returned non-Tensor"), so every call raises ``torch._dynamo.exc.Unsupported``. The default
(``fullgraph=False``) breaks the graph there and compiles the rest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from dsv41_rope.kernel import apply_rope_eager

__all__ = [
    "APPLY_ROPE_COMPILED_FULLGRAPH_REPRO",
    "APPLY_ROPE_COMPILED_REPRO",
    "APPLY_ROPE_EAGER_REPRO",
    "RECOMPILE_LIMIT",
    "apply_rope_compiled",
    "apply_rope_compiled_fullgraph",
    "compiled_eager",
]

# Enough recompiles for every shape, dtype and layout of a conformance run; dynamo's default (8) would leave all
# later specializations running eagerly, unseen.
RECOMPILE_LIMIT = 100_000


@functools.cache
def compiled_eager(fullgraph: bool) -> Callable[..., torch.Tensor]:
    """``torch.compile(apply_rope_eager, fullgraph=fullgraph)`` (inductor, default dynamic shapes), made once."""
    return torch.compile(apply_rope_eager, fullgraph=fullgraph)


def _call_compiled(fullgraph: bool, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
    """Calls the compiled reference with the recompile limit lifted and reaching it an error: past dynamo's limit a
    compiled function runs its Python eagerly without a word, and every call must be judged compiled."""
    with torch._dynamo.config.patch(
        recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True
    ):
        return compiled_eager(fullgraph)(values, angles, inverse=inverse)


def apply_rope_compiled_fullgraph(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """``dsv41_rope.kernel.apply_rope_eager`` compiled with ``fullgraph=True``: ``torch.polar`` tables and the
    conjugate by ``.conj()``, as the eager path. Raises ``torch._dynamo.exc.Unsupported`` (see the module)."""
    return _call_compiled(True, values, angles, inverse)


def apply_rope_compiled(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """``dsv41_rope.kernel.apply_rope_eager`` compiled with the default ``fullgraph=False``: one graph break, at its
    ``storage_offset()`` guard; the rotation itself is compiled."""
    return _call_compiled(False, values, angles, inverse)


# The lines of a standalone reproduction (registry's convention): values, angles (3-D), inverse -> got. The eager
# reference, dsv41_rope.kernel.apply_rope_eager, written out (a reproduction imports only torch), step for step.
_EAGER_REFERENCE = """\
def rope(values, angles, inverse):  # Automodel's _apply_rope (DeepSeek V4.1), step for step
    pairs = values[..., -2 * angles.shape[-1] :].float().unflatten(-1, (-1, 2)).contiguous()
    if pairs.storage_offset() % 2:  # view_as_complex needs an even offset (under torch.compile: a graph break)
        pairs = pairs.clone(memory_format=torch.contiguous_format)
    frequencies = torch.polar(torch.ones_like(angles), angles)
    frequencies = frequencies.unsqueeze(2) if values.dim() == 4 else frequencies
    rotated = torch.view_as_complex(pairs) * (frequencies.conj() if inverse else frequencies)
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., -2 * angles.shape[-1] :] = torch.view_as_real(rotated).flatten(-2).to(values.dtype)
    return output
"""
APPLY_ROPE_COMPILED_FULLGRAPH_REPRO = (
    _EAGER_REFERENCE + "got = torch.compile(rope, fullgraph=True)(values, angles, inverse)  # raises Unsupported\n"
)
APPLY_ROPE_COMPILED_REPRO = _EAGER_REFERENCE + "got = torch.compile(rope)(values, angles, inverse)\n"
# dsv41_rope.kernel:apply_rope_eager's (the control), here: the kernel carries no reproduction text
APPLY_ROPE_EAGER_REPRO = _EAGER_REFERENCE + "got = rope(values, angles, inverse)\n"
