"""Pieces both benchmark scripts share: the CUDA check, timing, the environment record and the JSON file."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conformance import provenance

MIB = 2**20
# Median first: the scripts compare medians; the 20th and 80th percentiles show the spread.
QUANTILES = (0.5, 0.2, 0.8)
NO_CUDA_EXIT_CODE = 2


@dataclasses.dataclass(frozen=True)
class Timing:
    """Quantiles of one callable's GPU time, and the host time of one call, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    host_ms: float

    def __add__(self, other: Timing) -> Timing:
        # Only for "two clones"; a sum of quantiles is not the quantile of a sum, as the docs say.
        return Timing(*(mine + theirs for mine, theirs in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[float, float, float, float]:
        """The fields in order."""
        return (self.median_ms, self.p20_ms, self.p80_ms, self.host_ms)

    def to_json(self) -> dict[str, float]:
        """The timing as ``{"median", "p20", "p80", "host"}``, milliseconds."""
        return {"median": self.median_ms, "p20": self.p20_ms, "p80": self.p80_ms, "host": self.host_ms}


class GpuTimer:
    """Times callables with a CUDA event pair around every call; reports quantiles of the per-call times.

    Before each call the timer sums a 1 GiB pad buffer, as often as it takes to outlast the call's host time. Like
    do_bench's flush, that evicts the call's inputs from the L2 (60 MB on an H200); unlike it (do_bench zeroes 256 MB)
    it leaves clean lines, not dirty ones whose write-back would be charged to a small call. And the GPU stays busy
    while Python enqueues the call, so launch overhead (reported apart as ``host_ms``) opens no gaps in the timed
    region. Measured on the H200 (torch 2.11, triton 3.6): the fused query forward, about 0.35 ms of host time, read
    0.166 and 0.236 ms in two do_bench runs and 0.160 ms in both runs of this timer; the fused window KV forward read
    0.10 to 0.13 ms under do_bench and 0.015 ms here.
    """

    PAD_BYTES = 2**30

    def __init__(self, *, warmup_ms: float, rep_ms: float) -> None:
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self._pad = torch.zeros(self.PAD_BYTES // 4, dtype=torch.float32, device="cuda")
        self.pad_ms = self._device_ms(self._pad.sum, calls=10)

    @staticmethod
    def _device_ms(fn: Callable[[], object], calls: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls

    @staticmethod
    def _host_ms(fn: Callable[[], object], calls: int = 5) -> float:
        times = []
        for _ in range(calls):
            torch.cuda.synchronize()  # an empty queue, so that no launch blocks on a full one
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e3)
        torch.cuda.synchronize()
        return float(np.median(times))

    def time(self, fn: Callable[[], object]) -> Timing:
        """Times ``fn``; it must already have run once (compilation stays out of the warm-up).

        Args:
            fn: the work; it must not synchronize with the host.

        Returns:
            The median, 20th and 80th percentile of ``rep_ms`` worth of calls, after ``warmup_ms`` worth.
        """
        host_ms = self._host_ms(fn)
        # 1.5: room for the host time of the pad sums and event records themselves.
        pad_reads = max(1, math.ceil(1.5 * host_ms / self.pad_ms))
        iteration_ms = pad_reads * self.pad_ms + self._device_ms(fn, calls=3)
        for _ in range(max(1, round(self.warmup_ms / iteration_ms))):
            fn()
        calls = min(max(5, round(self.rep_ms / iteration_ms)), 2000)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        for start, end in zip(starts, ends, strict=True):
            for _ in range(pad_reads):
                self._pad.sum()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)]
        median, p20, p80 = np.quantile(times, QUANTILES)
        return Timing(float(median), float(p20), float(p80), host_ms)


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


def short_error(error: BaseException) -> str:
    """The exception's type and first message line, short enough for a table cell and a JSON field."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
