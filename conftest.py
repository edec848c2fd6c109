"""Root conftest: choose the kernel backend before anything defines a Triton kernel, and load the suite's plugins.

Triton decides between compiling and interpreting when a ``@triton.jit`` function is defined, so this file sets
``TRITON_INTERPRET=1`` on machines without a CUDA device (``conformance.backend.choose``) before any test module
imports ``impl``. Set ``TRITON_INTERPRET=1`` yourself to run the interpreter on a GPU machine. Under pytest-xdist each
worker process runs this file too (``conformance/conftest.py`` pins worker ``gwN`` to GPU ``N mod k``).

``conformance.pytest_plugin`` (the implementation under test, ``--rope-impl``) loads the ulp-drift report plugin. An
installed distribution registers it as a pytest11 entry point of the same name, which this line then finds loaded; a
checkout run without installing (a GPU runner's) loads it from here.
"""

from __future__ import annotations

import torch

from conformance import backend

backend.choose()

pytest_plugins = ["conformance.pytest_plugin"]


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
