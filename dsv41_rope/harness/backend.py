"""Where the kernel runs in this test session: a CUDA device, or Triton's interpreter on the CPU.

:func:`choose` decides before anything defines a Triton kernel: with no CUDA device it sets ``TRITON_INTERPRET=1``
(unless the caller set it), so the same kernel source runs on CPU tensors. The root conftest of a checkout, the
suite's own conftest (an installed suite has no root conftest) and the implementation-selection plugin, before it
imports the implementation named on the command line, all call it. Under xdist, worker ``gwN`` uses GPU ``N mod k``.

Nothing here imports torch when the module loads, and neither do :func:`choose`, :func:`name` and :func:`gpu_workers`
(``dsv41_rope.harness.devices`` answers them): xdist's controller, which only hands tests out, calls them and never
imports torch, so that its workers start seconds sooner.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from dsv41_rope.harness import devices

if TYPE_CHECKING:
    import torch

__all__ = [
    "choose",
    "device",
    "gpu_workers",
    "host_cores",
    "interpreted",
    "interpreter_cast_problems",
    "interpreter_fma_problem",
    "name",
    "share_host_cores",
    "worker_index",
]


def choose() -> None:
    """Run Triton kernels in the interpreter when torch cannot run on a GPU here (unless ``TRITON_INTERPRET`` is set):
    a CPU build of torch, or no device the CUDA driver lists (``dsv41_rope.harness.devices.cuda_usable``).

    Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is defined, so this must run before any module
    that defines a kernel is imported; calling it again changes nothing."""
    if not devices.cuda_usable():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreted() -> bool:
    """Whether Triton kernels run in the interpreter (the truth test Triton applies to ``TRITON_INTERPRET``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


def name() -> str:
    """``"cuda"`` or ``"interpreter"``: the backend recorded with every case in the report."""
    return "interpreter" if interpreted() else "cuda"


def worker_index() -> int:
    """The xdist worker number (``gw3`` -> 3), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def host_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def gpu_workers() -> int | None:
    """xdist's worker count for ``-n auto`` on this machine's GPUs, or None without CUDA (xdist's default then: a
    worker per core).

    16 workers a GPU where every GPU has at least 120 GiB and the host a core for each worker, else 8: full-size cases
    take several GB each, and on the H200 16 workers ran the suite in 141-149 s where 8 had not finished in 190 s
    (docs/ci.md)."""
    if interpreted() or not devices.cuda_usable():
        return None
    gpus = devices.driver_devices()
    memory = min(gpu.total_memory for gpu in gpus)
    cores = host_cores()
    return len(gpus) * (16 if memory >= 120 * 2**30 and cores >= 16 * len(gpus) else 8)


def share_host_cores() -> int | None:
    """Give this xdist worker its share of the host's cores for PyTorch's CPU work (the oracle, the truth, the
    comparisons on the CPU), and return the thread count set; None when it leaves PyTorch's default: outside xdist, or
    where ``OMP_NUM_THREADS`` says how many threads to use.

    Each worker's PyTorch otherwise runs one thread per core, so 8 or 16 workers on a 16-core host ran 8-16 times
    more threads than cores, each elementwise operation on the CPU waiting on the other workers' threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1 or os.environ.get("OMP_NUM_THREADS"):
        return None
    import torch

    cores = host_cores()
    threads = max(1, cores // workers)
    torch.set_num_threads(threads)
    return threads


def device() -> torch.device:
    """The device this worker's tensors live on: its GPU (worker i -> GPU i mod k), or the CPU."""
    import torch

    if interpreted() or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", worker_index() % torch.cuda.device_count())


@functools.cache
def interpreter_fma_problem() -> str | None:
    """Why the interpreter cannot run the kernel bit-exactly, or None when it can.

    The kernel's bits rest on ``tl.fma`` rounding once. Some Triton interpreters compute it as a float64 multiply-add
    rounded to float32, which rounds twice: for ``fma(-(1 + 2**-23), 1 - 2**-23, 2**24 + 2)`` the exact sum
    ``2**24 + 1 + 2**-46`` rounds up to ``2**24 + 2``, but float64 first drops the ``2**-46`` and the resulting tie
    then rounds to even, ``2**24``. Other triples check cancellation and a subnormal result.
    """
    if not interpreted():
        return None
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def fma_probe(a_ptr, b_ptr, c_ptr, out_ptr, SIZE: tl.constexpr):
        index = tl.arange(0, SIZE)
        a, b, c = tl.load(a_ptr + index), tl.load(b_ptr + index), tl.load(c_ptr + index)
        tl.store(out_ptr + index, tl.fma(a, b, c))

    triples = [
        (-(1 + 2**-23), 1 - 2**-23, 2**24 + 2, 2**24 + 2),  # double rounding through float64
        (1 + 2**-23, 1 - 2**-23, -1.0, -(2**-46)),  # total cancellation: the product's low bits survive
        (1.5 * 2**-75, 2**-74, 0.0, 2**-148),  # a subnormal tie (1.5 * 2**-149) rounds to even
        (0.0, 0.0, 0.0, 0.0),  # pads the block to a power of two
    ]
    a, b, c, expected = (torch.tensor([t[i] for t in triples], dtype=torch.float32) for i in range(4))
    out = torch.empty_like(a)
    fma_probe[(1,)](a, b, c, out, SIZE=len(triples))
    wrong = (out.view(torch.int32) != expected.view(torch.int32)).nonzero().flatten().tolist()
    if not wrong:
        return None
    first = wrong[0]
    return (
        f"Triton {triton.__version__}'s interpreter does not compute tl.fma exactly: fma({a[first].item()!r}, "
        f"{b[first].item()!r}, {c[first].item()!r}) gave {out[first].item()!r}, exact {expected[first].item()!r}; "
        "a Triton kernel's results there may be off by that rounding, where an exact sum rounds to a tie in float64"
    )


# The interpreter's casts, probed: (dtype name, float32 bit pattern narrowed to the dtype) and (dtype name, the dtype's
# bit pattern widened to float32). Each narrowed value lies strictly between two neighbours of the dtype (1 + 2**-8 +
# 2**-20 is just above the BF16 tie 1 + 2**-8: nearest even 0x3F81, truncation 0x3F80), on a tie (which rounds to even)
# or in the subnormal range; each widened one is a subnormal of the dtype.
_NARROWED = {
    "bf16": (0x3F808008, 0x3F818000, 0x3F838000, 0x00408000, 0xBF808008),
    "fp16": (0x3F801008, 0x3F803000, 0x33C00100, 0x33400000, 0xB3C00100),
}
_WIDENED = {"bf16": (0x0001, 0x007F, 0x8001), "fp16": (0x0001, 0x03FF, 0x8001)}


@functools.cache
def interpreter_cast_problems() -> dict[str, str]:
    """What Triton's interpreter gets wrong when a kernel casts float32 to BF16 or FP16 or back, by dtype name (empty
    when it casts exactly, and off the interpreter).

    A tiny Triton kernel casts known values (see ``_NARROWED``, ``_WIDENED``), compared with round-to-nearest-even
    (``dsv41_rope.oracle.rounding``, the suite's own exact conversion) and exact widening. Triton 3.9.0's interpreter
    narrows float32 to BF16 by truncation (toward zero) and widens BF16 subnormals wrongly; the project's kernel
    converts with integer bit operations instead, but another Triton kernel judged on a CPU meets these casts.
    """
    if not interpreted():
        return {}
    import torch
    import triton
    import triton.language as tl

    from dsv41_rope.oracle.rounding import INTEGER_VIEW, round_to_dtype, widen_to_float32

    @triton.jit
    def cast_probe(source_ptr, out_ptr, SIZE: tl.constexpr):
        index = tl.arange(0, SIZE)
        tl.store(out_ptr + index, tl.load(source_ptr + index).to(out_ptr.dtype.element_ty))

    def cast(source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        size = triton.next_power_of_2(source.numel())
        padded = torch.zeros(size, dtype=source.dtype)
        padded[: source.numel()] = source
        out = torch.empty(size, dtype=dtype)
        cast_probe[(1,)](padded, out, SIZE=size)
        return out[: source.numel()]

    def patterns(tensor: torch.Tensor) -> list[int]:
        width = 8 * tensor.element_size()
        return [int(p) & ((1 << width) - 1) for p in tensor.view(INTEGER_VIEW[tensor.dtype]).tolist()]

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    problems = {}
    for name, narrowed in _NARROWED.items():
        dtype = dtypes[name]
        found = []
        source = torch.tensor(narrowed, dtype=torch.int64).to(torch.int32).view(torch.float32)
        got, expected = patterns(cast(source, dtype)), patterns(round_to_dtype(source, dtype))
        wrong = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
        if wrong:
            i = wrong[0]
            found.append(
                f"it narrows float32 to {name} wrongly in {len(wrong)} of {len(got)} probes ({source[i].item()!r} -> "
                f"0x{got[i]:04X}, round-to-nearest-even 0x{expected[i]:04X})"
            )
        integers = torch.tensor(_WIDENED[name], dtype=torch.int32).to(INTEGER_VIEW[dtype])
        source = integers.view(dtype)
        got_wide, exact = cast(source, torch.float32), widen_to_float32(source)
        wrong = (got_wide.view(torch.int32) != exact.view(torch.int32)).nonzero().flatten().tolist()
        if wrong:
            i = wrong[0]
            found.append(
                f"it widens {name} subnormals wrongly in {len(wrong)} of {len(got_wide)} probes "
                f"(0x{patterns(source)[i]:04X} -> {got_wide[i].item()!r}, exact {exact[i].item()!r})"
            )
        if found:
            problems[name] = f"Triton {triton.__version__}'s interpreter casts wrongly: " + "; ".join(found)
    return problems
