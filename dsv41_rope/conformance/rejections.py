"""Inputs eager rejects: what the suite asks of an implementation other than the project's kernel, decided by asking
the eager path itself, on this machine, at run time (never from a list of what some torch once rejected).

The project's kernel has a contract of its own (``test_bad_input.py``: the documented error types and words); another
implementation must raise some exception wherever the eager reference raises on the same inputs, may answer as it
likes wherever eager computes something (by accident of slicing, or because this torch accepts what another
rejected), and must never write its inputs when it refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dsv41_rope.conformance.checks import eager_reference
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import Judged, judged
from dsv41_rope.oracle.rounding import bits

__all__ = ["eager_in_place_reference", "raised_by", "refuses_what_eager_refuses", "rejects_what_eager_rejects"]


def raised_by(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Exception | None:
    """What ``function(*args, **kwargs)`` raised, or None."""
    try:
        function(*args, **kwargs)
    except Exception as error:  # any exception: only the project kernel's types and words are specified
        return error
    return None


def eager_in_place_reference(values: Any, angles: Any, inverse: Any = False) -> Any:
    """The eager path in place: the rotary channels of ``values`` overwritten with the eager reference's rotation of
    them (``copy_``, which refuses what PyTorch's in-place operations refuse: a leaf that requires grad, a view whose
    elements share memory). Returns ``values``."""
    rotary = values[..., -2 * angles.shape[-1] :]
    rotary.copy_(eager_reference(rotary, angles, inverse))
    return values


def rejects_what_eager_rejects(implementation: Judged, values: Any, angles: Any, inverse: Any) -> None:
    """Another implementation's answer to a bad input: some exception where the eager reference, asked now on these
    inputs, raises one (the message says what eager raised); any answer where eager computes something. A
    ``TypeError`` that says the function cannot be called as ``fn(values, angles, inverse=...)`` at all rejects
    nothing (:meth:`Implementation.calling_convention_error`)."""
    implementation = judged(implementation)
    unusable = implementation.calling_convention_error(values, angles, inverse)
    if unusable is not None:
        raise ConformanceFailure(
            f"{implementation.name} cannot be called as the suite calls it: {unusable}",
            what="bad input: cannot be called as fn(values, angles, inverse=...)",
        )
    accepted = raised_by(implementation.forward, values, angles, inverse) is None
    eager = raised_by(eager_reference, values, angles, inverse)
    if accepted and eager is not None:
        raise ConformanceFailure(
            f"{implementation.name} accepted an input eager rejects (eager raised {type(eager).__name__}: {eager})",
            what="bad input: accepted an input eager rejects",
        )


def refuses_what_eager_refuses(
    implementation: Judged, make_inputs: Callable[[], tuple[Any, Any]], inverse: bool = False
) -> None:
    """Another implementation's in-place function on inputs an in-place rotation may have to refuse: it must raise
    where the eager path in place (:func:`eager_in_place_reference`), asked now on inputs made the same way, raises,
    and a refusal must leave ``values`` unwritten. ``make_inputs`` makes fresh ``(values, angles)`` for each of the
    two calls, so that what they share (memory, ``requires_grad``, expanded strides) is what the inputs have."""
    implementation = judged(implementation)
    eager = raised_by(eager_in_place_reference, *make_inputs(), inverse)
    values, angles = make_inputs()
    before = bits(values)
    raised = raised_by(implementation.in_place, values, angles, inverse=inverse)
    if raised is None and eager is not None:
        raise ConformanceFailure(
            f"{implementation.in_place_name} rotated in place an input eager in place refuses (eager raised "
            f"{type(eager).__name__}: {eager})",
            what="in-place: accepted an input eager refuses",
        )
    if raised is not None and not torch.equal(bits(values), before):
        raise ConformanceFailure(
            f"{implementation.in_place_name} refused an input ({type(raised).__name__}: {raised}) yet wrote values",
            what="in-place: wrote values it refused",
        )
