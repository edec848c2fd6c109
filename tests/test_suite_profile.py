"""The suite profile tells a build from a wait on the compile lock followed by a load from the disk cache."""

from __future__ import annotations

import time
from types import SimpleNamespace

from scripts import suite_profile


def _compile(runtime: SimpleNamespace, build_seconds: float) -> None:
    """What Triton's JIT does around one compile: the pre-compile hook, the compile, the post-compile hook."""
    runtime.jit_cache_hook(key="spec", fn=SimpleNamespace(name="kernel", jit_function=SimpleNamespace(cache_key="src")))
    time.sleep(build_seconds)
    runtime.jit_post_compile_hook(key="spec", fn=SimpleNamespace(name="kernel"))


def test_a_wait_for_another_workers_build_is_not_counted_as_a_build():
    waited = []
    runtime = SimpleNamespace(
        jit_cache_hook=lambda **kwargs: waited.append(time.sleep(0.2)) or False,  # the lock: another worker builds
        jit_post_compile_hook=lambda **kwargs: None,
    )
    tally = suite_profile._Tally()
    tally.hook_compiles(runtime)
    _compile(runtime, build_seconds=0.0)  # then a load from the disk cache
    assert waited and tally.seconds["triton_wait"] >= 0.2
    assert (tally.counts["triton_compile"], tally.counts["triton_build"]) == (1, 0)
    _compile(runtime, build_seconds=0.1)  # a build of its own
    assert tally.counts["triton_build"] == 1 and len(tally.builds) == 1
