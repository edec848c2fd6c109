"""Full-size GPU parity: ``apply_rope_triton`` against the eager path, bit for bit, on the DeepSeek V4.1 shapes.

Run on a CUDA machine from the repository root: ``python scripts/gpu_parity.py [--out DIR]``. For each shape, dtype
and direction it compares the fused forward with ``_apply_rope_torch`` and the fused backward with eager autograd,
on normal values and on a special-value mix (NaN payloads, +-inf, +-0, subnormals, near-max values), and the CPU
oracle (fed the GPU's frequencies) with the eager forward and backward on sampled positions. Differences are split
into real bit mismatches, signed-zero differences and NaN-bit differences; the script exits 1 on any real mismatch,
or on a NaN-bit/signed-zero difference anywhere but the fused backward against eager's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance import provenance  # noqa: E402
from impl.rope_triton import _apply_rope_torch, _uses_fused_kernel, apply_rope_triton  # noqa: E402
from oracle import eager as oracle_eager  # noqa: E402

# name: (values shape, transposed from [B, H, S, D], batch of the angles)
SHAPES = {
    "query": ((1, 4096, 64, 512), False, 1),
    "inverse-output-transposed": ((1, 4096, 64, 512), True, 1),
    "window-kv": ((1, 4096, 512), False, 1),
    "compressed-kv": ((1, 2048, 512), False, 1),
    "index-query": ((1, 4096, 32, 128), False, 1),
    "index-keys": ((1, 1024, 128), False, 1),
    "batch3-broadcast-angles": ((3, 256, 8, 512), False, 1),
    "batch3-per-batch-angles": ((3, 256, 8, 512), False, 3),
    "batch3-per-batch-angles-transposed": ((3, 256, 8, 512), True, 3),
}
PAIRS = 32
# Where tensors live: the GPU; `--smoke` runs the plumbing on the CPU through the interpreter (eager on the CPU
# does not fuse, so its mismatch counts there mean nothing).
DEVICE = "cuda"
INTEGER_VIEW = {2: torch.int16, 4: torch.int32}


def make_values(shape: tuple[int, ...], transposed: bool, dtype: torch.dtype, regime: str, seed: int) -> torch.Tensor:
    """Values in ``regime`` (normal or special); transposed ones arrive as a [B, H, S, D] -> [B, S, H, D] view."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    storage_shape = (shape[0], shape[2], shape[1], shape[3]) if transposed else shape
    values = torch.randn(storage_shape, generator=generator, device=DEVICE, dtype=torch.float32).to(dtype)
    if regime == "special":
        info = torch.finfo(dtype)
        flat = values.view(-1)
        count = flat.numel()
        picks = torch.randint(0, 10, (count,), generator=generator, device=DEVICE)
        specials = torch.tensor(
            [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, info.tiny / 4, -info.tiny / 8, info.max, -info.max],
            device=DEVICE,
            dtype=torch.float32,
        ).to(dtype)
        chosen = picks < len(specials)
        flat[chosen] = specials[picks[chosen]]
        # NaNs with non-canonical payloads and the sign bit set, to see what is copied and what is canonicalized.
        bits = flat.view(INTEGER_VIEW[values.element_size()])
        payload_nan = -1 if values.element_size() == 2 else -4194305  # 0xFFFF / 0xFFBFFFFF
        bits[::97] = payload_nan
    return values.transpose(1, 2) if transposed else values


def split_differences(actual: torch.Tensor, expected: torch.Tensor) -> dict[str, int]:
    """Count bit differences, separating signed-zero and NaN-payload differences from real mismatches."""
    integer = INTEGER_VIEW[actual.element_size()]
    a, e = actual.contiguous().view(integer), expected.contiguous().view(integer)
    differ = a != e
    both_nan = actual.isnan() & expected.isnan()
    both_zero = (actual == 0) & (expected == 0)
    return {
        "elements": actual.numel(),
        "mismatches": int((differ & ~both_nan & ~both_zero).sum()),
        "nan_bit_differences": int((differ & both_nan).sum()),
        "signed_zero_differences": int((differ & both_zero).sum()),
    }


def sampled_positions(sequence: int) -> torch.Tensor:
    """The first and last 32 positions (all of a short sequence), where the CPU oracle is compared."""
    if sequence <= 64:
        return torch.arange(sequence, device=DEVICE)
    return torch.cat([torch.arange(32), torch.arange(sequence - 32, sequence)]).to(DEVICE)


def check(
    name: str, shape: tuple[int, ...], transposed: bool, angle_batch: int, dtype: torch.dtype, regime: str
) -> list[dict]:
    seed = zlib.crc32(f"{name}-{dtype}-{regime}".encode())
    values = make_values(shape, transposed, dtype, regime, seed)
    generator = torch.Generator(device=DEVICE).manual_seed(seed + 1)
    angles = torch.rand((angle_batch, shape[1], PAIRS), generator=generator, device=DEVICE) * 4096.0
    results = []
    for inverse in (False, True):
        assert _uses_fused_kernel(values, angles)
        fused = apply_rope_triton(values, angles, inverse)
        eager = _apply_rope_torch(values, angles, inverse)
        row = {"shape": name, "dtype": str(dtype).removeprefix("torch."), "regime": regime, "inverse": inverse}
        results.append({**row, "direction": "forward", **split_differences(fused, eager)})
        grad = make_values(shape, transposed, dtype, regime, seed + 2)
        leaf_fused = values.detach().requires_grad_(True)
        apply_rope_triton(leaf_fused, angles, inverse).backward(grad)
        leaf_eager = values.detach().requires_grad_(True)
        _apply_rope_torch(leaf_eager, angles, inverse).backward(grad)
        results.append({**row, "direction": "backward", **split_differences(leaf_fused.grad, leaf_eager.grad)})
        # The oracle's GPU proof: fed the device's own frequencies, it reproduces eager CUDA's forward and autograd
        # backward bit for bit, signed zeros and NaN payloads included, on sampled positions (CPU time).
        chosen = sampled_positions(shape[1])
        frequencies = torch.polar(torch.ones_like(angles), angles)
        sampled = {
            key: tensor.index_select(1, chosen).cpu()
            for key, tensor in (("values", values), ("eager", eager), ("grad", grad), ("eager_grad", leaf_eager.grad))
        }
        frequencies = (frequencies.index_select(1, chosen) if frequencies.shape[1] > 1 else frequencies).cpu()
        expected = oracle_eager.apply_rope(sampled["values"], frequencies, inverse=inverse)
        results.append({**row, "direction": "oracle-forward", **split_differences(expected, sampled["eager"])})
        expected = oracle_eager.apply_rope_backward(sampled["grad"], frequencies, inverse=inverse)
        results.append({**row, "direction": "oracle-backward", **split_differences(expected, sampled["eager_grad"])})
        del fused, eager, grad, leaf_fused, leaf_eager
    return results


def timings() -> list[dict]:
    """Median forward times (ms) of fused, eager and clone on the query, for a first look at speed."""
    from triton.testing import do_bench

    rows = []
    for name in ("query", "index-query", "window-kv"):
        shape, _, _ = SHAPES[name]
        for dtype in (torch.bfloat16, torch.float32):
            values = torch.randn(shape, device="cuda").to(dtype)
            angles = torch.rand((1, shape[1], PAIRS), device="cuda")
            clone = do_bench(values.clone, return_mode="median")
            fused = do_bench(lambda v=values, a=angles: apply_rope_triton(v, a), return_mode="median")
            eager = do_bench(lambda v=values, a=angles: _apply_rope_torch(v, a), return_mode="median")
            rows.append(
                {
                    "shape": name,
                    "dtype": str(dtype),
                    "clone_ms": clone,
                    "fused_ms": fused,
                    "eager_ms": eager,
                    "fused_over_clone": fused / clone,
                    "eager_over_fused": eager / fused,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _smoke_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape of the same rank and channels with 40 positions and at most 2 heads."""
    return (shape[0], 40, min(shape[2], 2), shape[3]) if len(shape) == 4 else (shape[0], 40, shape[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for parity.json")
    parser.add_argument("--no-timings", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (interpreter): plumbing only")
    args = parser.parse_args()
    global DEVICE, SHAPES
    if args.smoke:
        DEVICE = "cpu"
        SHAPES = {name: (_smoke_shape(shape), *rest) for name, (shape, *rest) in SHAPES.items()}
    elif not torch.cuda.is_available():
        print("gpu_parity: no CUDA device", file=sys.stderr)
        return 2
    metadata = {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (smoke run)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        **provenance.record(),  # versions (torch, triton, CUDA, python), git state, kernel SHA-256
    }
    print(json.dumps(metadata), flush=True)
    results = []
    started = time.time()
    for name, (shape, transposed, angle_batch) in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for regime in ("normal", "special"):
                for row in check(name, shape, transposed, angle_batch, dtype, regime):
                    results.append(row)
                    print(json.dumps(row), flush=True)
    # Only the fused backward against eager may differ in signed zeros and NaN payloads (autograd's zero-filled
    # accumulation); the forward and the oracle (which models that accumulation) must match every bit.
    failures = [
        r
        for r in results
        if r["mismatches"]
        or (r["direction"] != "backward" and (r["nan_bit_differences"] or r["signed_zero_differences"]))
    ]
    total = {key: sum(r[key] for r in results) for key in ("elements", "mismatches")}
    summary = {"cases": len(results), **total, "failures": len(failures), "seconds": round(time.time() - started, 1)}
    print("SUMMARY", json.dumps(summary), flush=True)
    speed = [] if args.no_timings or args.smoke else timings()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {"metadata": metadata, "summary": summary, "results": results, "timings": speed}
        (args.out / "parity.json").write_text(json.dumps(payload, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
