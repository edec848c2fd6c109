"""dsv41-rope: the fused Triton rotary embedding of DeepSeek V4.1 attention, and the suite that proves it bit for bit.

The kernel's public functions are reached from here (``from dsv41_rope import apply_rope_triton``); they are imported
on first use, so that the suite's controller-side modules (``dsv41_rope.report``, ``dsv41_rope.harness``), which import
this package, never import torch.

Subpackages: :mod:`dsv41_rope.kernel` (the kernel, vendorable on its own), :mod:`dsv41_rope.oracle` (the CPU emulation
of eager PyTorch and the float64 truth), :mod:`dsv41_rope.conformance` (the suite), :mod:`dsv41_rope.harness` (which
implementation the suite judges, where it runs), :mod:`dsv41_rope.report` (the ulp-drift report),
:mod:`dsv41_rope.peers` (adapters that put other projects' DeepSeek V4 rotaries behind the suite's contract).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["apply_rope_triton", "apply_rope_triton_", "apply_rope_eager", "calibrate", "settings"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("dsv41_rope.kernel"), name)
    raise AttributeError(f"module 'dsv41_rope' has no attribute {name!r}")
