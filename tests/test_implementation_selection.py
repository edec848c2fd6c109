"""Choosing the implementation under test: ``--rope-impl`` and its environment variables, a usage error that names
what was looked up when the name cannot be judged, the project kernel's self-tests collected for it alone, and what
another implementation skips, saying why.

The runs name the suite's plugin explicitly (``-p``), as where the distribution is not installed. Runs that stop at a
usage error run in this process (pytester), on modules that import nothing; a run that imports kernels runs in a
subprocess, since pytester's in-process runs unload the modules they imported (torch's included) afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsv41_rope.harness.implementation import CLAIMS, FunctionName, ImplementationError, load, parse_claims

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "dsv41_rope" / "conformance"
PLUGIN = ["-p", "dsv41_rope.harness.under_test", "-p", "no:cacheprovider"]
FOREIGN = "dsv41_rope.conformance.judged.wrong:backward_without_conjugate"


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, with no selection or CI page inherited from the outer run, and the checkout importable."""
    variables = ("DSV41_ROPE_IMPL", "DSV41_ROPE_IMPL_IN_PLACE", "DSV41_ROPE_IMPL_CLAIMS", "DSV41_ROPE_REFERENCE")
    for variable in (*variables, "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return pytester


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("their.missing_kernel", "--rope-impl their.missing_kernel:apply_rope_triton: cannot import module"),
        ("fake_kernel", "fake_kernel.py) has no attribute 'apply_rope_triton'; its public callables: rotate"),
        ("fake_kernel:PAIRS", "'PAIRS' is not callable (a int)"),
        ("fake_kernel:a:b", "--rope-impl='fake_kernel:a:b': expected MODULE[:FUNCTION]"),
    ],
    ids=["missing-module", "missing-function", "not-callable", "malformed"],
)
def test_a_name_that_cannot_be_judged_is_a_usage_error_before_any_test(suite, given, words):
    suite.makepyfile(fake_kernel="PAIRS = 32\n\n\ndef rotate(values, angles, *, inverse=False):\n    return values\n")
    suite.syspathinsert()
    result = suite.runpytest_inprocess(*PLUGIN, "--rope-impl", given, str(SUITE / "test_forward_bits.py"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in result.stderr.str(), result.stderr.str()
    assert "collected" not in result.stdout.str()


@pytest.mark.parametrize(
    ("function", "words"),
    [
        (
            "def rope(values, angles):\n    return values.clone()\n",
            "--rope-impl calls_wrongly:rope: cannot be judged: calls_wrongly:rope(values, angles, inverse=False) with "
            "values float32 (1, 2, 2, 8) on cpu, angles float32 (1, 2, 2) on cpu raised TypeError: rope() got an "
            "unexpected keyword argument 'inverse'; the suite calls fn(values, angles, *, inverse=False)",
        ),
        (
            "def rope(values, angles, *, inverse=False):\n    return values[..., :4] if inverse else values.clone()\n",
            "calls_wrongly:rope(values, angles, inverse=True) with values float32 (1, 2, 2, 8) on cpu, angles float32 "
            "(1, 2, 2) on cpu returned float32 (1, 2, 2, 4) on cpu, not a tensor of the values' shape and dtype",
        ),
    ],
    ids=["without-inverse", "wrong-shape"],
)
def test_a_function_the_suite_cannot_call_is_a_usage_error_before_any_test(suite, function, words):
    suite.makepyfile(calls_wrongly=function)
    suite.syspathinsert()
    result = suite.runpytest_subprocess(*PLUGIN, "--rope-impl", "calls_wrongly:rope", str(SUITE / "test_bad_input.py"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in " ".join(result.stderr.str().split()), result.stderr.str()
    assert "collected" not in result.stdout.str()


def test_a_missing_function_is_named_with_the_module_file_and_its_callables():
    with pytest.raises(ImplementationError) as raised:
        load("dsv41_rope.kernel:apply_rope")
    message = str(raised.value)
    assert "has no attribute 'apply_rope'" in message and "kernel/__init__.py" in message
    assert "apply_rope_triton, apply_rope_triton_" in message


def test_an_in_place_function_must_be_named_in_full():
    with pytest.raises(ImplementationError, match="--rope-impl-in-place='dsv41_rope.kernel': expected MODULE:FUNCTION"):
        load(None, in_place="dsv41_rope.kernel")


def test_unknown_claims_are_refused_and_none_claims_none():
    with pytest.raises(ImplementationError, match="unknown claims \\['graphs'\\]"):
        parse_claims("compile,graphs", "--rope-impl-claims")
    assert parse_claims("none", "--rope-impl-claims") == frozenset()
    assert parse_claims(" compile , cuda-graphs ", "x") == {"compile", "cuda-graphs"}


def test_defaults_judge_the_project_kernel_with_its_in_place_function_and_every_claim():
    implementation = load(None)
    assert implementation.name == "dsv41_rope.kernel:apply_rope_triton" and implementation.is_project_kernel
    assert str(implementation.in_place_name) == "dsv41_rope.kernel:apply_rope_triton_"
    assert implementation.claims == set(CLAIMS)


def test_another_function_of_the_project_module_is_another_implementation():
    implementation = load("dsv41_rope.kernel:apply_rope_eager", claims="double-backward")
    assert not implementation.is_project_kernel and implementation.in_place_name is None
    assert implementation.claims == {"double-backward"}
    assert FunctionName.parse("a.b", default_function="f", option="x") == FunctionName("a.b", "f")


def test_a_modules_own_claims_stand_unless_the_option_says_otherwise(tmp_path, monkeypatch):
    (tmp_path / "claiming_kernel.py").write_text(
        "from dsv41_rope.kernel import apply_rope_triton\nROPE_CONFORMANCE_CLAIMS = ('compile',)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load("claiming_kernel").claims == {"compile"}
    assert load("claiming_kernel", claims="none").claims == frozenset()


def test_the_environment_names_the_implementation_when_the_option_does_not(suite, monkeypatch):
    monkeypatch.setenv("DSV41_ROPE_IMPL", "their.kernel_from_the_environment")
    result = suite.runpytest_inprocess(*PLUGIN, str(SUITE / "test_forward_bits.py"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "their.kernel_from_the_environment" in result.stderr.str()
    assert "(named by $DSV41_ROPE_IMPL)" in result.stderr.str()


# One test of each kind another implementation does not answer to, and one it does.
SKIPPED_FOR_ANOTHER = {
    "test_in_place.py::test_version_counter_is_bumped": "no in-place function is judged for " + FOREIGN,
    "test_integration.py::test_compile_fullgraph_gives_eager_mode_bits[bf16-static-shapes]": (
        f"{FOREIGN} does not claim compile"
    ),
}


def _collected(suite: pytest.Pytester, *arguments: str) -> list[str]:
    result = suite.runpytest_subprocess(*PLUGIN, "--co", "-q", *arguments, str(SUITE))
    return [line for line in result.stdout.lines if "::" in line]


def test_the_kernels_self_tests_are_collected_for_the_project_kernel_alone(suite):
    """Another implementation's run collects none of them: they judge nothing of it, and would only read as skips."""
    own = _collected(suite, "-k", "test_empty_sequence or test_version_counter_is_bumped")
    assert any("kernel_self_tests/test_dispatch.py::test_empty_sequence" in test for test in own), own
    foreign = _collected(suite, "--rope-impl", FOREIGN, "-k", "test_empty_sequence or test_version_counter_is_bumped")
    assert foreign and not any("kernel_self_tests" in test for test in foreign), foreign


def test_another_implementation_skips_what_it_does_not_answer_to_saying_why(suite):
    selected = [str(SUITE / nodeid) for nodeid in SKIPPED_FOR_ANOTHER]
    selected.append(str(SUITE / "test_bad_input.py::test_valid_call_does_not_write_inputs"))
    result = suite.runpytest_subprocess(*PLUGIN, "-rs", "--rope-impl", FOREIGN, *selected)
    result.assert_outcomes(passed=2, skipped=len(SKIPPED_FOR_ANOTHER))
    skipped = "\n".join(line for line in result.stdout.lines if line.startswith("SKIPPED"))
    for reason in SKIPPED_FOR_ANOTHER.values():
        assert reason in skipped, skipped
    assert "project kernel's internals" not in skipped, skipped
    assert f"dsv41-rope: judging {FOREIGN}" in result.stdout.str()
