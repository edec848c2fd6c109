"""README's "Certify your own kernel" keeps its commands and smoke selection honest: each ``dsv41-rope`` line is one the
command takes, and the ``-k`` it gives for a first try selects a small slice of the suite (a minute of CPU) that still
reaches every property any implementation answers to. Its ``pip install`` line: tests/test_install_lines.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_rope import cli
from dsv41_rope.cli import SMOKE_SELECTION

REPO = Path(__file__).resolve().parents[1]
# The suites every implementation answers to, each of which the smoke selection must reach.
EVERY_IMPLEMENTATION = (
    "test_forward_bits.py::test_fused_equals_oracle",
    "test_copied_channels.py::test_copied_channels_are_bit_copies",
    "test_gradient_conjugate.py::test_gradient_is_conjugate_rotation",
    "test_error_vs_truth.py::test_normwise_error_within_bound",
    "test_bad_input.py::test_rejected_with_a_clear_error",
    "test_generated_layouts.py::test_out_of_place_op_matches_eager_on_generated_layouts",
    "test_input_classes.py::test_forward_matches_its_reference",
    "test_input_classes.py::test_backward_matches_its_reference",
)


def certify_section() -> str:
    """README's "Certify your own kernel" section."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split("## Certify your own kernel", 1)[1]
    return section.split("\n## ", 1)[0]


def smoke_selection() -> str:
    """The ``-k`` expression of the smoke selection in README's "Certify your own kernel"."""
    found = re.findall(r'-k "([^"]+)"', certify_section())
    assert len(found) == 1, f"the section should give one smoke selection, found {found}"
    return found[0]


def stated_smoke_size() -> int:
    """How many tests README says the smoke selection runs ("a smoke selection of N tests")."""
    found = re.findall(r"smoke selection of (\d+) tests", certify_section())
    assert len(found) == 1, f"the section should state the smoke selection's size once, found {found}"
    return int(found[0])


def certify_lines() -> list[str]:
    """The ``dsv41-rope`` commands of the section's shell blocks, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", certify_section(), re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("dsv41-rope ")]


def test_each_certify_line_is_one_the_command_takes() -> None:
    lines = certify_lines()
    assert len(lines) >= 2, f"expected a smoke line and a whole-suite line, found {lines}"
    for line in lines:
        try:
            args = cli.parse_arguments(shlex.split(line)[1:])
        except SystemExit as error:
            pytest.fail(f"{line!r}: the command refuses it (exit {error.code})")
        assert args.command == "certify" and cli.certify_command(args)[:4] == [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
        ]


def test_the_readme_gives_the_commands_smoke_selection() -> None:
    assert smoke_selection() == SMOKE_SELECTION, "README.md and dsv41_rope.cli disagree on the smoke selection"


def test_the_smoke_selection_is_small_and_reaches_every_property() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DSV41_ROPE_IMPL"))}
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--co",
            "-q",
            "dsv41_rope/conformance",
            "-k",
            smoke_selection(),
        ],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    tests = [line for line in collected if "::" in line]
    assert 30 <= len(tests) <= 100, f"{len(tests)} tests"
    stated = stated_smoke_size()
    assert len(tests) == stated, f"README says {stated} tests; the selection has {len(tests)}"
    for suite in EVERY_IMPLEMENTATION:
        assert any(suite in test for test in tests), f"the smoke selection reaches no {suite}"
    assert {"bf16", "fp16", "fp32"} <= {dtype for test in tests for dtype in re.findall(r"\b(bf16|fp16|fp32)-", test)}
    assert {"forward", "inverse"} <= {way for test in tests for way in re.findall(r"-(forward|inverse)-", test)}
