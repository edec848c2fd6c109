"""Where a run came from: the machine, the software versions, the git checkout and the kernel source it ran.

Nothing here imports torch: versions come from installed distributions, and GPUs are named only when the caller
already imported torch.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_metadata(command: str, cwd: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describes the machine and checkout a run came from.

    Args:
        command: the command line that produced the run.
        cwd: where to ask git for the commit; the current directory when None.

    Returns:
        created (UTC, ISO 8601), hostname, platform, python, torch, triton, gpu, git_commit, git_dirty,
        kernel_sha256, command.
        Versions come from installed distributions, so writing metadata never imports torch; the GPU is named only
        when torch is already imported (it always is in the conformance suite).
    """
    metadata: dict[str, Any] = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _distribution_version("torch"),
        "triton": _distribution_version("triton"),
        "gpu": _gpu_names(),
    }
    metadata.update(_git_state(Path(cwd) if cwd is not None else Path.cwd()))
    metadata["kernel_sha256"] = kernel_fingerprint()
    metadata["command"] = command
    return metadata


KERNEL_SOURCE = Path(__file__).resolve().parents[1] / "impl" / "rope_triton.py"


def kernel_fingerprint() -> str | None:
    """The first 16 hex digits of the SHA-256 of ``impl/rope_triton.py``: which kernel ran, where git cannot say.

    A copy of the checkout (a GPU runner's, the device tool's) may carry a stale or no ``.git``, so a run records
    the kernel source it ran as well as the commit; ``sha256sum impl/rope_triton.py`` gives the same digits.
    """
    try:
        return hashlib.sha256(KERNEL_SOURCE.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu_names() -> str | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        return ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count()))
    except Exception:  # a broken driver must not cost the report
        return None


def _git_state(cwd: Path) -> dict[str, Any]:
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
