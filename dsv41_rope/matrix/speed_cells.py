"""One cell of the speed matrix: one peer's calls on one DeepSeek V4.1 tensor, each timed over the copy of its bytes.

:data:`SHAPES` are the five tensors DeepSeek V4.1 attention rotates, in BF16 with 32 rotary pairs; :class:`CellTimer`
takes a cell's measurements over :class:`dsv41_rope.matrix.timing.GraphTimer`, by CUDA-graph replay, or between CUDA
events in a stream where a call cannot be captured; :func:`measure_cell` times a peer's forward, forward+backward and
host time and turns them into ratios, recording a call that raises as the cell's error. ``dsv41_rope.matrix.speed``
runs the cells and explains the method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from dsv41_rope.matrix.timing import COLD_FROM_BYTES, GraphTimer

__all__ = [
    "DTYPE",
    "EVENTS_WARM_CALLS",
    "PAIRS",
    "SHAPES",
    "CellTimer",
    "Inputs",
    "Measured",
    "Shape",
    "Timer",
    "make_inputs",
    "measure_cell",
    "ratio",
    "rope_angles",
    "short_error",
    "time_operation",
    "unmeasured_cell",
]

PAIRS = 32
DTYPE = torch.bfloat16
# Back-to-back calls of one warm events measurement; a call whose capture fails is timed this way only.
EVENTS_WARM_CALLS = 10
# GPU clock cycles (about 10 ms) the stream waits before a warm events measurement, while the host queues the calls.
EVENTS_SLEEP_CYCLES = 20_000_000


@dataclasses.dataclass(frozen=True)
class Shape:
    """One tensor DeepSeek V4.1 attention rotates.

    Attributes:
        name: the row label, as ``benchmarks.shapes`` names the same tensor.
        dims: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, contiguous.
    """

    name: str
    dims: tuple[int, ...]

    @property
    def bytes(self) -> int:
        """The tensor's size in BF16."""
        return int(np.prod(self.dims)) * DTYPE.itemsize

    @property
    def cold(self) -> bool:
        """Timed with a cold L2: from ``COLD_FROM_BYTES`` on a tensor does not stay in the L2 between calls."""
        return self.bytes >= COLD_FROM_BYTES


SHAPES: tuple[Shape, ...] = (
    Shape("query", (1, 4096, 64, 512)),
    Shape("window_kv", (1, 4096, 512)),
    Shape("index_query", (1, 4096, 32, 128)),
    Shape("compressed_kv", (1, 2048, 512)),
    Shape("index_keys", (1, 1024, 128)),
)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """A cell's tensors: the values, their angles, and the fixed gradient of the output a backward is handed."""

    values: torch.Tensor
    angles: torch.Tensor
    grad: torch.Tensor


def rope_angles(sequence: int, device: str | torch.device) -> torch.Tensor:
    """Angles ``[1, sequence, PAIRS]`` float32 as RoPE makes them: position times a geometric frequency (the
    formula of ``benchmarks.shapes.make_angles``)."""
    positions = torch.arange(sequence, dtype=torch.float32, device=device)
    frequencies = 10000.0 ** (-torch.arange(PAIRS, dtype=torch.float32, device=device) / PAIRS)
    return torch.outer(positions, frequencies).unsqueeze(0)


def make_inputs(shape: Shape, device: str | torch.device) -> Inputs:
    """Random BF16 values and gradient in the shape (random, because zeros can hide unwritten outputs), seeded so
    that every run rotates the same numbers, and the shape's angles."""
    generator = torch.Generator(device=device).manual_seed(0)
    values = torch.randn(shape.dims, dtype=DTYPE, device=device, generator=generator)
    grad = torch.randn(shape.dims, dtype=DTYPE, device=device, generator=generator)
    return Inputs(values, rope_angles(shape.dims[1], device), grad)


def short_error(error: BaseException) -> str:
    """The exception's type and first message line, short enough for a table cell and a JSON field."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, None where either is missing or the denominator is not positive."""
    return None if numerator is None or denominator is None or denominator <= 0 else numerator / denominator


class Timer(Protocol):
    """The measurements a cell takes (:class:`CellTimer`; the tests hand a fake), and the replays each takes."""

    replays: int

    def copy_floor_ms(self, values: torch.Tensor, cold: bool) -> float: ...

    def graph_ms(self, fn: Callable[[], object], cold: bool) -> float: ...

    def events_ms(self, fn: Callable[[], object], cold: bool) -> float: ...

    def host_us(self, fn: Callable[[], object]) -> float: ...

    def release(self) -> None: ...


class CellTimer:
    """A cell's measurements over one :class:`GraphTimer`, whose capture stream and flush buffer every cell shares."""

    def __init__(self, timer: GraphTimer | None = None) -> None:
        self.timer = timer or GraphTimer()
        self.replays = self.timer.replays

    def copy_floor_ms(self, values: torch.Tensor, cold: bool) -> float:
        """The fastest copy of ``values``' bytes (:meth:`GraphTimer.copy_floor_ms`)."""
        values.clone()
        return self.timer.copy_floor_ms(values, cold)

    def graph_ms(self, fn: Callable[[], object], cold: bool) -> float:
        """GPU time per call by CUDA-graph replay (:meth:`GraphTimer.gpu_ms`)."""
        stream = torch.cuda.current_stream()
        try:
            return self.timer.gpu_ms(fn, cold)
        finally:
            # A capture that fails ends at capture_end, before torch.cuda.graph restores the stream it replaced.
            torch.cuda.set_stream(stream)

    def events_ms(self, fn: Callable[[], object], cold: bool) -> float:
        """GPU time per call launched in a stream, between CUDA events, for a call no graph can hold.

        Cold: right after a flush, (call; flush) minus (flush), as the copy floor's stream launch
        (:meth:`GraphTimer.stream_cold_ms`). Warm: ``EVENTS_WARM_CALLS`` calls queued behind a GPU sleep of about
        10 ms, so that the host's time stays out; the median of the timer's replays."""
        if cold:
            return self.timer.stream_cold_ms(fn)
        times = []
        for _ in range(self.timer.replays):
            torch.cuda._sleep(EVENTS_SLEEP_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(EVENTS_WARM_CALLS):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / EVENTS_WARM_CALLS)
        return float(np.median(times))

    def host_us(self, fn: Callable[[], object]) -> float:
        """Host microseconds of one call with no grad, started on an idle GPU (:meth:`GraphTimer.host_ms`)."""
        with torch.no_grad():
            fn()  # a compiled peer compiles again for no-grad mode here, outside the timing
            return self.timer.host_ms(fn) * 1e3

    def release(self) -> None:
        """Returns the cached memory of a cell's graphs and tensors to the device."""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@dataclasses.dataclass(frozen=True)
class Measured:
    """One operation of a cell: its GPU time per call and how it was timed ("graph" or "events"), or why not.

    ``graph_error`` says why a call timed by events could not be captured in a CUDA graph."""

    ms: float | None = None
    method: str | None = None
    error: str | None = None
    graph_error: str | None = None


def time_operation(timer: Timer, fn: Callable[[], object], cold: bool) -> Measured:
    """Runs ``fn`` once (compilation, JIT, autotuning and calibration stay out of the timing), then times it by
    graph replay, or between CUDA events where the capture fails; an exception is the result's error."""
    try:
        fn()
    except Exception as error:  # a peer that raises is a result of the matrix, not the end of the run
        return Measured(error=short_error(error))
    try:
        return Measured(timer.graph_ms(fn, cold), "graph")
    except Exception as error:  # a call that synchronizes or allocates outside PyTorch cannot be captured
        graph_error = short_error(error)
    try:
        return Measured(timer.events_ms(fn, cold), "events", graph_error=graph_error)
    except Exception as error:
        return Measured(error=short_error(error), graph_error=graph_error)


def forward_call(fn: Callable[..., torch.Tensor], inputs: Inputs) -> Callable[[], object]:
    """The timed forward: ``fn(values, angles, inverse=False)``."""
    return lambda: fn(inputs.values, inputs.angles, inverse=False)


def forward_backward_call(fn: Callable[..., torch.Tensor], inputs: Inputs) -> Callable[[], object]:
    """The timed forward and backward: the forward of a leaf copy of the values, then ``torch.autograd.grad`` of its
    output with the fixed gradient (as ``benchmarks.run`` times it: a new gradient each call, none accumulated).
    Under graph capture the forward runs on the capture stream, so its backward does too."""
    leaf = inputs.values.detach().requires_grad_(True)
    return lambda: torch.autograd.grad(fn(leaf, inputs.angles, inverse=False), leaf, inputs.grad)


def unmeasured_cell(reason: str) -> dict[str, Any]:
    """A cell with no figures, saying why (an unavailable peer, an adapter that does not import, the time budget)."""
    return {
        "forward": None,
        "forward_backward": None,
        "host_us": None,
        "method": None,
        "error": reason,
        "ms": {"forward": None, "forward_backward": None},
        "graph_errors": {},
    }


def _method(measured: dict[str, Measured]) -> str | None:
    methods = {op: m.method for op, m in measured.items() if m.method is not None}
    if len(set(methods.values())) > 1:
        return ", ".join(f"{op} {method}" for op, method in methods.items())
    return next(iter(methods.values()), None)


def measure_cell(
    timer: Timer, fn: Callable[..., torch.Tensor], backward: bool, shape: Shape, inputs: Inputs, copy_ms: float | None
) -> dict[str, Any]:
    """Times one peer on one tensor: forward over ``copy_ms`` (the copy floor), forward+backward (where the peer has
    a backward) over two copies, and the host time of a forward; the cell as the matrix's JSON holds it."""
    measured = {"forward": time_operation(timer, forward_call(fn, inputs), shape.cold)}
    errors = []
    host_us = None
    if measured["forward"].error is None:
        try:
            host_us = timer.host_us(forward_call(fn, inputs))
        except Exception as error:
            errors.append(f"host: {short_error(error)}")
        if backward:
            measured["forward_backward"] = time_operation(timer, forward_backward_call(fn, inputs), shape.cold)
    errors[:0] = [f"{op}: {m.error}" for op, m in measured.items() if m.error is not None]
    forward_backward = measured.get("forward_backward", Measured())
    return {
        "forward": ratio(measured["forward"].ms, copy_ms),
        "forward_backward": ratio(forward_backward.ms, None if copy_ms is None else 2 * copy_ms),
        "host_us": host_us,
        "method": _method(measured),
        "error": "; ".join(errors) or None,
        "ms": {"forward": measured["forward"].ms, "forward_backward": forward_backward.ms},
        "graph_errors": {op: m.graph_error for op, m in measured.items() if m.graph_error is not None},
    }
