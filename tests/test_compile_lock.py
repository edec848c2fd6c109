"""The compile lock: one process builds a Triton specialization while the others needing it wait for its build.

Triton's hooks are called here directly, as its JIT calls them (``jit_cache_hook(**kwargs)`` before a compile,
``jit_post_compile_hook(**kwargs)`` after), by processes that stand in for xdist workers.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from types import SimpleNamespace

from dsv41_rope.harness import compile_lock

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
