"""Small edge cases through the fused forward and backward, for ``compute-sanitizer --tool memcheck`` on a GPU.

Run from the repository root:
``compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_probe.py``.
Every conformance layout and edge shape runs once forward, inverse and backward at its CPU size (the same shapes
the interpreter checks), so memcheck sees the masks at every tile boundary: odd channel counts, one pair, all
channels rotary, two channels, sequence 1, padded rows, channel-strided and transposed views, per-batch angles.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.cases import SHAPES, Case, make_angles, make_values  # noqa: E402
from impl.rope_triton import apply_rope_triton  # noqa: E402


def main() -> int:
    device = torch.device("cuda")
    count = 0
    for shape_name, shape in SHAPES.items():
        for layout in shape.layouts:
            for per_batch in (False, True) if shape.cpu[0] > 1 else (False,):
                for dtype_name in ("bf16", "fp32"):
                    case = Case(dtype_name, shape_name, layout, False, "special", per_batch_angles=per_batch)
                    # The CPU sizes: small tensors keep memcheck fast and put tile edges everywhere.
                    values = make_values(case, torch.device("cpu")).to(device)
                    angles = make_angles(case, torch.device("cpu")).to(device)
                    leaf = values.detach().requires_grad_(True)
                    output = apply_rope_triton(leaf, angles, False)
                    output.backward(torch.ones_like(output))
                    apply_rope_triton(values, angles, True)
                    count += 1
    torch.cuda.synchronize()
    print(f"sanitize_probe: {count} cases forward, inverse and backward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
