"""How the GPU timings are planned, checked without a GPU in a child python: `benchmarks.common.GraphTimer` counts the
calls a graph holds from the GPU time of one captured call, never from a stream launch whose time includes the host's
(a replay's start is shared by its calls, so calls of one GPU time but different host times would read different
times)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CALLS_PER_GRAPH = """
import json
from benchmarks.common import GraphTimer

def fail():
    raise AssertionError("the count must not call the function outside a graph")

counts = {}
for one_call_ms in (0.0025, 0.05, 0.1, 1.5, 5.0):
    timer = GraphTimer.__new__(GraphTimer)  # no CUDA buffers: only the count is under test
    captured = []
    timer._capture = lambda fn, count: captured.append(count) or "graph"
    timer._replay_ms = lambda graph, count, one_call_ms=one_call_ms: one_call_ms
    counts[one_call_ms] = [timer._calls(fail), captured]
print(json.dumps(counts))
"""


def _child(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_graph_holds_calls_by_the_replayed_time_of_one_call() -> None:
    counts = _child(_CALLS_PER_GRAPH)
    assert counts == {"0.0025": [50, [1]], "0.05": [40, [1]], "0.1": [20, [1]], "1.5": [2, [1]], "5.0": [1, [1]]}
