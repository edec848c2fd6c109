"""Production integration: torch.compile without graph breaks, CUDA graphs, double backward, tensors past 2**31
elements, determinism.

The kernel launch is a ``torch.library`` operator (``dsv41_rope::rotate``) with a fake implementation, so Dynamo
treats it as one node inside the autograd Function instead of tracing into Triton's launcher.

Another implementation is held to compile, CUDA graphs and double backward where it claims them
(``--rope-impl-claims``); determinism and the tensor past 2**31 elements hold for every implementation.
"""

from __future__ import annotations

import pytest
import torch

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import DTYPES, Case, make_angles, make_values
from dsv41_rope.oracle.rounding import bits


def _inputs(device: torch.device, dtype_name: str, layout: str = "transposed", regime: str = "normal"):
    case = Case(dtype_name, "batch3", layout, True, regime, per_batch_angles=False)
    return case, make_values(case, device), make_angles(case, device)


@pytest.mark.compile_bound
@pytest.mark.parametrize(
    ("dtype_name", "dynamic"), [("bf16", False), ("fp32", True)], ids=["bf16-static-shapes", "fp32-dynamic-shapes"]
)
def test_compile_fullgraph_gives_eager_mode_bits(impl_under_test, device, dtype_name, dynamic):
    impl_under_test.require("compile")
    case, values, angles = _inputs(device, dtype_name)
    if impl_under_test.kernel is not None:
        assert impl_under_test.kernel.uses_fused_kernel(values, angles)
    upstream = make_values(case, device, salt=1)

    def step(values: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        return impl_under_test.forward(values, angles, True)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, dynamic=dynamic)  # fullgraph: any graph break raises
    results = {}
    for name, function in (("compiled", compiled), ("eager-mode", step)):
        leaf = values.detach().requires_grad_(True)
        output = function(leaf, angles)
        (gradient,) = torch.autograd.grad(output, leaf, upstream)
        results[name] = (output, gradient)
    for compiled_result, eager_result in zip(results["compiled"], results["eager-mode"], strict=True):
        assert torch.equal(bits(compiled_result), bits(eager_result))


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
def test_double_backward_is_the_forward_rotation(impl_under_test, device, dtype_name, inverse, ulp_drift):
    """The backward is linear in the upstream gradient g; its gradient for a weight w is the forward op on w."""
    impl_under_test.require("double-backward")
    case = Case(dtype_name, "query", "contiguous", inverse, "normal")
    values, angles = make_values(case, device), make_angles(case, device)
    upstream = make_values(case, device, salt=1).detach().requires_grad_(True)
    leaf = values.detach().requires_grad_(True)
    output = impl_under_test.forward(leaf, angles, inverse)
    (gradient,) = torch.autograd.grad(output, leaf, upstream, create_graph=True)
    assert gradient.requires_grad, "the backward's output has no grad_fn: a second derivative would be silently lost"
    weight = make_values(case, device, salt=2)
    (second,) = torch.autograd.grad(gradient, upstream, weight)
    forward_of_weight = impl_under_test.forward(weight, angles, inverse)
    checks.assert_bits(ulp_drift, "double-backward-vs-forward", case, device, second, forward_of_weight)
    if device.type == "cuda":
        eager_upstream = upstream.detach().requires_grad_(True)
        eager_leaf = values.detach().requires_grad_(True)
        eager_output = checks.eager_reference(eager_leaf, angles, inverse)
        (eager_gradient,) = torch.autograd.grad(eager_output, eager_leaf, eager_upstream, create_graph=True)
        (eager_second,) = torch.autograd.grad(eager_gradient, eager_upstream, weight)
        checks.assert_bits(
            ulp_drift, "double-backward-vs-eager", case, device, second, eager_second, allow=("signed-zero", "nan-bits")
        )


@pytest.mark.parametrize("dtype_name", ["bf16", "fp32"])
def test_deterministic_run_to_run(impl_under_test, device, dtype_name):
    _, values, angles = _inputs(device, dtype_name, regime="special")
    first, second = impl_under_test.forward(values, angles), impl_under_test.forward(values, angles)
    assert torch.equal(bits(first), bits(second))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bf16", "fp32"])
def test_cuda_graph_replay_gives_direct_call_bits(impl_under_test, gpu, dtype_name):
    impl_under_test.require("cuda-graphs")
    case, values, angles = _inputs(gpu, dtype_name)
    upstream = make_values(case, gpu, salt=1)

    def step(values: torch.Tensor) -> torch.Tensor:
        return impl_under_test.forward(values, angles, True)

    sample = values.detach().requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(step, (sample,))
    for salt in (3, 4):  # replay on fresh inputs, not only the capture's
        fresh = make_values(case, gpu, salt=salt).detach()
        graph_leaf, direct_leaf = fresh.clone().requires_grad_(True), fresh.clone().requires_grad_(True)
        graph_output = graphed(graph_leaf)
        graph_output.backward(upstream)
        direct_output = step(direct_leaf)
        direct_output.backward(upstream)
        assert torch.equal(bits(graph_output), bits(direct_output))
        assert torch.equal(bits(graph_leaf.grad), bits(direct_leaf.grad))


@pytest.mark.gpu
def test_more_than_2_to_the_31_elements_gives_eager_bits(impl_under_test, gpu, ulp_drift):
    """BF16 [1, 8192, 128, 2112] (about 4.4 GB): element offsets beyond 2**31 must be 64-bit."""
    case = Case("bf16", "query", "contiguous", False, "normal")
    generator = torch.Generator(device=gpu).manual_seed(case.seed)
    values = torch.randn((1, 8192, 128, 2112), generator=generator, device=gpu, dtype=torch.bfloat16)
    assert values.numel() > 2**31
    angles = torch.rand((1, 8192, 32), generator=generator, device=gpu) * 8192
    fused = impl_under_test.forward(values, angles)
    eager = checks.eager_reference(values, angles)
    checks.assert_bits(ulp_drift, "fused-vs-eager-2**31", case, gpu, fused, eager)
