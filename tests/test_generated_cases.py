"""The machinery of the generated conformance cases: layout specs and the code that rebuilds them, the strategies,
the shards, and the tally that records a hypothesis run in the ulp-drift report. (That the generated-case check
fails on the faults it is there to find: dsv41_rope/conformance/kernel_self_tests/test_generated_checks.py.)"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from hypothesis import given, settings

from dsv41_rope.conformance import generated_shards, strategies
from dsv41_rope.conformance.generated_shards import PARTS, SHARDS, DriftTally, run_shard
from dsv41_rope.conformance.layouts import LayoutSpec, StridedLayout, build_inputs
from dsv41_rope.oracle.rounding import bits

CPU = torch.device("cpu")


def _spec(values: torch.Tensor, angles: torch.Tensor, gradient: torch.Tensor | None = None, **fields) -> LayoutSpec:
    gradient_layout = StridedLayout.of(gradient) if gradient is not None else StridedLayout.contiguous(values.shape)
    fields = {"dtype_name": "fp32", "inverse": False, "regime": "normal", **fields}
    return LayoutSpec(
        values=StridedLayout.of(values), angles=StridedLayout.of(angles), gradient=gradient_layout, **fields
    )


ONE_TOKEN_STEP = _spec(torch.empty(3, 5, 2, 16)[:, 2:3], torch.empty(3, 1, 8), position_start=7, seed=3)
EXPANDED_BATCH = _spec(
    torch.empty(1, 4, 2, 16).expand(3, 4, 2, 16),
    torch.empty(1, 4, 8),
    torch.empty(()).expand(3, 4, 2, 16),
    dtype_name="bf16",
)


# -- layouts ----------------------------------------------------------------------------------------------------------


def test_layout_of_a_view_rebuilds_the_view():
    buffer = torch.arange(5 * 7 * 4.0).reshape(5, 7, 4)
    view = buffer.transpose(0, 1)[2:6:2, 1:2]
    layout = StridedLayout.of(view)
    assert layout == StridedLayout((2, 1, 4), (8, 28, 1), 2 * 4 + 28, 140)
    assert torch.equal(layout.view(buffer.reshape(-1)), view)


def test_layout_past_its_storage_is_rejected():
    with pytest.raises(ValueError, match="past its storage"):
        StridedLayout((2, 3), (3, 1), 1, 6)


def test_expanded_views_overlap_and_slices_do_not():
    assert StridedLayout.of(torch.empty(1, 4, 8).expand(3, 4, 8)).overlapping()
    assert StridedLayout.of(torch.empty(1, 4, 8).expand(3, 4, 8)).expanded_dims == (0,)
    assert not StridedLayout.of(torch.empty(3, 9, 8)[:, ::2, 1:]).overlapping()
    assert not StridedLayout((2, 1, 4), (4, 0, 1), 0, 8).overlapping()  # a size-1 dimension's stride addresses nothing


@pytest.mark.parametrize(
    ("values", "angles"),
    [((2, 3, 4, 16), (3, 8)), ((2, 3, 16), (2, 3, 3, 8)), ((2, 3, 16), (3, 3, 8)), ((2, 3, 16), (2, 1, 9))],
    ids=["2d-angles-for-4d-values", "4d-angles", "batch-does-not-broadcast", "too-many-pairs"],
)
def test_spec_refuses_angles_the_op_does_not_take(values, angles):
    with pytest.raises(ValueError, match="angles"):
        _spec(torch.empty(values), torch.empty(angles))


def test_angle_storage_is_nan_outside_the_view():
    spec = _spec(torch.empty(2, 3, 8), torch.empty(2, 5, 8)[:, 1:4, :2])
    inputs = build_inputs(spec, CPU)
    assert not inputs.angles.isnan().any()
    assert int(inputs.angles_storage.isnan().sum()) == inputs.angles_storage.numel() - inputs.angles.numel()


@pytest.mark.parametrize("spec", [ONE_TOKEN_STEP, EXPANDED_BATCH], ids=["one-token-step", "expanded-batch"])
def test_reproduction_code_rebuilds_the_inputs_bit_for_bit(spec):
    namespace: dict = {}
    exec(spec.reproduction(CPU), namespace)
    inputs = build_inputs(spec, CPU)
    for name in ("values", "angles", "grad_output"):
        rebuilt, built = namespace[name], getattr(inputs, name)
        assert rebuilt.stride() == built.stride() and rebuilt.storage_offset() == built.storage_offset(), name
        assert torch.equal(bits(rebuilt), bits(built)), name
    assert namespace["output"].shape == spec.values.shape
    assert namespace["diffs"].mismatches == 0, "the project's kernel differs from the oracle in the reproduction"


def test_reproduction_code_runs_the_implementation_judged(tmp_path, monkeypatch):
    (tmp_path / "their_rope.py").write_text(
        "calls = []\n\n\nclass Rope:\n    @staticmethod\n    def apply(values, angles, *, inverse=False):\n"
        "        calls.append((values, angles, inverse))\n        return values * 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # their_rope leaves with the test (a vendored copy's name)
    namespace: dict = {}
    exec(ONE_TOKEN_STEP.reproduction(CPU, "their_rope:Rope.apply"), namespace)
    import their_rope

    ((values, angles, inverse),) = their_rope.calls
    assert values.shape == namespace["values"].shape and angles is namespace["angles"] and inverse is False
    assert namespace["gradient"].shape == namespace["values"].shape, "the backward ran for the upstream gradient"
    assert namespace["diffs"].mismatches > 0, "an implementation that rotates nothing matched the oracle"
    in_place = ONE_TOKEN_STEP.reproduction(CPU, "their_rope:Rope.apply", in_place=True)
    assert "output = Rope.apply(values, angles, inverse=False)  # in place: values holds the result" in in_place


# -- strategies and shards --------------------------------------------------------------------------------------------


@settings(max_examples=100)
@given(spec=strategies.layout_specs("bf16", 4, False), three_d=strategies.layout_specs("fp16", 3, True))
def test_drawn_specs_are_small_valid_inputs_of_the_op(spec, three_d):
    from dsv41_rope import kernel as rope_triton

    for drawn in (spec, three_d):
        assert 1 <= drawn.pairs <= drawn.values.shape[-1] // 2
        for layout in (drawn.values, drawn.angles, drawn.gradient):
            assert layout.storage_size <= strategies.MAX_STORAGE_ELEMENTS + strategies.MAX_STORAGE_OFFSET
        assert torch.Size(drawn.values.shape).numel() <= strategies.MAX_VIEW_ELEMENTS
        inputs = build_inputs(drawn, CPU)
        eager = rope_triton.apply_rope_eager(inputs.values, inputs.angles, inverse=drawn.inverse)  # accepts them
        assert eager.shape == inputs.values.shape


def test_shards_split_the_space_by_dtype_rank_and_direction_in_parts():
    keys = {(shard.dtype_name, shard.rank, shard.inverse, shard.part) for shard in SHARDS}
    assert len(keys) == len(SHARDS) == 12 * PARTS
    assert len({shard.seed for shard in SHARDS}) == len(SHARDS)
    assert len({shard.id for shard in SHARDS}) == len(SHARDS)


@pytest.fixture
def derandomized_profile():
    previous = settings.get_current_profile_name()
    settings.register_profile("generated-cases-self-test", derandomize=True, database=None, max_examples=60)
    settings.load_profile("generated-cases-self-test")
    yield
    settings.load_profile(previous)


def test_the_parts_of_a_shard_draw_the_profiles_examples_between_them(derandomized_profile, monkeypatch):
    """Each part draws its share; together they draw as many distinct examples as one run of them all did (every
    search begins with the simplest examples, so parts share those, and a run repeats some of its own)."""
    parts = [_drawn(shard) for shard in SHARDS if (shard.dtype_name, shard.rank, shard.inverse) == ("bf16", 3, False)]
    assert [len(drawn) for drawn in parts] == [60 // PARTS] * PARTS
    monkeypatch.setattr(generated_shards, "PARTS", 1)
    whole = _drawn(generated_shards.Shard("bf16", 3, False))
    assert len(whole) == 60
    assert len(set().union(*parts)) >= len(set(whole))


def _drawn(shard) -> list[str]:
    specs: list[str] = []
    run_shard(shard, lambda spec, tally: specs.append(repr(spec)), None)
    return specs


def test_a_shard_draws_the_same_examples_whatever_literals_the_code_holds(derandomized_profile, tmp_path, monkeypatch):
    before = _drawn(SHARDS[0])
    assert _drawn(SHARDS[0]) == before
    # Hypothesis collects the literals of imported local modules and draws some integers from them.
    literals = ", ".join(str(27 * k + 5) for k in range(300))  # 5 to 8078: seeds, positions, sizes
    (tmp_path / "more_literals.py").write_text(f"LITERALS = ({literals})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("more_literals")
    try:
        assert _drawn(SHARDS[0]) == before
    finally:
        del sys.modules["more_literals"]
    assert _drawn(SHARDS[1]) != before


# -- the report tally -------------------------------------------------------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def record(self, **fields) -> None:
        self.records.append(fields)


def _example(comparison: str, **counts) -> dict:
    fields = {"comparison": comparison, "dtype": "bf16", "backend": "interpreter", "device": "cpu", "allowed": ""}
    return {**fields, "elements": 10, "mismatches": 0, "max_distance": 0, **counts}


def test_tally_records_one_total_per_comparison():
    tally = DriftTally()
    tally.record(**_example("generated-fused-vs-oracle", signed_zero_differences=1))
    tally.record(**_example("generated-fused-vs-oracle", mismatches=2, max_distance=7, detail="at (0, 1)"))
    tally.record(**_example("generated-fused-vs-oracle", mismatches=1, max_distance=3, detail="at (2, 2)"))
    tally.record(**_example("generated-backward-vs-oracle"))
    recorder = _Recorder()
    tally.flush(recorder)
    forward, backward = recorder.records
    assert forward["elements"] == 30 and forward["mismatches"] == 3 and forward["signed_zero_differences"] == 1
    assert forward["max_distance"] == 7
    assert forward["detail"] == "3 generated examples; first mismatch at (0, 1)"
    assert backward["elements"] == 10 and backward["detail"] == "1 generated examples"


def test_tally_refuses_examples_of_another_dtype_under_one_comparison():
    tally = DriftTally()
    tally.record(**_example("generated-fused-vs-oracle"))
    with pytest.raises(ValueError, match="dtype"):
        tally.record(**{**_example("generated-fused-vs-oracle"), "dtype": "fp32"})
