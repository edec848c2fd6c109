"""In place: ``apply_rope_triton_`` rotates ``values[..., -2P:]`` itself, bit for bit as the out-of-place op.

For every case of the fixed matrix the result is ``values`` itself, its rotary channels are the out-of-place op's
bits (and the oracle's, and eager's on a GPU), and the channels before them keep every bit. It refuses what
PyTorch's in-place operations refuse, leaving ``values`` unchanged; it bumps the version counter; where the
out-of-place op falls back to eager, it falls back to an eager in-place rotation with the same bits; it compiles
(``torch.compile(fullgraph=True)``) and replays in CUDA graphs.

Another implementation is judged here when an in-place function of it is named (``--rope-impl-in-place``): the
project kernel's error types and words aside (it must refuse, unwritten, what the eager path in place refuses on this
machine, asked at run time), and compile and CUDA graphs where it claims them.
"""

from __future__ import annotations

import pytest
import torch

from dsv41_rope.conformance import checks, rejections
from dsv41_rope.conformance.cases import Case, case_params, make_angles, make_values
from dsv41_rope.oracle.rounding import bits


@pytest.mark.parametrize("case", case_params())
def test_in_place_equals_out_of_place(case, device, in_place_impl, ulp_drift):
    checks.in_place_matches(case, device, in_place_impl, ulp_drift)


SHORT_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _inputs(device, dtype=torch.bfloat16):
    """Transposed ``[3, 7, 2, 96]`` values (the attention output's layout) with 16 pairs, and their angles."""
    case = Case(SHORT_DTYPE[dtype], "batch3", "transposed", False, "normal")
    return make_values(case, device), make_angles(case, device)


def _require_grad(values, angles):
    return values.requires_grad_(True), angles


def _expanded_values(values, angles):
    return values[:1].expand(values.shape), angles


def _angles_inside_values(values, angles):
    return values, values[:, :, 0, :16]  # float32 [3, 7, 16] read from the values' own first channels


def _too_many_pairs(values, angles):
    return values, torch.zeros((1, values.shape[1], 49), device=values.device)


def _fp16_angles(values, angles):
    return values, angles.half()


REFUSED = {
    "values-require-grad": (_require_grad, RuntimeError, "require grad"),
    "expanded-values": (_expanded_values, RuntimeError, "single memory location"),
    "angles-inside-values": (_angles_inside_values, RuntimeError, "share memory"),
    "too-many-pairs": (_too_many_pairs, ValueError, "pairs=49"),
    "fp16-angles": (_fp16_angles, TypeError, "float16"),
}


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize("label", list(REFUSED))
def test_refused_inputs_leave_values_unchanged(in_place_impl, device, label):
    """The project's kernel refuses each with its documented error, unwritten; another implementation must refuse
    what the eager path in place refuses on this machine (asked now), and leave a refused input unwritten."""
    make, error, words = REFUSED[label]
    if not in_place_impl.is_project_kernel:
        rejections.refuses_what_eager_refuses(in_place_impl, lambda: make(*_inputs(device, torch.float32)))
        return
    values, angles = make(*_inputs(device, torch.float32))
    before = values.detach().clone()
    with pytest.raises(error, match=words):
        in_place_impl.in_place(values, angles, inverse=False)
    assert torch.equal(bits(values), bits(before)), f"{label}: refused, yet values were written"


def test_values_requiring_grad_are_accepted_under_no_grad(in_place_impl, device):
    values, angles = _inputs(device)
    values.requires_grad_(True)
    expected = in_place_impl.forward(values.detach(), angles)
    with torch.no_grad():
        in_place_impl.in_place(values, angles)
    assert torch.equal(bits(values), bits(expected))


def test_version_counter_is_bumped(in_place_impl, device):
    """Autograd notices that a tensor saved for a backward was modified, as with any in-place operation."""
    values, angles = _inputs(device, torch.float32)
    before = values._version
    in_place_impl.in_place(values, angles)
    assert values._version > before

    saved = torch.randn(values.shape, device=device, requires_grad=True) * 2
    loss = (saved * saved).sum()  # the product saves its operand for the backward
    with torch.no_grad():
        in_place_impl.in_place(saved, angles)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize(
    ("label", "dtype", "angle_dtype"),
    [("fp64-values", torch.float64, torch.float32), ("fp64-angles", torch.bfloat16, torch.float64)],
)
def test_eager_fallbacks_rotate_in_place_with_the_fallback_bits(in_place_impl, device, label, dtype, angle_dtype):
    """Inputs the eager path takes and the project's kernel leaves to it: the in-place rotation has the out-of-place
    function's bits."""
    values = torch.randn((2, 5, 3, 40), generator=torch.Generator().manual_seed(4)).to(dtype).to(device)
    angles = (torch.randn((1, 5, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 50).to(
        angle_dtype
    )
    angles = angles.to(device)
    if in_place_impl.kernel is not None:
        assert not in_place_impl.kernel.uses_fused_kernel(values, angles), label
    expected = in_place_impl.forward(values, angles, True)
    leading = values[..., :-16].clone()
    assert in_place_impl.in_place(values, angles, inverse=True) is values
    assert torch.equal(values, expected)
    assert torch.equal(values[..., :-16], leading)


@pytest.mark.compile_bound
def test_compile_fullgraph_gives_eager_mode_bits(in_place_impl, device):
    in_place_impl.require("compile")
    values, angles = _inputs(device)

    def step(values: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        return in_place_impl.in_place(values, angles, inverse=True)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)  # fullgraph: any graph break raises
    compiled_values, eager_mode_values = values.clone(), values.clone()
    compiled(compiled_values, angles)
    step(eager_mode_values, angles)
    assert torch.equal(bits(compiled_values), bits(eager_mode_values))
    assert not torch.equal(bits(compiled_values), bits(values)), "the compiled call rotated nothing"


@pytest.mark.gpu
def test_cuda_graph_replay_rotates_in_place(in_place_impl, gpu):
    in_place_impl.require("cuda-graphs")
    values, angles = _inputs(gpu)
    static = values.clone()
    in_place_impl.in_place(static.clone(), angles)  # compile and calibrate outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        in_place_impl.in_place(static, angles)
    for salt in (3, 4):
        fresh = make_values(Case("bf16", "batch3", "transposed", False, "normal"), gpu, salt=salt)
        static.copy_(fresh)
        graph.replay()
        assert torch.equal(bits(static), bits(in_place_impl.forward(fresh, angles)))
