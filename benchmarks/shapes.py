"""The tensors DeepSeek V4.1 attention rotates, as the benchmarks build them."""

from __future__ import annotations

import dataclasses

import torch

PAIRS = 32
# The dtypes the benchmarks take on their command lines (--dtypes bf16,fp32).
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class Case:
    """One tensor that DeepSeek V4.1 attention rotates.

    Attributes:
        name: the row label.
        shape: logical shape, ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``.
        transposed: the values arrive as ``[batch, heads, sequence, channels]`` storage viewed through
            ``transpose(1, 2)``, as the attention output does before the inverse rotation.
        inverse: rotate by the conjugate (``inverse=True``).
    """

    name: str
    shape: tuple[int, ...]
    transposed: bool = False
    inverse: bool = False


# Most important first, so that a run cut short by its time budget still holds the rows the targets name.
CASES = {
    case.name: case
    for case in (
        Case("query", (1, 4096, 64, 512)),
        Case("window_kv", (1, 4096, 512)),
        Case("inverse_output", (1, 4096, 64, 512), transposed=True, inverse=True),
        Case("index_query", (1, 4096, 32, 128)),
        Case("compressed_kv", (1, 2048, 512)),
        Case("index_keys", (1, 1024, 128)),
        Case("large_2gb", (2, 8192, 128, 512)),
    )
}
QUICK_CASES = ("query", "window_kv")


def make_values(case: Case, dtype: torch.dtype, device: str = "cuda") -> torch.Tensor:
    """Random values in the case's shape and layout; random, because zeros can hide unwritten outputs. On the
    ``meta`` device: the layout alone (``tools.build_cost``)."""
    if case.transposed:
        batch, sequence, heads, channels = case.shape
        return torch.randn(batch, heads, sequence, channels, dtype=dtype, device=device).transpose(1, 2)
    return torch.randn(case.shape, dtype=dtype, device=device)


def make_angles(sequence: int) -> torch.Tensor:
    """Angles ``[1, sequence, PAIRS]`` float32 as RoPE makes them: position times a geometric frequency."""
    positions = torch.arange(sequence, dtype=torch.float32, device="cuda")
    frequencies = 10000.0 ** (-torch.arange(PAIRS, dtype=torch.float32, device="cuda") / PAIRS)
    return torch.outer(positions, frequencies).unsqueeze(0)
