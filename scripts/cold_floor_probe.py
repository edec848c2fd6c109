"""Why the index query read 1.36x a copy cold but 1.05x warm and 1.06x a Triton copy under ncu (answered: run 39).

The copy floor and the op were timed cold by different methods. The op: a graph of (flush; op) minus a graph
of flushes, which charges the op for writing back the dirty lines it leaves in the L2 (the next flush evicts them).
The copy: also ``clone()`` launched in a stream between CUDA events right after a flush, which ended when the
copy's stores reached the L2, so up to an L2 of its output (the whole 32 MB output of the index query) was never
written back inside the timed interval.

On a CUDA machine, from the repository root::

    python -m scripts.cold_floor_probe

For each tensor (BF16 and FP32 index query, query, window KV) and each of ``clone``, the Triton copy and the fused
forward, prints milliseconds per call by: graph replay warm; graph (flush; call) minus graph (flush) ("diff"); events
around a call launched after a flush ("stream", the floor's second method until 2026-12-04); and events around
(call; flush) minus events around (flush) ("stream+wb", which pays the write-back as "diff" does: the floor's second
method since). One JSON line per row follows.
"""

from __future__ import annotations

import json
import sys

import torch

from benchmarks.common import NO_CUDA_EXIT_CODE, GraphTimer, cuda_available, triton_copy
from benchmarks.shapes import CASES, make_angles, make_values
from impl.rope_triton import apply_rope_triton

TENSORS = ("index_query", "query", "window_kv")


def main() -> int:
    if not cuda_available("scripts.cold_floor_probe"):
        return NO_CUDA_EXIT_CODE
    timer = GraphTimer(replays=25)
    print(f"{'tensor':<22}{'call':<13}{'warm':>9}{'diff':>9}{'stream':>9}{'stream+wb':>11}  (ms per call)")
    for name in TENSORS:
        for dtype in (torch.bfloat16, torch.float32):
            case = CASES[name]
            values = make_values(case, dtype)
            angles = make_angles(case.shape[1])
            calls = {
                "clone": values.clone,
                "triton_copy": lambda values=values: triton_copy(values),
                "fused": lambda values=values, angles=angles: apply_rope_triton(values, angles),
            }
            figures = {}
            for label, fn in calls.items():
                fn()
                torch.cuda.synchronize()
                row = {
                    "warm": timer.warm_ms(fn),
                    "diff": timer.cold_ms(fn),
                    "stream": timer.stream_cold_ms(fn, write_back=False),
                    "stream+wb": timer.stream_cold_ms(fn),
                }
                figures[label] = row
                tag = f"{name} {str(dtype)[6:]}"
                print(
                    f"{tag:<22}{label:<13}"
                    + "".join(f"{row[k]:>9.4f}" for k in ("warm", "diff", "stream"))
                    + f"{row['stream+wb']:>11.4f}",
                    flush=True,
                )
            floor_before = min(figures["clone"]["diff"], figures["clone"]["stream"], figures["triton_copy"]["diff"])
            floor_now = min(figures["clone"]["diff"], figures["clone"]["stream+wb"], figures["triton_copy"]["diff"])
            print(
                f"{'':<22}fused cold over the floor as timed before {figures['fused']['diff'] / floor_before:.3f}, "
                f"as timed now {figures['fused']['diff'] / floor_now:.3f}",
                flush=True,
            )
            print(
                json.dumps(
                    {
                        "tensor": name,
                        "dtype": str(dtype),
                        "bytes": values.numel() * values.element_size(),
                        "ms": figures,
                    }
                )
            )
            del values

    return 0


if __name__ == "__main__":
    sys.exit(main())
