"""How the GPU timings are planned, checked without a GPU in a child python (tests do not import benchmarks or
scripts): `benchmarks.common.GraphTimer` counts the calls a graph holds from the GPU time of one captured call, never
from a stream launch whose time includes the host's (a replay's start is shared by its calls, so calls of one GPU
time but different host times read different times, run 63); `scripts/small_tensor_probe.py` times every call in
every round in an order that rotates, and takes each ratio between times of one round (runs 60 and 61 disagreed when
each call was timed apart)."""

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

_PROBE_ROUNDS = """
import json
from scripts.small_tensor_probe import alternating_times, ratio_summary

order = []
def measurement(label):
    def measure():
        order.append(label)
        return 1.0
    return measure
times = alternating_times({label: measurement(label) for label in ("clone", "copy", "ours")}, rounds=4)
# The GPU runs twice as fast in the second round: within each round ours takes 1.1 of the copy's time.
paired = [{"copy": 2.0, "ours": 2.2}, {"copy": 1.0, "ours": 1.1}, {"copy": 2.0, "ours": 2.2}]
print(json.dumps({"order": order, "rounds": [sorted(t) for t in times], "paired": ratio_summary(paired, "ours", "copy"),
                  "outlier": ratio_summary(paired[:1] + [{"copy": 1.0, "ours": 1.3}] + paired[2:], "ours", "copy")}))
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


def test_the_probe_runs_every_call_each_round_in_a_rotating_order_and_pairs_its_ratios() -> None:
    found = _child(_PROBE_ROUNDS)
    firsts = found["order"][::3]
    assert firsts == ["clone", "copy", "ours", "clone"], f"each round's first call: {firsts}"
    assert found["rounds"] == [["clone", "copy", "ours"]] * 4
    assert found["paired"] == [1.1, 1.1, 1.1], "a ratio must be taken between the times of one round"
    assert found["outlier"] == [1.1, 1.1, 1.3]
