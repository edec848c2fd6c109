"""Root conftest: choose the kernel backend before anything defines a Triton kernel, and load the suite's plugins.

Triton decides between compiling and interpreting when a ``@triton.jit`` function is defined, so this file sets
``TRITON_INTERPRET=1`` on machines without a CUDA device (``dsv41_rope.harness.backend.choose``) before any test module
imports the kernel. Set ``TRITON_INTERPRET=1`` yourself to run the interpreter on a GPU machine. Under pytest-xdist each
worker process runs this file too (``dsv41_rope/conformance/conftest.py`` pins worker ``gwN`` to GPU ``N mod k``).

``dsv41_rope.pytest_plugin`` loads the implementation under test (``--rope-impl``) and the ulp-drift report plugin. An
installed distribution registers it as the pytest11 entry point ``dsv41_rope``; a checkout run without installing (a
GPU runner's) registers it here under that name, so that ``-p no:dsv41_rope`` blocks it either way.

Nothing here imports torch: xdist's controller only hands tests out to its workers, and torch's import (3-7 s on the
H200) would delay their start (docs/ci.md).
"""

from __future__ import annotations

import pytest

from dsv41_rope import pytest_plugin
from dsv41_rope.harness import backend, provenance
from dsv41_rope.harness.under_test import runs_tests

backend.choose()


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Registers the suite's plugin where no entry point did (pytest calls this as it registers this conftest, before
    it parses the command line, so the plugin's options are parsed too)."""
    pytest_plugin.register_once(pluginmanager)


def pytest_report_header(config) -> list[str]:
    """Say which backend and devices run the session, at the top of the run (the interpreter's fma check, which
    imports torch, where this process runs tests; under xdist each skipped test gives it)."""
    versions = provenance.versions()
    where = (provenance.gpu_names() or "no GPU found") if backend.name() == "cuda" else "CPU"
    software = f"torch {versions['torch']}, triton {versions['triton']}"
    lines = [f"dsv41-rope: kernel backend {backend.name()} on {where}; {software}"]
    problem = backend.interpreter_fma_problem() if runs_tests(config) else None
    if problem:
        lines.append(f"dsv41-rope: {problem}")
    return lines
