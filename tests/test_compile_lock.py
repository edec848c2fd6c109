"""The compile lock: one process builds a Triton specialization while the others needing it wait for its build, and
Triton's hooks installed before it (another tool's) still run, and are put back at the end of the session.

Triton's hooks are called here directly, as its JIT calls them (``jit_cache_hook(**kwargs)`` before a compile,
``jit_post_compile_hook(**kwargs)`` after), by processes that stand in for xdist workers.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dsv41_rope.conformance import conftest
from dsv41_rope.harness import compile_lock

pytest_plugins = ["pytester"]

BUILD_SECONDS = 0.5


def _hook_kwargs(key: str, source: str = "source-hash") -> dict:
    function = SimpleNamespace(
        module="dsv41_rope.kernel", name="_rope_kernel", jit_function=SimpleNamespace(cache_key=source)
    )
    return {"key": key, "fn": function, "repr": "", "compile": {}, "is_manual_warmup": False, "already_compiled": False}


def _worker(directory: str, key: str, source: str, log: str, start) -> None:
    """Compile like a worker, once all are ready: hook, 'build' (sleep), hook; log when the build ran."""
    lock = compile_lock.CompileLock(Path(directory))
    start.wait()
    assert lock.before_compile(**_hook_kwargs(key, source)) is False
    begin = time.monotonic()
    time.sleep(BUILD_SECONDS)
    with open(log, "a") as file:
        file.write(f"{key} {source} {begin} {time.monotonic()}\n")
    lock.after_compile(**_hook_kwargs(key, source))


def _builds(tmp_path: Path, jobs: list[tuple[str, str]]) -> list[tuple[float, float]]:
    log = tmp_path / "log"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(jobs))
    processes = [
        context.Process(target=_worker, args=(str(tmp_path / "locks"), key, source, str(log), start))
        for key, source in jobs
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    return sorted(
        (float(begin), float(end)) for *_, begin, end in (line.split() for line in log.read_text().splitlines())
    )


def _overlap(spans: list[tuple[float, float]]) -> bool:
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


def test_one_specialization_is_built_by_one_process_at_a_time(tmp_path):
    spans = _builds(tmp_path, [("spec-a", "source-hash")] * 3)
    assert not _overlap(spans), f"builds of one specialization overlapped: {spans}"


def test_different_specializations_build_at_once(tmp_path):
    spans = _builds(tmp_path, [("spec-a", "source-hash"), ("spec-b", "source-hash")])
    assert _overlap(spans), f"builds of different specializations waited for each other: {spans}"


def test_a_lock_is_named_by_the_specialization_and_the_kernel_source():
    name = compile_lock.CompileLock.lock_name
    names = [name(_hook_kwargs(key, source)) for key, source in (("a", "1"), ("b", "1"), ("a", "2"))]
    assert len(set(names)) == 3, f"two of (spec a, source 1), (b, 1), (a, 2) share a lock: {names}"
    assert name(_hook_kwargs("a", "1")) == names[0]


def test_a_compile_that_raised_releases_its_lock_at_the_next_compile(tmp_path):
    lock = compile_lock.CompileLock(tmp_path)
    lock.before_compile(**_hook_kwargs("spec-a"))  # the compile raises: no post-compile hook
    lock.before_compile(**_hook_kwargs("spec-b"))
    other = compile_lock.CompileLock(tmp_path)
    begin = time.monotonic()
    assert other.before_compile(**_hook_kwargs("spec-a")) is False
    assert time.monotonic() - begin < 1, "spec-a's lock was still held after the next compile began"
    other.after_compile()
    lock.after_compile()


def test_install_sets_both_hooks_of_triton():
    knobs = __import__("triton").knobs
    saved = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    try:
        lock = compile_lock.install()
        assert lock is not None
        assert knobs.runtime.jit_cache_hook == lock.before_compile
        assert knobs.runtime.jit_post_compile_hook == lock.after_compile
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = saved


def test_install_has_triton_start_up_before_it_locks(monkeypatch):
    knobs = __import__("triton").knobs
    saved = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
    hooks_at_start_up = []
    monkeypatch.setattr(
        compile_lock,
        "start_triton",
        lambda: hooks_at_start_up.append((knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)),
    )
    try:
        lock = compile_lock.install()
        assert hooks_at_start_up, "install() locked compiles without starting Triton up first"
        assert hooks_at_start_up == [saved], (
            f"Triton started up under the hooks {hooks_at_start_up[0]}, not those before install() ({saved}): its "
            f"first compile would wait on the lock; installed: {lock.before_compile}"
        )
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = saved


@pytest.fixture
def their_hooks(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Hooks another tool installed before the lock, recording their calls (``calls``; ``skip``: the pre-compile hook
    skips the compile); Triton's own hooks are put back after the test, and Triton's start-up is skipped."""
    runtime = pytest.importorskip("triton").knobs.runtime
    theirs = SimpleNamespace(calls=[], skip=False)

    def their_cache_hook(**kwargs: object) -> bool:
        theirs.calls.append(("before", kwargs))
        return theirs.skip

    def their_post_compile_hook(**kwargs: object) -> None:
        theirs.calls.append(("after", kwargs))

    theirs.before, theirs.after = their_cache_hook, their_post_compile_hook
    monkeypatch.setattr(runtime, "jit_cache_hook", their_cache_hook)
    monkeypatch.setattr(runtime, "jit_post_compile_hook", their_post_compile_hook)
    monkeypatch.setattr(compile_lock, "start_triton", lambda: None)
    return theirs


def test_install_chains_to_the_hooks_already_installed_and_uninstall_puts_them_back(their_hooks, tmp_path):
    runtime = __import__("triton").knobs.runtime
    lock = compile_lock.install(tmp_path)
    assert (runtime.jit_cache_hook, runtime.jit_post_compile_hook) == (lock.before_compile, lock.after_compile)
    kwargs = _hook_kwargs("spec-a")
    assert runtime.jit_cache_hook(**kwargs) is False
    runtime.jit_post_compile_hook(**kwargs)
    assert their_hooks.calls == [("before", kwargs), ("after", kwargs)], "the hooks installed before were not called"
    assert compile_lock.install(tmp_path) is lock, "a second lock would wait on the first one's lock files"
    compile_lock.uninstall(lock)
    assert (runtime.jit_cache_hook, runtime.jit_post_compile_hook) == (their_hooks.before, their_hooks.after)


def test_a_compile_an_earlier_hook_skips_takes_no_lock(their_hooks, tmp_path):
    lock = compile_lock.CompileLock(tmp_path, their_hooks.before, their_hooks.after)
    their_hooks.skip = True
    assert lock.before_compile(**_hook_kwargs("spec-a")) is True, "Triton must skip the compile the earlier hook skips"
    other = compile_lock.CompileLock(tmp_path)
    begin = time.monotonic()
    assert other.before_compile(**_hook_kwargs("spec-a")) is False
    assert time.monotonic() - begin < 1, "a skipped compile held its specialization's lock"
    other.after_compile()


def test_uninstall_leaves_a_hook_installed_on_top_of_the_lock(their_hooks, tmp_path):
    runtime = __import__("triton").knobs.runtime
    lock = compile_lock.install(tmp_path)

    def later_hook(**kwargs: object) -> bool:
        return lock.before_compile(**kwargs)

    runtime.jit_cache_hook = later_hook
    compile_lock.uninstall(lock)
    assert runtime.jit_cache_hook is later_hook
    assert runtime.jit_post_compile_hook is their_hooks.after


def test_the_suites_conftest_puts_tritons_hooks_back_at_the_end_of_the_session(their_hooks, pytester, monkeypatch):
    runtime = __import__("triton").knobs.runtime
    monkeypatch.setattr(conftest.backend, "name", lambda: "cuda")
    monkeypatch.setattr(conftest.backend, "device", lambda: SimpleNamespace(type="cuda"))
    monkeypatch.setattr(conftest.backend, "share_host_cores", lambda: None)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.delenv("DSV41_COMPILE_LOCK", raising=False)
    config = pytester.parseconfig()
    conftest.pytest_configure(config)
    lock = getattr(runtime.jit_cache_hook, "__self__", None)
    assert isinstance(lock, compile_lock.CompileLock), "the suite on a GPU installed no compile lock"
    assert lock.previous_before is their_hooks.before and lock.previous_after is their_hooks.after
    conftest.pytest_unconfigure(config)
    assert (runtime.jit_cache_hook, runtime.jit_post_compile_hook) == (their_hooks.before, their_hooks.after)
