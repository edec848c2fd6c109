"""How the conformance suite hands its tests to pytest-xdist: compile-bound tests first, then, on a GPU, one test at
a time.

On the H200 the generated-layout shards (each builds a kernel per example) once all went to two workers in chunks of
consecutive tests, and the run ended 230 s after the other six workers had finished (docs/gpu-runs/README.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from conformance import conftest

ROOT = Path(__file__).resolve().parents[1]


def _collected(*paths: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_compile_bound_tests_are_collected_first_and_the_rest_keep_their_order():
    forward_bits = _collected("conformance/test_forward_bits.py")
    both = _collected("conformance/test_forward_bits.py", "conformance/test_generated_layouts.py")
    generated = [node for node in both if "test_generated_layouts.py" in node]
    assert generated, "no generated-layout tests collected"
    assert both == generated + forward_bits, (
        f"expected the {len(generated)} generated-layout tests (compile-bound) first, then test_forward_bits.py in "
        f"its own order; got first {both[:3]}"
    )


def test_xdist_sends_one_test_at_a_time_on_a_gpu_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(conftest.backend, "device", lambda: SimpleNamespace(type="cuda"))
    monkeypatch.setattr(conftest.torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(conftest.compile_lock, "install", lambda: None)
    unset = SimpleNamespace(option=SimpleNamespace(maxschedchunk=None))
    conftest.pytest_configure(unset)
    assert unset.option.maxschedchunk == 1
    given = SimpleNamespace(option=SimpleNamespace(maxschedchunk=8))
    conftest.pytest_configure(given)
    assert given.option.maxschedchunk == 8
    without_xdist = SimpleNamespace(option=SimpleNamespace())
    conftest.pytest_configure(without_xdist)
    assert not hasattr(without_xdist.option, "maxschedchunk")


def test_xdist_keeps_its_chunks_on_a_cpu(monkeypatch):
    monkeypatch.setattr(conftest.backend, "device", lambda: SimpleNamespace(type="cpu"))
    unset = SimpleNamespace(option=SimpleNamespace(maxschedchunk=None))
    conftest.pytest_configure(unset)
    assert unset.option.maxschedchunk is None
