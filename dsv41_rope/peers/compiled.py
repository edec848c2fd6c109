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

__all__ = ["RECOMPILE_LIMIT", "apply_rope_compiled", "apply_rope_compiled_fullgraph", "compiled_eager"]

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
