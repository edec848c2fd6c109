"""Which FMA contraction does PyTorch's CUDA complex64 multiply use, per kernel path and per element?

The kernel and the oracle follow ``real = fma(a, c, -(b*d))``, ``imag = fma(a, d, b*c)`` (the first product fused),
measured on the H200 on the large, contiguous DeepSeek shapes. A kernel compiled by nvcc is one instantiation per
code path, though: PyTorch's vectorized elementwise loop, its unrolled loop for a tensor's tail, and the strided
loop for non-contiguous or broadcast operands are separate code and may contract ``a*c - b*d`` differently. This
probe multiplies complex64 tensors of many sizes and layouts on the GPU and classifies every result against the
candidate patterns, computed exactly on the CPU (``oracle.fma``):

* ``first-fused``: real ``fma(a, c, -(b*d))``, imag ``fma(a, d, b*c)`` (the model);
* ``second-fused``: real ``fma(-b, d, a*c)``, imag ``fma(b, c, a*d)``;
* ``mixed``: real first-fused, imag second-fused (the stand-alone nvcc replica's pattern), and the reverse;
* ``unfused``: both products rounded, then added.

For each size and layout it prints how many elements each pattern explains (an element can match several) and the
first and last indices that the model does not explain, so a tail-only deviation shows as indices near the end.
Run on a CUDA machine from the repository root: ``python3 scripts/eager_contraction_probe.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from oracle.fma import fma32, multiply32

SIZES = (
    1,
    3,
    7,
    100,
    127,
    511,
    512,
    513,
    1000,
    1023,
    1024,
    1025,
    2047,
    2048,
    2049,
    4095,
    4096,
    4099,
    8193,
    65541,
    1 << 20,
)
# The eager RoPE itself (FP32 values, so the output and gradient bits are the complex multiply's), on the edge
# shapes of the conformance suite and two full-size controls: (name, values shape, pairs, layout).
ROPE_SHAPES = (
    ("sequence1", (2, 1, 3, 64), 32, "contiguous"),
    ("batch3", (3, 7, 2, 96), 16, "contiguous"),
    ("batch3-transposed", (3, 7, 2, 96), 16, "transposed"),
    ("odd-channels", (2, 5, 3, 37), 5, "contiguous"),
    ("pairs1", (1, 6, 2, 64), 1, "contiguous"),
    ("all-rotary", (1, 6, 2, 64), 32, "contiguous"),
    ("channels2", (2, 5, 2), 1, "contiguous"),
    ("window-kv", (1, 4096, 512), 32, "contiguous"),
    ("index-query", (1, 4096, 32, 128), 32, "contiguous"),
)


def patterns(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(real, imag) of (a + ib)(c + id) under each contraction, exactly rounded as the GPU would."""
    ac, bd, ad, bc = multiply32(a, c), multiply32(b, d), multiply32(a, d), multiply32(b, c)
    first = (fma32(a, c, -bd), fma32(a, d, bc))
    second = (fma32(-b, d, ac), fma32(b, c, ad))
    return {
        "first-fused": first,
        "second-fused": second,
        "real-first-imag-second": (first[0], second[1]),
        "real-second-imag-first": (second[0], first[1]),
        "unfused": ((ac - bd).astype(np.float32), (ad + bc).astype(np.float32)),
    }


def classify(product: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> dict:
    """Per-pattern match counts for ``product = left * right`` (broadcast), all complex64, on the CPU."""
    left, right = torch.broadcast_tensors(left, right)
    a, b = left.real.contiguous().numpy(), left.imag.contiguous().numpy()
    c, d = right.real.contiguous().numpy(), right.imag.contiguous().numpy()
    real = product.real.contiguous().numpy().view(np.uint32).reshape(-1)
    imag = product.imag.contiguous().numpy().view(np.uint32).reshape(-1)
    counts, model_misses, last_misses = {}, None, {}
    for name, (expected_real, expected_imag) in patterns(a, b, c, d).items():
        same = (expected_real.view(np.uint32).reshape(-1) == real) & (expected_imag.view(np.uint32).reshape(-1) == imag)
        counts[name] = int(same.sum())
        misses = np.flatnonzero(~same)
        last_misses[name] = int(misses[-1]) if misses.size else None
        if name == "first-fused":
            model_misses = np.flatnonzero(~same)
    return {
        "elements": int(real.size),
        "matches": counts,
        "model_misses": int(model_misses.size),
        "first_miss": int(model_misses[0]) if model_misses.size else None,
        "last_miss": int(model_misses[-1]) if model_misses.size else None,
        # A tail handled by another code path shows as: the model wrong only from some index on, and another
        # pattern wrong only before it.
        "pattern_last_miss": last_misses,
        "model_miss_sample": model_misses[:: max(1, model_misses.size // 24)][:24].tolist(),
    }


def layouts(size: int, generator: torch.Generator) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Operand pairs that take different PyTorch kernel paths: contiguous, strided, broadcast."""

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn((*shape, 2), generator=generator, device="cuda").view(torch.complex64).squeeze(-1)

    wide = draw(size, 2)
    return {
        "contiguous": (draw(size), draw(size)),
        "strided-left": (wide[:, 0], draw(size)),
        "broadcast-right": (draw(size, 3), draw(size, 1)),
        "broadcast-left-batch": (draw(3, size), draw(1, size)),
    }


def rope_rows(generator: torch.Generator) -> list[dict]:
    """Classify the complex multiplies inside the eager RoPE forward and backward (FP32, so nothing is rounded after
    them) on the suite's edge shapes, with the operands' real layouts."""
    from impl.rope_triton import _apply_rope_torch

    rows = []
    for name, shape, pairs, layout in ROPE_SHAPES:
        for inverse in (False, True):
            values = torch.randn(shape, generator=generator, device="cuda")
            if layout == "transposed":
                batch, sequence, heads, channels = shape
                values = values.new_empty((batch, heads, sequence, channels)).transpose(1, 2).copy_(values)
            angles = torch.randn((1, shape[1], pairs), generator=generator, device="cuda") * 100
            grad_output = torch.randn(shape, generator=generator, device="cuda")
            leaf = values.detach().requires_grad_(True)
            output = _apply_rope_torch(leaf, angles, inverse)
            (gradient,) = torch.autograd.grad(output, leaf, grad_output)
            frequencies = torch.polar(torch.ones_like(angles), angles)
            if len(shape) == 4:
                frequencies = frequencies.unsqueeze(2)

            def as_pairs(tensor: torch.Tensor, pairs: int = pairs) -> torch.Tensor:
                block = tensor.detach()[..., -2 * pairs :].float().contiguous().cpu()
                return torch.view_as_complex(block.unflatten(-1, (-1, 2)).contiguous())

            conjugated = frequencies.conj().resolve_conj().cpu()
            for direction, result, operand, factor in (
                ("forward", output, values, conjugated if inverse else frequencies.cpu()),
                ("backward", gradient, grad_output, frequencies.cpu() if inverse else conjugated),
            ):
                row = {"size": name, "layout": f"rope-{layout}-{'inverse' if inverse else 'forward'}-{direction}"}
                row.update(classify(as_pairs(result), as_pairs(operand), factor))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("eager_contraction_probe: no CUDA device", file=sys.stderr)
        return 2
    generator = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for size in SIZES:
        for layout, (left, right) in layouts(size, generator).items():
            product = (left * right).cpu()
            row = {"size": size, "layout": layout, **classify(product, left.cpu(), right.cpu())}
            rows.append(row)
            print(json.dumps(row), flush=True)
    rows += rope_rows(generator)
    misses = sum(r["model_misses"] for r in rows)
    print(f"SUMMARY model misses {misses} of {sum(r['elements'] for r in rows)} elements", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "eager_contraction.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
