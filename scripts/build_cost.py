"""What building the kernel costs, off the GPU: Triton's stages timed for the specializations the launcher makes.

From a fresh Triton cache the GPU suite's time is mostly Triton builds (``docs/ci.md``). This compiles a kernel file
(default ``impl/rope_triton.py``) for sm_90 with Triton's ahead-of-time compiler, for the specializations its launcher
makes for the DeepSeek V4.1 tensors (out of place and in place, BF16 and FP32), and prints per kernel file the build
seconds, per stage, and per specialization the SASS's instructions, registers, local-memory accesses and a digest of
its instructions; for each file after the first, how many specializations have the first file's SASS::

    python -m scripts.build_cost                                  # impl/rope_triton.py
    python -m scripts.build_cost impl/rope_triton.py OTHER.py --rounds 3   # kernel files alternating, fresh caches
    python -m scripts.build_cost --launches DIR --sample 60       # launches scripts.launch_recorder wrote

With ``--launches`` it builds instead the distinct specializations of recorded launches (the suite's generated
layouts: ``scripts/launch_recorder.py``), or a fixed sample of them, and prints their count, the mean build and the
three largest programs (shape, tile and warps).

It needs a Triton with its NVIDIA backend (the wheel carries ``ptxas`` and ``cuobjdump``), no GPU: Triton 3.6.0's
wheel unpacked into a folder on ``PYTHONPATH`` gives the H200's compiler. Integer arguments are specialized as Triton
specializes them (1 as a constant, multiples of 16 as divisible, except those the kernel names ``do_not_specialize``),
pointers as 16-byte aligned (recorded launches' as they were).
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
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

from benchmarks.common import import_source
from benchmarks.shapes import CASES, PAIRS, make_values

TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# The benchmarks' DeepSeek V4.1 tensors, each out of place and in place.
SPECIALIZATIONS = tuple(
    (name + (" in place" if in_place else ""), in_place) for name in CASES for in_place in (False, True)
)


def specialization(kernel, scalars: dict[str, object], dtype: torch.dtype) -> tuple[dict, dict, dict]:
    """Triton's ``signature``, ``constexprs`` and ``attrs`` for a launch of ``kernel`` with ``scalars`` (the
    arguments after its three pointers, in order), as Triton specializes them when it launches on a GPU."""
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


def _build(rope: ModuleType, name: str, values, angles, output, negate_sin: bool, aligned=(True, True, True)) -> Build:
    settings = rope.KernelSettings(contraction=("first", "first"), in_kernel_frequencies=True, source="build_cost")
    plan = rope._make_plan(values, angles, output, negate_sin, settings, None)
    signature, constexprs, attrs = specialization(rope._rope_kernel, plan.scalars, values.dtype)
    for index, is_aligned in enumerate(aligned):  # Triton marks a pointer divisible only where it is 16-byte aligned
        if not is_aligned:
            attrs.pop((index,), None)
    return Build(name, values.dtype, signature, constexprs, attrs, plan.num_warps)


def deepseek_builds(rope: ModuleType, cases: Sequence[str] | None = None) -> list[Build]:
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
            found.append(_build(rope, name, values, angles, output, False))
    return found


def recorded_builds(rope: ModuleType, directory: Path) -> tuple[int, list[Build]]:
    """The distinct specializations of the launches ``scripts.launch_recorder`` wrote into ``directory`` (angles
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
        build = _build(rope, name, values, angles, output, launch["negate_sin"], launch["aligned"])
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

        def timed_add_stages(backend, stages, options, *args, **kwargs):
            add_stages(backend, stages, options, *args, **kwargs)
            for stage, function in list(stages.items()):
                stages[stage] = clock._timed(stage, function)

        CUDABackend.add_stages = timed_add_stages

    def _timed(self, stage: str, function):
        def timed(source, metadata):
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


def sass_lines(cubin: bytes) -> list[str]:
    """A cubin's SASS instructions, one line each as ``cuobjdump`` prints them (address, instruction, encoding)."""
    return [line for line in _cuobjdump(cubin, "-sass").splitlines() if re.match(r"^\s+/\*[0-9a-f]{4,}\*/", line)]


def sass_stats(cubin: bytes) -> Sass:
    """The :class:`Sass` figures of a cubin (``cuobjdump``'s SASS and resource usage)."""
    lines = sass_lines(cubin)
    usage = _cuobjdump(cubin, "-res-usage")
    registers = re.search(r"REG:(\d+)", usage)
    local = sum(bool(re.search(r"\b(LDL|STL)\b", line)) for line in lines)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    return Sass(int(registers.group(1)) if registers else None, len(lines), local, digest)


def sm90_cubin(source, num_warps: int) -> bytes:
    """The cubin Triton builds for the H200's architecture (sm_90) from a ``triton.compiler.ASTSource``."""
    import triton
    from triton.backends.compiler import GPUTarget

    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["cubin"]


def build_all(rope: ModuleType, builds: Sequence[Build]) -> tuple[float, list[tuple[Build, Sass]]]:
    """Compile every build from an empty cache; the wall seconds and each build's SASS figures."""
    import triton
    from triton.compiler import ASTSource

    rows, seconds = [], 0.0
    with tempfile.TemporaryDirectory(prefix="build-cost-") as caches:  # an empty Triton cache for every build
        for build in builds:
            triton.knobs.cache.dir = tempfile.mkdtemp(dir=caches)
            source = ASTSource(
                fn=rope._rope_kernel, signature=build.signature, constexprs=build.constexprs, attrs=build.attrs
            )
            began = time.perf_counter()
            cubin = sm90_cubin(source, build.num_warps)
            seconds += time.perf_counter() - began
            rows.append((build, sass_stats(cubin)))
    return seconds, rows


def main(argv: Sequence[str] | None = None) -> int:
    """Builds each kernel file's specializations ``--rounds`` times, alternating the files; prints the medians."""
    parser = argparse.ArgumentParser(prog="python -m scripts.build_cost", description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", type=Path, default=[Path("impl/rope_triton.py")])
    parser.add_argument("--rounds", type=int, default=1, help="builds of each file, alternating (default 1)")
    names = ", ".join(name for name, _ in SPECIALIZATIONS)
    parser.add_argument("--cases", help=f"comma-separated, of: {names} (default all)")
    parser.add_argument("--launches", type=Path, help="build the launches scripts.launch_recorder wrote here instead")
    parser.add_argument("--sample", type=int, help="with --launches: build this many, a fixed random choice")
    args = parser.parse_args(argv)
    cases = args.cases.split(",") if args.cases else None
    unknown = sorted(set(cases or ()) - {name for name, _ in SPECIALIZATIONS})
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {names}")
    if args.sample is not None and args.launches is None:
        parser.error("--sample picks among recorded launches: give --launches too")
    if args.launches is not None and not any(args.launches.glob("launches-*.jsonl")):
        parser.error(f"no launches-*.jsonl in {args.launches} (scripts.launch_recorder writes them)")
    # Compiled kernels, even where the caller runs Triton's interpreter: the kernel file and Triton read it.
    os.environ["TRITON_INTERPRET"] = "0"
    import triton

    clock = StageClock()
    sources = tempfile.TemporaryDirectory(prefix="build-cost-")  # the kernel files' copies, removed at exit
    modules = [
        import_source(path.read_text(), Path(sources.name), f"build_cost_kernel_{index}")
        for index, path in enumerate(args.kernels)
    ]
    builds, described = {}, {}
    for index, module in enumerate(modules):
        if args.launches is None:
            builds[index] = deepseek_builds(module, cases)
            described[index] = f"{len(builds[index])} specializations of the DeepSeek tensors"
        else:
            launches, distinct = recorded_builds(module, args.launches)
            builds[index] = distinct
            if args.sample is not None and args.sample < len(distinct):
                builds[index] = random.Random(0).sample(distinct, args.sample)
            described[index] = (
                f"{launches} launches, {len(distinct)} distinct specializations, {len(builds[index])} built"
            )
    print(f"triton {triton.__version__}, sm_90")
    totals: dict[int, list[float]] = {index: [] for index in range(len(modules))}
    stages: dict[int, dict[str, float]] = {index: {} for index in range(len(modules))}
    figures: dict[int, list] = {}
    for _ in range(args.rounds):
        for index, module in enumerate(modules):
            clock.seconds = {}
            seconds, figures[index] = build_all(module, builds[index])
            totals[index].append(seconds)
            for stage, value in clock.seconds.items():
                stages[index][stage] = stages[index].get(stage, 0.0) + value / args.rounds
    for index, path in enumerate(args.kernels):
        median = sorted(totals[index])[len(totals[index]) // 2]
        per_stage = ", ".join(f"{stage} {value:.2f}" for stage, value in stages[index].items())
        print(f"\n{path}: {described[index]}")
        print(f"  builds {median:.2f} s (median of {args.rounds}; stages, mean s: {per_stage})")
        if args.launches is not None:
            registers = sorted(sass.registers or 0 for _, sass in figures[index])
            largest = sum(sass.instructions >= 4096 for _, sass in figures[index])
            print(
                f"  {median / len(builds[index]):.3f} s a build; registers median {registers[len(registers) // 2]},"
                f" most {registers[-1]}; programs of 4096 instructions or more: {largest}"
            )
            names = modules[index]._rope_kernel.arg_names
            by_size = sorted(figures[index], key=lambda row: (row[1].instructions, row[1].registers or 0))
            for build, (registers, instructions, local, _) in by_size[-3:]:
                tile = {names[key[0]]: value for key, value in build.constexprs.items()}
                print(
                    f"  largest: {build.name} {TRITON_TYPES[build.dtype]}"
                    f" {'out of place' if tile['COPY_CHANNELS'] else 'in place'}, {tile['BLOCK_R']} rows of"
                    f" {tile['COPY_K']}+{tile['ROTARY_K']} channels on {build.num_warps} warps: {instructions}"
                    f" instructions, {registers} registers, LDL/STL {local}"
                )
            continue
        for build, (registers, instructions, local, digest) in figures[index]:
            print(
                f"  {build.name:22} {TRITON_TYPES[build.dtype]:5} registers {registers!s:>4}  instructions"
                f" {instructions:>5}  LDL/STL {local}  SASS {digest}"
            )
        if index:
            pairs = zip(figures[index], figures[0], strict=True)
            same = [ours.digest == first.digest for (_, ours), (_, first) in pairs]
            print(f"  SASS the same as {args.kernels[0]}'s: {sum(same)} of {len(same)} specializations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
