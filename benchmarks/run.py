"""The fused rotary embedding against a copy, eager PyTorch and torch.compile on the DeepSeek V4.1 shapes.

From the repository root, on a CUDA machine::

    python -m benchmarks.run --out benchmarks/results           # every section, about 3 minutes on an H200
    python -m benchmarks.run --out benchmarks/results --quick   # two bf16 shapes, the in-place rows, host times
    python -m benchmarks.run --against REV                      # the speed gate (benchmarks.against)

Three sections, all in one run and one ``run_<date>_<gpu>.json`` (rewritten after every row):

* out of place: forward, backward and forward+backward of ``apply_rope_triton``, of the eager ``apply_rope_eager``,
  of that function under ``torch.compile`` and of ``clone()`` of the same tensor, each timed by CUDA-graph replay with
  a warm and with a cold L2, plus the host time of one call (``benchmarks.common.GraphTimer``);
* in place (``benchmarks.in_place``): ``apply_rope_triton_`` against a copy, the bytes floor (``2P/C`` of a copy),
  the out-of-place call and flash-attention's in-place rotary on the same slice;
* host: wall time per call over 3000 back-to-back calls on a tiny tensor, with and without ``torch.no_grad()``.

docs/benchmarks.md explains the columns, the method and the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks import against
from benchmarks.common import (
    MIB,
    NO_CUDA_EXIT_CODE,
    Clock,
    GraphTimer,
    ResultFile,
    Timing,
    cuda_available,
    environment,
    short_error,
)
from benchmarks.shapes import CASES, DTYPES, PAIRS, QUICK_CASES, Case, make_angles, make_values
from benchmarks.targets import evaluate_targets, target

OPS = ("forward", "backward", "forward+backward")
SHORT_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# Inputs, output gradient, outputs and eager's intermediates all live at once in an eager forward+backward.
TENSORS_IN_FLIGHT = 8
SPARE_BYTES = 512 * MIB


def op_callable(
    op: str,
    impl: Callable[..., torch.Tensor],
    values: torch.Tensor,
    angles: torch.Tensor,
    grad: torch.Tensor,
    inverse: bool,
    stream: torch.cuda.Stream,
) -> Callable[[], object]:
    """Builds the timed call of one operation; for ``backward`` the forward runs here, once, on ``stream`` (the
    timer's capture stream), and its graph is kept.

    Args:
        op: one of ``OPS``.
        impl: a function with ``apply_rope_triton``'s signature.
        values: ``[batch, sequence, (heads,) channels]``.
        angles: ``[1, sequence, pairs]`` float32.
        grad: gradient of the output, contiguous, in the shape of ``values``.
        inverse: rotate by the conjugate.
        stream: the stream graphs are captured on.
    """
    if op == "forward":
        return lambda: impl(values, angles, inverse=inverse)
    leaf = values.detach().requires_grad_(True)
    if op == "backward":
        with torch.cuda.stream(stream):  # the backward runs on its forward's stream: the timer's capture stream
            output = impl(leaf, angles, inverse=inverse)
        torch.cuda.current_stream().wait_stream(stream)
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


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or denominator is None or denominator <= 0 else numerator / denominator


def make_row(
    case: Case,
    dtype: torch.dtype,
    op: str,
    values: torch.Tensor,
    copy: Timing,
    timings: dict[str, Timing],
    peaks: dict[str, int],
    errors: dict[str, str],
) -> dict[str, Any]:
    """One JSON row: times, ratios and targets of one operation on one tensor."""
    passes = 2 if op == "forward+backward" else 1
    tensor_bytes = values.numel() * values.element_size()
    fused = timings.get("fused")

    def ratios(numerator: Timing | None, denominator: Timing | None) -> dict[str, float | None]:
        return {
            mode: _ratio(getattr(numerator, f"{mode}_ms", None), getattr(denominator, f"{mode}_ms", None))
            for mode in ("warm", "cold")
        }

    row = {
        "case": case.name,
        "shape": list(case.shape),
        "layout": "transposed" if case.transposed else "contiguous",
        "inverse": case.inverse,
        "dtype": str(dtype).removeprefix("torch."),
        "pairs": PAIRS,
        "op": op,
        "tensor_bytes": tensor_bytes,
        "copy_bytes": passes * 2 * tensor_bytes,
        "times_ms": {**{name: timing.to_json() for name, timing in timings.items()}, "copy": copy.to_json()},
        "ratio_to_copy": ratios(fused, copy),
        "speedup_vs_eager": ratios(timings.get("eager"), fused),
        "speedup_vs_compile": ratios(timings.get("compile"), fused),
        "peak_extra_bytes": peaks if op == "forward+backward" else None,
        "errors": errors,
    }
    row["targets"] = evaluate_targets(case, dtype, op, row)
    return row


def measure_case(
    case: Case,
    dtype: torch.dtype,
    rope: ModuleType,
    timer: GraphTimer,
    with_compile: bool,
    clock: Clock,
    results: ResultFile,
) -> bool:
    """Times every operation of one case and adds a row per operation; False when the time budget ran out."""
    values = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    grad = torch.randn(case.shape, dtype=dtype, device="cuda")
    # A fresh dynamo cache per shape keeps torch.compile under its recompile limit across the whole plan.
    torch.compiler.reset()
    impls = {"fused": rope.apply_rope_triton, "eager": rope.apply_rope_eager}
    if with_compile:
        impls["compile"] = torch.compile(rope.apply_rope_eager, dynamic=False)
    # clone() keeps a transposed view's strides: the same bytes read and written in the best order, the floor.
    values.clone()
    copy = timer.time_copy(values.clone)
    copies = {"forward": copy, "backward": copy, "forward+backward": copy + copy}
    channels = case.shape[-1]
    heads = case.shape[2] if len(case.shape) == 4 else 1
    launch = rope.launch_config(values.numel() // channels, channels, PAIRS, values.element_size(), heads)
    for op in OPS:
        if clock.expired():
            return False
        timings: dict[str, Timing] = {}
        peaks: dict[str, int] = {}
        errors: dict[str, str] = {}
        for name, impl in impls.items():
            try:
                fn = op_callable(op, impl, values, angles, grad, case.inverse, timer.stream)
                fn()  # torch.compile compiles, Triton JITs and the kernel calibrates here, outside the timing
                if op == "forward+backward":
                    peaks[name] = peak_extra_bytes(fn)
                timings[name] = timer.time(fn)
            except Exception as error:  # a failing implementation, compile above all, must not end the run
                errors[name] = short_error(error)
                clock.log(f"  {case.name} {SHORT_DTYPE[dtype]} {op} {name} failed: {errors[name]}")
            fn = None  # drops the kept graph of "backward" before the next implementation allocates its own
            torch.cuda.empty_cache()
        row = make_row(case, dtype, op, values, copies[op], timings, peaks, errors)
        row["launch_config"] = dataclasses.asdict(launch)
        results.add_row(row)
        clock.log(format_row(row))
    return True


# Rounds of the host-time measurement: the first one or two rounds of a process read up to 1.5x the later ones
# (with gradients 69 and 55 us, then 45-47 us, both kernels alike), so each call is timed in every round,
# alternating, and the median of the rounds is kept.
HOST_ROUNDS = 5


def measure_host(rope: ModuleType, timer: GraphTimer) -> list[dict[str, Any]]:
    """Wall time per call over 3000 back-to-back calls on a BF16 ``[1, 1, 1, 64]`` tensor (the GPU keeps up, so
    this is the host's cost), fused and eager, with gradients wanted and under ``torch.no_grad()``: the median of
    ``HOST_ROUNDS`` rounds, each timing every call in turn."""
    values = torch.randn((1, 1, 1, 64), dtype=torch.bfloat16, device="cuda")
    angles = make_angles(1)
    leaf = values.detach().requires_grad_(True)
    calls = {
        ("grad", "eager"): lambda: rope.apply_rope_eager(leaf, angles),
        ("grad", "fused"): lambda: rope.apply_rope_triton(leaf, angles),
        ("no_grad", "eager"): lambda: rope.apply_rope_eager(values, angles),
        ("no_grad", "fused"): lambda: rope.apply_rope_triton(values, angles),
        ("no_grad", "fused in place"): lambda: rope.apply_rope_triton_(values, angles),
    }
    rounds: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(HOST_ROUNDS):
        for (mode, name), call in calls.items():
            with torch.set_grad_enabled(mode == "grad"):
                rounds[mode, name].append(timer.back_to_back_host_ms(call))
    measured = {key: statistics.median(times) for key, times in rounds.items()}
    rows = []
    for (mode, name), host_ms in measured.items():
        eager = measured[mode, "eager"]
        row = {"mode": mode, "impl": name, "host_us": host_ms * 1e3, "ratio_to_eager": host_ms / eager}
        if name != "eager":
            row["target"] = target("host fused/eager", "<=", 0.5, row["ratio_to_eager"])
        rows.append(row)
    return rows


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
    f"{'case':<15} {'dtype':<5} {'op':<16} {'MiB':>5} {'fused us':>9} {'cold us':>8} {'host us':>8} "
    f"{'xcopy':>6} {'xcopy c':>7} {'eager x':>7} {'eager c':>7} {'comp x':>6} {'comp c':>6} {'peak f/e':>10}  targets"
)


def format_row(row: dict[str, Any]) -> str:
    """One table line; docs/benchmarks.md explains the columns."""
    fused = row["times_ms"].get("fused") or {}
    peaks = row["peak_extra_bytes"] or {}
    peak = f"{peaks['fused'] / MIB:.0f}/{peaks['eager'] / MIB:.0f}" if {"fused", "eager"} <= peaks.keys() else "-"
    us = {key: None if key not in fused else fused[key] * 1e3 for key in ("warm", "cold", "host")}
    return (
        f"{row['case']:<15} {row['dtype'].replace('bfloat', 'bf').replace('float', 'fp'):<5} {row['op']:<16} "
        f"{row['tensor_bytes'] / MIB:>5.0f} {_cell(us['warm'], '9.1f')} {_cell(us['cold'], '8.1f')} "
        f"{_cell(us['host'], '8.1f')} {_cell(row['ratio_to_copy']['warm'], '6.3f')} "
        f"{_cell(row['ratio_to_copy']['cold'], '7.3f')} {_cell(row['speedup_vs_eager']['warm'], '7.2f')} "
        f"{_cell(row['speedup_vs_eager']['cold'], '7.2f')} {_cell(row['speedup_vs_compile']['warm'], '6.2f')} "
        f"{_cell(row['speedup_vs_compile']['cold'], '6.2f')} {peak:>10}  {_targets_cell(row['targets'])}"
    )


def print_tables(document: dict[str, Any]) -> None:
    """Prints the environment and the three sections."""
    from benchmarks.in_place import IN_PLACE_HEADER, format_in_place_row

    env = document["environment"]
    print(
        f"\n{env['gpu']} | torch {env['torch']} | triton {env['triton']} | CUDA {env['cuda']} | {env['date']}"
        f" | kernel {env.get('kernel_sha256')} | {document.get('calibration', '')} | status: {document['status']}"
    )
    print(HEADER)
    for row in document["rows"]:
        print(format_row(row))
    print("\n" + IN_PLACE_HEADER)
    for row in document["in_place"]:
        print(format_in_place_row(row))
    print(f"\n{'mode':<8} {'impl':<15} {'host us':>8} {'x eager':>8}")
    for row in document["host"]:
        print(f"{row['mode']:<8} {row['impl']:<15} {row['host_us']:>8.1f} {row['ratio_to_eager']:>8.3f}")
    for skip in document["skipped"]:
        print(f"skipped {skip['case']} {skip['dtype']}: {skip['reason']}")


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: the plan's options, and the speed gate's (``benchmarks.against``) for ``--help``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the JSON")
    parser.add_argument("--quick", action="store_true", help="bf16 query and window KV only out of place")
    parser.add_argument(
        "--dtypes", default="bf16,fp32", help="comma-separated, of bf16, fp16, fp32 (default %(default)s)"
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=420.0,
        metavar="SECONDS",
        help="start no new measurement after this many seconds; the rows so far are kept (default: %(default)g)",
    )
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    gate = parser.add_argument_group(
        "the speed gate",
        "With --against REV, benchmarks.against runs instead, with these options, --dtypes, --out (default "
        "benchmarks/results/scratch) and --time-budget (default 480); exit 0, 1 (a row slower) or 2 (no CUDA).",
    )
    against.add_gate_arguments(gate, standalone=False)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line; the gate's options without ``--against`` are a usage error (exit 2)."""
    args = (parser := build_parser()).parse_args(argv)
    given = [option for option in against.GATE_OPTIONS if getattr(args, option.removeprefix("--")) is not None]
    if given and args.against is None:
        parser.error(f"{', '.join(given)}: options of the speed gate, which needs --against REV")
    return args


def _fits(case: Case, dtype: torch.dtype) -> str | None:
    torch.cuda.empty_cache()
    needed = TENSORS_IN_FLIGHT * torch.Size(case.shape).numel() * dtype.itemsize + SPARE_BYTES
    free = torch.cuda.mem_get_info()[0]
    return None if free >= needed else f"needs ~{needed / MIB:.0f} MiB of GPU memory, {free / MIB:.0f} MiB free"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the plan (exit 0, also when stopped by the budget; 2 without CUDA) or ``--against REV``'s gate."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    if args.against is not None:  # the gate parses the same words with its own defaults
        return against.main(arguments)
    if not cuda_available("benchmarks.run"):
        return NO_CUDA_EXIT_CODE
    from benchmarks.in_place import IN_PLACE_CASES, format_in_place_row, load_flash_attention_rotary, measure_in_place
    from dsv41_rope import kernel as rope

    clock = Clock(args.time_budget)
    timer = GraphTimer()
    dtypes = [DTYPES[name] for name in args.dtypes.split(",")]
    document = {
        "schema": "rope-benchmark-run/2",
        "status": "running",
        "environment": environment(),
        "calibration": rope.settings(torch.device("cuda", torch.cuda.current_device())).describe(),
        "settings": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "pairs": PAIRS,
            "replays": timer.replays,
            "flush_bytes": GraphTimer.FLUSH_BYTES,
            "time_budget_s": args.time_budget,
        },
        "rows": [],
        "in_place": [],
        "host": [],
        "skipped": [],
    }
    results = ResultFile(args.out, "run", document)
    clock.log(f"writing {results.path}; {document['calibration']}")
    status = "complete"
    try:
        document["host"] = measure_host(rope, timer)
        results.write()
        flash_rotary, flash_note = load_flash_attention_rotary()
        document["settings"]["flash_attention"] = flash_note
        for name in IN_PLACE_CASES:
            for dtype in dtypes:
                try:
                    document["in_place"].append(measure_in_place(CASES[name], dtype, rope, timer, flash_rotary))
                    clock.log(format_in_place_row(document["in_place"][-1]))
                except Exception as error:  # one failing row must not end the run
                    clock.log(f"in place {name} {SHORT_DTYPE[dtype]} failed: {short_error(error)}")
                results.write()
        plan = [(name, dtype) for dtype in dtypes for name in (QUICK_CASES if args.quick else CASES)]
        for name, dtype in plan:
            case = CASES[name]
            if clock.expired():
                status = f"stopped: time budget of {args.time_budget:g} s spent before {name} {SHORT_DTYPE[dtype]}"
                break
            reason = _fits(case, dtype)
            if reason:
                document["skipped"].append({"case": name, "dtype": str(dtype).removeprefix("torch."), "reason": reason})
                continue
            clock.log(f"{name} {SHORT_DTYPE[dtype]} {list(case.shape)} {'inverse ' if case.inverse else ''}...")
            if not measure_case(case, dtype, rope, timer, not args.no_compile, clock, results):
                status = f"stopped: time budget of {args.time_budget:g} s spent during {name} {SHORT_DTYPE[dtype]}"
                break
    except KeyboardInterrupt:
        status = "interrupted"
    results.finish(status)
    print_tables(document)
    clock.log(f"wrote {results.path}")
    return 130 if status == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
