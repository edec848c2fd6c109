"""Why the small DeepSeek tensors are slower than the sketch: each way of calling our kernel beside the sketch.

On a CUDA machine, from the repository root (the sketch from ``.peers/one_launch_sketch.py``)::

    python -m scripts.small_tensor_probe              # warm GPU times over the clone, and the kernels one call runs
    ncu --clock-control none python -m scripts.small_tensor_probe --once   # one launch of each, for the counters

For the window KV, compressed KV, index keys and index query (BF16 and FP32), by CUDA-graph replay with a warm L2:
``clone``, the Triton copy, the same copy kernel handed as many unused integer arguments as our kernel takes (what a
launch's larger parameter block costs in graph replay, where ours trails the sketch while under ncu one launch of ours
is the faster), the public forward (``apply_rope_triton``), the launcher called directly (``_launch``, no checks, no
custom op, no autograd), the compiled kernel launched from its plan, and the sketch; and the CUDA kernels one public
forward launches (``torch.profiler``). Every call is timed in each of ``--rounds`` rounds, in an order that rotates
from round to round; each ratio (a call over the clone, the unused-arguments copy over the plain copy, our launcher
over the sketch) is taken within a round and printed as [median, least, greatest] over the rounds: runs 60 and 61
(three rounds, each call timed apart) read the unused arguments' cost from -9% to +18% on the same rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks.against import load_sketch
from benchmarks.common import GraphTimer, calls_per_graph, triton_copy
from benchmarks.shapes import CASES, make_angles, make_values

SMALL = ("window_kv", "compressed_kv", "index_keys", "index_query")
UNUSED_ARGUMENTS = 14  # our kernel's runtime integers: 13 for a 3-D contiguous tensor, 14 for a 4-D one (main's)


@functools.cache
def _copy_kernel_with_unused_arguments():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(
        source_ptr, target_ptr, count, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, BLOCK: tl.constexpr
    ):
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < count
        tl.store(target_ptr + offsets, tl.load(source_ptr + offsets, mask=mask), mask=mask)

    return copy_kernel


def triton_copy_with_unused_arguments(values: torch.Tensor) -> torch.Tensor:
    """:func:`benchmarks.common.triton_copy`'s kernel and launch, with 14 integer arguments it does not read (odd
    values, which Triton passes as 32-bit parameters rather than constants)."""
    output = torch.empty_like(values)
    unused = [3 + 2 * index for index in range(UNUSED_ARGUMENTS)]
    _copy_kernel_with_unused_arguments()[(-(-values.numel() // 4096),)](
        values, output, values.numel(), *unused, BLOCK=4096, num_warps=4
    )
    return output


def alternating_times(measurements: dict[str, Callable[[], float]], rounds: int) -> list[dict[str, float]]:
    """Each measurement (a call's time in ms) taken once in each of ``rounds`` rounds. The order rotates from round to
    round, so that no call always runs right after the same one; ratios taken within a round (a call over the clone,
    or over another call) then share that round's state of the GPU, which moves by more than the differences sought
    at 2-3 us."""
    labels = list(measurements)
    times = []
    for round_index in range(rounds):
        start = round_index % len(labels)
        times.append({label: measurements[label]() for label in labels[start:] + labels[:start]})
    return times


def ratio_summary(times: list[dict[str, float]], numerator: str, denominator: str) -> list[float]:
    """The median, least and greatest of ``numerator``'s time over ``denominator``'s, taken round by round."""
    ratios = sorted(round_times[numerator] / round_times[denominator] for round_times in times)
    return [round(float(np.median(ratios)), 3), round(ratios[0], 3), round(ratios[-1], 3)]


def event_timed_calls(call: Callable[[], object]) -> int:
    """Calls per graph as :class:`benchmarks.common.GraphTimer` counted them before run 62: one call timed between
    CUDA events in a stream (host time included), enough for 2 ms, at most 50."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return calls_per_graph(start.elapsed_time(end))


def kernels_of(call) -> list[str]:
    """Names of the CUDA kernels one call launches."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        call()
        torch.cuda.synchronize()
    return [event.name for event in profile.events() if event.device_type == torch.autograd.DeviceType.CUDA]


def compiled_kernels(function) -> list:
    """Every kernel a ``@triton.jit`` function has compiled in this process (Triton 3.x's per-device caches)."""
    kernels = []
    for cache in getattr(function, "device_caches", {}).values():
        kernels.extend(cache[0].values())
    return kernels


def write_sass(kernel, path: Path) -> None:
    """The SASS of a compiled kernel (``cuobjdump -sass`` of its cubin), with its registers and spills first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cubin = path.with_suffix(".cubin")
    cubin.write_bytes(kernel.asm["cubin"])
    import triton.backends.nvidia

    bundled = Path(triton.backends.nvidia.__file__).parent / "bin" / "cuobjdump"
    tool = shutil.which("cuobjdump") or str(bundled)
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True).stdout
    path.write_text(
        f"// registers {getattr(kernel, 'n_regs', None)} spills {getattr(kernel, 'n_spills', None)}\n" + sass
    )
    (path.with_suffix(".ptx")).write_text(kernel.asm.get("ptx", ""))
    cubin.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="launch each once (after a warm-up), for ncu")
    parser.add_argument("--sass", type=Path, help="write the SASS of our compiled kernel and the sketch's here")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every call, in rotating order (default 5)")
    args = parser.parse_args(argv)
    from impl import rope_triton as rope

    sketch, origin = load_sketch(Path(tempfile.mkdtemp()))
    print("sketch:", origin if sketch is None else "loaded", flush=True)
    timer = GraphTimer(replays=25)
    for dtype in (torch.bfloat16, torch.float32):
        for name in SMALL:
            case = CASES[name]
            values, angles = make_values(case, dtype), make_angles(case.shape[1])
            calls = {
                "clone": values.clone,
                "triton_copy": lambda values=values: triton_copy(values),
                "triton_copy_unused_arguments": lambda values=values: triton_copy_with_unused_arguments(values),
                "public": lambda values=values, angles=angles: rope.apply_rope_triton(values, angles),
                "launch": lambda values=values, angles=angles: rope._launch(values, angles, False),
            }
            calls["launch"]()
            plan_key = next(reversed(rope._PLANS))
            plan = rope._PLANS[plan_key]
            output = torch.empty_like(values)
            calls["plan"] = lambda values=values, angles=angles, plan=plan, output=output: plan.launch(
                values, angles, output
            )
            if sketch is not None and dtype == torch.bfloat16:
                calls["sketch"] = lambda values=values, angles=angles: sketch(values, angles)
            if args.once:
                for label, call in calls.items():
                    if label in ("launch", "sketch", "triton_copy", "triton_copy_unused_arguments"):
                        call()
                        torch.cuda.synchronize()
                continue
            row = {"case": name, "dtype": str(dtype).removeprefix("torch."), "config": str(plan.scalars)[-120:]}
            for call in calls.values():
                call()
            # Calls a graph holds for each way of calling (GraphTimer's count, once per call for every round), beside
            # the count an event-timed call gives, which includes host time (GraphTimer's count before run 62).
            counts = {label: timer._calls(call) for label, call in calls.items()}
            measurements = {
                label: functools.partial(timer.warm_ms, call, counts[label]) for label, call in calls.items()
            }
            times = alternating_times(measurements, args.rounds)
            for label in calls:  # [median, least, greatest] over the clone of the same round
                row[label] = ratio_summary(times, label, "clone")
            row["unused_arguments_over_copy"] = ratio_summary(times, "triton_copy_unused_arguments", "triton_copy")
            if "sketch" in calls:
                row["launch_over_sketch"] = ratio_summary(times, "launch", "sketch")
            row["clone_us"] = round(float(np.median([round_times["clone"] for round_times in times])) * 1e3, 2)
            row["calls"] = counts
            row["calls_event_timed"] = {label: event_timed_calls(call) for label, call in calls.items()}
            row["public_kernels"] = kernels_of(calls["public"])
            leaf = values.detach().requires_grad_(True)
            output, grad = rope.apply_rope_triton(leaf, angles), torch.ones_like(values)
            row["backward_kernels"] = kernels_of(
                functools.partial(torch.autograd.grad, output, leaf, grad, retain_graph=True)
            )
            row["registers"] = getattr(plan.compiled, "n_regs", None), getattr(plan.compiled, "n_spills", None)
            if args.sass:
                write_sass(plan.compiled, args.sass / f"ours_{name}_{row['dtype']}.sass")
            print(json.dumps(row), flush=True)
    if args.sass and sketch is not None:  # each kernel the sketch compiled for the cases above, once
        for index, kernel in enumerate(compiled_kernels(sketch.__globals__.get("rope1"))):
            write_sass(kernel, args.sass / f"sketch_{index}.sass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
