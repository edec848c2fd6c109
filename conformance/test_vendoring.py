"""Vendoring: the kernel file is imported under other module names (Automodel ships it as
``nemo_automodel.components.models.deepseek_v41.rope_triton``; users copy it), and two copies in one process must not
clash. Each registers its ``torch.library`` operators under a namespace derived from its module name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

from conformance.cases import Case, make_angles, make_values
from oracle.rounding import bits

COPY = "vendored_rope_copy"


def test_two_copies_register_and_run_their_own_operators(rope, device, tmp_path, monkeypatch):
    (tmp_path / f"{COPY}.py").write_bytes(Path(rope.__file__).read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, COPY, raising=False)
    copy = importlib.import_module(COPY)  # raises if its operators took the project kernel's names
    monkeypatch.delitem(sys.modules, COPY)
    assert copy._OPERATOR_NAMESPACE != rope._OPERATOR_NAMESPACE
    case = Case("bf16", "batch3", "transposed", True, "special")
    values, angles = make_values(case, device), make_angles(case, device)
    launched = []

    def recording(module):
        launch = module._launch

        def recorded(*args, **kwargs):
            launched.append(module.__name__)
            return launch(*args, **kwargs)

        return recorded

    for module in (rope, copy):
        monkeypatch.setattr(module, "_launch", recording(module))
    outputs = {}
    for module in (copy, rope):
        launched.clear()
        outputs[module] = getattr(torch.ops, module._OPERATOR_NAMESPACE).rotate(values, angles, True)
        assert launched == [module.__name__], f"{module.__name__}'s operator ran the launch of {launched}"
    assert torch.equal(bits(outputs[copy]), bits(outputs[rope])), "the copies disagree"
    assert torch.equal(bits(copy.apply_rope_triton(values, angles, True)), bits(outputs[rope]))
