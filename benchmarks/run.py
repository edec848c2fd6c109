"""The fused rotary embedding against a copy, eager PyTorch and torch.compile on the DeepSeek V4.1 shapes.

From the repository root, on a CUDA machine::

    python -m benchmarks.run --out benchmarks/results           # every case, 1 to 2 minutes on an H200
    python -m benchmarks.run --out benchmarks/results --sweep   # then benchmarks.sweep, under ten minutes in all
    python -m benchmarks.run --out benchmarks/results --quick   # two bf16 shapes with short repetitions

Each row times one operation (forward, backward, forward+backward) of ``apply_rope_triton``, of the eager
``_apply_rope_torch``, of that function under ``torch.compile`` and of ``clone()`` of the same tensor. It prints a
table, writes ``run_<date>_<gpu>.json`` after every row and, when matplotlib imports, a PNG of achieved bandwidth
against tensor size. docs/benchmarks.md explains the columns and the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import (
    MIB,
    NO_CUDA_EXIT_CODE,
    QUANTILES,
    Clock,
    GpuTimer,
    ResultFile,
    Timing,
    cuda_available,
    environment,
    short_error,
)

PAIRS = 32
# The kernel reads one complex64 (cos, sin) per angle: that is the frequency table of the byte formula.
FREQUENCY_BYTES = 8
OPS = ("forward", "backward", "forward+backward")
SHORT_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# Inputs, output gradient, outputs and eager's intermediates all live at once in an eager forward+backward.
TENSORS_IN_FLIGHT = 8
SPARE_BYTES = 512 * MIB


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
        Case("large_2gb", (1, 8192, 128, 1024)),
    )
}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Every case in every dtype takes about two minutes on an H200, well inside the ten the issue allows.
FULL_PLAN = tuple((name, dtype) for dtype in DTYPES for name in CASES)
QUICK_PLAN = (("query", torch.bfloat16), ("window_kv", torch.bfloat16))


def make_values(case: Case, dtype: torch.dtype) -> torch.Tensor:
    """Random values in the case's shape and layout; random, because zeros can hide unwritten outputs."""
    if case.transposed:
        batch, sequence, heads, channels = case.shape
        return torch.randn(batch, heads, sequence, channels, dtype=dtype, device="cuda").transpose(1, 2)
    return torch.randn(case.shape, dtype=dtype, device="cuda")


def make_angles(sequence: int) -> torch.Tensor:
    """Angles ``[1, sequence, PAIRS]`` float32 as RoPE makes them: position times a geometric frequency."""
    positions = torch.arange(sequence, dtype=torch.float32, device="cuda")
    frequencies = 10000.0 ** (-torch.arange(PAIRS, dtype=torch.float32, device="cuda") / PAIRS)
    return torch.outer(positions, frequencies).unsqueeze(0)


def op_callable(
    op: str,
    impl: Callable[..., torch.Tensor],
    values: torch.Tensor,
    angles: torch.Tensor,
    grad: torch.Tensor,
    inverse: bool,
) -> Callable[[], object]:
    """Builds the timed call of one operation.

    Args:
        op: one of ``OPS``.
        impl: a function with ``apply_rope_triton``'s signature.
        values: ``[batch, sequence, (heads,) channels]``.
        angles: ``[1, sequence, pairs]`` float32.
        grad: gradient of the output, contiguous, in the shape of ``values``.
        inverse: rotate by the conjugate.

    Returns:
        A callable without arguments. For ``backward`` the forward runs here, once, and its graph is kept.
    """
    if op == "forward":
        return lambda: impl(values, angles, inverse=inverse)
    leaf = values.detach().requires_grad_(True)
    if op == "backward":
        output = impl(leaf, angles, inverse=inverse)
        # autograd.grad returns a new gradient each call instead of accumulating into leaf.grad.
        return lambda: torch.autograd.grad(output, leaf, grad, retain_graph=True)
    return lambda: torch.autograd.grad(impl(leaf, angles, inverse=inverse), leaf, grad)


def peak_extra_bytes(fn: Callable[[], object]) -> int:
    """Peak of ``torch.cuda.max_memory_allocated`` during one call of ``fn``, minus what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    del result
    return torch.cuda.max_memory_allocated() - before


def _target(name: str, comparison: str, bound: float, value: float | None) -> dict[str, Any]:
    if value is None:
        passed = None
    elif comparison == "<=":
        passed = value <= bound
    elif comparison == ">=":
        passed = value >= bound
    else:
        passed = value > bound
    return {"target": name, "comparison": comparison, "bound": bound, "value": value, "passed": passed}


def evaluate_targets(case: Case, op: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's H200 targets that apply to this row, each with its value and whether it passed.

    ``passed`` is None where the value is missing (an implementation failed or was skipped).
    """
    checks = []
    if op in ("forward", "backward"):
        if row["tensor_bytes"] >= 256 * MIB:
            checks.append(_target("fused/copy", "<=", 1.05, row["ratio_to_copy"]))
        elif row["tensor_bytes"] >= 32 * MIB:
            checks.append(_target("fused/copy", "<=", 1.10, row["ratio_to_copy"]))
        if case.name == "window_kv":
            checks.append(_target("fused/copy", "<=", 2.0, row["ratio_to_copy"]))
            checks.append(_target("eager/fused", ">", 1.0, row["speedup_vs_eager"]))
            checks.append(_target("compile/fused", ">", 1.0, row["speedup_vs_compile"]))
    if case.name == "query" and op == "forward":
        checks.append(_target("compile/fused", ">=", 1.5, row["speedup_vs_compile"]))
    if op == "forward+backward":
        if case.name == "query":
            checks.append(_target("eager/fused", ">=", 4.0, row["speedup_vs_eager"]))
        peaks = row["peak_extra_bytes"]
        ratio = peaks["fused"] / peaks["eager"] if "fused" in peaks and peaks.get("eager") else None
        checks.append(_target("peak fused/eager", "<=", 1.0, ratio))
    return checks


def _ratio(numerator: Timing | None, denominator: Timing | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    return numerator.median_ms / denominator.median_ms


def make_row(
    case: Case,
    dtype: torch.dtype,
    op: str,
    values: torch.Tensor,
    angles: torch.Tensor,
    copy: Timing,
    timings: dict[str, Timing],
    peaks: dict[str, int],
    errors: dict[str, str],
) -> dict[str, Any]:
    """One JSON row: times, bandwidths, ratios and targets of one operation on one tensor."""
    passes = 2 if op == "forward+backward" else 1
    tensor_bytes = values.numel() * values.element_size()
    table_bytes = angles.numel() * FREQUENCY_BYTES
    moved_bytes = passes * (2 * tensor_bytes + table_bytes)
    copy_bytes = passes * 2 * tensor_bytes
    fused = timings.get("fused")
    gbps = {name: moved_bytes / (timing.median_ms * 1e6) for name, timing in timings.items()}
    gbps["copy"] = copy_bytes / (copy.median_ms * 1e6)
    row = {
        "case": case.name,
        "shape": list(case.shape),
        "layout": "transposed" if case.transposed else "contiguous",
        "inverse": case.inverse,
        "dtype": str(dtype).removeprefix("torch."),
        "pairs": PAIRS,
        "op": op,
        "tensor_bytes": tensor_bytes,
        "table_bytes": table_bytes,
        "bytes": moved_bytes,
        "copy_bytes": copy_bytes,
        "times_ms": {**{name: timing.to_json() for name, timing in timings.items()}, "copy": copy.to_json()},
        "gbps": gbps,
        "ratio_to_copy": _ratio(fused, copy),
        "speedup_vs_eager": _ratio(timings.get("eager"), fused),
        "speedup_vs_compile": _ratio(timings.get("compile"), fused),
        "peak_extra_bytes": peaks if op == "forward+backward" else None,
        "errors": errors,
    }
    row["targets"] = evaluate_targets(case, op, row)
    return row


def measure_case(
    case: Case,
    dtype: torch.dtype,
    rope: ModuleType,
    timer: GpuTimer,
    with_compile: bool,
    clock: Clock,
    results: ResultFile,
) -> bool:
    """Times every operation of one case and adds a row per operation.

    Returns:
        False when the time budget ran out before the last operation.
    """
    values = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    grad = torch.randn(case.shape, dtype=dtype, device="cuda")
    # A fresh dynamo cache per shape keeps torch.compile under its recompile limit across the whole plan.
    torch.compiler.reset()
    impls = {"fused": rope.apply_rope_triton, "eager": rope._apply_rope_torch}
    if with_compile:
        impls["compile"] = torch.compile(rope._apply_rope_torch, dynamic=False)
    # clone() keeps a transposed view's strides: the same bytes read and written in the best order, the ceiling.
    copy = timer.time(values.clone)
    copies = {"forward": copy, "backward": copy, "forward+backward": copy + copy}
    channels = case.shape[-1]
    launch = rope._launch_config(values.numel() // channels, channels, PAIRS, values.element_size())
    for op in OPS:
        if clock.expired():
            return False
        timings: dict[str, Timing] = {}
        peaks: dict[str, int] = {}
        errors: dict[str, str] = {}
        for name, impl in impls.items():
            try:
                fn = op_callable(op, impl, values, angles, grad, case.inverse)
                fn()  # torch.compile compiles and Triton JITs here, outside the timing
                if op == "forward+backward":
                    peaks[name] = peak_extra_bytes(fn)
                timings[name] = timer.time(fn)
            except Exception as error:  # a failing implementation, compile above all, must not end the run
                errors[name] = short_error(error)
                clock.log(f"  {case.name} {SHORT_DTYPE[dtype]} {op} {name} failed: {errors[name]}")
            fn = None  # drops the kept graph of "backward" before the next implementation allocates its own
            torch.cuda.empty_cache()
        row = make_row(case, dtype, op, values, angles, copies[op], timings, peaks, errors)
        row["launch_config"] = dataclasses.asdict(launch)
        results.add_row(row)
        clock.log(format_row(row))
    return True


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _targets_cell(checks: list[dict[str, Any]]) -> str:
    missed = [f"{c['target']}{c['comparison']}{c['bound']:g}" for c in checks if c["passed"] is False]
    if missed:
        return "MISS " + ", ".join(missed)
    if any(c["passed"] is None for c in checks):
        return "n/a"
    return "pass" if checks else "-"


HEADER = (
    f"{'case':<15} {'dtype':<5} {'op':<16} {'MiB':>6} {'fused ms':>9} {'GB/s':>6} {'host ms':>8} {'copy ms':>8} "
    f"{'xcopy':>6} {'eager x':>7} {'compile x':>9} {'peak MiB f/e':>13}  targets"
)


def format_row(row: dict[str, Any]) -> str:
    """One table line; docs/benchmarks.md explains the columns."""
    fused = row["times_ms"].get("fused")
    peaks = row["peak_extra_bytes"] or {}
    peak = f"{peaks['fused'] / MIB:.0f}/{peaks['eager'] / MIB:.0f}" if {"fused", "eager"} <= peaks.keys() else "-"
    return (
        f"{row['case']:<15} {row['dtype'].replace('bfloat', 'bf').replace('float', 'fp'):<5} {row['op']:<16} "
        f"{row['tensor_bytes'] / MIB:>6.0f} {_cell(fused and fused['median'], '9.4f')} "
        f"{_cell(row['gbps'].get('fused'), '6.0f')} {_cell(fused and fused['host'], '8.4f')} "
        f"{row['times_ms']['copy']['median']:>8.4f} "
        f"{_cell(row['ratio_to_copy'], '6.3f')} {_cell(row['speedup_vs_eager'], '7.2f')} "
        f"{_cell(row['speedup_vs_compile'], '9.2f')} {peak:>13}  {_targets_cell(row['targets'])}"
    )


def print_table(document: dict[str, Any]) -> None:
    """Prints the environment and one line per row."""
    env = document["environment"]
    print(
        f"\n{env['gpu']} | torch {env['torch']} | triton {env['triton']} | CUDA {env['cuda']} | {env['date']}"
        f" | status: {document['status']}"
    )
    print(HEADER)
    for row in document["rows"]:
        print(format_row(row))
    for skip in document["skipped"]:
        print(f"skipped {skip['case']} {skip['dtype']}: {skip['reason']}")


def save_plot(document: dict[str, Any], path: Path) -> bool:
    """Plots achieved GB/s against tensor size, one panel per operation; returns False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, len(OPS), figsize=(16, 4.5), sharey=True)
    for axis, op in zip(axes, OPS, strict=True):
        rows = sorted((row for row in document["rows"] if row["op"] == op), key=lambda row: row["tensor_bytes"])
        for name, marker in (("fused", "o"), ("eager", "s"), ("compile", "^"), ("copy", "x")):
            points = [(row["tensor_bytes"] / MIB, row["gbps"][name]) for row in rows if name in row["gbps"]]
            if points:
                sizes, bandwidths = zip(*points, strict=True)
                axis.plot(sizes, bandwidths, marker=marker, linestyle="none", label=name)
        axis.set_xscale("log")
        axis.set_title(op)
        axis.set_xlabel("tensor size (MiB)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("achieved GB/s")
    axes[0].legend()
    env = document["environment"]
    figure.suptitle(f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['date']}")
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line; ``--quick`` also shortens the repetitions."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the JSON and PNG")
    parser.add_argument("--quick", action="store_true", help="bf16 query and window KV only, short repetitions")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=540.0,
        metavar="SECONDS",
        help="start no new measurement after this many seconds; the rows so far are kept (default: %(default)g)",
    )
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument(
        "--sweep", action="store_true", help="then run benchmarks.sweep on what is left of the time budget"
    )
    args = parser.parse_args(argv)
    args.warmup_ms, args.rep_ms = (5.0, 20.0) if args.quick else (25.0, 100.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the plan and returns the exit status: 0 when done or stopped by the budget, 2 without CUDA."""
    args = parse_args(argv)
    if not cuda_available("benchmarks.run"):
        return NO_CUDA_EXIT_CODE
    from impl import rope_triton as rope

    clock = Clock(args.time_budget)
    timer = GpuTimer(warmup_ms=args.warmup_ms, rep_ms=args.rep_ms)
    document = {
        "schema": "rope-benchmark-run/1",
        "status": "running",
        "environment": environment(),
        "settings": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "pairs": PAIRS,
            "warmup_ms": args.warmup_ms,
            "rep_ms": args.rep_ms,
            "quantiles": list(QUANTILES),
            "pad_bytes": GpuTimer.PAD_BYTES,
            "pad_ms": timer.pad_ms,
            "time_budget_s": args.time_budget,
        },
        "rows": [],
        "skipped": [],
    }
    results = ResultFile(args.out, "run", document)
    clock.log(f"writing {results.path}")
    status = "complete"
    try:
        for name, dtype in QUICK_PLAN if args.quick else FULL_PLAN:
            case = CASES[name]
            if clock.expired():
                status = f"stopped: time budget of {args.time_budget:g} s spent before {name} {SHORT_DTYPE[dtype]}"
                break
            torch.cuda.empty_cache()
            needed = TENSORS_IN_FLIGHT * torch.Size(case.shape).numel() * dtype.itemsize + SPARE_BYTES
            free = torch.cuda.mem_get_info()[0]
            if free < needed:
                reason = f"needs ~{needed / MIB:.0f} MiB of GPU memory, {free / MIB:.0f} MiB free"
                document["skipped"].append({"case": name, "dtype": str(dtype).removeprefix("torch."), "reason": reason})
                results.write()
                continue
            clock.log(f"{name} {SHORT_DTYPE[dtype]} {list(case.shape)} {'inverse ' if case.inverse else ''}...")
            if not measure_case(case, dtype, rope, timer, not args.no_compile, clock, results):
                status = f"stopped: time budget of {args.time_budget:g} s spent during {name} {SHORT_DTYPE[dtype]}"
                break
    except KeyboardInterrupt:
        status = "interrupted"
    results.finish(status)
    print_table(document)
    plot = results.path.with_suffix(".png")
    try:
        plotted = save_plot(document, plot)
        note = f"and {plot}" if plotted else "(no plot: matplotlib does not import)"
    except Exception as error:  # the plot is a convenience; the JSON already holds every number
        note = f"(no plot: {short_error(error)})"
    clock.log(f"wrote {results.path} {note}")
    if status == "interrupted":
        return 130
    if args.sweep:
        from benchmarks import sweep

        budget = min(sweep.DEFAULT_TIME_BUDGET_S, args.time_budget - clock.elapsed())
        return sweep.main(["--out", str(args.out), "--time-budget", str(budget)] + (["--quick"] if args.quick else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
