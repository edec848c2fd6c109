"""The suite's smoke selection: a first try in under a minute on a CPU (``dsv41-rope certify --smoke``, ``dsv41-rope
matrix --smoke``): forward and inverse bits, copied channels, gradient, error bound, bad input, one shard of
generated layouts and float64 angles, on small cases of every dtype (README.md, "Certify your own kernel")."""

from __future__ import annotations

__all__ = ["SMOKE_SELECTION"]

SMOKE_SELECTION = (
    "contiguous-pairs1-forward-normal or contiguous-pairs1-forward-special or contiguous-pairs1-inverse-normal"
    " or test_bad_input or ci-fp32-4d-forward or batch3-inverse-normal-angles-float64"
)
