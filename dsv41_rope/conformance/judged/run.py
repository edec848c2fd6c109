"""Runs a slice of the suite against an implementation, in a fresh pytest process, and reads what it said.

Usage:
    python -m dsv41_rope.conformance.judged.run [--out DIR] [--timeout S] [IMPLEMENTATION ...] [-- PYTEST ARGS]

judges each implementation (``MODULE[:FUNCTION]``; by default the wrong ones of ``dsv41_rope.conformance.judged.wrong``
and ``dsv41_rope.conformance.judged.plain``)
on :data:`SLICE` (or the pytest arguments after ``--``) and prints, for each, the verdict and every failed test with the
comparison that failed it. Exit status 0 when every wrong implementation failed and every other one passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from pathlib import Path

from dsv41_rope.report import failure_entry, grouped_lines

__all__ = [
    "SLICE",
    "SLICE_CASES",
    "SLICE_MODULES",
    "SUITE",
    "TIMED_OUT",
    "PLAIN_WRONG",
    "WRONG",
    "Outcome",
    "judge",
    "main",
    "passing_counts",
    "read_junit",
    "slice_args",
]

SUITE = Path(__file__).resolve().parents[1]
# One small case, both regimes where the defects show (normal values; NaN payloads and signed zeros), both angle
# layouts, in the suites every implementation answers to: forward bits, copied channels, gradient, error.
SLICE_MODULES = ("test_forward_bits", "test_copied_channels", "test_gradient_conjugate", "test_error_vs_truth")
# The oracle's own proof against eager judges no implementation: it is left out.
SLICE_CASES = (
    "(bf16-4d-contiguous-odd-channels-inverse-normal or bf16-4d-contiguous-odd-channels-inverse-special)"
    " and not oracle_equals_torch_eager"
)


def slice_args(*, pyargs: bool = False) -> list[str]:
    """pytest arguments that select the slice: this suite's files, or (``pyargs``) the installed suite's modules."""
    if pyargs:
        return ["--pyargs", *(f"dsv41_rope.conformance.{name}" for name in SLICE_MODULES), "-k", SLICE_CASES]
    return [*(str(SUITE / f"{name}.py") for name in SLICE_MODULES), "-k", SLICE_CASES]


SLICE = slice_args()


def passing_counts(backend: str) -> dict[str, int]:
    """The slice's tests by outcome for an implementation that passes it on ``backend`` ("cuda" or "interpreter"):
    its 4 comparisons with PyTorch's eager path run on a GPU only."""
    return {"passed": 15} if backend == "cuda" else {"passed": 11, "skipped": 4}


WRONG = {
    name: f"dsv41_rope.conformance.judged.wrong:{name}"
    for name in ("rotates_leading_channels", "product_in_bf16", "backward_without_conjugate", "canonical_nan_copies")
}
# Plain PyTorch ones, no Triton: held to the CPU's own eager path on a CPU, to the GPU's on a GPU.
PLAIN_WRONG = {
    name: f"dsv41_rope.conformance.judged.plain:{name}"
    for name in ("rotates_leading_channels", "forgets_the_conjugate", "nan_with_a_payload")
}
# The exit status an outcome reports when the run was stopped at its time limit (as timeout(1) reports it).
TIMED_OUT = 124
# Seconds an interrupted run has to write its junit XML and report before it is killed.
_GRACE_SECONDS = 60
# An outer run's state that must not leak into the judged run: its xdist worker id, options, CI page.
_OUTER_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one run of the suite said about an implementation.

    Attributes:
        implementation: ``MODULE[:FUNCTION]`` as judged.
        exit_status: pytest's exit status (0 passed, 1 tests failed, 4 usage error, ...), or :data:`TIMED_OUT`.
        tests: each test's node id (as the junit XML gives it) and its outcome: "passed", "failed", "skipped" or
            "error".
        failures: each failed (or erroring) test's node id and the first line of its failure, which names the case
            and the comparison that failed.
        output: pytest's output.
    """

    implementation: str
    exit_status: int
    tests: Mapping[str, str]
    failures: Mapping[str, str]
    output: str

    @property
    def counts(self) -> dict[str, int]:
        """Tests by outcome."""
        counts: dict[str, int] = {}
        for outcome in self.tests.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def summary(self) -> str:
        """A few lines: the verdict and the counts, then per failed test function how many of its cases failed and
        on which comparisons (``fused-vs-oracle: bit mismatches``, ``norm-wise error over the bound``, ...), as the
        suite's own terminal summary groups them (``dsv41_rope.report.failed_tests``)."""
        verdict = "PASS" if self.exit_status == 0 else f"FAIL (exit {self.exit_status})"
        counts = ", ".join(f"{count} {kind}" for kind, count in sorted(self.counts.items()) if count)
        lines = [f"{self.implementation}: {verdict}: {counts or 'no tests'}"]
        lines += grouped_lines({nodeid: failure_entry(message) for nodeid, message in self.failures.items()})
        if self.exit_status not in (0, 1):
            lines += ["  " + line for line in self.output.splitlines()[-8:]]
        return "\n".join(lines)


def judge(
    implementation: str,
    workdir: Path,
    pytest_args: Sequence[str] = SLICE,
    *,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> Outcome:
    """Runs pytest on ``pytest_args`` with ``--rope-impl implementation`` in ``workdir``, and reads its junit XML.

    Args:
        implementation: ``MODULE[:FUNCTION]``.
        workdir: where pytest runs and writes its junit XML and ulp-drift report (``workdir/report``).
        pytest_args: what to run.
        python: the interpreter (another environment's, for an installed suite).
        env: the environment; when None, this process's less an outer pytest run's own variables, with this suite
            importable (``PYTHONPATH``).
        timeout: seconds before the run is interrupted (the outcome is then :data:`TIMED_OUT`, with the tests that
            ran before it, as the junit XML pytest writes on an interrupt gives them; killed if it hangs).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    junit = workdir / "junit.xml"
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "--rope-impl", implementation]
    command += ["--junitxml", str(junit), "--ulp-report", str(workdir / "report"), *pytest_args]
    if env is None:
        env = {key: value for key, value in os.environ.items() if key not in _OUTER_VARIABLES}
        env["PYTHONPATH"] = os.pathsep.join([str(SUITE.parent), *filter(None, [env.get("PYTHONPATH")])])
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        status = process.returncode
    except subprocess.TimeoutExpired:
        # Interrupted, pytest still writes the junit XML and the report of the tests that ran; killed if it hangs.
        os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        output = _text(output) + f"\n(interrupted after {timeout:g} s)"
        status = TIMED_OUT
    tests, failures = read_junit(junit) if junit.is_file() else ({}, {})
    return Outcome(implementation, status, tests, failures, _text(output))


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def read_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each test's node id (``classname::name``) and outcome, and each failed test's first failure line, from a junit
    XML pytest wrote."""
    tests: dict[str, str] = {}
    failures: dict[str, str] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            tests[nodeid] = "failed" if problem.tag == "failure" else "error"
            failures[nodeid] = _first_line(problem.get("message", ""))
        else:
            tests[nodeid] = "skipped" if case.find("skipped") is not None else "passed"
    return tests, failures


def _first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "-"
    return line if len(line) <= 200 else line[:197] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Judges each implementation and prints its summary; see the module docstring for the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = SLICE
    if "--" in argv:
        pytest_args = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(
        prog="python -m dsv41_rope.conformance.judged.run", description=__doc__.splitlines()[0]
    )
    every_wrong = [*WRONG.values(), *PLAIN_WRONG.values()]
    parser.add_argument("implementations", nargs="*", metavar="IMPLEMENTATION", default=every_wrong)
    parser.add_argument("--out", type=Path, help="keep each run's junit XML and report here (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    args = parser.parse_args(argv)
    expected_right = True
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        for implementation in args.implementations:
            workdir = out / implementation.replace(":", "-").replace(".", "-")
            outcome = judge(implementation, workdir, pytest_args, timeout=args.timeout)
            print(outcome.summary(), flush=True)
            wrong = implementation in every_wrong
            expected_right &= (outcome.exit_status == 1) if wrong else (outcome.exit_status == 0)
    return 0 if expected_right else 1


if __name__ == "__main__":
    sys.exit(main())
