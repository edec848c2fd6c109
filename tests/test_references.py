"""What a computation is held to is decided from what it runs: a call that launches a Triton kernel (on a CPU, in
Triton's interpreter) is held to eager CUDA's bits as the oracle emulates them, PyTorch code on a CPU to that CPU's
own eager path, anything on a GPU to the GPU's eager path; ``--rope-reference`` overrides it on a CPU; the verdict
line names the references and, on a CPU, says what to run on a GPU."""

from __future__ import annotations

import sys

import pytest
import torch

from dsv41_rope import kernel
from dsv41_rope.conformance import references
from dsv41_rope.conformance.judged import plain
from dsv41_rope.harness.implementation import ImplementationError, load, parse_reference
from dsv41_rope.report import CPU_VERDICT, FROM_TESTS, REFERENCES, Report, verdict

CPU = torch.device("cpu")
needs_interpreter = pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a GPU every computation is held to the GPU's eager path"
)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, 4, 2, 16), torch.rand(1, 4, 4)


def _launched(function, *args, **kwargs) -> bool:
    with references.watch_triton_launches() as launches:
        function(*args, **kwargs)
    return launches.launched


@needs_interpreter
def test_a_triton_kernel_launch_is_seen_and_pytorch_code_is_not():
    values, angles = _inputs()
    assert _launched(kernel.apply_rope_triton, values, angles)
    assert not _launched(plain.rope, values, angles)
    assert not _launched(kernel.apply_rope_triton, values, angles.double()), "the eager fallback runs no kernel"


def test_watching_puts_back_the_profile_function_it_found():
    calls = []

    def outer_profile(frame, event, arg):
        calls.append(event)

    sys.setprofile(outer_profile)
    try:
        with references.watch_triton_launches():
            plain.rope(*_inputs())
        assert sys.getprofile() is outer_profile
    finally:
        sys.setprofile(None)


@needs_interpreter
@pytest.mark.parametrize(
    ("choice", "launched", "expected"),
    [
        ("auto", True, references.EMULATED_CUDA),
        ("auto", False, references.CPU_EAGER),
        ("cuda-emulated", False, references.EMULATED_CUDA),
        ("cpu-eager", True, references.CPU_EAGER),
    ],
)
def test_the_reference_on_a_cpu_follows_what_the_call_ran_unless_overridden(choice, launched, expected):
    implementation = load("dsv41_rope.conformance.judged.plain:rope", reference=choice)
    reference = references.held_to(CPU, implementation, launched)
    assert reference.name == expected
    assert reference.uses_oracle == (expected == references.EMULATED_CUDA)
    assert reference.eager_on_device == (expected == references.CPU_EAGER)


def test_an_unknown_reference_choice_is_a_usage_error():
    with pytest.raises(ImplementationError, match="--rope-reference='gpu': expected one of auto, cuda-emulated"):
        parse_reference("gpu", "--rope-reference")


def test_the_verdict_names_the_references_and_what_a_cpu_verdict_leaves_to_a_gpu():
    report = Report(metadata={}, cases={})
    report.metadata[FROM_TESTS] = {
        REFERENCES: {"eager on the CPU": "this CPU's eager PyTorch path"},
        CPU_VERDICT: "a CPU verdict, which says nothing of a GPU's bits: judge it on a CUDA machine too (x)",
    }
    line = verdict(report)
    assert line.endswith(
        "; held to eager on the CPU (this CPU's eager PyTorch path) - a CPU verdict, which says nothing of a GPU's "
        "bits: judge it on a CUDA machine too (x)"
    ), line
    assert "held to" not in verdict(Report(metadata={}, cases={})), "no reference recorded, none named"
