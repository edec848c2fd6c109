"""Small edge cases through every entry point of the kernel, for ``compute-sanitizer --tool memcheck`` on a GPU.

From the repository root (``tools/gpu_gate.sh`` runs it where ``compute-sanitizer`` is installed)::

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tools.memcheck

Every conformance layout and edge shape runs forward, inverse, backward and in place at its CPU size, with cos/sin
computed in the kernel and read from torch.polar's table, so that memcheck sees the masks at every tile boundary: odd
channel counts, one pair, all channels rotary, two channels, sequence 1, padded rows, channel-strided and transposed
views, per-batch angles. Small tensors keep memcheck fast and put tile edges everywhere. The bits themselves are the
conformance suite's to check; this only needs every access in bounds.
"""

from __future__ import annotations

import os
import sys

import torch

from dsv41_rope.conformance.cases import SHAPES, Case, make_angles, make_values
from dsv41_rope.kernel import FREQUENCIES_VARIABLE, apply_rope_triton, apply_rope_triton_

__all__ = ["main", "run_cases"]


def run_cases(device: torch.device) -> int:
    """Runs every case on ``device`` (forward with its backward, inverse, in place), both frequency sources.

    Returns:
        How many cases ran.
    """
    count = 0
    for source in ("in-kernel", "table"):
        os.environ[FREQUENCIES_VARIABLE] = source
        for shape_name, shape in SHAPES.items():
            for layout in shape.layouts:
                for per_batch in (False, True) if shape.cpu[0] > 1 else (False,):
                    for dtype_name in ("bf16", "fp32"):
                        case = Case(dtype_name, shape_name, layout, False, "special", per_batch, small=True)
                        values, angles = make_values(case, device), make_angles(case, device)
                        leaf = values.detach().requires_grad_(True)
                        output = apply_rope_triton(leaf, angles, inverse=False)
                        output.backward(torch.ones_like(output))
                        apply_rope_triton(values, angles, inverse=True)
                        apply_rope_triton_(values, angles, inverse=True)
                        count += 1
    return count


def main() -> int:
    """Runs the cases on ``cuda``; returns 0, or 2 without a CUDA device (``compute-sanitizer`` sets the exit status
    on an error it finds)."""
    if not torch.cuda.is_available():
        print("tools.memcheck: needs a CUDA device", file=sys.stderr)
        return 2
    count = run_cases(torch.device("cuda"))
    torch.cuda.synchronize()
    print(f"tools.memcheck: {count} cases forward, inverse, backward and in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
