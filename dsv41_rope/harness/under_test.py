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
- ``--rope-reference auto|cuda-emulated|cpu-eager`` (``DSV41_ROPE_REFERENCE``): what a computation on a CPU is held
  to; ``auto`` decides from what each call runs (``dsv41_rope.conformance.references``).

An implementation named explicitly is imported when the session starts (after choosing the backend, since Triton reads
``TRITON_INTERPRET`` when a kernel is defined) and called once on a tiny valid input, with ``inverse=False`` and
``inverse=True`` as the suite calls it: one that cannot be imported, or that cannot be called so, stops the run with
a usage error (exit status 4) that names what was looked up or what call raised what, before any test runs. The
default one is imported by the suite's fixture. This module imports neither torch nor the implementation when it
loads: the entry point loads it in every pytest session of the environment.

**Inert unless asked** (:func:`suite_requested`): installed beside another project, the entry point loads this plugin
in that project's sessions too. It always adds its options (pytest must know them), but names the implementation in
the header, sets ``-n auto``'s worker count and ignores the interpreter's warnings only in a session that asked for the
suite: one that targets its tests, gives one of the suite's options, or sets one of its environment variables.

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
from pathlib import Path
from typing import Any

import pytest

from dsv41_rope.harness.failures import short_failure
from dsv41_rope.harness.implementation import (
    PROJECT_FUNCTION,
    PROJECT_MODULE,
    REFERENCE_CHOICES,
    FunctionName,
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
    "REFERENCE_VARIABLE",
    "SUITE_DIRECTORY",
    "SUITE_OPTIONS",
    "SUITE_PACKAGE",
    "Selection",
    "implementation_under_test",
    "judges_project_kernel",
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "pytest_xdist_auto_num_workers",
    "release_frames",
    "runs_tests",
    "suite_requested",
    "targets_suite",
]


IMPL_VARIABLE = "DSV41_ROPE_IMPL"
IN_PLACE_VARIABLE = "DSV41_ROPE_IMPL_IN_PLACE"
CLAIMS_VARIABLE = "DSV41_ROPE_IMPL_CLAIMS"
REFERENCE_VARIABLE = "DSV41_ROPE_REFERENCE"
# Each option, in the order Selection takes them, and the variable that stands in for it.
_VARIABLES = {
    "--rope-impl": IMPL_VARIABLE,
    "--rope-impl-in-place": IN_PLACE_VARIABLE,
    "--rope-impl-claims": CLAIMS_VARIABLE,
    "--rope-reference": REFERENCE_VARIABLE,
}

# The suite: its package, and its folder (found from this file, without importing the suite).
SUITE_PACKAGE = "dsv41_rope.conformance"
SUITE_DIRECTORY = Path(__file__).resolve().parents[1] / "conformance"
# The options of the suite's plugins (this one's and the report's) whose use asks for the suite; unset, each is None,
# False or 0.
SUITE_OPTIONS = (
    *_VARIABLES,
    "--ulp-report",
    "--ulp-baseline",
    "--ulp-baseline-strict",
    "--ulp-save-baseline",
    "--ulp-tolerance",
    "--ulp-fraction-tolerance",
)
# Folders between a target and the suite that pytest does not collect (it skips hidden folders and virtualenvs).
_NOT_COLLECTED = ("site-packages", "dist-packages")

_SELECTION = pytest.StashKey["Selection"]()
_REQUESTED = pytest.StashKey[bool]()
# The traceback styles that ask for a check's traceback too; the others (auto, short, line, no) show its line.
_FULL_TRACEBACKS = ("long", "native")


@dataclasses.dataclass
class Selection:
    """What the session was asked to judge (None: not named), and the implementation once imported."""

    forward: str | None
    in_place: str | None
    claims: str | None
    reference: str | None = None
    # The environment variables that named what no option did.
    from_environment: tuple[str, ...] = ()
    _loaded: Implementation | None = None

    @property
    def explicit(self) -> bool:
        """Whether anything was named on the command line or in the environment."""
        return any(value is not None for value in (self.forward, self.in_place, self.claims, self.reference))

    @property
    def judges_project_kernel(self) -> bool:
        """Whether the project's kernel is judged, decided from the names alone (nothing is imported): the module
        ``dsv41_rope.kernel`` and its ``apply_rope_triton``, as :func:`dsv41_rope.harness.implementation.load`
        decides it. A malformed name judges no kernel (the run then stops with a usage error)."""
        try:
            name = FunctionName.parse(
                self.forward or PROJECT_MODULE, default_function=PROJECT_FUNCTION, option="--rope-impl"
            )
        except ImplementationError:
            return False
        return (name.module, name.function) == (PROJECT_MODULE, PROJECT_FUNCTION)

    def load(self) -> Implementation:
        """Imports the implementation (once).

        Raises:
            ImplementationError: naming what was looked up, when it cannot be judged.
        """
        if self._loaded is None:
            self._loaded = load(self.forward, self.in_place, self.claims, self.reference)
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
            reference = "" if self._loaded.reference == "auto" else f"; reference forced: {self._loaded.reference}"
            return (
                f"dsv41-rope: judging {described['function']} ({described['source']}, sha256 {described['sha256']}); "
                f"in place: {described['in place']}; claims: {described['claims']}{reference}"
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
    group.addoption(
        "--rope-reference",
        metavar="|".join(REFERENCE_CHOICES),
        help=f"what a computation on a CPU is held to: auto decides from what each call runs (a call that launches a "
        f"Triton kernel: eager CUDA's bits, emulated; PyTorch code: the CPU's own eager path); on a GPU, always its "
        f"eager path (default: ${REFERENCE_VARIABLE}, else auto)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Reads the selection; imports an implementation named explicitly, turning any failure into a usage error."""
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped on CPU machines, with the reason)")
    config.addinivalue_line(
        "markers", "compile_bound: builds many kernels (seconds a test on a GPU); scheduled first under xdist"
    )
    if suite_requested(config):
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


# tryfirst: xdist's own implementation always answers, and the order of the others is the order plugins loaded in.
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config | None) -> int | None:
    """``-n auto`` on GPUs: ``dsv41_rope.harness.backend.gpu_workers`` (16 or 8 a GPU); on a CPU, in a session that
    did not ask for the suite (:func:`suite_requested`), or where ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` names a count,
    xdist's own count. A direct call without a config gets the suite's count."""
    if config is not None and not suite_requested(config):
        return None
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from dsv41_rope.harness import backend  # imports torch: not when this module loads

    return backend.gpu_workers()


def runs_tests(config: pytest.Config) -> bool:
    """Whether this pytest process runs (or collects) tests: False in xdist's controller, which hands them out to its
    workers and only gathers their reports, so that it need not import torch."""
    if hasattr(config, "workerinput"):
        return True
    distributing = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    return not distributing or bool(config.getoption("collectonly", False))


def suite_requested(config: pytest.Config) -> bool:
    """Whether the session asked for the conformance suite, decided from what it was given (the command line, the ini
    file's ``addopts`` and ``testpaths``, the environment), before collection, as xdist's worker count must be:

    - one of :data:`SUITE_OPTIONS` has a value (``--rope-impl*``, ``--ulp-*``);
    - one of the environment variables that stand in for ``--rope-impl*`` is set and not empty;
    - a target (an argument, else ``testpaths``, else the current folder) is the suite: :func:`targets_suite`.
    """
    requested = config.stash.get(_REQUESTED, None)
    if requested is None:
        requested = (
            any(config.getoption(option, None) for option in SUITE_OPTIONS)
            or any(os.environ.get(variable) for variable in _VARIABLES.values())
            or any(targets_suite(config, target) for target in config.args)
        )
        config.stash[_REQUESTED] = requested
    return requested


def targets_suite(config: pytest.Config, target: str) -> bool:
    """Whether collecting one of the session's targets collects the suite's tests: with ``--pyargs``, the module
    ``dsv41_rope``, ``dsv41_rope.conformance`` or one of its modules; else a path (relative to the invocation folder)
    in the suite's folder, or a folder that holds it where pytest would collect it (not through a hidden folder, a
    virtualenv or ``site-packages``)."""
    target = target.split("::", 1)[0]
    if config.getoption("pyargs", False) and (
        target in ("dsv41_rope", SUITE_PACKAGE) or target.startswith(f"{SUITE_PACKAGE}.")
    ):
        return True
    try:
        path = Path(config.invocation_params.dir, target).resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    if path == SUITE_DIRECTORY or path in SUITE_DIRECTORY.parents:
        # The folders from the target down to the suite's, both left out.
        folders = [path / folder for folder in SUITE_DIRECTORY.relative_to(path).parents if folder != Path(".")]
        return not any(
            folder.name.startswith(".") or folder.name in _NOT_COLLECTED or (folder / "pyvenv.cfg").exists()
            for folder in folders
        )
    return SUITE_DIRECTORY in path.parents


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Names the implementation under test at the top of the run (nothing where the suite was not asked for)."""
    return [config.stash[_SELECTION].header()] if suite_requested(config) else []


def judges_project_kernel(config: pytest.Config) -> bool:
    """Whether the session judges the project's kernel (its self-tests are collected only then), from the options
    and the environment alone, so that xdist's controller and its workers decide alike."""
    return config.stash[_SELECTION].judges_project_kernel


def implementation_under_test(config: pytest.Config) -> Implementation:
    """The session's implementation under test, imported on first use.

    Raises:
        ImplementationError: when it cannot be judged (an explicitly named one fails at start-up instead).
    """
    return config.stash[_SELECTION].load()
