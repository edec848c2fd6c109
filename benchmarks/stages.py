"""Where the kernel's time goes: variants that leave one stage out, the compiled kernel's loads and registers.

From the repository root, on a CUDA machine::

    python -m benchmarks.stages --out DIR              # the stage table (about a minute on an H200)
    ncu --clock-control none --kernel-name regex:'rope_kernel|copy_kernel' --metrics METRICS \\
        python -m benchmarks.stages --launch-once     # each shape's forward, in place and copy once, for counters
    python -m benchmarks.stages --table STAGES_JSON NCU_CSV   # the Markdown table of docs/benchmarks.md

Each variant is a copy of the kernel package with one stage edited out of one of its modules (``STAGE_EDITS`` names the
module; each edit must match once), imported as a package of its own; its forward (and in place) is timed by CUDA-graph
replay beside the full kernel and the copy of the same bytes, cold L2 from 32 MiB and warm below (as the targets). The
difference to the full kernel is that stage's cost. Variants compute wrong bits on purpose: they are timed, never used.
flash-attention's in-place rotary, handed its cos/sin tables, is timed alike on the same tensor where its file is found
(as ``benchmarks.in_place`` finds it): ours over it, whole and with each stage left out, says which stage stands between
our in-place call and its time. Per shape the compiled full kernel's registers, spills and global load/store widths
(from its PTX) are recorded too.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import (
    COLD_FROM_BYTES,
    NO_CUDA_EXIT_CODE,
    Clock,
    GraphTimer,
    ResultFile,
    environment,
    short_error,
    triton_copy,
)
from benchmarks.in_place import flash_in_place, load_flash_attention_rotary
from benchmarks.shapes import CASES, DTYPES, make_angles, make_values
from dsv41_rope import vendor

# stage left out: (the kernel module edited, its text in the full kernel, the variant's text)
STAGE_EDITS = {
    "cos/sin (angles used as both)": (
        "rotary_kernel.py",
        "            cos, sin = cos_sin(cos_or_angle)\n",
        "            cos, sin = cos_or_angle, sin_or_angle\n",
    ),
    "copied channels": (
        "rotary_kernel.py",
        "        if COPY_CHANNELS:\n            _copy_channels(",
        "        if False:\n            _copy_channels(",
    ),
    # No rotary pairs: every rotary load and store masked off, the chunk loop empty (Triton folds them away).
    "rotary block": (
        "rotary_kernel.py",
        "        rotary_source = source + pair_offset * stride_values_channel\n",
        "        pairs = 0\n        rotary_source = source + pair_offset * stride_values_channel\n",
    ),
}
# flash-attention's in-place rotary, timed beside our in-place call where its file is found
# (benchmarks.in_place.load_flash_attention_rotary): what the small tensors' in-place target compares against.
FLASH = "flash-attention"
STAGE_CASES = ("query", "index_query", "window_kv", "compressed_kv", "index_keys", "large_2gb")


def variant(edit: tuple[str, str, str], directory: Path, name: str) -> ModuleType:
    """A copy of the kernel package with one edit applied, imported under a name of its own."""
    module, original, edited = edit
    package = re.sub(r"\W", "_", f"stage_{name}")
    copy = vendor.write_copy(directory / package, package)
    source = (copy / module).read_text()
    if source.count(original) != 1:
        raise RuntimeError(f"stage edit {name!r} no longer applies to {module}: update STAGE_EDITS")
    (copy / module).write_text(source.replace(original, edited))
    return vendor.load_copy(copy)


def compiled_profile(rope, values: torch.Tensor) -> dict[str, Any]:
    """Registers, spills and the global memory accesses by width of the kernel the last launch compiled."""
    plans = [plan for plan in rope.launch.PLANS.values() if plan.compiled is not None]
    if not plans:
        return {}
    compiled = plans[-1].compiled
    ptx = compiled.asm.get("ptx", "")
    widths = {}
    for kind in ("ld", "st"):
        for match in re.finditer(rf"\b{kind}\.global(?:\.\w+)*?(\.v[248])?\.(?:b|u|f)(\d+)", ptx):
            vector = int(match.group(1)[2:]) if match.group(1) else 1
            bits = vector * int(match.group(2))
            widths[f"{kind} {bits}-bit"] = widths.get(f"{kind} {bits}-bit", 0) + 1
    return {
        "registers": getattr(compiled, "n_regs", None),
        "spills": getattr(compiled, "n_spills", None),
        "global_accesses_in_ptx": widths,
        "config": str(
            rope.launch_config(
                values.numel() // values.shape[-1],
                values.shape[-1],
                32,
                values.element_size(),
                values.shape[2] if values.dim() == 4 else 1,
            )
        ),
    }


def measure(
    case_name: str,
    dtype: torch.dtype,
    full,
    variants: dict[str, Any],
    timer: GraphTimer,
    rounds: int,
    flash_rotary: Callable | None = None,
) -> dict[str, Any]:
    """One row: copy, full kernel and each variant, forward and in place; and flash-attention's in-place rotary
    (``flash_rotary``, where given) on the same tensor, timed alike."""
    case = CASES[case_name]
    values = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    cold = values.numel() * values.element_size() >= COLD_FROM_BYTES
    row: dict[str, Any] = {
        "case": case_name,
        "dtype": str(dtype).removeprefix("torch."),
        "l2": "cold" if cold else "warm",
        "tensor_bytes": values.numel() * values.element_size(),
    }
    row["copy_ms"] = timer.copy_floor_ms(values, cold)
    scratch = values.clone()
    modules = {"full": full, **variants}
    for op in ("forward", "in place"):
        for name, module in modules.items():
            if op == "forward":
                call = lambda module=module: module.apply_rope_triton(values, angles, inverse=case.inverse)  # noqa: E731
            else:
                call = lambda module=module: module.apply_rope_triton_(scratch, angles, inverse=case.inverse)  # noqa: E731
            with torch.no_grad():
                call()
                call()  # the second call launches the compiled kernel directly: its profile is readable
                row[f"{op} {name} ms"] = statistics.median(timer.gpu_ms(call, cold) for _ in range(rounds))
            if name == "full" and op == "forward":
                row["profile"] = compiled_profile(full, values)
    if flash_rotary is not None:
        rotate = flash_in_place(flash_rotary, angles, conjugate=case.inverse)
        flash = lambda: rotate(scratch)  # noqa: E731
        try:
            flash()
            row[f"in place {FLASH} ms"] = statistics.median(timer.gpu_ms(flash, cold) for _ in range(rounds))
        except Exception as error:  # the peer's failure must not end the run
            row["flash_error"] = short_error(error)
    return row


def format_row(row: dict[str, Any], names: list[str]) -> str:
    """The row as text: the full kernel over the copy and each stage's share (full minus the variant)."""
    copy = row["copy_ms"]
    parts = [f"{row['case']:<14} {row['dtype']:<9} {row['l2']:<4} copy {copy * 1e3:8.1f} us"]
    for op in ("forward", "in place"):
        full = row[f"{op} full ms"]
        stages = ", ".join(f"{name} {(full - row[f'{op} {name} ms']) / copy:+.3f}" for name in names)
        parts.append(f"  {op}: {full / copy:.3f}x copy ({stages} of a copy)")
    flash = row.get(f"in place {FLASH} ms")
    if flash is not None:
        without = {name: row[f"in place {name} ms"] / flash for name in names}
        parts.append(
            f"  {FLASH} in place: {flash / copy:.3f}x copy; ours over it {row['in place full ms'] / flash:.3f}, "
            + ", ".join(f"without {name} {ratio:.3f}" for name, ratio in without.items())
        )
    profile = row.get("profile", {})
    parts.append(
        f"  regs {profile.get('registers')} spills {profile.get('spills')} "
        f"{profile.get('global_accesses_in_ptx')} {profile.get('config')}"
    )
    return "\n".join(parts)


def launch_once() -> None:
    """Each shape's forward and in place once and a Triton copy of it, BF16 and FP32 (for ncu)."""
    from dsv41_rope import kernel as rope

    for dtype in (torch.bfloat16, torch.float32):
        for name in STAGE_CASES:
            case = CASES[name]
            values, angles = make_values(case, dtype), make_angles(case.shape[1])
            with torch.no_grad():
                rope.apply_rope_triton(values, angles, inverse=case.inverse)
                rope.apply_rope_triton_(values, angles, inverse=case.inverse)
                triton_copy(values.contiguous())
            torch.cuda.synchronize()
            print(f"launched {name} {dtype}", flush=True)


NCU_METRICS = {
    "time": "gpu__time_duration.sum",
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical": "sm__maximum_warps_per_active_cycle_pct",
    "instructions": "smsp__inst_executed.sum",
}


def ncu_launches(path: Path) -> list[dict[str, float]]:
    """The metrics of each profiled launch of an ``ncu --csv`` file, in launch order."""
    import csv

    launches: dict[int, dict[str, float]] = {}
    header = None
    for line in csv.reader(path.read_text().splitlines()):
        if line and line[0] == "ID":
            header = line
        elif header and len(line) == len(header):
            entry = dict(zip(header, line, strict=True))
            value = float(entry["Metric Value"].replace(",", "") or "nan")
            launches.setdefault(int(entry["ID"]), {})[entry["Metric Name"]] = value
    return [launches[key] for key in sorted(launches)]


def where_the_time_goes(stages_path: Path, ncu_path: Path) -> str:
    """The Markdown table of docs/benchmarks.md: per tensor and operation, the time over the copy (graph replay),
    each stage's share, and from ncu (one launch each, ``--launch-once``) the DRAM throughput of the kernel and of
    the copy, instructions per element and occupancy."""
    document = json.loads(stages_path.read_text())
    # --launch-once profiles forward, in place and the copy of each case of each dtype, after calibration's launches.
    launches = ncu_launches(ncu_path)[-3 * len(STAGE_CASES) * 2 :]
    lines = [
        "| tensor | dtype | op | x copy | cos/sin | copied channels | rotary block | flash-attention x copy "
        "| DRAM % of peak (copy) | instructions / element (copy) | occupancy % (theoretical) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, row in enumerate(document["rows"]):
        copy, numel = row["copy_ms"], row["tensor_bytes"] // getattr(torch, row["dtype"]).itemsize
        forward, in_place, copy_launch = launches[3 * index : 3 * index + 3]
        for op, launch in (("forward", forward), ("in place", in_place)):
            full = row[f"{op} full ms"]
            stages = [f"{(full - row[f'{op} {name} ms']) / copy:+.3f}" for name in document["stages"]]
            flash = row.get(f"{op} {FLASH} ms")
            stages.append("-" if flash is None else f"{flash / copy:.3f}")
            per_element = launch[NCU_METRICS["instructions"]] * 32 / numel
            copy_per_element = copy_launch[NCU_METRICS["instructions"]] * 32 / numel
            lines.append(
                f"| {row['case']} | {row['dtype'].replace('bfloat16', 'bf16').replace('float32', 'fp32')} | {op} | "
                f"{full / copy:.3f} | {' | '.join(stages)} | {launch[NCU_METRICS['dram']]:.0f} "
                f"({copy_launch[NCU_METRICS['dram']]:.0f}) | {per_element:.1f} ({copy_per_element:.1f}) | "
                f"{launch[NCU_METRICS['occupancy']]:.0f} ({launch[NCU_METRICS['theoretical']]:.0f}) |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The stage table, or (``--launch-once``) one launch per shape for a profiler, or (``--table``) the Markdown
    table of a stages JSON and an ncu CSV."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scratch"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--launch-once", action="store_true", help="launch each shape once (under ncu)")
    parser.add_argument("--time-budget", type=float, default=240.0, metavar="SECONDS")
    parser.add_argument("--table", nargs=2, type=Path, metavar=("STAGES_JSON", "NCU_CSV"), help="print the table")
    args = parser.parse_args(argv)
    if args.table:
        print(where_the_time_goes(*args.table))
        return 0
    if not torch.cuda.is_available():
        print("benchmarks.stages: no CUDA device is visible; this benchmark needs one.", file=sys.stderr)
        return NO_CUDA_EXIT_CODE
    if args.launch_once:
        launch_once()
        return 0
    from dsv41_rope import kernel as full

    clock, timer = Clock(args.time_budget), GraphTimer()
    flash_rotary, flash_note = load_flash_attention_rotary()
    clock.log(f"{FLASH}: {flash_note}")
    with tempfile.TemporaryDirectory() as scratch:
        variants = {name: variant(edit, Path(scratch), name) for name, edit in STAGE_EDITS.items()}
        document = {
            "schema": "rope-benchmark-stages/1",
            "status": "running",
            "environment": environment(),
            "stages": {name: list(edit) for name, edit in STAGE_EDITS.items()},
            "flash_attention": flash_note,
            "rows": [],
        }
        results = ResultFile(args.out, "stages", document)
        status = "complete"
        for dtype_name in args.dtypes.split(","):
            for name in STAGE_CASES:
                if clock.expired():
                    status = "stopped: time budget spent"
                    break
                row = measure(name, DTYPES[dtype_name], full, variants, timer, args.rounds, flash_rotary)
                results.add_row(row)
                print(format_row(row, list(variants)), flush=True)
        results.finish(status)
    clock.log(f"wrote {results.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
