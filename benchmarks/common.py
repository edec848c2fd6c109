"""Pieces the benchmark scripts share: the CUDA check, the environment record and the JSON file; and, from their home
in the installed package (whose speed matrix measures with them too), the GPU timer of ``dsv41_rope.matrix.timing`` and
the error text of ``dsv41_rope.matrix.speed_cells``."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from dsv41_rope.harness import provenance
from dsv41_rope.matrix.speed_cells import short_error
from dsv41_rope.matrix.timing import COLD_FROM_BYTES, MIB, GraphTimer, Timing, calls_per_graph, triton_copy

__all__ = [
    "COLD_FROM_BYTES",
    "MIB",
    "NO_CUDA_EXIT_CODE",
    "Clock",
    "GraphTimer",
    "ResultFile",
    "Timing",
    "calls_per_graph",
    "cuda_available",
    "environment",
    "import_file",
    "import_source",
    "short_error",
    "triton_copy",
]

NO_CUDA_EXIT_CODE = 2


def import_file(path: Path, name: str) -> ModuleType:
    """Import the Python file at ``path`` as module ``name``. The module stays in ``sys.modules``: its dataclasses look
    it up."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def import_source(source: str, directory: Path, name: str) -> ModuleType:
    """Import ``source`` as module ``name`` from a file written into ``directory`` (Triton reads a kernel's source
    through ``inspect``, so a kernel cannot come from a string alone)."""
    path = directory / f"{name}.py"
    path.write_text(source)
    return import_file(path, name)


def cuda_available(program: str) -> bool:
    """Says whether a CUDA device is present, printing why the program cannot run when it is not."""
    if torch.cuda.is_available():
        return True
    print(
        f"{program}: no CUDA device is visible (torch {torch.__version__}); this benchmark needs one.", file=sys.stderr
    )
    return False


def environment() -> dict[str, Any]:
    """Records the machine and software a result was measured on (device 0)."""
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "multiprocessors": props.multi_processor_count,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **provenance.record(),  # versions (torch, triton, CUDA, python), git state, kernel SHA-256
    }


class Clock:
    """Wall time since the script started, the ``--time-budget`` check, and flushed progress lines."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._start = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since this clock was made."""
        return time.monotonic() - self._start

    def expired(self) -> bool:
        """Says whether the time budget is spent."""
        return self.elapsed() >= self.budget_s

    def log(self, message: str) -> None:
        """Prints one progress line at once, so that a killed run still shows how far it got."""
        print(f"[{self.elapsed():6.1f}s] {message}", flush=True)


class ResultFile:
    """One run's JSON document, rewritten whole after every row so that a partial run leaves valid JSON.

    The file is named ``<prefix>_<UTC date and time>_<GPU name>.json`` inside ``out_dir``.
    """

    def __init__(self, out_dir: Path, prefix: str, document: dict[str, Any]) -> None:
        stamp = dt.datetime.fromisoformat(document["environment"]["date"]).strftime("%Y%m%dT%H%M%SZ")
        gpu = re.sub(r"[^A-Za-z0-9]+", "-", document["environment"]["gpu"]).strip("-")
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / f"{prefix}_{stamp}_{gpu}.json"
        self.document = document
        self.write()

    def add_row(self, row: dict[str, Any]) -> None:
        """Appends a row and writes the file."""
        self.document["rows"].append(row)
        self.write()

    def finish(self, status: str) -> None:
        """Records how the run ended and writes the file."""
        self.document["status"] = status
        self.write()

    def write(self) -> None:
        """Writes the document; the rename keeps a reader from ever seeing half a file."""
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.document, indent=1) + "\n")
        os.replace(partial, self.path)
