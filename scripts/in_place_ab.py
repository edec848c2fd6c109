"""Cold in place against flash-attention, this kernel and another revision alternating in one process.

The gate (``benchmarks.run --against``) times the small tensors warm; issue 20 judges in place cold
(``benchmarks.in_place``: a graph of (flush; op) minus a graph of the flushes), where a row of 2-3 us moves by up to
10% between runs. This prints ``benchmarks.in_place``'s cold row for both kernels, round after round, so that the
two are compared under the same noise. On the GPU machine, from the repository root::

    python -m scripts.in_place_ab .peers/k_66a80c2a.py --rounds 3 --dtypes fp32

Exit status 2 without CUDA.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import NO_CUDA_EXIT_CODE, GraphTimer, cuda_available
from benchmarks.shapes import CASES, DTYPES


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.in_place_ab", description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="a git revision, or the path of a kernel file (.py), to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="fp32", help="comma-separated, of bf16, fp16, fp32")
    parser.add_argument("--cases", default="index_keys,compressed_kv,window_kv,index_query")
    args = parser.parse_args(argv)
    if not cuda_available("scripts.in_place_ab"):
        return NO_CUDA_EXIT_CODE
    from benchmarks.against import load_revision
    from benchmarks.in_place import IN_PLACE_HEADER, format_in_place_row, load_flash_attention_rotary, measure_in_place
    from impl import rope_triton as ours

    other, other_hash = load_revision(args.revision, Path(tempfile.mkdtemp()))
    flash, note = load_flash_attention_rotary()
    print(f"ours: impl/rope_triton.py; other: {args.revision} ({other_hash}); flash-attention: {note}")
    print(f"round kernel {IN_PLACE_HEADER}")
    timer = GraphTimer()
    for round_ in range(args.rounds):
        for name in args.cases.split(","):
            for dtype in (DTYPES[d] for d in args.dtypes.split(",")):
                for label, module in (("ours", ours), ("other", other)):
                    row = measure_in_place(CASES[name], dtype, module, timer, flash)
                    print(f"{round_:<5} {label:<6} {format_in_place_row(row)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
