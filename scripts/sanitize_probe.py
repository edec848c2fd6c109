"""Small edge cases through the fused forward, backward and in-place op, for ``compute-sanitizer --tool memcheck``.

Run from the repository root:
``compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m scripts.sanitize_probe``.
Every conformance layout and edge shape runs forward, inverse, backward and in place at its CPU size (the same shapes
the interpreter checks), with cos/sin computed in the kernel and read from torch.polar's table, so memcheck sees the
masks at every tile boundary: odd channel counts, one pair, all channels rotary, two channels, sequence 1, padded
rows, channel-strided and transposed views, per-batch angles.
"""

from __future__ import annotations

import os
import sys

import torch

from conformance.cases import SHAPES, Case, make_angles, make_values
from impl.rope_triton import FREQUENCIES_VARIABLE, apply_rope_triton, apply_rope_triton_


def main() -> int:
    device = torch.device("cuda")
    count = 0
    for source in ("in-kernel", "table"):
        os.environ[FREQUENCIES_VARIABLE] = source
        for shape_name, shape in SHAPES.items():
            for layout in shape.layouts:
                for per_batch in (False, True) if shape.cpu[0] > 1 else (False,):
                    for dtype_name in ("bf16", "fp32"):
                        # The CPU sizes (small): small tensors keep memcheck fast and put tile edges everywhere.
                        case = Case(dtype_name, shape_name, layout, False, "special", per_batch, small=True)
                        values, angles = make_values(case, device), make_angles(case, device)
                        leaf = values.detach().requires_grad_(True)
                        output = apply_rope_triton(leaf, angles, False)
                        output.backward(torch.ones_like(output))
                        apply_rope_triton(values, angles, True)
                        apply_rope_triton_(values, angles, inverse=True)
                        count += 1
    torch.cuda.synchronize()
    print(f"sanitize_probe: {count} cases forward, inverse, backward and in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
