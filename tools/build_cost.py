"""What building the kernel costs off the GPU, and whether two kernel sources build to the same machine code.

This compiles kernel sources for sm_90 with Triton's ahead-of-time compiler, for the specializations their launcher
makes for the DeepSeek V4.1 tensors (out of place and in place, BF16 and FP32), and prints per source the build
seconds, per stage, and per specialization the SASS's instructions, registers, local-memory accesses and a digest of
its instructions; for each source after the first, how many specializations have the first source's SASS. A source
is a kernel package directory or a single-file kernel of a revision before the package (``tools/export_kernel.sh``
exports either); equal digests on every specialization show, without a GPU, that a change moves no bits::

    python -m tools.build_cost                                        # dsv41_rope/kernel
    python -m tools.build_cost dsv41_rope/kernel OTHER --rounds 3     # sources alternating, fresh caches
    python -m tools.build_cost --launches DIR --sample 60             # launches tools.launch_recorder wrote

With ``--launches`` it builds instead the distinct specializations of recorded launches (the suite's generated
layouts: :mod:`tools.launch_recorder`), or a fixed sample of them, and prints their count, the mean build and the
three largest programs (shape, tile and warps).

It needs a Triton with its NVIDIA backend (the wheel carries ``ptxas`` and ``cuobjdump``), no GPU. Integer arguments
are specialized as Triton specializes them (1 as a constant, multiples of 16 as divisible, except those the kernel
names ``do_not_specialize``), pointers as 16-byte aligned (recorded launches' as they were). The SASS digest is taken
over the instructions with the kernel's own name replaced, so that a renamed kernel function compares equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from benchmarks.shapes import CASES, PAIRS, make_values
from tools.kernel_source import KernelSource, load_kernel

__all__ = [
    "SPECIALIZATIONS",
    "TRITON_TYPES",
    "Build",
    "Sass",
    "StageClock",
    "build_all",
    "deepseek_builds",
    "main",
    "recorded_builds",
    "sass_lines",
    "sass_stats",
    "sm90_cubin",
    "specialization",
]

TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# The benchmarks' DeepSeek V4.1 tensors, each out of place and in place.
SPECIALIZATIONS = tuple(
    (name + (" in place" if in_place else ""), in_place) for name in CASES for in_place in (False, True)
)
# What a kernel's own name becomes in the SASS compared: the name is no part of the machine code.
KERNEL_NAME = "<kernel>"
DEFAULT_SOURCE = Path("dsv41_rope/kernel")


def specialization(kernel: Any, scalars: dict[str, object], dtype: torch.dtype) -> tuple[dict, dict, dict]:
    """Triton's ``signature``, ``constexprs`` and ``attrs`` for a launch of ``kernel`` with ``scalars`` (the
    arguments after its three pointers, in order), as Triton specializes them when it launches on a GPU.

    Raises:
        TypeError: a runtime argument is not an integer (a bool included).
    """
    signature, constexprs, attrs = {}, {}, {}
    for index, name in enumerate(kernel.arg_names):
        if index < 3:  # values, frequencies (float32 angles), output
            signature[name] = "*fp32" if index == 1 else f"*{TRITON_TYPES[dtype]}"
            attrs[(index,)] = [["tt.divisibility", 16]]
            continue
        value = scalars[name]
        specialize = not kernel.params[index].do_not_specialize
        if kernel.params[index].is_constexpr:
            signature[name], constexprs[(index,)] = "constexpr", value
        elif isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: a runtime argument {value!r} that is not an integer")
        elif value == 1 and specialize:
            signature[name], constexprs[(index,)] = "constexpr", 1
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0 and specialize:
                attrs[(index,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


@dataclasses.dataclass(frozen=True)
class Build:
    """One specialization of the kernel to compile: a label, the values' dtype, and Triton's view of the launch."""

    name: str
    dtype: torch.dtype
    signature: dict
    constexprs: dict
    attrs: dict
    num_warps: int


def _build(
    kernel: KernelSource,
    name: str,
    values: torch.Tensor,
    angles: torch.Tensor,
    output: torch.Tensor,
    negate_sin: bool,
    aligned: Sequence[bool] = (True, True, True),
) -> Build:
    settings = kernel.kernel_settings(contraction=("first", "first"), in_kernel_frequencies=True, source="build_cost")
    plan = kernel.make_plan(values, angles, output, negate_sin, settings, None)
    signature, constexprs, attrs = specialization(kernel.rope_kernel, plan.scalars, values.dtype)
    for index, is_aligned in enumerate(aligned):  # Triton marks a pointer divisible only where it is 16-byte aligned
        if not is_aligned:
            attrs.pop((index,), None)
    return Build(name, values.dtype, signature, constexprs, attrs, plan.num_warps)


def deepseek_builds(kernel: KernelSource, cases: Sequence[str] | None = None) -> list[Build]:
    """The launcher's specialization for each DeepSeek tensor, out of place and in place (of ``cases``, default all),
    and dtype (shapes on the meta device: no memory, no GPU)."""
    found = []
    for dtype in (torch.bfloat16, torch.float32):
        for name, in_place in SPECIALIZATIONS:
            if cases is not None and name not in cases:
                continue
            case = CASES[name.removesuffix(" in place")]
            values = make_values(case, dtype, device="meta")
            angles = torch.empty(1, case.shape[1], PAIRS, dtype=torch.float32, device="meta")
            output = values if in_place else torch.empty(case.shape, dtype=dtype, device="meta")
            found.append(_build(kernel, name, values, angles, output, False))
    return found


def recorded_builds(kernel: KernelSource, directory: Path) -> tuple[int, list[Build]]:
    """The distinct specializations of the launches :mod:`tools.launch_recorder` wrote into ``directory`` (angles
    taken as contiguous), in a fixed order; and how many launches there were."""
    files = sorted(directory.glob("launches-*.jsonl"))
    launches = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    distinct: dict[str, Build] = {}
    for launch in launches:
        dtype = getattr(torch, launch["dtype"])
        values = torch.empty_strided(launch["shape"], launch["stride"], dtype=dtype, device="meta")
        if values.numel() == 0:
            continue
        output = (
            values
            if launch["in_place"]
            else torch.empty_strided(launch["shape"], launch["output_stride"], dtype=dtype, device="meta")
        )
        angles = torch.empty(launch["angles"], dtype=torch.float32, device="meta")
        name = "x".join(map(str, launch["shape"]))
        build = _build(kernel, name, values, angles, output, launch["negate_sin"], launch["aligned"])
        constants = sorted(build.constexprs.items())
        key = repr((build.dtype, build.signature, constants, sorted(build.attrs), build.num_warps))
        distinct.setdefault(key, build)
    return len(launches), list(distinct.values())


class StageClock:
    """Seconds per compiler stage, summed over builds (each stage the NVIDIA backend adds, wrapped)."""

    def __init__(self) -> None:
        from triton.backends.nvidia.compiler import CUDABackend

        self.seconds: dict[str, float] = {}
        add_stages = CUDABackend.add_stages
        clock = self

        def timed_add_stages(backend: Any, stages: dict, options: Any, *args: Any, **kwargs: Any) -> None:
            add_stages(backend, stages, options, *args, **kwargs)
            for stage, function in list(stages.items()):
                stages[stage] = clock._timed(stage, function)

        CUDABackend.add_stages = timed_add_stages

    def _timed(self, stage: str, function: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def timed(source: Any, metadata: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(source, metadata)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - began

        return timed


class Sass(NamedTuple):
    """What a build's machine code is: registers, instructions, local-memory loads/stores (spills, and libdevice's
    slow paths), and a digest of its instructions (equal digests: the same machine code)."""

    registers: int | None
    instructions: int
    local: int
    digest: str


def _cuobjdump(cubin: bytes, option: str) -> str:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([tool, option, file.name], capture_output=True, text=True, check=True).stdout


def sass_lines(cubin: bytes, kernel_name: str | None = None) -> list[str]:
    """A cubin's SASS instructions, one line each as ``cuobjdump`` prints them (address, instruction, encoding),
    with ``kernel_name`` (where given) written as ``<kernel>`` wherever it stands as a name of its own (the
    subroutines Triton names after the kernel)."""
    lines = [line for line in _cuobjdump(cubin, "-sass").splitlines() if re.match(r"^\s+/\*[0-9a-f]{4,}\*/", line)]
    if kernel_name is None:
        return lines
    name = re.compile(rf"(?<!\w){re.escape(kernel_name)}(?!\w)")
    return [name.sub(KERNEL_NAME, line) for line in lines]


def sass_stats(cubin: bytes, kernel_name: str | None = None) -> Sass:
    """The :class:`Sass` figures of a cubin (``cuobjdump``'s SASS and resource usage), its digest over
    :func:`sass_lines` with ``kernel_name`` replaced."""
    lines = sass_lines(cubin, kernel_name)
    usage = _cuobjdump(cubin, "-res-usage")
    registers = re.search(r"REG:(\d+)", usage)
    local = sum(bool(re.search(r"\b(LDL|STL)\b", line)) for line in lines)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    return Sass(int(registers.group(1)) if registers else None, len(lines), local, digest)


def sm90_cubin(source: Any, num_warps: int) -> bytes:
    """The cubin Triton builds for sm_90 (H100, H200) from a ``triton.compiler.ASTSource``."""
    import triton
    from triton.backends.compiler import GPUTarget

    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["cubin"]


def build_all(kernel: KernelSource, builds: Sequence[Build]) -> tuple[float, list[tuple[Build, Sass]]]:
    """Compile every build from an empty cache; the wall seconds and each build's SASS figures."""
    import triton
    from triton.compiler import ASTSource

    rows, seconds = [], 0.0
    with tempfile.TemporaryDirectory(prefix="build-cost-") as caches:  # an empty Triton cache for every build
        for build in builds:
            triton.knobs.cache.dir = tempfile.mkdtemp(dir=caches)
            source = ASTSource(
                fn=kernel.rope_kernel, signature=build.signature, constexprs=build.constexprs, attrs=build.attrs
            )
            began = time.perf_counter()
            cubin = sm90_cubin(source, build.num_warps)
            seconds += time.perf_counter() - began
            rows.append((build, sass_stats(cubin, kernel.kernel_name)))
    return seconds, rows


def _print_largest(kernel: KernelSource, figures: list[tuple[Build, Sass]], median: float) -> None:
    """The recorded launches' summary: mean build, registers, and the three largest programs."""
    registers = sorted(sass.registers or 0 for _, sass in figures)
    largest = sum(sass.instructions >= 4096 for _, sass in figures)
    print(
        f"  {median / len(figures):.3f} s a build; registers median {registers[len(registers) // 2]},"
        f" most {registers[-1]}; programs of 4096 instructions or more: {largest}"
    )
    names = kernel.rope_kernel.arg_names
    by_size = sorted(figures, key=lambda row: (row[1].instructions, row[1].registers or 0))
    for build, (registers, instructions, local, _) in by_size[-3:]:
        tile = {names[key[0]]: value for key, value in build.constexprs.items()}
        print(
            f"  largest: {build.name} {TRITON_TYPES[build.dtype]}"
            f" {'out of place' if tile['COPY_CHANNELS'] else 'in place'}, {tile['BLOCK_R']} rows of"
            f" {tile['COPY_K']}+{tile['ROTARY_K']} channels on {build.num_warps} warps: {instructions}"
            f" instructions, {registers} registers, LDL/STL {local}"
        )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.build_cost", description=__doc__.splitlines()[0])
    parser.add_argument(
        "sources",
        nargs="*",
        type=Path,
        default=[DEFAULT_SOURCE],
        metavar="SOURCE",
        help=f"a kernel package directory or a single-file kernel (default {DEFAULT_SOURCE})",
    )
    parser.add_argument("--rounds", type=int, default=1, help="builds of each source, alternating (default 1)")
    names = ", ".join(name for name, _ in SPECIALIZATIONS)
    parser.add_argument("--cases", help=f"comma-separated, of: {names} (default all)")
    parser.add_argument("--launches", type=Path, help="build the launches tools.launch_recorder wrote here instead")
    parser.add_argument("--sample", type=int, help="with --launches: build this many, a fixed random choice")
    args = parser.parse_args(argv)
    args.cases = args.cases.split(",") if args.cases else None
    unknown = sorted(set(args.cases or ()) - {name for name, _ in SPECIALIZATIONS})
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {names}")
    if args.sample is not None and args.launches is None:
        parser.error("--sample picks among recorded launches: give --launches too")
    if args.launches is not None and not any(args.launches.glob("launches-*.jsonl")):
        parser.error(f"no launches-*.jsonl in {args.launches} (tools.launch_recorder writes them)")
    missing = [str(path) for path in args.sources if not path.exists()]
    if missing:
        parser.error(f"no such kernel source: {', '.join(missing)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Builds each source's specializations ``--rounds`` times, alternating the sources; prints the medians."""
    args = _parse_args(argv)
    # Compiled kernels, even where the caller runs Triton's interpreter: the kernel and Triton read it on import.
    os.environ["TRITON_INTERPRET"] = "0"
    import triton

    clock = StageClock()
    kernels = [load_kernel(path) for path in args.sources]
    builds, described = {}, {}
    for index, kernel in enumerate(kernels):
        if args.launches is None:
            builds[index] = deepseek_builds(kernel, args.cases)
            described[index] = f"{len(builds[index])} specializations of the DeepSeek tensors"
        else:
            launches, distinct = recorded_builds(kernel, args.launches)
            builds[index] = distinct
            if args.sample is not None and args.sample < len(distinct):
                builds[index] = random.Random(0).sample(distinct, args.sample)
            described[index] = (
                f"{launches} launches, {len(distinct)} distinct specializations, {len(builds[index])} built"
            )
    print(f"triton {triton.__version__}, sm_90")
    totals: dict[int, list[float]] = {index: [] for index in range(len(kernels))}
    stages: dict[int, dict[str, float]] = {index: {} for index in range(len(kernels))}
    figures: dict[int, list[tuple[Build, Sass]]] = {}
    for _ in range(args.rounds):
        for index, kernel in enumerate(kernels):
            clock.seconds = {}
            seconds, figures[index] = build_all(kernel, builds[index])
            totals[index].append(seconds)
            for stage, value in clock.seconds.items():
                stages[index][stage] = stages[index].get(stage, 0.0) + value / args.rounds
    for index, kernel in enumerate(kernels):
        median = sorted(totals[index])[len(totals[index]) // 2]
        per_stage = ", ".join(f"{stage} {value:.2f}" for stage, value in stages[index].items())
        print(f"\n{kernel.path} (kernel {kernel.sha256}, {kernel.kernel_name}): {described[index]}")
        print(f"  builds {median:.2f} s (median of {args.rounds}; stages, mean s: {per_stage})")
        if args.launches is not None:
            if figures[index]:
                _print_largest(kernel, figures[index], median)
            continue
        for build, (registers, instructions, local, digest) in figures[index]:
            print(
                f"  {build.name:22} {TRITON_TYPES[build.dtype]:5} registers {registers!s:>4}  instructions"
                f" {instructions:>5}  LDL/STL {local}  SASS {digest}"
            )
        if index:
            pairs = zip(figures[index], figures[0], strict=True)
            same = [ours.digest == first.digest for (_, ours), (_, first) in pairs]
            print(f"  SASS the same as {args.sources[0]}'s: {sum(same)} of {len(same)} specializations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
