"""One Triton compile per kernel specialization in a distributed run, however many xdist workers need it at once.

Neighbouring tests (one tensor's forward, inverse and backward, its value regimes) launch the same specializations,
and pytest-xdist hands them to different workers at the same moment: each worker compiled the kernel itself, up to
eight times over, before any could find another's in Triton's disk cache. :func:`install` makes Triton's JIT take
a file lock per specialization before compiling (``triton.knobs.runtime.jit_cache_hook``, called before every
compile) and release it after (``jit_post_compile_hook``): the first worker compiles and writes the disk cache, the
others wait, then load it in milliseconds. Nothing else about the compile changes, so bits cannot.

A compile that raises never reaches the post-compile hook; its lock is released at the worker's next compile or
exit, and a worker never waits on a lock longer than ``WAIT_SECONDS`` (it then compiles without it).

Hooks already installed (another tool's) are kept: the lock calls them too, the earlier pre-compile hook first (a
compile it skips takes no lock), and :func:`uninstall` puts them back at the end of the session.

A process's first compile also pays Triton's start-up there (hashing Triton's own 400 MB library into the cache key,
making the backend): about 0.5 s on the H200 with every kernel in the disk cache. Taken inside the lock, a run's 16
workers paid it in turns, the last waiting about 7 s (docs/ci.md). :func:`install` therefore has Triton start up
first, outside the lock (:func:`start_triton`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

__all__ = ["WAIT_SECONDS", "CompileLock", "install", "start_triton", "uninstall"]

WAIT_SECONDS = 120.0
_POLL_SECONDS = 0.01


if triton is not None:

    @triton.jit
    def _write_one(pointer):
        tl.store(pointer, 1)

else:
    _write_one = None


class CompileLock:
    """The pre- and post-compile hooks, the lock file this process holds, if any, and the hooks they chain to.

    Attributes:
        directory: where the lock files live.
        previous_before: the pre-compile hook installed before this one, called first; None: none.
        previous_after: the post-compile hook installed before this one, called after the lock's release; None: none.
    """

    def __init__(
        self,
        directory: Path,
        previous_before: Callable[..., Any] | None = None,
        previous_after: Callable[..., Any] | None = None,
    ) -> None:
        self.directory = directory
        self.previous_before = previous_before
        self.previous_after = previous_after
        self._held: int | None = None  # the open, locked file descriptor

    @staticmethod
    def lock_name(kwargs: dict[str, Any]) -> str:
        """The specialization: Triton's in-memory cache key and the kernel's source hash (mutated copies of one
        kernel share names, not sources)."""
        function = kwargs.get("fn")
        source = getattr(getattr(function, "jit_function", None), "cache_key", "")
        text = f"{getattr(function, 'module', '')}.{getattr(function, 'name', '')}|{source}|{kwargs.get('key')!r}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def release(self) -> None:
        """Releases the lock this process holds, if any."""
        if self._held is not None:
            fcntl.flock(self._held, fcntl.LOCK_UN)
            os.close(self._held)
            self._held = None

    def before_compile(self, **kwargs: Any) -> bool:
        """Calls the earlier hook, then waits for this specialization's lock; False: go on compiling (Triton skips the
        compile on True, which the earlier hook's true answer passes on, taking no lock)."""
        self.release()  # a previous compile that raised
        if self.previous_before is not None and self.previous_before(**kwargs):
            return True
        self.directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.directory / self.lock_name(kwargs), os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._held = descriptor
                return False
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(descriptor)
                    return False
                time.sleep(_POLL_SECONDS)

    def after_compile(self, **kwargs: Any) -> None:
        """Releases the lock, then calls the earlier post-compile hook."""
        self.release()
        if self.previous_after is not None:
            self.previous_after(**kwargs)


def start_triton() -> None:
    """Pay Triton's one-time start-up in this process now: compile and launch a trivial kernel on the current CUDA
    device (nothing without one, or without Triton). All processes may do so at once: it is the same specialization
    for all, which Triton's disk cache stores atomically."""
    import torch

    if _write_one is not None and torch.cuda.is_available():
        _write_one[(1,)](torch.zeros(1, dtype=torch.int32, device="cuda"))


def _runtime() -> Any:
    """Triton's runtime knobs, where they have both compile hooks; None otherwise (no Triton, an older one)."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook") or not hasattr(runtime, "jit_post_compile_hook"):
        return None
    return runtime


def install(directory: Path | None = None) -> CompileLock | None:
    """Lock each compile of this process's Triton JIT (None where Triton has no such hooks, or runs interpreted),
    once Triton has started up in this process (:func:`start_triton`), chaining to the hooks already installed. Where
    a lock is installed already, returns it: two would wait on each other's lock files.

    Args:
        directory: where the lock files live; shared by the run's workers. Default: a folder in the system's
            temporary directory named by the run's xdist test-run id (one folder per run), else per user.
    """
    runtime = _runtime()
    if runtime is None:
        return None
    installed = getattr(runtime.jit_cache_hook, "__self__", None)
    if isinstance(installed, CompileLock):
        return installed
    if directory is None:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"uid{os.getuid()}")
        directory = Path(tempfile.gettempdir()) / f"dsv41-compile-locks-{run}"
    start_triton()
    lock = CompileLock(directory, runtime.jit_cache_hook, runtime.jit_post_compile_hook)
    runtime.jit_cache_hook = lock.before_compile
    runtime.jit_post_compile_hook = lock.after_compile
    return lock


def uninstall(lock: CompileLock) -> None:
    """Releases the lock's file and puts back the hooks installed before it, each where the lock's is still Triton's
    (a hook installed on top of it, which may call it, stays)."""
    lock.release()
    runtime = _runtime()
    if runtime is None:
        return
    if runtime.jit_cache_hook == lock.before_compile:
        runtime.jit_cache_hook = lock.previous_before
    if runtime.jit_post_compile_hook == lock.after_compile:
        runtime.jit_post_compile_hook = lock.previous_after
