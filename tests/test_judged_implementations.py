"""The suite judges implementations it did not write: each deliberately wrong one
(``dsv41_rope/conformance/judged/wrong.py``, the project's kernel with one defect built around it) fails a slice of the
suite for its defect alone, exactly the tests that defect reaches and each on the comparison that shows it; a correct
copy of the kernel, imported under another module name, passes the same slice, and its report names it.

Each implementation runs in its own pytest process (``dsv41_rope.conformance.judged.run``), as another repository's CI
would run the suite.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from dsv41_rope.conformance.judged.run import PLAIN_WRONG, SLICE, WRONG, Outcome, judge, passing_counts
from dsv41_rope.harness import backend
from dsv41_rope.harness.provenance import kernel_sha256
from dsv41_rope.report import what_failed
from dsv41_rope.vendor import write_copy

REPO = Path(__file__).resolve().parents[1]
NORMAL, SPECIAL = "inverse-normal", "inverse-special"
# Per wrong implementation: each test function it fails, the comparison its failures name and what differed there
# (`dsv41_rope.report.what_failed`), and the value regimes of the failing cases (both angle layouts of
# each). Every other test of the slice passes. The eager comparisons run on a GPU only.
BITS, NAN_BITS, OVER_BOUND = "bit mismatches", "NaN bit-pattern differences", "norm-wise error over the bound"
EXPECTED_FAILURES = {
    "rotates_leading_channels": {
        "test_fused_equals_oracle": (f"fused-vs-oracle: {BITS}", {NORMAL, SPECIAL}),
        "test_fused_equals_torch_eager": (f"fused-vs-eager: {BITS}", {NORMAL, SPECIAL}),
        "test_copied_channels_are_bit_copies": (f"copied-vs-input: {BITS}", {NORMAL}),
        "test_normwise_error_within_bound": (OVER_BOUND, {NORMAL}),
        # Its gradient is its own forward's conjugate rotation (the roll is linear); the oracle backward catches it.
        "test_gradient_is_conjugate_rotation": (f"backward-vs-oracle: {BITS}", {NORMAL, SPECIAL}),
    },
    "product_in_bf16": {
        "test_fused_equals_oracle": (f"fused-vs-oracle: {BITS}", {NORMAL, SPECIAL}),
        "test_fused_equals_torch_eager": (f"fused-vs-eager: {BITS}", {NORMAL, SPECIAL}),
        "test_normwise_error_within_bound": (OVER_BOUND, {NORMAL}),
        # Its backward is the kernel's: the conjugate rotation through its own (wrong) forward differs from it.
        "test_gradient_is_conjugate_rotation": (f"backward-vs-conjugate: {BITS}", {NORMAL, SPECIAL}),
    },
    "backward_without_conjugate": {
        "test_gradient_is_conjugate_rotation": (f"backward-vs-conjugate: {BITS}", {NORMAL, SPECIAL}),
    },
    "canonical_nan_copies": {
        # Only NaN payloads differ; normal values hold no NaN, the special ones' copied channels do.
        "test_copied_channels_are_bit_copies": (f"copied-vs-input: {NAN_BITS}", {NORMAL}),
        "test_fused_equals_oracle": (f"fused-vs-oracle: {NAN_BITS}", {SPECIAL}),
        "test_fused_equals_torch_eager": (f"fused-vs-eager: {NAN_BITS}", {SPECIAL}),
    },
}


# The plain PyTorch ones are held to the eager path of the device they run on: the oracle's emulation of eager CUDA on a
# GPU (with eager itself), the CPU's eager path on a CPU.
HELD_TO = "oracle" if backend.name() == "cuda" else "eager"
ON_A_GPU = (
    {"test_fused_equals_torch_eager": (f"fused-vs-eager: {BITS}", {NORMAL, SPECIAL})} if HELD_TO == "oracle" else {}
)
PLAIN_EXPECTED_FAILURES = {
    "rotates_leading_channels": {
        "test_fused_equals_oracle": (f"fused-vs-{HELD_TO}: {BITS}", {NORMAL, SPECIAL}),
        **ON_A_GPU,
        "test_copied_channels_are_bit_copies": (f"copied-vs-input: {BITS}", {NORMAL}),
        "test_normwise_error_within_bound": (OVER_BOUND, {NORMAL}),
        # Autograd's gradient of its own forward is that forward's conjugate rotation: its reference's backward
        # catches it.
        "test_gradient_is_conjugate_rotation": (f"backward-vs-{HELD_TO}: {BITS}", {NORMAL, SPECIAL}),
    },
    "forgets_the_conjugate": {
        "test_fused_equals_oracle": (f"fused-vs-{HELD_TO}: {BITS}", {NORMAL, SPECIAL}),
        **ON_A_GPU,
        "test_normwise_error_within_bound": (OVER_BOUND, {NORMAL}),
        "test_gradient_is_conjugate_rotation": (f"backward-vs-conjugate: {BITS}", {NORMAL, SPECIAL}),
    },
    "nan_with_a_payload": {
        "test_fused_equals_oracle": (f"fused-vs-{HELD_TO}: {NAN_BITS}", {SPECIAL}),
        **({"test_fused_equals_torch_eager": (f"fused-vs-eager: {NAN_BITS}", {SPECIAL})} if ON_A_GPU else {}),
    },
}


def _function_and_regime(nodeid: str) -> tuple[str, str]:
    name = nodeid.rsplit("::", 1)[-1]
    regime = NORMAL if NORMAL in name else SPECIAL if SPECIAL in name else "?"
    return name.split("[", 1)[0], regime


def _unexpected(outcome: Outcome, expected: dict[str, tuple[str, set[str]]]) -> list[str]:
    """Every test whose outcome or failing comparison is not what the defect explains."""
    problems = []
    for nodeid, result in sorted(outcome.tests.items()):
        function, regime = _function_and_regime(nodeid)
        comparison, regimes = expected.get(function, ("", set()))
        should_fail = regime in regimes
        if result == "skipped":
            continue  # the GPU's eager comparisons, skipped on a CPU (the control run checks how many)
        if (result == "failed") != should_fail:
            problems.append(f"{nodeid}: {result}, expected {'a failure' if should_fail else 'a pass'}")
        elif should_fail and what_failed(outcome.failures[nodeid]) != comparison:
            problems.append(f"{nodeid}: failed on {outcome.failures[nodeid]!r}, not on {comparison!r}")
    return problems


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_implementation_fails_for_its_defect_alone(name, tmp_path):
    outcome = judge(WRONG[name], tmp_path)
    assert outcome.exit_status == 1, outcome.summary()
    assert sum(passing_counts(backend.name()).values()) == len(outcome.tests), outcome.summary()
    assert _unexpected(outcome, EXPECTED_FAILURES[name]) == [], outcome.summary()


@pytest.mark.parametrize("name", list(PLAIN_WRONG))
def test_wrong_plain_pytorch_implementation_fails_for_its_defect_alone(name, tmp_path):
    outcome = judge(PLAIN_WRONG[name], tmp_path)
    assert outcome.exit_status == 1, outcome.summary()
    assert sum(passing_counts(backend.name()).values()) == len(outcome.tests), outcome.summary()
    assert _unexpected(outcome, PLAIN_EXPECTED_FAILURES[name]) == [], outcome.summary()
    report = json.loads((tmp_path / "report" / "ulp-drift.json").read_text())
    held_to = "eager CUDA" if HELD_TO == "oracle" else "eager on the CPU"
    assert list(report["metadata"]["from_tests"]["references"]) == [held_to]
    failures = report["metadata"]["failed_tests"].values()
    against_references = [failure for failure in failures if re.match(r"[\w-]+-vs-(eager|oracle):", failure["what"])]
    assert against_references and all(f"; held to {held_to}" in failure["message"] for failure in against_references)


def test_correct_plain_pytorch_implementation_passes_the_slice(tmp_path):
    outcome = judge("dsv41_rope.conformance.judged.plain:rope", tmp_path)
    assert outcome.exit_status == 0, outcome.summary()
    assert outcome.counts == passing_counts(backend.name()), outcome.summary()


def test_correct_kernel_under_another_module_name_passes_the_slice(tmp_path):
    vendor = tmp_path / "vendor"
    write_copy(vendor / "vendored_rope", "vendored_rope")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "GITHUB_STEP"))}
    env["PYTHONPATH"] = os.pathsep.join([str(vendor), str(REPO)])
    outcome = judge("vendored_rope", tmp_path / "run", SLICE, env=env)
    assert outcome.exit_status == 0, outcome.summary()
    assert outcome.counts == passing_counts(backend.name()), outcome.summary()
    report = json.loads((tmp_path / "run" / "report" / "ulp-drift.json").read_text())
    judged = report["metadata"]["from_tests"]["implementation under test"]
    assert judged["function"] == "vendored_rope:apply_rope_triton"
    assert judged["source"] == str(vendor / "vendored_rope")
    assert judged["sha256"] == kernel_sha256(vendor / "vendored_rope")
    assert judged["in place"] == "none judged" and judged["claims"] == "none"
    markdown = (tmp_path / "run" / "report" / "ulp-drift.md").read_text()
    assert "| function | vendored_rope:apply_rope_triton |" in markdown.split("### By dtype")[0], "not in the header"
