"""The conformance suite's pytest plugin for the implementation under test: which one it judges (``--rope-impl``),
the report header that names it, ``-n auto`` on GPUs, and the one-line report of a check's failure.

Listed by :mod:`dsv41_rope.pytest_plugin` (the distribution's pytest11 entry point, beside the ulp-drift report
plugin), so that ``python -m pytest --pyargs dsv41_rope.conformance --rope-impl their.module`` works from any
directory; in a checkout the root conftest loads it.

Options, each with an environment variable that stands in when the option is not given (what ``./run`` passes on):

- ``--rope-impl MODULE[:FUNCTION]`` (``DSV41_ROPE_IMPL``): the out-of-place function judged; FUNCTION defaults to
  ``apply_rope_triton``; default the project's kernel, ``dsv41_rope.kernel:apply_rope_triton``.
- ``--rope-impl-in-place MODULE:FUNCTION`` (``DSV41_ROPE_IMPL_IN_PLACE``): an in-place function to judge too.
- ``--rope-impl-claims CLAIMS`` (``DSV41_ROPE_IMPL_CLAIMS``): comma-separated behaviours the implementation claims
  (``compile``, ``cuda-graphs``, ``double-backward``, or ``none``).

An implementation named explicitly is imported when the session starts (after choosing the backend, since Triton reads
``TRITON_INTERPRET`` when a kernel is defined) and called once on a tiny valid input, with ``inverse=False`` and
``inverse=True`` as the suite calls it: one that cannot be imported, or that cannot be called so, stops the run with
a usage error (exit status 4) that names what was looked up or what call raised what, before any test runs. The
default one is imported by the suite's fixture. This module imports neither torch nor the implementation when it
loads: the entry point loads it in every pytest session of the environment.

A failure of the suite's own comparisons (``dsv41_rope.harness.failures.ConformanceFailure``) is reported by its one
line, without a traceback (unless ``--tb=long`` or ``--tb=native`` asks for one): the line names the case, the
comparison, the differing elements and the bits, and the ulp-drift report keeps the rest. Any other failure keeps its
traceback.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
import types
from typing import Any

import pytest

from dsv41_rope.harness.failures import short_failure
from dsv41_rope.harness.implementation import (
    PROJECT_FUNCTION,
    PROJECT_MODULE,
    Implementation,
    ImplementationError,
    check_calling_convention,
    load,
)
from dsv41_rope.harness.provenance import kernel_sha256, kernel_source

__all__ = [
    "CLAIMS_VARIABLE",
    "IMPL_VARIABLE",
    "IN_PLACE_VARIABLE",
    "Selection",
    "implementation_under_test",
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "pytest_xdist_auto_num_workers",
    "release_frames",
    "runs_tests",
]


IMPL_VARIABLE = "DSV41_ROPE_IMPL"
IN_PLACE_VARIABLE = "DSV41_ROPE_IMPL_IN_PLACE"
CLAIMS_VARIABLE = "DSV41_ROPE_IMPL_CLAIMS"
# Each option, in the order Selection takes them, and the variable that stands in for it.
_VARIABLES = {
    "--rope-impl": IMPL_VARIABLE,
    "--rope-impl-in-place": IN_PLACE_VARIABLE,
    "--rope-impl-claims": CLAIMS_VARIABLE,
}

_SELECTION = pytest.StashKey["Selection"]()
# The traceback styles that ask for a check's traceback too; the others (auto, short, line, no) show its line.
_FULL_TRACEBACKS = ("long", "native")


@dataclasses.dataclass
class Selection:
    """What the session was asked to judge (None: not named), and the implementation once imported."""

    forward: str | None
    in_place: str | None
    claims: str | None
    # The environment variables that named what no option did.
    from_environment: tuple[str, ...] = ()
    _loaded: Implementation | None = None

    @property
    def explicit(self) -> bool:
        """Whether anything was named on the command line or in the environment."""
        return any(value is not None for value in (self.forward, self.in_place, self.claims))

    def load(self) -> Implementation:
        """Imports the implementation (once).

        Raises:
            ImplementationError: naming what was looked up, when it cannot be judged.
        """
        if self._loaded is None:
            self._loaded = load(self.forward, self.in_place, self.claims)
        return self._loaded

    def load_and_check(self) -> Implementation:
        """Imports the implementation and checks that it takes the suite's calls (on this process's device).

        Raises:
            ImplementationError: naming what was looked up, or the call tried and what it raised.
        """
        implementation = self.load()
        from dsv41_rope.harness import backend

        check_calling_convention(implementation, backend.device())
        return implementation

    def header(self) -> str:
        """One line for the top of the run: the function judged, its source and digest, and what else is judged."""
        if self._loaded is not None:
            described = self._loaded.describe()
            return (
                f"dsv41-rope: judging {described['function']} ({described['source']}, sha256 {described['sha256']}); "
                f"in place: {described['in place']}; claims: {described['claims']}"
            )
        source = kernel_source(PROJECT_MODULE)
        return (
            f"dsv41-rope: judging {PROJECT_MODULE}:{PROJECT_FUNCTION}, the project's kernel ({source or '-'}, sha256 "
            f"{kernel_sha256(source) or '-'}); --rope-impl MODULE[:FUNCTION] judges another"
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds the --rope-impl options."""
    group = parser.getgroup("rope-impl", "implementation under test (dsv41-rope conformance)")
    group.addoption(
        "--rope-impl",
        metavar="MODULE[:FUNCTION]",
        help=f"the RoPE function to judge, (values, angles, *, inverse=False) -> tensor; FUNCTION defaults to "
        f"{PROJECT_FUNCTION} (default: ${IMPL_VARIABLE}, else the project's kernel, "
        f"{PROJECT_MODULE}:{PROJECT_FUNCTION})",
    )
    group.addoption(
        "--rope-impl-in-place",
        metavar="MODULE:FUNCTION",
        help=f"an in-place variant to judge too, (values, angles, *, inverse=False) -> values (default: "
        f"${IN_PLACE_VARIABLE}; the project kernel's own for the project's kernel, else none: those tests skip)",
    )
    group.addoption(
        "--rope-impl-claims",
        metavar="CLAIMS",
        help=f"what the implementation claims beyond the eager contract, comma-separated: compile, cuda-graphs, "
        f"double-backward, or none (default: ${CLAIMS_VARIABLE}, else the module's ROPE_CONFORMANCE_CLAIMS, else all "
        "for the project's kernel and none for another)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Reads the selection; imports an implementation named explicitly, turning any failure into a usage error."""
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped on CPU machines, with the reason)")
    config.addinivalue_line(
        "markers", "compile_bound: builds many kernels (seconds a test on a GPU); scheduled first under xdist"
    )
    # The interpreter evaluates kernels with numpy, which warns on IEEE events the special-value cases produce on
    # purpose (inf * 0, overflow to inf when narrowing); the GPU raises no such warnings.
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter")
    given = {option: config.getoption(option) for option in _VARIABLES}
    from_environment = {
        option: os.environ[variable]
        for option, variable in _VARIABLES.items()
        if given[option] is None and os.environ.get(variable)
    }
    given.update(from_environment)
    named_by = tuple(f"${_VARIABLES[option]}" for option in from_environment)
    selection = Selection(*given.values(), from_environment=named_by)
    config.stash[_SELECTION] = selection
    if selection.explicit:
        from dsv41_rope.harness import backend

        backend.choose()
        try:
            selection.load_and_check()
        except ImplementationError as error:
            named_by = f" (named by {', '.join(selection.from_environment)})" if selection.from_environment else ""
            raise pytest.UsageError(f"{error}{named_by}") from error


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport | None:
    """Reports a failure of the suite's own comparisons by its line (``dsv41_rope.harness.failures.short_failure``)
    instead of pytest's traceback, which repeats the line after the reprs of every frame's tensors and costs more than
    the check itself; ``report.conformance_failure`` says what failed (the comparison and the kind of difference).
    Anything else (a crash, another exception, ``--tb=long``/``--tb=native``) is left to pytest."""
    excinfo = call.excinfo
    if excinfo is None or item.config.getoption("tbstyle", "auto") in _FULL_TRACEBACKS:
        return None
    short = short_failure(excinfo.value)
    if short is None:
        return None
    # pytest's report of a call whose "excinfo" is not an exception is a failure whose longrepr is that text; the
    # call itself, with its exception, still reaches every other hook (xfail, --pdb).
    reported: Any = types.SimpleNamespace(
        when=call.when, start=call.start, stop=call.stop, duration=call.duration, excinfo=short.text
    )
    report = pytest.TestReport.from_item_and_call(item, reported)
    report.conformance_failure = short.what
    if not item.config.getoption("usepdb", False):
        release_frames(excinfo.value)
    return report


def release_frames(error: BaseException) -> None:
    """Drops the locals of the finished frames a reported failure's traceback holds (each leaf's, for a group).

    Its line is all pytest shows, but the exception lives on: pytest keeps it as ``sys.last_value`` until the next
    test's call, and a reference cycle (the traceback holds the frame of pytest's ``CallInfo.from_call``, whose locals
    hold the exception) keeps it until Python's cyclic collector runs, which may be many tests later. With the frames'
    locals went every tensor the failed check held, full-size on a GPU (values, output, expected, bit masks: GBs a
    test), so each xdist worker sharing the GPU carried several failed tests' worth. ``--pdb`` keeps them."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            pending += list(current.exceptions)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on GPUs: ``dsv41_rope.harness.backend.gpu_workers`` (16 or 8 a GPU); on a CPU, xdist's own count."""
    from dsv41_rope.harness import backend  # imports torch: not when this module loads

    return backend.gpu_workers()


def runs_tests(config: pytest.Config) -> bool:
    """Whether this pytest process runs (or collects) tests: False in xdist's controller, which hands them out to its
    workers and only gathers their reports, so that it need not import torch."""
    if hasattr(config, "workerinput"):
        return True
    distributing = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    return not distributing or bool(config.getoption("collectonly", False))


def pytest_report_header(config: pytest.Config) -> str:
    """Names the implementation under test at the top of the run."""
    return config.stash[_SELECTION].header()


def implementation_under_test(config: pytest.Config) -> Implementation:
    """The session's implementation under test, imported on first use.

    Raises:
        ImplementationError: when it cannot be judged (an explicitly named one fails at start-up instead).
    """
    return config.stash[_SELECTION].load()
