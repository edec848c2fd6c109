"""How the conformance suite hands its tests to pytest-xdist: compile-bound tests first, tests of one kernel
specialization spread apart, and, on a GPU, one test at a time.

Handed out in chunks of consecutive tests, the generated-layout shards (each builds a kernel per example) can all land
on two workers, which then run them one after another while the others sit idle.
"""

from __future__ import annotations

import collections
import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dsv41_rope.conformance import cases, conftest
from dsv41_rope.harness import compile_lock

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


def test_compile_bound_tests_are_collected_first():
    forward_bits = _collected("dsv41_rope/conformance/test_forward_bits.py")
    both = _collected("dsv41_rope/conformance/test_forward_bits.py", "dsv41_rope/conformance/test_generated_layouts.py")
    generated = [node for node in both if "test_generated_layouts.py" in node]
    assert generated, "no generated-layout tests collected"
    assert both == generated + forward_bits, (
        f"expected the {len(generated)} generated-layout tests (compile-bound) first, then test_forward_bits.py in "
        f"the order it has alone; got first {both[:3]}"
    )


def test_tests_launching_one_kernel_specialization_are_spread_apart():
    """In-place tests of one case differ only in direction and values, which one compiled kernel serves: every
    case's first test comes before any case's second, so that xdist's workers start on different kernels."""
    by_id = {case.id: case for case in cases.all_cases()}
    in_place = "dsv41_rope/conformance/test_in_place.py"
    prefix = f"{in_place}::test_in_place_equals_out_of_place["
    ids = [node.removeprefix(prefix)[:-1] for node in _collected(in_place) if prefix in node]
    assert len(ids) > 100, f"only {len(ids)} in-place tests collected"
    seen: collections.Counter = collections.Counter()
    ranks = []
    for test_id in ids:
        group = dataclasses.replace(by_id[test_id], inverse=False, regime="")
        ranks.append(seen[group])
        seen[group] += 1
    later = next((i for i in range(1, len(ranks)) if ranks[i] < ranks[i - 1]), None)
    assert later is None, (
        f"{ids[later]} is its kernel's first test, but comes after {ids[later - 1]}, test {ranks[later - 1] + 1} of "
        f"its own kernel"
    )


class FakeConfig:
    """A pytest config as `dsv41_rope/conformance/conftest.py`'s `pytest_configure` sees it in one of xdist's roles: its
    controller (hands the tests out), a worker, or a run without xdist (`maxschedchunk` absent: no xdist option)."""

    def __init__(self, role: str, maxschedchunk: object = "absent") -> None:
        self.option = SimpleNamespace()
        if maxschedchunk != "absent":
            self.option.maxschedchunk = maxschedchunk
        if role == "worker":
            self.workerinput = {"workerid": "gw0"}
        distributing = role == "controller"
        self._options = {"dist": "load" if distributing else "no", "tx": ["popen"] if distributing else []}

    def getoption(self, name: str, default: object = None) -> object:
        return self._options.get(name, default)

    def addinivalue_line(self, name: str, line: str) -> None:
        pass


@pytest.fixture
def on_a_gpu(monkeypatch):
    """A CUDA backend whose worker set-up is recorded (pinning the device, installing the compile lock)."""
    done = []
    monkeypatch.setattr(conftest.backend, "name", lambda: "cuda")
    monkeypatch.setattr(conftest.backend, "device", lambda: done.append("device") or SimpleNamespace(type="cuda"))
    monkeypatch.setattr(conftest.backend, "share_host_cores", lambda: done.append("cores"))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: done.append("set_device"))
    monkeypatch.setattr(compile_lock, "install", lambda: done.append("compile lock"))
    return done


def test_xdist_sends_one_test_at_a_time_on_a_gpu_unless_told_otherwise(on_a_gpu):
    for role in ("controller", "worker"):
        unset = FakeConfig(role, maxschedchunk=None)
        conftest.pytest_configure(unset)
        assert unset.option.maxschedchunk == 1, f"xdist's {role}"
        given = FakeConfig(role, maxschedchunk=8)
        conftest.pytest_configure(given)
        assert given.option.maxschedchunk == 8, f"xdist's {role}"
    without_xdist = FakeConfig("alone")
    conftest.pytest_configure(without_xdist)
    assert not hasattr(without_xdist.option, "maxschedchunk")


def test_only_where_tests_run_is_a_worker_pinned_to_its_gpu(on_a_gpu):
    conftest.pytest_configure(FakeConfig("controller", maxschedchunk=None))
    assert on_a_gpu == [], "xdist's controller, which runs no test, set up a worker (and imported torch for it)"
    for role in ("worker", "alone"):
        on_a_gpu.clear()
        conftest.pytest_configure(FakeConfig(role, maxschedchunk=None))
        assert on_a_gpu == ["cores", "device", "set_device", "compile lock"], role


def test_xdist_keeps_its_chunks_on_a_cpu(monkeypatch):
    monkeypatch.setattr(conftest.backend, "name", lambda: "interpreter")
    monkeypatch.setattr(conftest.backend, "device", lambda: SimpleNamespace(type="cpu"))
    monkeypatch.setattr(conftest.backend, "share_host_cores", lambda: None)
    for role in ("controller", "worker"):
        unset = FakeConfig(role, maxschedchunk=None)
        conftest.pytest_configure(unset)
        assert unset.option.maxschedchunk is None, f"xdist's {role}"
