"""Where the kernel runs in this test session: a CUDA device, or Triton's interpreter on the CPU.

:func:`choose` decides before anything defines a Triton kernel: with no CUDA device it sets ``TRITON_INTERPRET=1``
(unless the caller set it), so the same kernel source runs on CPU tensors. The root conftest of a checkout, the
suite's own conftest (an installed suite has no root conftest) and the implementation-selection plugin, before it
imports the implementation named on the command line, all call it. Under xdist, worker ``gwN`` uses GPU ``N mod k``.
"""

from __future__ import annotations

import functools
import os

import torch


def choose() -> None:
    """Run Triton kernels in the interpreter when there is no CUDA device (unless ``TRITON_INTERPRET`` is set).

    Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is defined, so this must run before any module
    that defines a kernel is imported; calling it again changes nothing."""
    if not torch.cuda.is_available():
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


def device() -> torch.device:
    """The device this worker's tensors live on: its GPU (worker i -> GPU i mod k), or the CPU."""
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
        "the CPU kernel checks cannot tell a kernel bug from an interpreter artefact, so they are skipped"
    )
