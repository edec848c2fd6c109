"""Where a result came from: the machine, the software versions, the GPUs, the git checkout and the kernel source.

The one home of this record for every producer of results: the ulp-drift report (`dsv41_rope.report.run_end`, the
shard merger `dsv41_rope.report.merge_cli`), and the benchmarks (`benchmarks/common.py`).

Nothing here imports torch or triton, so the report can run in an xdist controller that never does: a version comes
from the imported module when the caller already imported it (what actually ran), else from the installed
distribution (torch's, with its build tag, and its CUDA version from ``dsv41_rope.harness.devices``, which reads
torch's own ``version.py``); the GPUs from the CUDA driver (``dsv41_rope.harness.devices``).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from dsv41_rope.harness import devices

__all__ = [
    "KERNEL_MODULE",
    "git_state",
    "gpu_names",
    "kernel_sha256",
    "kernel_source",
    "record",
    "run_metadata",
    "source_files",
    "versions",
]

# The kernel under test unless a caller names another module or passes the source file itself.
KERNEL_MODULE = "dsv41_rope.kernel"


def kernel_source(module: str = KERNEL_MODULE) -> Path | None:
    """Returns the source of a kernel module: a package's folder, or a single module's file. It is the imported
    module's when the module is imported, else what an import would load (found without importing the module itself);
    None when there is no such module.

    Args:
        module: the dotted module name, e.g. "dsv41_rope.kernel".
    """
    origin = getattr(sys.modules.get(module), "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
    if not origin:
        return None
    path = Path(origin)
    return path.parent if path.name == "__init__.py" else path


def source_files(path: str | os.PathLike[str]) -> list[Path]:
    """Returns the files a kernel's source is made of: the file itself, or a package folder's Python and JSON files
    (subfolders included, caches left out), sorted by their path in the folder."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    return sorted(
        (file for file in path.rglob("*") if file.suffix in (".py", ".json") and "__pycache__" not in file.parts),
        key=lambda file: file.relative_to(path).as_posix(),
    )


def kernel_sha256(path: str | os.PathLike[str] | None) -> str | None:
    """Returns the first 16 hex digits of the SHA-256 of a kernel's source: which kernel ran, where git cannot say.

    A copy of the checkout (a GPU runner's) may carry a stale or no ``.git``, so a run records the kernel source it ran
    as well as the commit. A single file is hashed as it is (``sha256sum FILE`` gives the same digits); a package
    folder as each of its :func:`source_files` in turn: its path in the folder, a NUL, its bytes, a NUL.

    Args:
        path: the kernel's source file or package folder (`kernel_source()` finds it from the module); None gives None.

    Returns:
        The digits, or None when there is no path or a file cannot be read.
    """
    if path is None:
        return None
    path = Path(path)
    try:
        if not path.is_dir():
            return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        digest = hashlib.sha256()
        for file in source_files(path):
            digest.update(file.relative_to(path).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
        return digest.hexdigest()[:16]
    except OSError:
        return None


def versions() -> dict[str, str | None]:
    """Returns the python, torch, triton, CUDA and hypothesis versions (CUDA: the one torch was built for, None for a
    CPU build; hypothesis: the generated-layout cases draw the same examples only under one version, None when it is
    not installed)."""
    return {
        "python": platform.python_version(),
        "torch": devices.torch_version() or _version("torch"),
        "triton": _version("triton"),
        "cuda": devices.torch_cuda_version(),
        "hypothesis": _version("hypothesis"),
    }


def _version(name: str) -> str | None:
    version = getattr(sys.modules.get(name), "__version__", None)
    if version is not None:
        return str(version)
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_names() -> str | None:
    """Returns every GPU torch can run on here as "cuda:0 NAME, cuda:1 NAME", or None without (a CPU build of torch,
    no device)."""
    if not devices.cuda_usable():
        return None
    return ", ".join(f"cuda:{gpu.index} {gpu.name}" for gpu in devices.driver_devices())


def git_state(cwd: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Returns ``git_commit`` (HEAD) and ``git_dirty`` (tracked files changed) of the checkout at `cwd`, or Nones.

    Args:
        cwd: a folder in the checkout; the current directory when None.
    """

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def record(
    *,
    kernel_path: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    gpus: bool = False,
) -> dict[str, Any]:
    """Describes the machine, software and source a result was produced with.

    Args:
        kernel_path: the kernel's source file; `kernel_source()` (the default kernel module's file) when None.
        cwd: where to ask git for the commit; the current directory when None.
        gpus: also name every visible GPU (`gpu_names()`) under "gpu"; a benchmark names the one it measured itself.

    Returns:
        hostname, platform, python, torch, triton, cuda, hypothesis, (gpu), git_commit, git_dirty, kernel_sha256.
    """
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        **versions(),
        **({"gpu": gpu_names()} if gpus else {}),
        **git_state(cwd),
        "kernel_sha256": kernel_sha256(kernel_path if kernel_path is not None else kernel_source()),
    }


def run_metadata(
    command: str, cwd: str | os.PathLike[str] | None = None, *, kernel_path: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Describes a conformance run for its report: when, on what, from which source, by which command.

    Args:
        command: the command line that produced the run.
        cwd: where to ask git for the commit; the current directory when None.
        kernel_path: the kernel's source file; the default kernel module's file when None.

    Returns:
        created (UTC, ISO 8601), then `record()`'s fields with every GPU, then command.
    """
    return {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **record(kernel_path=kernel_path, cwd=cwd, gpus=True),
        "command": command,
    }
