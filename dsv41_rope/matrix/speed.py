"""The speed part of the conformance matrix: every peer timed side by side, in one process, on one GPU.

On a CUDA machine::

    python -m dsv41_rope.matrix.speed --out speed.json                      # every available peer
    python -m dsv41_rope.matrix.speed --out speed.json --peers torch-compile,liger-llama4-rope --time-budget 600

Each row is a peer of ``dsv41_rope.peers.registry`` called through its adapter (``MODULE:FUNCTION``); this project's
kernel (``dsv41_rope.kernel:apply_rope_triton``, row "dsv41-rope") and the eager control
(``dsv41_rope.kernel:apply_rope_eager``) are always rows. Each column is a tensor DeepSeek V4.1 attention rotates.
Exit status: 0, also when the time budget stopped the run; 2 without CUDA or for an unknown peer name.

Method:

The five tensors, BF16, contiguous, 32 rotary pairs, angles [1, S, 32] float32 (position times a geometric
frequency): query [1, 4096, 64, 512], window KV [1, 4096, 512], index query [1, 4096, 32, 128], compressed KV
[1, 2048, 512] and index keys [1, 1024, 128]. Every figure is a ratio within one run to the copy floor, the fastest
copy of the same bytes timed in the same process: clone() by CUDA-graph replay and launched in a stream, and from
32 MiB a plain Triton copy kernel too, each paying the write-back of its output from the L2 as the peer's call does.
forward is the GPU time of fn(values, angles, inverse=False) over one copy; forward_backward, for peers with a
backward, the GPU time of that forward on a leaf copy of the values and torch.autograd.grad of its output with a
fixed upstream gradient (the backward's work, with no accumulation into .grad) over two copies (the output and the
gradient). GPU time is measured by CUDA-graph replay, so that no host time enters: a graph of n back-to-back calls,
n chosen from one replayed call's GPU time so that a replay lasts about 2 ms (at most 50), replayed 15 times, the
median replay over n. Tensors of 32 MiB and more (query, index query) are timed with a cold L2: a graph of n times
(flush; call) minus a graph of the n flushes, the flush reading a 256 MiB buffer; smaller ones (window KV,
compressed KV, index keys), which stay in the L2 between a model's calls, warm. host_us is the median wall time in
microseconds of one forward call under torch.no_grad() started on an idle GPU (Python, checks and launches; the
GPU's work runs behind it). Every call runs once before it is timed, so compilation, JIT, autotuning and calibration
stay out. A call that cannot be captured in a CUDA graph (it waits for the GPU, or allocates outside PyTorch's
allocator) is timed in a stream between CUDA events instead, and its cell's method says "events" (else "graph"):
cold, right after a flush, (call; flush) minus (flush); warm, 10 calls queued behind a GPU sleep of about 10 ms, so
that the host's time stays out while it queues them faster than that. A call that raises is its cell's error (type
and first line); the run goes on. The method, the timer and the copy floor are those of the project's benchmarks
(dsv41_rope.matrix.timing, docs/benchmarks.md, docs/decisions/0008-gpu-timing-method.md).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from dsv41_rope.harness import provenance
from dsv41_rope.matrix.speed_cells import (
    DTYPE,
    PAIRS,
    SHAPES,
    CellTimer,
    Shape,
    Timer,
    make_inputs,
    measure_cell,
    short_error,
    unmeasured_cell,
)
from dsv41_rope.matrix.timing import COLD_FROM_BYTES, GraphTimer
from dsv41_rope.peers.registry import PEERS, Peer, by_name

__all__ = [
    "ALWAYS_MEASURED",
    "BUDGET_SPENT",
    "EAGER_CONTROL",
    "METHOD",
    "NO_CUDA_EXIT_CODE",
    "PROJECT_KERNEL",
    "SCHEMA",
    "build_parser",
    "load_adapter",
    "main",
    "measure",
    "selected_peers",
]

SCHEMA = "dsv41-rope-matrix-speed/1"
METHOD = " ".join(__doc__.partition("\nMethod:\n")[2].split())
NO_CUDA_EXIT_CODE = 2
BUDGET_SPENT = "not measured: time budget"
PROJECT_KERNEL = Peer(
    "dsv41-rope",
    None,
    None,
    "dsv41_rope.kernel:apply_rope_triton",
    "dsv41_rope/kernel/api.py: apply_rope_triton(values, angles, *, inverse=False)",
    "triton",
    "project",
    backward=True,
    notes="This project's kernel.",
)
EAGER_CONTROL = by_name("eager-control")
ALWAYS_MEASURED = (PROJECT_KERNEL, EAGER_CONTROL)


def selected_peers(names: str | None) -> list[Peer]:
    """The registry's peers named in a comma-separated list; every available one (``Peer.unavailable`` None) when
    ``names`` is None.

    Raises:
        KeyError: a name the registry lacks; the message lists the names.
    """
    if names is None:
        return [peer for peer in PEERS if peer.unavailable is None]
    return [by_name(name.strip()) for name in names.split(",") if name.strip()]


def load_adapter(adapter: str) -> Callable[..., torch.Tensor]:
    """The function an adapter ``MODULE:FUNCTION`` names, its module imported (its peer is imported on first call)."""
    module, _, function = adapter.partition(":")
    return getattr(importlib.import_module(module), function)


def _environment(device: str) -> dict[str, Any]:
    gpu = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else None
    return {
        "gpu": gpu,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **provenance.record(),  # versions (torch, triton, CUDA, python), git state, kernel SHA-256
    }


def _write(document: dict[str, Any], path: Path) -> None:
    # Rewritten whole after every cell through a rename, so that a reader never sees half a file.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(partial, path)


def _log(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:7.1f}s] {message}", flush=True)


def _summary(cell: dict[str, Any]) -> str:
    def figure(key: str, spec: str) -> str:
        return "-" if cell[key] is None else format(cell[key], spec)

    figures = (
        f"forward {figure('forward', '.3f')}  forward+backward {figure('forward_backward', '.3f')}  "
        f"host {figure('host_us', '.1f')} us  ({cell['method'] or 'not timed'})"
    )
    return figures if cell["error"] is None else f"{figures}  {cell['error']}"


def _release(timer: Timer, start: float) -> None:
    try:
        timer.release()
    except Exception as error:  # a peer that broke the CUDA context: every later cell records its own error
        _log(start, f"releasing memory failed: {short_error(error)}")


def _row(peer: Peer) -> tuple[dict[str, Any], Callable[..., torch.Tensor] | None]:
    row: dict[str, Any] = {
        "peer": peer.name,
        "adapter": peer.adapter,
        "backward": peer.backward,
        "skipped": peer.unavailable,
        "error": None,
        "shapes": {},
    }
    if peer.unavailable is not None:
        return row, None
    try:
        return row, load_adapter(peer.adapter)
    except Exception as error:  # an adapter that does not import is a row of the matrix, not the end of the run
        row["error"] = short_error(error)
        return row, None


def measure(
    peers: Sequence[Peer],
    out_path: str | os.PathLike[str],
    *,
    time_budget: float | None = None,
    timer: Timer | None = None,
    device: str = "cuda",
    shapes: Sequence[Shape] = SHAPES,
) -> dict[str, Any]:
    """Times every peer on every shape in this process and writes the JSON to ``out_path`` after every cell.

    Args:
        peers: the peers to time, after this project's kernel and the eager control (``ALWAYS_MEASURED``), which are
            always rows; a name given twice is one row. A peer with ``unavailable`` set gets a row skipped with
            that reason; one whose adapter does not import, a row with that error in every cell.
        out_path: the JSON file to write (its folder is made).
        time_budget: seconds after which no new cell is measured; the rest read ``BUDGET_SPENT``. None: no limit.
        timer: the measurements (a :class:`CellTimer` over a new ``GraphTimer`` when None; the tests hand a fake).
        device: where the tensors live.
        shapes: the tensors, by default the five of DeepSeek V4.1 (``SHAPES``).

    Returns:
        The document written: ``schema``, ``status`` ("complete", "stopped: ...", "interrupted"), ``environment``
        (GPU, versions, git state, kernel SHA-256), ``method`` (the text of this module's "Method:"), ``settings``,
        ``shapes`` (each tensor's dims, bytes, L2 and ``copy_ms``) and ``rows``: ``{peer, adapter, backward,
        skipped, error, shapes: {shape: {forward, forward_backward, host_us, method, error, ms, graph_errors}}}``,
        ``forward`` and ``forward_backward`` being ratios to one and two copies, ``ms`` their milliseconds.
    """
    start = time.monotonic()
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    unique = {peer.name: peer for peer in (*ALWAYS_MEASURED, *peers)}
    rows = [_row(peer) for peer in unique.values()]
    timer = timer or CellTimer(GraphTimer())
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "status": "running",
        "environment": _environment(device),
        "method": METHOD,
        "settings": {
            "dtype": str(DTYPE).removeprefix("torch."),
            "pairs": PAIRS,
            "cold_from_bytes": COLD_FROM_BYTES,
            "replays": timer.replays,
            "flush_bytes": GraphTimer.FLUSH_BYTES,
            "time_budget_s": time_budget,
        },
        "shapes": {
            shape.name: {
                "dims": list(shape.dims),
                "bytes": shape.bytes,
                "l2": "cold" if shape.cold else "warm",
                "copy_ms": None,
            }
            for shape in shapes
        },
        "rows": [row for row, _ in rows],
    }
    _write(document, path)
    _log(start, f"writing {path}; {document['environment']['gpu']}, {len(rows)} rows, {len(shapes)} shapes")

    cut = False

    def spent() -> bool:
        nonlocal cut
        cut = cut or (time_budget is not None and time.monotonic() - start >= time_budget)
        return cut

    try:
        for shape in shapes:
            if spent():
                for row, _ in rows:
                    row["shapes"][shape.name] = unmeasured_cell(BUDGET_SPENT)
                _write(document, path)
                continue
            try:
                inputs = make_inputs(shape, device)
            except Exception as error:  # no memory for the tensor, or a CUDA context a peer broke
                for row, _ in rows:
                    row["shapes"][shape.name] = unmeasured_cell(f"inputs: {short_error(error)}")
                _write(document, path)
                continue
            try:
                copy_ms: float | None = timer.copy_floor_ms(inputs.values, shape.cold)
            except Exception as error:  # no copy floor leaves the ratios empty, the milliseconds still measured
                copy_ms = None
                document["shapes"][shape.name]["copy_error"] = short_error(error)
            document["shapes"][shape.name]["copy_ms"] = copy_ms
            floor = "failed" if copy_ms is None else f"{copy_ms * 1e3:.1f} us"
            _log(start, f"{shape.name} {list(shape.dims)} {document['shapes'][shape.name]['l2']}: copy floor {floor}")
            for row, fn in rows:
                if row["skipped"] is not None:
                    cell = unmeasured_cell(f"unavailable: {row['skipped']}")
                elif fn is None:
                    cell = unmeasured_cell(row["error"])
                elif spent():
                    cell = unmeasured_cell(BUDGET_SPENT)
                else:
                    cell = measure_cell(timer, fn, row["backward"], shape, inputs, copy_ms)
                    _release(timer, start)
                row["shapes"][shape.name] = cell
                _write(document, path)
                _log(start, f"{shape.name:<14} {row['peer']:<24} {_summary(cell)}")
            del inputs
            _release(timer, start)
    except KeyboardInterrupt:
        document["status"] = "interrupted"
        _write(document, path)
        raise
    document["status"] = f"stopped: time budget of {time_budget:g} s spent" if cut else "complete"
    _write(document, path)
    _log(start, f"{document['status']}; wrote {path}")
    return document


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    parser = argparse.ArgumentParser(prog="python -m dsv41_rope.matrix.speed", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the JSON file to write")
    parser.add_argument(
        "--peers",
        metavar="NAME,NAME",
        help="peers of the registry (python -m dsv41_rope.peers), default every available one; dsv41-rope and "
        "eager-control are always timed",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="measure no new cell after this many seconds; the JSON is still written (default: no limit)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line: 0 when the JSON is written (also when the time budget stopped the run), 2 without
    CUDA or for an unknown peer, 130 when interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        peers = selected_peers(args.peers)
    except KeyError as error:
        parser.error(error.args[0])
    if not torch.cuda.is_available():
        print(
            f"{parser.prog}: no CUDA device is visible (torch {torch.__version__}); the speed matrix needs one.",
            file=sys.stderr,
        )
        return NO_CUDA_EXIT_CODE
    try:
        measure(peers, args.out, time_budget=args.time_budget)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
