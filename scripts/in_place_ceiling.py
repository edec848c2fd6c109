"""What stops the small tensors' in-place call at flash-attention's time: launch configurations against cos/sin.

Issue 20 asks our in-place call to be at least as fast as flash-attention's in-place rotary, which is handed its
cos/sin tables. On the 3-D DeepSeek tensors (window KV, compressed KV, index keys) every row has its own 32 angles, so
our call computes 32 cos/sin a row where flash-attention loads them. This times, in one process and alternating round
after round, flash-attention and three versions of our kernel over a grid of launch configurations (pairs a thread x
warps), warm and cold:

* ``full``: the committed kernel (libdevice cos/sin from the angles);
* ``no cos/sin``: the angles used as both cos and sin (``benchmarks.stages``' edit): the kernel's structure alone,
  loading 4 bytes a pair where flash-attention loads 8;
* ``fast cos/sin``: libdevice's fast path without its branch (runs 70-71's candidate, exact below 105615 only):
  the most an exact cos/sin cheaper than libdevice's could save.

Variants compute wrong bits on purpose: they are timed, never used. On the GPU machine, from the repository root::

    python -m scripts.in_place_ceiling --out DIR [--rounds 3] [--dtypes bf16,fp32]
    python -m scripts.in_place_ceiling --table DIR/in_place_ceiling.json   # docs/benchmarks.md's table (no GPU)

Writes ``in_place_ceiling.json`` (every timing) and prints, per tensor, each version's best configuration over
flash-attention's time. Exit status 2 without CUDA (but for ``--table``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from benchmarks.common import GraphTimer
    from benchmarks.shapes import Case

SMALL_TENSORS = ("window_kv", "compressed_kv", "index_keys")
# The kernel as it is, with cos/sin left out, and with the branch-free cos/sin (FAST_SINCOS)
VERSIONS = ("full", "no cos/sin", "fast cos/sin")
# (pairs a thread, warps): a program holds pairs * warps rows of 32 pairs
GRID = tuple((pairs, warps) for pairs in (1, 2, 4) for warps in (2, 4, 8))
FAST_SINCOS = (
    "            return libdevice.cos(angle), tl.where(subnormal, angle, libdevice.sin(angle))\n",
    """            j = libdevice.rint(angle * 0.6366197466850281)
            quadrant = j.to(tl.int32)
            r = tl.fma(j, -1.570796251296997, angle)
            r = tl.fma(j, -7.549789415861596e-08, r)
            r = tl.fma(j, -5.390302953474238e-15, r)
            r2 = r * r
            p = tl.fma(tl.fma(r2, -0.00019574658654164523, 0.00833270326256752), r2, -0.16666662693023682)
            sin_poly = tl.fma(p, tl.fma(r2, r, 0.0), r)
            q = tl.fma(tl.fma(r2, 2.4279579520225525e-05, -0.0013887860113754869), r2, 0.041666727513074875)
            cos_poly = tl.fma(tl.fma(q, r2, -0.4999999701976776), r2, 1.0)
            odd = (quadrant & 1) != 0
            cos = tl.where(odd, sin_poly, cos_poly)
            sin = tl.where(odd, cos_poly, sin_poly)
            cos = tl.where(((quadrant + 1) & 2) != 0, tl.fma(cos, -1.0, 0.0), cos)
            sin = tl.where((quadrant & 2) != 0, tl.fma(sin, -1.0, 0.0), sin)
            return cos, tl.where(subnormal, angle, sin)
""",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.in_place_ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scratch"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--table", type=Path, metavar="JSON", help="print the Markdown table of a run's JSON")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(markdown_table(json.loads(args.table.read_text())))
        return 0
    from benchmarks.common import NO_CUDA_EXIT_CODE, cuda_available

    if not cuda_available("scripts.in_place_ceiling"):
        return NO_CUDA_EXIT_CODE

    from benchmarks.common import GraphTimer, environment
    from benchmarks.in_place import load_flash_attention_rotary
    from benchmarks.shapes import CASES, DTYPES
    from benchmarks.stages import STAGE_EDITS, variant
    from impl import rope_triton as rope

    flash_rotary, note = load_flash_attention_rotary()
    if flash_rotary is None:
        print(note, file=sys.stderr)
        return 2
    directory = Path(tempfile.mkdtemp())
    no_cos_sin = variant(STAGE_EDITS["cos/sin (angles used as both)"], directory, "no cos/sin")
    versions = dict(zip(VERSIONS, (rope, no_cos_sin, variant(FAST_SINCOS, directory, "fast cos/sin")), strict=True))
    # Every version is handed the settings the committed kernel calibrated, with cos/sin computed in the kernel: a
    # variant's own calibration would find its cos/sin wrong and time the table path instead.
    chosen = rope.settings("cuda")
    if chosen.contraction is None:
        print(f"no contraction variant reproduces this device's eager path: {chosen.describe()}", file=sys.stderr)
        return 2
    timer = GraphTimer()
    args.out.mkdir(parents=True, exist_ok=True)
    document = {"environment": environment(), "settings": chosen.describe(), "flash_attention": note}
    document |= {"grid": GRID, "rows": []}
    for name in SMALL_TENSORS:
        for dtype in (DTYPES[d] for d in args.dtypes.split(",")):
            times = measure(CASES[name], dtype, versions, chosen, timer, flash_rotary, args.rounds)
            row = {"case": name, "dtype": str(dtype).removeprefix("torch."), "times_ms": times}
            document["rows"].append(row)
            (args.out / "in_place_ceiling.json").write_text(json.dumps(document, indent=1))
            print(summary(row), flush=True)
    return 0


def measure(
    case: Case,
    dtype: torch.dtype,
    versions: dict[str, ModuleType],
    chosen: object,
    timer: GraphTimer,
    flash_rotary: Callable[..., torch.Tensor],
    rounds: int,
) -> dict[str, dict[str, list[float]]]:
    """Every call's GPU time in ms, warm and cold, round after round: flash-attention, our public in-place call, and
    each version's launch in each configuration of the grid, all on the same tensor; ``chosen`` is the committed
    kernel's calibrated ``KernelSettings``."""
    import torch

    from benchmarks.in_place import flash_in_place
    from benchmarks.shapes import make_angles, make_values
    from impl import rope_triton as rope

    scratch = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    rotate = flash_in_place(flash_rotary, angles)
    calls = {"flash": lambda: rotate(scratch), "ours": lambda: rope.apply_rope_triton_(scratch, angles)}
    for label, module in versions.items():
        settings = module.KernelSettings(chosen.contraction, True, "scripts.in_place_ceiling")
        for pairs, warps in GRID:
            config = module.LaunchConfig(pairs * warps, 64, 64, warps)
            calls[f"{label} p{pairs} w{warps}"] = lambda m=module, c=config, s=settings: m._launch_kernel(
                scratch, angles, scratch, negate_sin=False, settings=s, config=c
            )
    times: dict[str, dict[str, list[float]]] = {key: {"warm": [], "cold": []} for key in calls}
    with torch.no_grad():
        for call in calls.values():
            call()
            call()
        for _ in range(rounds):
            for key, call in calls.items():
                times[key]["warm"].append(timer.gpu_ms(call, cold=False))
                times[key]["cold"].append(timer.gpu_ms(call, cold=True))
    return times


def medians(row: dict) -> dict[str, dict[str, float]]:
    """Each call's median over the rounds, per L2 state."""
    return {key: {l2: statistics.median(v) for l2, v in value.items()} for key, value in row["times_ms"].items()}


def best(median: dict[str, dict[str, float]], version: str, l2: str, pairs: str = "") -> tuple[str, float]:
    """A version's fastest configuration (``p<pairs a thread> w<warps>``), of those with ``pairs`` pairs a thread
    where given, and its median time."""
    prefix = f"{version} p{pairs}" + (" " if pairs else "")
    key = min((key for key in median if key.startswith(prefix)), key=lambda key: median[key][l2])
    return key.removeprefix(version + " "), median[key][l2]


def markdown_table(document: dict) -> str:
    """Per tensor, dtype and L2 state, over flash-attention's time: our public call, and each version's fastest
    configuration (docs/benchmarks.md)."""
    lines = [
        "| tensor | dtype | L2 | flash-attention us | ours (its configuration) | "
        + " | ".join(f"{version}, best configuration" for version in VERSIONS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(VERSIONS),
    ]
    for row in document["rows"]:
        median = medians(row)
        for l2 in ("warm", "cold"):
            flash = median["flash"][l2]
            cells = [f"{median['ours'][l2] / flash:.3f}"]
            for version in VERSIONS:
                config, ms = best(median, version, l2)
                cells.append(f"{ms / flash:.3f} ({config})")
            dtype = row["dtype"].replace("bfloat16", "bf16").replace("float32", "fp32")
            lines.append(f"| {row['case']} | {dtype} | {l2} | {flash * 1e3:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(row: dict) -> str:
    """Per L2 state: ours and each version's best configuration over flash-attention's time (medians of rounds)."""
    median = medians(row)
    lines = [f"{row['case']} {row['dtype']}"]
    for l2 in ("warm", "cold"):
        flash = median["flash"][l2]
        parts = [f"  {l2}: flash {flash * 1e3:.2f} us, ours {median['ours'][l2] / flash:.3f}"]
        for version in VERSIONS:
            config, ms = best(median, version, l2)
            one_pair, one_pair_ms = best(median, version, l2, pairs="1")
            parts.append(
                f"{version}: best {config} {ms / flash:.3f} (one pair a thread {one_pair} {one_pair_ms / flash:.3f})"
            )
        lines.append("; ".join(parts))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
