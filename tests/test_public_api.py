"""The public face of the package: the names ``dsv41_rope`` exports, ``inverse`` taken by keyword only (as Automodel's
``_apply_rope(values, angles, *, inverse=False)``), and the ``dsv41-rope`` command."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import dsv41_rope
from dsv41_rope import cli, kernel

ENTRY_POINTS = ["apply_rope_triton", "apply_rope_triton_", "apply_rope_eager"]


def test_the_package_exports_the_kernels_entry_points() -> None:
    for name in dsv41_rope.__all__:
        assert getattr(dsv41_rope, name) is getattr(kernel, name), name
    assert set(ENTRY_POINTS) <= set(dsv41_rope.__all__)


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_inverse_is_keyword_only(name: str) -> None:
    parameter = inspect.signature(getattr(kernel, name)).parameters["inverse"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is False


def test_certify_runs_the_installed_suite_on_the_function() -> None:
    args = cli.parse_arguments(["certify", "their.module:rope", "--smoke", "--claims", "none", "--", "-x"])
    command = cli.certify_command(args)
    assert command[1:5] == ["-m", "pytest", "--pyargs", "dsv41_rope.conformance"]
    assert command[command.index("--rope-impl") + 1] == "their.module:rope"
    assert command[command.index("-k") + 1] == cli.SMOKE_SELECTION
    assert command[command.index("-n") + 1] == "auto" and command[-1] == "-x"


@pytest.mark.parametrize("argv", [["--help"], ["certify", "--help"]])
def test_the_command_helps(argv: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "dsv41_rope", *argv], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "certify" in result.stdout
