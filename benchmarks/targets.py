"""The speed targets a ``benchmarks.run`` row is held to (docs/benchmarks.md), each with its value and whether it
passed."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.common import COLD_FROM_BYTES
from benchmarks.shapes import Case

__all__ = ["evaluate_targets", "target"]


def target(name: str, comparison: str, bound: float, value: float | None) -> dict[str, Any]:
    """One target: whether ``value`` is ``<=`` or ``>`` (``comparison``) ``bound``; ``passed`` is None without a
    value."""
    passed = None if value is None else value <= bound if comparison == "<=" else value > bound
    return {"target": name, "comparison": comparison, "bound": bound, "value": value, "passed": passed}


def evaluate_targets(case: Case, dtype: torch.dtype, op: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The H200 targets that apply to this row, each with its value and whether it passed (None: no value)."""
    checks = []
    copy_bound = {"query": 1.05, "inverse_output": 1.05, "large_2gb": 1.05, "index_query": 1.10}.get(case.name)
    if case.name in ("window_kv", "compressed_kv", "index_keys") and dtype == torch.bfloat16:
        copy_bound = 1.5
    # Against a cold-L2 copy from 32 MiB (such tensors do not stay in the L2 between calls), a warm one below.
    mode = "cold" if row["tensor_bytes"] >= COLD_FROM_BYTES else "warm"
    if op in ("forward", "backward") and copy_bound is not None:
        checks.append(target(f"fused/copy {mode}", "<=", copy_bound, row["ratio_to_copy"][mode]))
    for mode in ("warm", "cold"):
        checks.append(target(f"eager/fused {mode}", ">", 1.0, row["speedup_vs_eager"][mode]))
        checks.append(target(f"compile/fused {mode}", ">", 1.0, row["speedup_vs_compile"][mode]))
    return checks
