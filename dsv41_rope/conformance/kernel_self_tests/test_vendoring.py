"""Vendoring: ``python -m dsv41_rope.vendor DEST --namespace NAME`` writes a copy of the kernel package that another
project ships (Automodel as ``nemo_automodel.components.models.deepseek_v41.rope``). The copy imports by its folder's
name, runs its own operators under NAME beside the original in one process, and gives the original's bits."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch

from dsv41_rope import vendor
from dsv41_rope.conformance.cases import Case, make_angles, make_values
from dsv41_rope.oracle.rounding import bits

NAMESPACE = "vendored_rope_ops"
# Every dtype, both directions, 3-D and 4-D values, a transposed view and per-batch angles.
CASES = [
    Case("bf16", "query", "contiguous", False, "normal", small=True),
    Case("fp16", "window-kv", "contiguous", True, "special", small=True),
    Case("fp32", "inverse-output", "transposed", True, "normal", small=True),
    Case("bf16", "batch3", "transposed", False, "special", per_batch_angles=True),
]


@pytest.fixture
def vendored(rope, tmp_path, monkeypatch):
    """The copy ``python -m dsv41_rope.vendor`` writes, imported as a user would: its parent on ``sys.path``."""
    package = f"copy_{tmp_path.name}"
    assert vendor.main([str(tmp_path / "site" / package), "--namespace", f"{NAMESPACE}_{tmp_path.name}"]) == 0
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    copy = importlib.import_module(package)
    yield copy
    for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
        del sys.modules[name]


def test_the_copy_has_the_same_public_functions_and_its_own_namespace(rope, vendored, tmp_path):
    assert vendored.__all__ == rope.__all__
    assert vendored.OPERATOR_NAMESPACE == f"{NAMESPACE}_{tmp_path.name}" != rope.OPERATOR_NAMESPACE
    assert not any(name.startswith("dsv41_rope") for name in vars(vendored.operators)), "it imports nothing of ours"
    record = json.loads((tmp_path / "site" / vendored.__name__ / "VENDORED.json").read_text())
    assert record["kernel_sha256"] == vendor.kernel_sha256(vendor.KERNEL_DIR)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_copy_gives_the_original_bits(rope, vendored, device, case):
    values, angles = make_values(case, device), make_angles(case, device)
    for name, call in {
        "forward": lambda module: module.apply_rope_triton(values, angles, inverse=case.inverse),
        "in place": lambda module: module.apply_rope_triton_(values.clone(), angles, inverse=case.inverse),
        "operator": lambda module: getattr(torch.ops, module.OPERATOR_NAMESPACE).rotate(values, angles, case.inverse),
    }.items():
        theirs, ours = call(vendored), call(rope)
        assert torch.equal(bits(theirs), bits(ours)), f"{case.id} {name}: the vendored copy's bits differ"
    gradients = []
    for module in (vendored, rope):
        leaf = values.detach().clone().requires_grad_(True)
        output = module.apply_rope_triton(leaf, angles, inverse=case.inverse)
        (gradient,) = torch.autograd.grad(output, leaf, torch.ones_like(output))
        gradients.append(gradient)
    assert torch.equal(bits(gradients[0]), bits(gradients[1])), f"{case.id} backward: the vendored copy's bits differ"


def test_each_copy_runs_its_own_launch(rope, vendored, device, monkeypatch):
    case = CASES[-1]
    values, angles = make_values(case, device), make_angles(case, device)
    launched = []
    for module in (rope, vendored):
        monkeypatch.setattr(module.operators, "rotate", _recording(module.operators.rotate, module.__name__, launched))
    for module in (vendored, rope):
        launched.clear()
        getattr(torch.ops, module.OPERATOR_NAMESPACE).rotate(values, angles, True)
        assert launched == [module.__name__], f"{module.__name__}'s operator ran the launch of {launched}"


def _recording(launch, name, launched):
    def recorded(*args, **kwargs):
        launched.append(name)
        return launch(*args, **kwargs)

    return recorded


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--namespace", "not-an-identifier"], "--namespace must be a Python identifier"),
        (["--namespace", "fine"], "exists and is not empty: pass --force"),
    ],
)
def test_the_command_refuses_what_it_cannot_write(tmp_path, capsys, arguments, message):
    (tmp_path / "rope").mkdir()
    (tmp_path / "rope" / "keep.py").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        vendor.main([str(tmp_path / "rope"), *arguments])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert (tmp_path / "rope" / "keep.py").exists(), "nothing was removed"
