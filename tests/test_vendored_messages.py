"""A vendored copy of the kernel speaks of itself: where it tells the caller to calibrate ahead of torch.compile tracing
or CUDA-graph capture, it names the call by the copy's own package (``their_rope.calibrate('cuda:0')``), a name the
caller has, not ``dsv41_rope.kernel``, which a project shipping the copy may not have installed."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import dsv41_rope.kernel
from dsv41_rope.vendor import load_copy, write_copy

COPY_NAME = "their_rope"
# The copy's torch.library namespace: registered once a process, so no other test may use it.
COPY_NAMESPACE = "their_rope_messages"


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.ModuleType]:
    """The kernel package vendored into a temporary folder and imported as ``their_rope``."""
    folder = write_copy(tmp_path_factory.mktemp("vendor") / COPY_NAME, COPY_NAMESPACE)
    yield load_copy(folder)
    for name in [name for name in sys.modules if name == COPY_NAME or name.startswith(f"{COPY_NAME}.")]:
        del sys.modules[name]


@pytest.fixture(params=["dsv41_rope.kernel", COPY_NAME])
def package(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The project's kernel package or its vendored copy, seen from inside torch.compile tracing, calibrated nowhere."""
    package = dsv41_rope.kernel if request.param == "dsv41_rope.kernel" else request.getfixturevalue("copy")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(package.calibration, "WARNED", set())
    monkeypatch.delenv(package.CONTRACTION_VARIABLE, raising=False)
    monkeypatch.delenv(package.FREQUENCIES_VARIABLE, raising=False)
    return package


def test_the_copy_is_its_own_package(copy: types.ModuleType) -> None:
    assert copy.__name__ == COPY_NAME and copy.calibration.__name__ == f"{COPY_NAME}.calibration"
    assert Path(copy.__file__).parent.name == COPY_NAME
    assert copy.OPERATOR_NAMESPACE == COPY_NAMESPACE


def test_calibrate_inside_tracing_names_the_packages_own_calibrate(package: types.ModuleType) -> None:
    with pytest.raises(RuntimeError) as raised:
        package.calibrate("cpu")
    expected = f"call {package.__name__}.calibrate('cpu') before them"
    assert expected in str(raised.value), f"got {str(raised.value)!r}, expected it to say {expected!r}"
    if package.__name__ != "dsv41_rope.kernel":
        assert "dsv41_rope" not in str(raised.value)


def test_an_uncalibrated_gpu_inside_tracing_warns_with_the_packages_own_calibrate(
    package: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The warning is for compiled kernels on a CUDA device: here the CPU stands in, with the interpreter said off.
    monkeypatch.setattr(package.calibration, "INTERPRETED", False)
    expected = f"call {package.__name__}.calibrate('cuda:0') before them"
    with pytest.warns(RuntimeWarning, match=re.escape(expected)) as warned:
        settings = package.calibration.kernel_settings(torch.device("cuda", 0))
    assert settings.source == "not calibrated: eager path"
    if package.__name__ != "dsv41_rope.kernel":
        assert all("dsv41_rope" not in str(warning.message) for warning in warned)
