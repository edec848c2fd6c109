"""Why a small tensor's backward reads 1.2-2.2x a copy when its forward reads 1.1-1.7x: the same kernel, timed bare.

The backward is the rotation by the conjugate, one launch of our kernel, as the forward is. On a CUDA machine, from the
repository root::

    python -m scripts.backward_probe                      # BACKWARD_DOTS=DIR keeps each graph's DOT file there

For the window KV, compressed KV, index keys and index query (BF16), warm GPU time by graph replay of: ``clone``, the
forward, the conjugate rotation of the gradient called as a forward (``inverse=True``: the kernel a backward runs),
and the backward through autograd (``autograd.grad`` of a kept forward, as ``benchmarks.run`` times it); and the nodes
of one captured call of each, by type, from the graph's debug dump (what else a backward's graph holds).
"""

from __future__ import annotations

import collections
import os
import re
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.common import NO_CUDA_EXIT_CODE, GraphTimer, cuda_available
from benchmarks.shapes import CASES, make_angles, make_values
from impl.rope_triton import apply_rope_triton

TENSORS = ("window_kv", "compressed_kv", "index_keys", "index_query")


def graph_nodes(fn, stream: torch.cuda.Stream, keep: Path | None = None) -> dict[str, int]:
    """Node types of a graph of one call of ``fn`` (CUDA graph debug dump, a DOT file, copied to ``keep``)."""
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)  # the dump reads the graph, which is otherwise freed once built
    except TypeError:  # a torch without keep_graph keeps it in debug mode
        graph = torch.cuda.CUDAGraph()
    graph.enable_debug_mode()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "graph.dot"
        graph.debug_dump(str(path))
        text = path.read_text()
    if keep is not None:
        keep.write_text(text)
    kinds = collections.Counter(re.findall(r"\b(KERNEL|MEMSET|MEMCPY|EVENT_RECORD|WAIT_EVENT|EMPTY|HOST)\b", text))
    kinds.update(f"kernel {name[:50]}" for name in re.findall(r"\b_?\w*(?:rope|kernel|elementwise|fill)\w*", text))
    return dict(kinds)


def distinct_outputs(fn, stream: torch.cuda.Stream, calls: int = 10) -> int:
    """How many distinct output addresses ``calls`` captured calls of ``fn`` write (1: each reuses the last's memory,
    so a warm replay rewrites the same L2 lines; ``calls``: each writes fresh memory)."""
    addresses = set()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            result = fn()
            tensor = result[0] if isinstance(result, tuple) else result
            addresses.add(tensor.data_ptr())
            del result, tensor
    return len(addresses)


def main() -> int:
    if not cuda_available("scripts.backward_probe"):
        return NO_CUDA_EXIT_CODE
    timer = GraphTimer(replays=25)
    print(
        "tensor: clone, forward, conjugate forward, the same keeping every output, backward: us per call (over the"
        " clone), warm"
    )
    for name in TENSORS:
        case = CASES[name]
        values = make_values(case, torch.bfloat16)
        angles = make_angles(case.shape[1])
        grad = torch.randn_like(values)
        leaf = values.detach().requires_grad_(True)
        with torch.cuda.stream(timer.stream):
            output = apply_rope_triton(leaf, angles)
        torch.cuda.current_stream().wait_stream(timer.stream)
        calls = {
            "clone": values.clone,
            "forward": lambda values=values, angles=angles: apply_rope_triton(values, angles),
            "conj fwd": lambda grad=grad, angles=angles: apply_rope_triton(grad, angles, inverse=True),
            # the same, each call's output kept alive until the graph is captured: fresh memory every call
            "conj kept": lambda grad=grad, angles=angles, kept=[]: kept.append(
                apply_rope_triton(grad, angles, inverse=True)
            ),
            "backward": lambda output=output, leaf=leaf, grad=grad: torch.autograd.grad(
                output, leaf, grad, retain_graph=True
            ),
        }
        times = {}
        for label, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            times[label] = timer.warm_ms(fn) * 1e3
        print(
            f"{name:<16}" + "".join(f"{times[label]:>8.2f} ({times[label] / times['clone']:.2f})" for label in calls),
            flush=True,
        )
        print(
            "  distinct output addresses over 10 captured calls: "
            + ", ".join(f"{label} {distinct_outputs(calls[label], timer.stream)}" for label in ("forward", "backward")),
            flush=True,
        )
        for label in ("forward", "backward"):
            try:
                dots = os.environ.get("BACKWARD_DOTS")
                keep = Path(dots) / f"{name}-{label}.dot" if dots else None
                print(f"  graph of one {label}: {graph_nodes(calls[label], timer.stream, keep)}", flush=True)
            except (RuntimeError, AttributeError, OSError) as error:
                print(f"  graph of one {label}: no dump ({error})", flush=True)

    return 0


if __name__ == "__main__":
    sys.exit(main())
