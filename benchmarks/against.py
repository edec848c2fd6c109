"""The speed gate: this checkout's kernel against the kernel of another git revision, timed in one process.

From the repository root, on a CUDA machine::

    python -m benchmarks.run --against 36b8391                  # every shape and direction, BF16 and FP32
    python -m benchmarks.run --against main --margin 0.03 --dtypes bf16 --out benchmarks/results/scratch

The kernel as it is at the revision (the package ``dsv41_rope/kernel/``, or the single file ``impl/rope_triton.py`` of
revisions before the package) is imported beside this checkout's, and both are timed on every DeepSeek V4.1 tensor of
``benchmarks.shapes``: forward (inverse where the case is), backward (``autograd.grad`` of a kept forward), and in place
where both have ``apply_rope_triton_``. Each row is timed in ``--rounds`` alternating rounds (ours, theirs, ours, ...;
fresh graphs each round) and the medians are compared: GPU time by CUDA-graph replay, cold L2 for tensors of 32 MiB and
more, warm below (as the targets of docs/benchmarks.md). A row whose ratio exceeds ``1 + margin`` is measured again
with twice the rounds before it is called slower. Beside them, in the same process: the copy of the same bytes, the
50-line one-launch sketch (``.peers/one_launch_sketch.py`` or ``$DSV41_SKETCH``; forward of contiguous tensors only)
and flash-attention's rotary (``benchmarks.in_place.load_flash_attention_rotary``), each as a ratio to the copy.

Exit status: 0 when no row is slower than the revision by more than the margin, 1 when one is, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import (
    COLD_FROM_BYTES,
    MIB,
    NO_CUDA_EXIT_CODE,
    Clock,
    GraphTimer,
    ResultFile,
    environment,
    import_source,
    short_error,
)
from benchmarks.in_place import flash_in_place, load_flash_attention_rotary
from benchmarks.shapes import CASES, DTYPES, Case, make_angles, make_values
from dsv41_rope import vendor
from dsv41_rope.harness import provenance

SLOWER_EXIT_CODE = 1
# Where a revision keeps its kernel: the package, or (revisions before it) one file.
PACKAGE_PATH = "dsv41_rope/kernel"
SINGLE_FILE_PATH = "impl/rope_triton.py"
SKETCH_PATHS = (os.environ.get("DSV41_SKETCH", ""), ".peers/one_launch_sketch.py")
# The sketch's file ends in a benchmark loop of its own; its kernel and launcher are the lines before it.
SKETCH_END_MARKER = "\nres = {}"


def load_revision(revision: str, directory: Path) -> tuple[ModuleType, str]:
    """The kernel at ``revision`` as a module of its own, and its source's SHA-256 (16 digits).

    ``revision`` is a git revision, whose ``dsv41_rope/kernel/`` package is exported (or, before the package existed,
    its ``impl/rope_triton.py``); or the path of a kernel package folder or single kernel file (a variant not
    committed, or a commit the machine's clone lacks).

    Raises:
        RuntimeError: git does not know the revision, or it holds neither kernel.
    """
    name = "rope_at_" + re.sub(r"\W", "_", revision)
    path = Path(revision)
    if path.is_dir():
        return vendor.load_copy(path, name), provenance.kernel_sha256(path)
    if path.suffix == ".py" and path.is_file():
        module = import_source(path.read_text(), directory, name)
        return module, provenance.kernel_sha256(module.__file__)
    if _git("cat-file", "-e", f"{revision}:{PACKAGE_PATH}/__init__.py").returncode == 0:
        archive = _git("archive", "--format=tar", revision, PACKAGE_PATH, text=False)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(directory / "export", filter="data")
        package = directory / name
        (directory / "export" / PACKAGE_PATH).rename(package)
        return vendor.load_copy(package), provenance.kernel_sha256(package)
    result = _git("show", f"{revision}:{SINGLE_FILE_PATH}")
    if result.returncode:
        raise RuntimeError(f"{revision} holds neither {PACKAGE_PATH}/ nor {SINGLE_FILE_PATH}: {result.stderr.strip()}")
    module = import_source(result.stdout, directory, name)
    return module, provenance.kernel_sha256(module.__file__)


def _git(*arguments: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *arguments], capture_output=True, text=text, check=False)


def kernel_settings(module: ModuleType) -> str:
    """What a kernel module runs with on this device (contraction and cos/sin source, calibrating it first), as its
    ``settings(...).describe()`` says; for a revision without that call, a line starting "no settings()"."""
    settings = getattr(module, "settings", None)
    if settings is None:
        return "no settings() at this revision"
    try:
        return settings("cuda").describe()
    except Exception as error:  # an old revision's settings may differ in shape; the gate still runs
        return f"settings() failed: {short_error(error)}"


def load_sketch(directory: Path) -> tuple[Callable[..., torch.Tensor] | None, str]:
    """The sketch's ``launch(values, angles)``, imported without its own benchmark loop, and where it came from."""
    for candidate in SKETCH_PATHS:
        if candidate and Path(candidate).is_file():
            text = Path(candidate).read_text()
            try:
                module = import_source(text.split(SKETCH_END_MARKER)[0], directory, "one_launch_sketch")
            except Exception as error:  # a sketch that fails to import leaves its column empty
                return None, f"{candidate}: {short_error(error)}"
            return module.launch, candidate
    return None, "the sketch was not found (DSV41_SKETCH, .peers/one_launch_sketch.py)"


def operations(
    module: ModuleType,
    case: Case,
    values: torch.Tensor,
    angles: torch.Tensor,
    grad: torch.Tensor,
    stream: torch.cuda.Stream,
) -> dict[str, Callable[[], object]]:
    """The timed calls of one module on one tensor: forward, backward, and in place where the module has it."""
    calls: dict[str, Callable[[], object]] = {
        "forward": lambda: module.apply_rope_triton(values, angles, inverse=case.inverse)
    }
    leaf = values.detach().requires_grad_(True)
    with torch.cuda.stream(stream):  # the backward runs on its forward's stream: the timer's capture stream
        output = module.apply_rope_triton(leaf, angles, inverse=case.inverse)
    torch.cuda.current_stream().wait_stream(stream)
    calls["backward"] = lambda: torch.autograd.grad(output, leaf, grad, retain_graph=True)
    if hasattr(module, "apply_rope_triton_"):
        scratch = values.clone()  # rotated again on every call: the time does not depend on the values
        calls["in place"] = lambda: module.apply_rope_triton_(scratch, angles, inverse=case.inverse)
    return calls


def compare_row(
    timer: GraphTimer, ours: Callable[[], object], theirs: Callable[[], object], cold: bool, rounds: int
) -> tuple[float, float]:
    """Median GPU times (ms) of ours and theirs over ``rounds`` alternating rounds."""
    ours_ms, theirs_ms = [], []
    for _ in range(rounds):
        ours_ms.append(timer.gpu_ms(ours, cold))
        theirs_ms.append(timer.gpu_ms(theirs, cold))
    return statistics.median(ours_ms), statistics.median(theirs_ms)


def peers(
    op: str,
    case: Case,
    values: torch.Tensor,
    angles: torch.Tensor,
    sketch: Callable | None,
    flash: Callable | None,
) -> dict[str, Callable[[], object]]:
    """The peers' calls of one operation on this tensor, where they take it: the sketch's forward (contiguous,
    not inverse), flash-attention's rotary out of place (a copy, then the rotary slice rotated in place) and in
    place (on ``values[..., -2P:]``, given cos/sin tables computed beforehand)."""
    calls: dict[str, Callable[[], object]] = {}
    if op == "forward" and sketch is not None and values.is_contiguous() and not case.inverse:
        calls["sketch"] = lambda: sketch(values, angles)
    if flash is None or op == "backward":
        return calls
    flash_rotate = flash_in_place(flash, angles, conjugate=case.inverse)
    if op == "forward":
        calls["flash"] = lambda: flash_rotate(values.clone())
    else:
        scratch = values.clone()
        calls["flash"] = lambda: flash_rotate(scratch)
    return calls


def measure_case(
    case: Case,
    dtype: torch.dtype,
    ours: ModuleType,
    theirs: ModuleType,
    timer: GraphTimer,
    args: argparse.Namespace,
    extras: dict[str, Any],
) -> list[dict[str, Any]]:
    """Rows of one tensor: each operation of ours against theirs, with the copy and the peers."""
    values = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    grad = torch.randn(case.shape, dtype=dtype, device="cuda")
    tensor_bytes = values.numel() * values.element_size()
    cold = tensor_bytes >= COLD_FROM_BYTES
    copy = timer.copy_floor_ms(values, cold)
    ours_calls = operations(ours, case, values, angles, grad, timer.stream)
    theirs_calls = operations(theirs, case, values, angles, grad, timer.stream)
    rows = []
    for op, ours_call in ours_calls.items():
        row: dict[str, Any] = {
            "case": case.name,
            "shape": list(case.shape),
            "dtype": str(dtype).removeprefix("torch."),
            "op": op,
            "inverse": case.inverse,
            "tensor_bytes": tensor_bytes,
            "l2": "cold" if cold else "warm",
            "copy_ms": copy,
        }
        theirs_call = theirs_calls.get(op)
        try:
            ours_call()
            if theirs_call is None:
                row["ours_ms"] = statistics.median(timer.gpu_ms(ours_call, cold) for _ in range(args.rounds))
                row["note"] = f"{args.against} has no {op} call"
            else:
                theirs_call()
                ours_ms, theirs_ms = compare_row(timer, ours_call, theirs_call, cold, args.rounds)
                if ours_ms > (1 + args.margin) * theirs_ms:  # measured again before it is called slower
                    ours_ms, theirs_ms = compare_row(timer, ours_call, theirs_call, cold, 2 * args.rounds)
                    row["remeasured"] = True
                row.update(ours_ms=ours_ms, theirs_ms=theirs_ms, ratio=ours_ms / theirs_ms)
                row["slower"] = row["ratio"] > 1 + args.margin
        except Exception as error:  # one failing row must not end the run
            row["error"] = short_error(error)
        for name, call in peers(op, case, values, angles, extras["sketch"], extras["flash"]).items():
            try:
                call()
                row[f"{name}_ms"] = statistics.median(timer.gpu_ms(call, cold) for _ in range(args.rounds))
            except Exception as error:
                row[f"{name}_error"] = short_error(error)
        torch.cuda.empty_cache()
        rows.append(row)
    return rows


def format_row(row: dict[str, Any]) -> str:
    """One line of the table: times, ours over theirs, and each over the copy."""

    def over_copy(key: str) -> str:
        return f"{row[key] / row['copy_ms']:7.3f}" if key in row else f"{'-':>7}"

    ratio = f"{row['ratio']:7.3f}" if "ratio" in row else f"{'-':>7}"
    verdict = "SLOWER" if row.get("slower") else row.get("error", row.get("note", "ok"))
    us = lambda key: f"{row[key] * 1e3:9.1f}" if key in row else f"{'-':>9}"  # noqa: E731
    return (
        f"{row['case']:<15} {row['dtype'].replace('bfloat', 'bf').replace('float', 'fp'):<5} {row['op']:<9} "
        f"{row['tensor_bytes'] / MIB:>6.0f} {row['l2']:<4} {us('ours_ms')} {us('theirs_ms')} {ratio} "
        f"{over_copy('ours_ms')} {over_copy('theirs_ms')} {over_copy('sketch_ms')} {over_copy('flash_ms')}  {verdict}"
    )


HEADER = (
    f"{'case':<15} {'dtype':<5} {'op':<9} {'MiB':>6} {'L2':<4} {'ours us':>9} {'rev us':>9} {'ours/rev':>7} "
    f"{'ours/cp':>7} {'rev/cp':>7} {'sketch':>7} {'flash':>7}  verdict"
)


# The gate's own options, with their defaults; benchmarks.run lists them in its --help through add_gate_arguments.
MARGIN = 0.03
ROUNDS = 5
GATE_OPTIONS = ("--margin", "--rounds", "--cases")


def add_gate_arguments(parser: Any, *, standalone: bool) -> None:
    """Adds ``--against REV`` and the options only the gate reads to a parser or an argument group.

    Args:
        parser: an ``argparse.ArgumentParser`` or one of its argument groups.
        standalone: True for the gate's own parser (``--against`` required, the defaults set); False for
            ``benchmarks.run``'s, where every one of them is None unless given, so that it can tell them apart.
    """

    def default(value: object) -> object:
        return value if standalone else None

    parser.add_argument(
        "--against",
        required=standalone,
        metavar="REV",
        help="the speed gate: time this checkout's kernel against REV's (a git revision, or a kernel package folder or "
        "file); exit 1 when a row is slower by more than the margin",
    )
    parser.add_argument(
        "--margin", type=float, default=default(MARGIN), help=f"allowed slowdown of a row (default {MARGIN:g})"
    )
    parser.add_argument(
        "--rounds", type=int, default=default(ROUNDS), help=f"alternating rounds per row (default {ROUNDS})"
    )
    parser.add_argument(
        "--cases",
        default=default(",".join(CASES)),
        help="comma-separated, of " + ", ".join(CASES) + " (default: all)",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line (``benchmarks.run`` passes its own through when it sees ``--against``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run --against", description=__doc__.splitlines()[0])
    add_gate_arguments(parser, standalone=True)
    parser.add_argument("--dtypes", default="bf16,fp32", help="comma-separated, of bf16, fp16, fp32")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scratch"), help="folder for the JSON")
    parser.add_argument("--time-budget", type=float, default=480.0, metavar="SECONDS")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the comparison; returns 0, 1 (a row slower than the revision) or 2 (no CUDA)."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.run --against: no CUDA device is visible; this benchmark needs one.", file=sys.stderr)
        return NO_CUDA_EXIT_CODE
    from dsv41_rope import kernel as ours

    clock, timer = Clock(args.time_budget), GraphTimer()
    with tempfile.TemporaryDirectory() as scratch:
        theirs, theirs_sha = load_revision(args.against, Path(scratch))
        sketch, sketch_note = load_sketch(Path(scratch))
        flash, flash_note = load_flash_attention_rotary()
        extras = {"sketch": sketch, "flash": flash}
        document = {
            "schema": "rope-benchmark-against/1",
            "status": "running",
            "environment": environment(),
            "against": {"revision": args.against, "kernel_sha256": theirs_sha},
            "settings": {**{k: str(v) for k, v in vars(args).items()}, "sketch": sketch_note, "flash": flash_note},
            "rows": [],
        }
        ours_settings, theirs_settings = kernel_settings(ours), kernel_settings(theirs)
        document["settings"] |= {"ours_kernel": ours_settings, "theirs_kernel": theirs_settings}
        results = ResultFile(args.out, "against", document)
        clock.log(
            f"ours {document['environment'].get('kernel_sha256')} against {args.against} {theirs_sha}; "
            f"{sketch_note}; {flash_note}"
        )
        clock.log(f"ours: {ours_settings}; {args.against}: {theirs_settings}")
        if ours_settings != theirs_settings and not theirs_settings.startswith(("no settings()", "settings() failed")):
            # A kernel whose calibration rejects its own cos/sin runs the torch.polar table path (a launch more a
            # call): the rows then compare different paths, not the two kernels' code.
            clock.log("warning: the two kernels run with different settings on this device; their rows compare those")
        print(HEADER, flush=True)
        status = "complete"
        for dtype_name in args.dtypes.split(","):
            for name in args.cases.split(","):
                if clock.expired():
                    status = f"stopped: time budget spent before {name} {dtype_name}"
                    break
                for row in measure_case(CASES[name], DTYPES[dtype_name], ours, theirs, timer, args, extras):
                    results.add_row(row)
                    print(format_row(row), flush=True)
        results.finish(status)
    slower = [row for row in document["rows"] if row.get("slower")]
    failed = [row for row in document["rows"] if "error" in row]
    clock.log(
        f"{len(document['rows'])} rows, {len(slower)} slower than {args.against} by more than {args.margin:.0%}, "
        f"{len(failed)} failed; {status}; wrote {results.path}"
    )
    print(json.dumps({"slower": [f"{r['case']} {r['dtype']} {r['op']} {r['ratio']:.3f}" for r in slower]}))
    return SLOWER_EXIT_CODE if slower or failed or status != "complete" else 0


if __name__ == "__main__":
    sys.exit(main())
