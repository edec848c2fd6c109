"""Where the conformance suite's time goes: per test, its wall time, Triton compiles and the oracle's CPU work.

A pytest plugin and its summary. From the repository root::

    DSV41_PROFILE_DIR=/tmp/profile ./run conformance -p tools.suite_profile
    python -m tools.suite_profile /tmp/profile            # the table, grouped by test function

Each worker writes ``profile-<worker>.jsonl``, a line per test as it finishes (a run stopped early keeps what ran):
the test's node id, its wall time (setup, call and teardown), the Triton JIT compiles it triggered and their seconds
(from ``triton.knobs.runtime``'s cache hook, called before each compile, to its post-compile hook) and, apart, the
seconds it waited on the compile lock for another worker's build; which compiles were builds rather than loads from
the disk cache (and the specializations built, hashed with the kernel's source, to count those built twice); and
the seconds spent inside the oracle (the public functions of ``dsv41_rope.oracle.eager`` and
``dsv41_rope.oracle.truth``, outermost calls only) and in ``dsv41_rope.oracle.ulp.compare_bits``. Each process also
writes ``phases-<worker>.json``, the moments that place the run's start-up and end around its tests.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dsv41_rope.harness.under_test import runs_tests

__all__ = [
    "main",
    "phases",
    "pytest_configure",
    "pytest_runtest_protocol",
    "pytest_sessionfinish",
    "pytest_unconfigure",
    "summarize",
]

_ENV = "DSV41_PROFILE_DIR"
# A compile faster than this was a load from Triton's disk cache (about 2 ms on the H200; builds take 0.2-1.1 s).
_DISK_CACHE_SECONDS = 0.05


class _Tally:
    """Seconds and counts of the current test, by category."""

    def __init__(self) -> None:
        self.reset()
        self._depth: collections.Counter[str] = collections.Counter()
        self._compile_started: float | None = None

    def reset(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.counts: collections.Counter[str] = collections.Counter()
        self.builds: list[str] = []  # the specializations compiled, not loaded from the disk cache

    def timed(self, category: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, adding its outermost calls' time to ``category``."""

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._depth[category] += 1
            begin = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self._depth[category] -= 1
                if self._depth[category] == 0:
                    self.seconds[category] += time.perf_counter() - begin
                    self.counts[category] += 1

        return wrapper

    def hook_compiles(self, runtime: Any) -> None:
        """Time each compile from Triton's pre- to its post-compile hook, around the hooks already installed: the
        conftest's compile lock, whose wait for another worker's build is counted apart (``triton_wait``), so that
        a wait followed by a load from the disk cache is not taken for a build."""
        before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook

        def compile_starts(**kwargs: Any) -> bool:
            begin = time.perf_counter()
            skip = bool(before(**kwargs)) if before else False
            self._compile_started = time.perf_counter()
            self.seconds["triton_wait"] += self._compile_started - begin
            return skip

        def compile_ends(**kwargs: Any) -> None:
            if after:
                after(**kwargs)
            if self._compile_started is not None:
                seconds = time.perf_counter() - self._compile_started
                self.seconds["triton_compile"] += seconds
                self.counts["triton_compile"] += 1
                if seconds > _DISK_CACHE_SECONDS:
                    self.counts["triton_build"] += 1
                    function = kwargs.get("fn")
                    source = getattr(getattr(function, "jit_function", None), "cache_key", "")
                    self.builds.append(f"{getattr(function, 'name', '')}|{source}|{kwargs.get('key')!r}")
                self._compile_started = None

        runtime.jit_cache_hook, runtime.jit_post_compile_hook = compile_starts, compile_ends


_TALLY = _Tally()
# Wall-clock moments of this process (epoch seconds), for the run's phases: start-up before the first test, the tests,
# and the end after the last (the controller's report and summary). Written at unconfigure as phases-<worker>.json.
_MOMENTS: dict[str, float] = {}
# When this process loaded the plugin: with `-p tools.suite_profile`, as pytest starts, before it imports the
# conftests (which import torch: seconds on a GPU runner, before xdist starts a worker).
_LOADED = time.time()
_TIMED = {
    "oracle": ("dsv41_rope.oracle.eager", ("apply_rope", "apply_rope_backward", "complex_multiply", "eager_multiply")),
    "truth": ("dsv41_rope.oracle.truth", ("apply_rope", "apply_rope_mpmath", "certify")),
    "compare_bits": ("dsv41_rope.oracle.ulp", ("compare_bits",)),
}


def pytest_configure(config: pytest.Config) -> None:
    """Wrap the timed functions (after the conftest chose the backend) and hook Triton's compiles."""
    if not os.environ.get(_ENV):
        return
    _MOMENTS["loaded"] = _LOADED
    _MOMENTS["configure"] = time.time()
    if not runs_tests(config):  # xdist's controller: nothing to time, and the oracle's modules import torch
        return
    import importlib

    for category, (module_name, names) in _TIMED.items():
        module = importlib.import_module(module_name)
        for name in names:
            setattr(module, name, _TALLY.timed(category, getattr(module, name)))
    try:
        from triton import knobs
    except ImportError:
        return
    _TALLY.hook_compiles(knobs.runtime)


def _output(kind: str, suffix: str) -> Path:
    """This process's file of ``kind`` in the profile folder: ``<kind>-<xdist worker, or main>.<suffix>``."""
    directory = Path(os.environ[_ENV])
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{kind}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.{suffix}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not os.environ.get(_ENV):
        yield
        return
    _TALLY.reset()
    _MOMENTS.setdefault("first_test", time.time())
    begin = time.perf_counter()
    yield
    _MOMENTS["last_test_end"] = time.time()
    record = {
        "test": item.nodeid,
        "seconds": round(time.perf_counter() - begin, 4),
        **{f"{name}_seconds": round(value, 4) for name, value in _TALLY.seconds.items()},
        **{f"{name}_calls": value for name, value in _TALLY.counts.items()},
        "builds": [hashlib.sha256(build.encode()).hexdigest()[:16] for build in _TALLY.builds],
    }
    with open(_output("profile", "jsonl"), "a") as file:
        file.write(json.dumps(record) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if not os.environ.get(_ENV):
        return
    _MOMENTS["sessionfinish"] = time.time()
    # The controller's end is its report, then xdist's shutdown of the workers (its own sessionfinish, last): time
    # the shutdown apart, from its start to its return.
    nodes = getattr(session.config.pluginmanager.getplugin("dsession"), "nodemanager", None)
    if nodes is not None and hasattr(nodes, "teardown_nodes"):
        teardown = nodes.teardown_nodes

        def timed_teardown(*args: Any, **kwargs: Any) -> Any:
            _MOMENTS["workers_teardown"] = time.time()
            try:
                return teardown(*args, **kwargs)
            finally:
                _MOMENTS["workers_down"] = time.time()

        nodes.teardown_nodes = timed_teardown


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get(_ENV):
        return
    _MOMENTS["unconfigure"] = time.time()
    _output("phases", "json").write_text(json.dumps(_MOMENTS))


def phases(directory: Path) -> str:
    """Where the run's wall time goes outside its tests: from the controller's start (its loading this plugin, else
    its configure) to its configure (the conftests' imports), each worker's start and configure, and first test, the
    tests, and from the last test's end to the controller's end (its report, baseline gate, the workers' shutdown
    and the summary)."""
    moments = {
        path.stem.removeprefix("phases-"): json.loads(path.read_text()) for path in directory.glob("phases-*.json")
    }
    main, workers = moments.pop("main", None), [m for m in moments.values() if "first_test" in m]
    if not main or not workers:
        return "phases: not recorded (no phases-main.json, or no worker ran a test)"
    start = main.get("loaded", main["configure"])
    first = sorted(m["first_test"] - start for m in workers)
    configured = sorted(m["configure"] - start for m in workers)
    loaded = sorted(m["loaded"] - start for m in workers if "loaded" in m)
    last_end = max(m["last_test_end"] for m in workers) - start
    end = main.get("unconfigure", main.get("sessionfinish", start)) - start
    before = f"controller configured {main['configure'] - start:.1f}, " if "loaded" in main else ""
    if loaded:
        before += f"workers started {loaded[0]:.1f}-{loaded[-1]:.1f}, "
    teardown = ""
    if "workers_teardown" in main and "workers_down" in main:
        teardown = f", workers' shutdown {main['workers_teardown'] - start:.1f}-{main['workers_down'] - start:.1f}"
    return (
        f"phases (s from the controller's start): {before}workers configured {configured[0]:.1f}-{configured[-1]:.1f},"
        f" first tests {first[0]:.1f}-{first[-1]:.1f}, last test ends {last_end:.1f}, controller's session finish"
        f" {main.get('sessionfinish', float('nan')) - start:.1f}{teardown}, its end {end:.1f}"
    )


def _function_of(node_id: str) -> str:
    return node_id.split("[")[0]


def summarize(directory: Path, top: int = 25) -> str:
    """The profile as text: totals, per test function (slowest first), the slowest tests, and per worker."""
    records, workers = [], {}
    for path in sorted(directory.glob("profile-*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        workers[path.stem.removeprefix("profile-")] = sum(record["seconds"] for record in lines)
        records += lines
    if not records:
        return f"no profile records in {directory}"
    columns = (
        "seconds",
        "triton_compile_seconds",
        "triton_compile_calls",
        "triton_build_calls",
        "triton_wait_seconds",
        "oracle_seconds",
        "truth_seconds",
        "compare_bits_seconds",
    )
    groups: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for record in records:
        group = groups[_function_of(record["test"])]
        group["tests"] += 1
        for column in columns:
            group[column] += record.get(column, 0)
    total = collections.Counter()
    for group in groups.values():
        total.update(group)
    header = (
        f"{'tests':>6} {'seconds':>9} {'compiles':>9} {'builds':>7} {'compile s':>9} {'wait s':>7} "
        f"{'oracle s':>9} {'truth s':>8} {'compare s':>9}  test function"
    )

    def row(group: collections.Counter[str], name: str) -> str:
        return (
            f"{group['tests']:6d} {group['seconds']:9.1f} {group['triton_compile_calls']:9d} "
            f"{group['triton_build_calls']:7d} "
            f"{group['triton_compile_seconds']:9.1f} {group['triton_wait_seconds']:7.1f} "
            f"{group['oracle_seconds']:9.1f} {group['truth_seconds']:8.1f} "
            f"{group['compare_bits_seconds']:9.1f}  {name}"
        )

    builds = collections.Counter(build for record in records for build in record.get("builds", ()))
    lines = [
        f"Triton: {sum(builds.values())} builds (compiles not found in the disk cache) of {len(builds)} distinct"
        f" specializations; {sum(builds.values()) - len(builds)} built again by another worker meanwhile",
        f"{len(records)} tests on {len(workers)} workers; worker seconds (sum of test wall times):",
        header,
        row(total, "all"),
    ]
    lines += [row(group, name) for name, group in sorted(groups.items(), key=lambda item: -item[1]["seconds"])]
    lines += ["", f"slowest {top} tests: seconds, compiles, compile s, oracle s"]
    for record in sorted(records, key=lambda record: -record["seconds"])[:top]:
        lines.append(
            f"{record['seconds']:8.2f} {record.get('triton_compile_calls', 0):4d} "
            f"{record.get('triton_compile_seconds', 0):7.2f} {record.get('oracle_seconds', 0):7.2f}  "
            f"{record['test']}"
        )
    lines += ["", "per worker: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(workers.items()))]
    lines += [phases(directory)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the summary of a profiled run's folder; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="the run's DSV41_PROFILE_DIR")
    parser.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list")
    args = parser.parse_args(argv)
    print(summarize(args.directory, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
