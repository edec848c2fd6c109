"""Root conftest: choose the kernel backend before anything defines a Triton kernel, and load the report plugin.

Triton decides between compiling and interpreting when a ``@triton.jit`` function is defined, so this file sets
``TRITON_INTERPRET=1`` on machines without a CUDA device before any test module imports ``impl``. Set
``TRITON_INTERPRET=1`` yourself to run the interpreter on a GPU machine. Under pytest-xdist each worker process runs
this file too, and worker ``gwN`` uses GPU ``N mod k``.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from conformance import backend  # noqa: E402  (reads TRITON_INTERPRET, which must be set first)

pytest_plugins = ["conformance.plugin"]


def pytest_configure(config) -> None:
    """Pin this worker to its GPU so that kernels launch where its tensors live."""
    current = backend.device()
    if current.type == "cuda":
        torch.cuda.set_device(current)


def pytest_report_header(config) -> list[str]:
    """Say which backend and device ran the session, at the top of the run."""
    import triton

    where = torch.cuda.get_device_name(backend.device()) if backend.device().type == "cuda" else "CPU"
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    lines = [f"dsv41-rope: kernel backend {backend.name()} on {where}; {versions}"]
    problem = backend.interpreter_fma_problem()
    if problem:
        lines.append(f"dsv41-rope: {problem}")
    return lines
