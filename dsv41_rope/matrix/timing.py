"""GPU time by CUDA-graph replay, and the copy of the same bytes that every figure is a ratio to.

The one home of the timer that ``benchmarks`` and ``python -m dsv41_rope.matrix.speed`` measure with:
:class:`GraphTimer` (warm and cold graph replay, host time, the copy floor :meth:`GraphTimer.copy_floor_ms`, the
stream launch between CUDA events :meth:`GraphTimer.stream_cold_ms`), :class:`Timing`, :func:`calls_per_graph` and
:func:`triton_copy`. ``docs/decisions/0008-gpu-timing-method.md`` says why it times as it does.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["COLD_FROM_BYTES", "MIB", "GraphTimer", "Timing", "calls_per_graph", "triton_copy"]

MIB = 2**20
# From this size a tensor does not stay in the H200's 60 MB L2 between calls: it is timed, and its targets set, cold.
COLD_FROM_BYTES = 32 * MIB


@dataclasses.dataclass(frozen=True)
class Timing:
    """One callable's time per call, in milliseconds: GPU time by CUDA-graph replay with a warm L2 and with a cold
    one, and the host time of one call (Python and launch overhead; the GPU's work runs behind it)."""

    warm_ms: float
    cold_ms: float
    host_ms: float

    def __add__(self, other: Timing) -> Timing:
        # For "two copies": graph replay times of separate calls add.
        return Timing(self.warm_ms + other.warm_ms, self.cold_ms + other.cold_ms, self.host_ms + other.host_ms)

    def to_json(self) -> dict[str, float]:
        """The timing as ``{"warm", "cold", "host"}``, milliseconds."""
        return {"warm": self.warm_ms, "cold": self.cold_ms, "host": self.host_ms}


def calls_per_graph(one_call_ms: float) -> int:
    """How many back-to-back calls of ``one_call_ms`` a graph holds: enough for a replay of about 2 ms, at most 50."""
    return int(min(50, max(1, math.ceil(2.0 / max(one_call_ms, 1e-3)))))


class GraphTimer:
    """Times callables by replaying CUDA graphs of them, so that host time is excluded from GPU time.

    * warm: a graph of ``calls`` back-to-back calls, replayed ``replays`` times; the median replay over ``calls``.
    * cold: a graph of ``calls`` times (flush the L2; call), minus a graph of the flushes alone. The flush reads a
      256 MiB buffer (over four times the H200's 60 MB L2), so it evicts the call's data with clean lines whose
      eviction costs the call nothing, unlike a flush that writes (do_bench zeroes its buffer, and it also counts
      host time wherever the host is slower than the GPU).
    * host: the median wall time of one call after the GPU has drained (its launches are asynchronous), and
      :meth:`back_to_back_host_ms` for the wall time per call over thousands of calls, where the GPU keeps up.

    ``calls`` is chosen so that a replay lasts about 2 ms: small calls are averaged over up to 50 calls. Graphs are
    captured on :attr:`stream`; work whose backward is timed must run its forward there too (autograd runs a
    backward on its forward's stream, and a capture allows no other).

    A copy is timed by :meth:`time_copy`: captured, ``clone()`` becomes a memcpy node, which ran at about 2.8 TB/s
    on the H200 for tensors of 512 MiB and more against 4.2 TB/s for the same clone launched in a stream; so the
    faster of the two is its floor, the stream launch timed so that it pays its write-back (:meth:`stream_cold_ms`)
    as every graph-timed call does.
    """

    FLUSH_BYTES = 256 * MIB

    def __init__(self, *, replays: int = 15) -> None:
        self.replays = replays
        self.stream = torch.cuda.Stream()
        self._flush_buffer = torch.ones(self.FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self._flush_sink = torch.empty((), dtype=torch.float32, device="cuda")

    def flush(self) -> None:
        """Evict the L2 by reading the flush buffer."""
        torch.sum(self._flush_buffer, dim=0, out=self._flush_sink)

    def _capture(self, body: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            for _ in range(calls):
                body()
        return graph

    def _replay_ms(self, graph: torch.cuda.CUDAGraph, calls: int) -> float:
        graph.replay()  # the first replay uploads the graph
        times = []
        for _ in range(self.replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / calls)
        return float(np.median(times))

    @staticmethod
    def host_ms(fn: Callable[[], object], calls: int = 50) -> float:
        """Median wall time of one call of ``fn`` started on an idle GPU."""
        times = []
        for _ in range(calls):
            torch.cuda.synchronize()
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e3)
        torch.cuda.synchronize()
        return float(np.median(times))

    @staticmethod
    def back_to_back_host_ms(fn: Callable[[], object], calls: int = 3000) -> float:
        """Wall time per call over ``calls`` back-to-back calls (the GPU must keep up: use tiny tensors)."""
        fn()
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - begin
        torch.cuda.synchronize()
        return elapsed * 1e3 / calls

    def time(self, fn: Callable[[], object]) -> Timing:
        """Times ``fn``, which must have run once already (compilation and calibration stay out) and must not
        synchronize with the host or allocate outside PyTorch's allocator."""
        host_ms = self.host_ms(fn)
        calls = self._calls(fn)
        return Timing(self.warm_ms(fn, calls), self.cold_ms(fn, calls), host_ms)

    def _calls(self, fn: Callable[[], object]) -> int:
        """Calls per graph: enough for a replay of about 2 ms, at most 50, counted from the GPU time of one call in
        a graph. Each replay starts with a gap its calls share (the graph's launch), so calls of the same GPU time must
        get the same count: one call timed between events in a stream, which this count used before, holds the host's
        time too, and gave host-heavy calls (the public call over the bare launch, a backward through autograd) fewer
        calls to share the gap, which read them slower than the same kernel launched bare."""
        return calls_per_graph(self._replay_ms(self._capture(fn, 1), 1))

    def warm_ms(self, fn: Callable[[], object], calls: int | None = None) -> float:
        """GPU time per call of ``fn`` with a warm L2: the median replay of a graph of ``calls`` calls."""
        calls = calls or self._calls(fn)
        return self._replay_ms(self._capture(fn, calls), calls)

    def cold_ms(self, fn: Callable[[], object], calls: int | None = None) -> float:
        """GPU time per call of ``fn`` with a cold L2: a graph of (flush; call) minus a graph of the flushes."""
        calls = calls or self._calls(fn)

        def flushed() -> None:
            self.flush()
            fn()

        flushed_ms = self._replay_ms(self._capture(flushed, calls), calls)
        return flushed_ms - self._replay_ms(self._capture(self.flush, calls), calls)

    def gpu_ms(self, fn: Callable[[], object], cold: bool) -> float:
        """GPU time per call of ``fn`` with a cold or a warm L2 (:meth:`cold_ms`, :meth:`warm_ms`)."""
        return self.cold_ms(fn) if cold else self.warm_ms(fn)

    def copy_floor_ms(self, values: torch.Tensor, cold: bool) -> float:
        """The copy of ``values``' bytes, the floor of every ratio: :meth:`time_copy` of ``clone()``, and for a
        contiguous tensor timed cold also :func:`triton_copy`, the faster of them (graph replay turns a large
        ``clone`` into a slow memcpy node)."""
        clone = self.time_copy(values.clone)
        best = clone.cold_ms if cold else clone.warm_ms
        if cold and values.is_contiguous():
            triton_copy(values)
            best = min(best, self.gpu_ms(lambda: triton_copy(values), cold))
        return best

    def stream_cold_ms(self, fn: Callable[[], object], *, write_back: bool = True) -> float:
        """Median time of ``fn`` launched in a stream right after a flush, between CUDA events (the flush keeps the
        GPU busy while the host launches the call, so no host time enters).

        With ``write_back`` (the copy floor's method), the events hold (call; flush) and a second pair holds (flush)
        alone, and the difference is taken: the call then pays for writing back the dirty lines it leaves in the L2,
        as it does in :meth:`cold_ms` and in back-to-back replays. Without it the interval ends when the stores
        reach the L2: up to an L2 of output (all 32 MB of the index query's) is never written back inside it, which
        made a cold ``clone`` of the index query read 0.0178 ms against 0.0230 ms by :meth:`cold_ms` (H200,
        2026-12-04; ``docs/decisions/0008-gpu-timing-method.md``)."""
        bodies = ([fn, self.flush], [self.flush]) if write_back else ([fn],)
        times: list[list[float]] = [[] for _ in bodies]
        for _ in range(self.replays):
            for body, body_times in zip(bodies, times, strict=True):
                self.flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for step in body:
                    step()
                end.record()
                end.synchronize()
                body_times.append(start.elapsed_time(end))
        medians = [float(np.median(body_times)) for body_times in times]
        return medians[0] - medians[1] if write_back else medians[0]

    def time_copy(self, fn: Callable[[], object]) -> Timing:
        """Times a copy (``clone()``): each figure the faster of graph replay and a stream launch (cold, paying its
        write-back: :meth:`stream_cold_ms`), so that the floor is the copy's best, whichever engine runs it."""
        graphed = self.time(fn)
        stream_ms = self.stream_cold_ms(fn)
        return Timing(min(graphed.warm_ms, stream_ms), min(graphed.cold_ms, stream_ms), graphed.host_ms)


@functools.cache
def _copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(source_ptr, target_ptr, count, BLOCK: tl.constexpr):
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < count
        tl.store(target_ptr + offsets, tl.load(source_ptr + offsets, mask=mask), mask=mask)

    return copy_kernel


def triton_copy(values: torch.Tensor) -> torch.Tensor:
    """A plain Triton copy of a contiguous tensor, 4096 elements a program on 4 warps."""
    output = torch.empty_like(values)
    _copy_kernel()[(-(-values.numel() // 4096),)](values, output, values.numel(), BLOCK=4096, num_warps=4)
    return output
