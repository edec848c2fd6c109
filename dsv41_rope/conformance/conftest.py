"""Fixtures of the conformance suites: the device this worker runs on, the implementation under test, and the project
kernel's module for the suites of its internals; the hypothesis profiles of the generated-layout tests; and which
suites are collected: the contract suite always, the project kernel's self-tests (``kernel_self_tests/``) only when
the project's kernel is judged.

An installed suite has no root conftest, so this file chooses the backend too (``TRITON_INTERPRET=1`` without a CUDA
device), before any test module imports a kernel, and pins each xdist worker to its GPU.

Nothing here imports torch, the kernel or the oracle when the module loads: xdist's controller loads it too, only to
hand the tests out, and torch's import (3-7 s on the H200) would delay its workers' start. The hooks and fixtures
that need them, which run where tests run, import them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING

# torch.compile's inductor compiles in a pool of subprocesses, which an xdist worker's exit waits to shut down: on the
# H200 every worker of a 16-worker run sat in that shutdown after the last test had passed, until the call's time
# limit, and the report was never written. Compiling in the worker's own process
# has no pool to wait for. Set before inductor's config is first imported, which reads it; and on it, if it was.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
if "torch._inductor.config" in sys.modules:
    sys.modules["torch._inductor.config"].compile_threads = int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from dsv41_rope.harness import backend  # noqa: E402

backend.choose()

from dsv41_rope.harness.implementation import PROJECT_MODULE  # noqa: E402
from dsv41_rope.harness.under_test import implementation_under_test, judges_project_kernel, runs_tests  # noqa: E402
from dsv41_rope.report import IMPLEMENTATION, INTERPRETER_ARTEFACTS  # noqa: E402
from dsv41_rope.report.pytest_hooks import add_run_metadata  # noqa: E402

if TYPE_CHECKING:
    import torch

    from dsv41_rope.harness.compile_lock import CompileLock
    from dsv41_rope.harness.implementation import Implementation

_COMPILE_LOCK: pytest.StashKey[CompileLock] = pytest.StashKey()
# The project kernel's self-tests: collected only when it is judged.
KERNEL_SELF_TESTS = Path(__file__).resolve().parent / "kernel_self_tests"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leaves the project kernel's self-tests uncollected when another implementation is judged: they check the
    kernel's internals, judge nothing of another implementation, and would only read as skips in its verdict. Decided
    from the options and environment alone, alike in xdist's controller and workers."""
    path = collection_path.resolve()
    if (path == KERNEL_SELF_TESTS or KERNEL_SELF_TESTS in path.parents) and not judges_project_kernel(config):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    """On a GPU, have xdist hand out one test at a time (in its controller, whose scheduler does). Where tests run: give
    this worker its share of the host's cores, pin it to its GPU so that kernels launch where its tensors live, and let
    one worker compile each Triton specialization while the others wait for it (``dsv41_rope.harness.compile_lock``;
    DSV41_COMPILE_LOCK=0: not). This file loads only where the suite's tests are collected, so none of it reaches
    another project's session."""
    # The interpreter evaluates kernels with numpy, which warns on IEEE events the special-value cases produce on
    # purpose (inf * 0, overflow to inf when narrowing); the GPU raises no such warnings.
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter")
    if backend.name() == "cuda":
        # pytest-xdist's load scheduling hands a worker that runs low a chunk of the next tests in collection order;
        # the generated-layout shards once all went to two workers that way, which ran them one after another for
        # 260 s while six sat idle (H200). One test at a time keeps every worker busy to the
        # end. (On a CPU, where most tests take milliseconds, the round trip per test made the suite 25% slower.)
        if getattr(config.option, "maxschedchunk", "absent") is None:
            config.option.maxschedchunk = 1
    if not runs_tests(config):
        return
    backend.share_host_cores()
    current = backend.device()
    if current.type == "cuda":
        import torch

        from dsv41_rope.harness import compile_lock

        torch.cuda.set_device(current)
        if os.environ.get("DSV41_COMPILE_LOCK", "1") != "0":
            lock = compile_lock.install()
            if lock is not None:
                config.stash[_COMPILE_LOCK] = lock


def pytest_unconfigure(config: pytest.Config) -> None:
    """Puts back Triton's compile hooks as they were before the compile lock (pytester runs many sessions a process)."""
    lock = config.stash.get(_COMPILE_LOCK, None)
    if lock is not None:
        from dsv41_rope.harness import compile_lock

        compile_lock.uninstall(lock)
        del config.stash[_COMPILE_LOCK]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Compile-bound tests first (``@pytest.mark.compile_bound``: seconds each on a GPU, the suite's longest), so
    that xdist starts them early, spread over its workers, instead of ending a run on one of them. Within a test
    function, the tests that launch the same kernel specializations are spread apart: each group's first test, then
    each group's second, and so on. xdist hands neighbouring tests to different workers at the same moment, and where
    they needed one specialization, one worker built it while the others waited on the compile lock (52 of the
    in-place tests' 76 worker-seconds, H200, docs/ci.md); spread, the first tests build different specializations
    at once and the later ones load them. The order is otherwise kept (stable sorts: every worker collects the same
    order, as xdist requires)."""
    first_of_function: dict[object, int] = {}
    seen_in_group: dict[tuple, int] = {}
    order: dict[int, tuple[bool, int, int]] = {}
    for index, item in enumerate(items):
        function = getattr(item, "function", item.nodeid)
        first = first_of_function.setdefault(function, index)
        group = _kernel_group(item)
        rank = seen_in_group.get(group, 0)
        seen_in_group[group] = rank + 1
        order[id(item)] = (item.get_closest_marker("compile_bound") is None, first, rank)
    items.sort(key=lambda item: order[id(item)])


def _kernel_group(item: pytest.Item) -> tuple:
    """What decides the kernel specializations a test launches: its test function and parameters, less its case's
    direction and value regime (the conjugate is a runtime argument of one compiled kernel; the values are data)."""
    from dsv41_rope.conformance import cases

    parameters = getattr(getattr(item, "callspec", None), "params", {})
    group: list[object] = [getattr(item, "function", item.nodeid)]
    for name, value in sorted(parameters.items()):
        if isinstance(value, cases.Case):
            value = dataclasses.replace(value, inverse=False, regime="")
        group.append((name, repr(value)))
    return tuple(group)


# Hypothesis profiles for dsv41_rope/conformance/test_generated_layouts.py, chosen with `--hypothesis-profile NAME`
# (docs/conformance.md). Examples per shard (12 shards: dtype x rank x direction); no deadline and no timing health
# check, since the interpreter's timings vary with the machine's load; no explain phase, whose "lines only failing
# cases run" are those that print the failing case's reproduction.
PHASES = tuple(phase for phase in Phase if phase is not Phase.explain)
# ci (the default): the same examples every run (a fixed seed per shard), no example database written anywhere.
settings.register_profile(
    "ci",
    max_examples=50,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=False,
    phases=PHASES,
)
# gpu: the same, with ten times the examples (a CUDA kernel call costs microseconds, not the interpreter's 20 ms).
settings.register_profile("gpu", parent=settings.get_profile("ci"), max_examples=500)
# quick: the same, a fifth of the examples (the conformance matrix's runs of many kernels, each compiling its own).
settings.register_profile("quick", parent=settings.get_profile("ci"), max_examples=10)
# thorough: long local runs; new random examples each run, failures kept in .hypothesis/ (git-ignored) and replayed.
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=PHASES,
)
# The profile a run asks for by name: hypothesis's own --hypothesis-profile is read before this file loads where the
# suite is collected with --pyargs (dsv41-rope certify, dsv41-rope matrix), so it cannot name these profiles there.
PROFILE_VARIABLE = "DSV41_ROPE_HYPOTHESIS_PROFILE"
if os.environ.get(PROFILE_VARIABLE):
    settings.load_profile(os.environ[PROFILE_VARIABLE])
elif settings.get_current_profile_name() == "default":  # --hypothesis-profile, when given, is loaded after this
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def device() -> torch.device:
    """This worker's device: its GPU (xdist worker i -> GPU i mod k), or the CPU under the interpreter."""
    return backend.device()


@pytest.fixture(scope="session")
def impl_under_test(request: pytest.FixtureRequest, device: torch.device) -> Implementation:
    """The implementation the session judges (``--rope-impl``).

    The report's metadata records it (``implementation under test``: functions, source, SHA-256, claims) and, per
    device, the contraction variant the oracle emulates there: the project kernel's calibration (``kernel
    calibration``, with its frequency source) when the project's kernel is judged, the device's (``oracle
    contraction``) otherwise; and, for an implementation that runs Triton kernels under an interpreter that gets
    ``tl.fma`` or a dtype's casts wrong, what it gets wrong (``interpreter artefacts``, per dtype), which its failures
    there may be (``comparisons.interpreter_caveat``)."""
    import torch

    from dsv41_rope.conformance import checks
    from dsv41_rope.conformance.comparisons import interpreter_caveat

    implementation = implementation_under_test(request.config)
    if implementation.kernel is not None and not implementation.kernel.HAVE_TRITON:
        pytest.skip("triton is not installed: the fused kernel cannot run")
    add_run_metadata(request.config, IMPLEMENTATION, implementation.describe())
    dtypes = ("bf16", "fp16", "fp32") if backend.interpreter_fma_problem() else backend.interpreter_cast_problems()
    caveats = {dtype: interpreter_caveat(implementation, dtype) for dtype in dtypes}
    if any(caveats.values()):
        add_run_metadata(request.config, INTERPRETER_ARTEFACTS, {k: v for k, v in caveats.items() if v})
    where = f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else backend.name()})"
    if implementation.kernel is not None:
        settings = implementation.kernel.settings(device)
        add_run_metadata(request.config, "kernel calibration", {where: settings.describe()})
    else:
        add_run_metadata(request.config, "oracle contraction", {where: checks.describe_contraction(device)})
    return implementation


@pytest.fixture(scope="session")
def rope(impl_under_test: Implementation) -> types.ModuleType:
    """``dsv41_rope.kernel``, for the suites of the project kernel's internals (dispatch, calibration, contraction
    variants, its own cos/sin, gating mutations); skipped, saying why, when another implementation is judged (they
    are not collected then)."""
    if impl_under_test.kernel is None:
        pytest.skip(f"checks the project kernel's internals ({PROJECT_MODULE}); {impl_under_test.name} is judged")
    return impl_under_test.kernel


@pytest.fixture(scope="session")
def in_place_impl(impl_under_test: Implementation) -> Implementation:
    """The implementation under test, when an in-place function of it is judged; skipped, saying why, otherwise."""
    if impl_under_test.in_place_function is None:
        pytest.skip(
            f"no in-place function is judged for {impl_under_test.name}: name one with --rope-impl-in-place "
            "MODULE:FUNCTION"
        )
    return impl_under_test


@pytest.fixture(scope="session")
def gpu(device: torch.device) -> torch.device:
    """The CUDA device, for comparisons with PyTorch's own eager CUDA path; skipped on CPU runs, saying why."""
    if device.type != "cuda":
        pytest.skip("needs a CUDA device: it compares with eager CUDA itself, which runs on a GPU only")
    return device
