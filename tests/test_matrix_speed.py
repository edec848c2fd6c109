"""The speed matrix without a GPU (`dsv41_rope.matrix.speed`): its tensors, its ratios, a peer that raises or cannot be
captured, the time budget, the JSON it writes and the exit without CUDA. The timer is a fake returning fixed times;
the cells run on tiny CPU tensors, this project's kernel under Triton's interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dsv41_rope.matrix import speed, speed_cells, timing
from dsv41_rope.matrix.speed_cells import SHAPES, Shape, make_inputs, measure_cell, ratio, rope_angles
from dsv41_rope.peers.registry import Peer

REPO = Path(__file__).resolve().parents[1]
TINY = (Shape("tiny_heads", (1, 4, 2, 64)), Shape("tiny", (1, 8, 64)))
COPY_MS, FORWARD_MS, FORWARD_BACKWARD_MS, EVENTS_MS, HOST_US = 1.0, 1.5, 4.0, 2.5, 20.0


class FakeTimer:
    """Fixed times; each graph-timed call advances ``clock`` by ``seconds_per_call``; capture fails on request."""

    replays = 15

    def __init__(self, graph_fails: tuple[str, ...] = (), seconds_per_call: float = 0.0) -> None:
        self.graph_fails = graph_fails
        self.seconds_per_call = seconds_per_call
        self.clock = 0.0

    def copy_floor_ms(self, values: torch.Tensor, cold: bool) -> float:
        return COPY_MS

    def graph_ms(self, fn: Callable[[], object], cold: bool) -> float:
        self.clock += self.seconds_per_call
        op = "forward_backward" if isinstance(fn(), tuple) else "forward"  # autograd.grad returns a tuple
        if op in self.graph_fails:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nsecond line")
        return FORWARD_BACKWARD_MS if op == "forward_backward" else FORWARD_MS

    def events_ms(self, fn: Callable[[], object], cold: bool) -> float:
        fn()
        return EVENTS_MS

    def host_us(self, fn: Callable[[], object]) -> float:
        return HOST_US

    def release(self) -> None:
        pass


def rope(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    return values * 2


def raising_rope(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    raise ValueError("boom: the peer rejects these values\nand says more on a second line")


@pytest.fixture
def fake_peers(monkeypatch: pytest.MonkeyPatch) -> dict[str, Peer]:
    """Peers of a fake module's adapters: one that works, one that raises; one not installed, one unavailable."""
    module = types.ModuleType("fake_matrix_peers")
    module.rope, module.raising_rope = rope, raising_rope
    monkeypatch.setitem(sys.modules, "fake_matrix_peers", module)

    def peer(name: str, adapter: str, unavailable: str | None = None) -> Peer:
        return Peer(name, None, None, adapter, "", "pytorch", "project", backward=True, unavailable=unavailable)

    return {
        "works": peer("works", "fake_matrix_peers:rope"),
        "raises": peer("raises", "fake_matrix_peers:raising_rope"),
        "missing": peer("missing", "fake_matrix_no_such_module:rope"),
        "unavailable": peer("unavailable", "fake_matrix_peers:rope", unavailable="needs all of vllm"),
    }


def run(peers: list[Peer], tmp_path: Path, timer: FakeTimer | None = None, **options: object) -> dict:
    return speed.measure(peers, tmp_path / "out" / "speed.json", timer=timer or FakeTimer(), device="cpu", **options)


def test_the_five_deepseek_tensors_with_their_bytes_and_l2() -> None:
    assert [(shape.name, shape.dims) for shape in SHAPES] == [
        ("query", (1, 4096, 64, 512)),
        ("window_kv", (1, 4096, 512)),
        ("index_query", (1, 4096, 32, 128)),
        ("compressed_kv", (1, 2048, 512)),
        ("index_keys", (1, 1024, 128)),
    ]
    mib = timing.MIB
    assert [shape.bytes for shape in SHAPES] == [256 * mib, 4 * mib, 32 * mib, 2 * mib, mib // 4]
    assert [shape.name for shape in SHAPES if shape.cold] == ["query", "index_query"]  # from 32 MiB


def test_inputs_are_seeded_bf16_values_and_angles_as_rope_makes_them() -> None:
    inputs = make_inputs(TINY[0], "cpu")
    assert inputs.values.dtype == inputs.grad.dtype == torch.bfloat16 and inputs.values.is_contiguous()
    assert inputs.values.shape == inputs.grad.shape == TINY[0].dims
    assert torch.equal(inputs.values, make_inputs(TINY[0], "cpu").values)
    assert inputs.angles.shape == (1, 4, 32) and inputs.angles.dtype == torch.float32
    angles = rope_angles(4096, "cpu")
    assert angles[0, 3, 0].item() == 3.0
    frequencies = 10000.0 ** (-torch.arange(32, dtype=torch.float32) / 32)
    assert torch.equal(angles[0, 1], frequencies) and torch.equal(angles[0, 4095], 4095 * frequencies)


def test_ratios_are_to_one_copy_and_forward_backward_to_two() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(3.0, None) is None and ratio(3.0, 0.0) is None
    cell = measure_cell(FakeTimer(), rope, True, TINY[1], make_inputs(TINY[1], "cpu"), COPY_MS)
    assert cell["forward"] == FORWARD_MS / COPY_MS
    assert cell["forward_backward"] == FORWARD_BACKWARD_MS / (2 * COPY_MS)
    assert cell["ms"] == {"forward": FORWARD_MS, "forward_backward": FORWARD_BACKWARD_MS}
    assert (cell["host_us"], cell["method"], cell["error"], cell["graph_errors"]) == (HOST_US, "graph", None, {})


def test_a_peer_without_backward_has_no_forward_backward_figure() -> None:
    cell = measure_cell(FakeTimer(), rope, False, TINY[1], make_inputs(TINY[1], "cpu"), COPY_MS)
    assert cell["forward"] == FORWARD_MS and cell["forward_backward"] is None and cell["error"] is None


def test_a_call_no_graph_can_hold_is_timed_between_events() -> None:
    inputs = make_inputs(TINY[1], "cpu")
    cell = measure_cell(FakeTimer(graph_fails=("forward",)), rope, True, TINY[1], inputs, COPY_MS)
    assert cell["forward"] == EVENTS_MS and cell["forward_backward"] == FORWARD_BACKWARD_MS / 2
    assert cell["method"] == "forward events, forward_backward graph"
    capturing = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert cell["graph_errors"] == {"forward": capturing}
    both = measure_cell(FakeTimer(graph_fails=("forward", "forward_backward")), rope, True, TINY[1], inputs, 1.0)
    assert both["method"] == "events" and both["error"] is None


def test_a_peer_that_raises_is_an_error_cell_and_the_run_goes_on(tmp_path: Path, fake_peers: dict[str, Peer]) -> None:
    document = run([fake_peers["raises"], fake_peers["works"]], tmp_path, shapes=TINY)
    rows = {row["peer"]: row for row in document["rows"]}
    assert list(rows) == ["dsv41-rope", "eager-control", "raises", "works"]
    for cell in rows["raises"]["shapes"].values():
        assert cell["error"] == "forward: ValueError: boom: the peer rejects these values"
        assert cell["forward"] is cell["forward_backward"] is cell["host_us"] is cell["method"] is None
    for name in ("dsv41-rope", "eager-control", "works"):  # the real kernel and eager run on the CPU here
        for cell in rows[name]["shapes"].values():
            assert cell["error"] is None, (name, cell)
            assert (cell["forward"], cell["forward_backward"], cell["method"]) == (1.5, 2.0, "graph")
    assert document["status"] == "complete"


def test_a_peer_not_installed_or_unavailable_is_a_row_that_says_why(
    tmp_path: Path, fake_peers: dict[str, Peer]
) -> None:
    document = run([fake_peers["missing"], fake_peers["unavailable"]], tmp_path, shapes=TINY)
    missing, unavailable = document["rows"][2:]
    assert missing["error"] == "ModuleNotFoundError: No module named 'fake_matrix_no_such_module'"
    assert {cell["error"] for cell in missing["shapes"].values()} == {missing["error"]}
    assert unavailable["skipped"] == "needs all of vllm"
    assert {cell["error"] for cell in unavailable["shapes"].values()} == {"unavailable: needs all of vllm"}


def test_the_time_budget_leaves_the_rest_unmeasured(
    tmp_path: Path, fake_peers: dict[str, Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    timer = FakeTimer(seconds_per_call=10.0)
    monkeypatch.setattr(speed, "time", types.SimpleNamespace(monotonic=lambda: timer.clock))
    document = run([fake_peers["works"]], tmp_path, timer, time_budget=15.0, shapes=TINY)
    cells = [(row["peer"], shape, cell) for row in document["rows"] for shape, cell in row["shapes"].items()]
    measured = [(peer, shape) for peer, shape, cell in cells if cell["error"] is None]
    assert measured == [("dsv41-rope", "tiny_heads")]  # its forward and forward+backward spent 20 s
    assert all(cell["error"] == speed.BUDGET_SPENT for peer, _, cell in cells if peer != "dsv41-rope")
    assert document["status"] == "stopped: time budget of 15 s spent"
    assert json.loads((tmp_path / "out" / "speed.json").read_text())["status"] == document["status"]
    nothing = run([fake_peers["works"]], tmp_path, time_budget=0.0, shapes=TINY)
    assert {cell["error"] for row in nothing["rows"] for cell in row["shapes"].values()} == {speed.BUDGET_SPENT}


def test_the_json_holds_the_environment_method_shapes_and_rows(tmp_path: Path, fake_peers: dict[str, Peer]) -> None:
    document = run([fake_peers["works"]], tmp_path, shapes=TINY)
    assert json.loads((tmp_path / "out" / "speed.json").read_text()) == document
    assert not list((tmp_path / "out").glob("*.partial"))
    assert set(document) == {"schema", "status", "environment", "method", "settings", "shapes", "rows"}
    assert document["schema"] == speed.SCHEMA
    assert {"gpu", "date", "torch", "triton", "cuda", "git_commit", "kernel_sha256"} <= set(document["environment"])
    assert document["method"].startswith("The five tensors, BF16") and "copy floor" in document["method"]
    assert document["settings"]["dtype"] == "bfloat16" and document["settings"]["pairs"] == 32
    assert document["shapes"]["tiny"] == {"dims": [1, 8, 64], "bytes": 1024, "l2": "warm", "copy_ms": COPY_MS}
    row = document["rows"][0]
    assert set(row) == {"peer", "adapter", "backward", "skipped", "error", "shapes"}
    assert (row["peer"], row["adapter"]) == ("dsv41-rope", "dsv41_rope.kernel:apply_rope_triton")
    assert document["rows"][1]["adapter"] == "dsv41_rope.kernel:apply_rope_eager"
    cell_keys = {"forward", "forward_backward", "host_us", "method", "error", "ms", "graph_errors"}
    assert all(set(cell) == cell_keys for row in document["rows"] for cell in row["shapes"].values())


def test_peers_by_name_and_by_default(tmp_path: Path) -> None:
    default = [peer.name for peer in speed.selected_peers(None)]
    assert "vllm-dsv4" not in default and {"torch-compile", "flash-attn-rotary", "eager-control"} <= set(default)
    assert [peer.name for peer in speed.selected_peers("torch-compile, liger-llama4-rope")] == [
        "torch-compile",
        "liger-llama4-rope",
    ]
    with pytest.raises(SystemExit) as exit_info:
        speed.main(["--out", str(tmp_path / "speed.json"), "--peers", "no-such-peer"])
    assert exit_info.value.code == 2


def test_without_cuda_it_exits_2_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert speed.main(["--out", str(tmp_path / "speed.json")]) == speed.NO_CUDA_EXIT_CODE == 2
    assert "python -m dsv41_rope.matrix.speed: no CUDA device is visible" in capsys.readouterr().err
    assert not (tmp_path / "speed.json").exists()


def test_the_matrix_package_loads_torch_only_in_its_speed_modules() -> None:
    with_torch = {"timing", "speed", "speed_cells"}
    modules = ["dsv41_rope.matrix"] + [
        f"dsv41_rope.matrix.{path.stem}"
        for path in sorted((REPO / "dsv41_rope" / "matrix").glob("*.py"))
        if path.stem not in with_torch | {"__init__", "__main__"}
    ]
    code = "import importlib, json, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    code += "print(json.dumps([*sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not {"torch", "triton", "numpy"} & set(json.loads(done.stdout)), modules


def test_the_benchmarks_time_with_the_package_timer() -> None:
    from benchmarks import common

    for name in ("COLD_FROM_BYTES", "MIB", "GraphTimer", "Timing", "calls_per_graph", "triton_copy"):
        assert getattr(common, name) is getattr(timing, name)
    assert common.short_error is speed_cells.short_error
