"""How the suite's own comparisons fail: :class:`ConformanceFailure`, and the one line pytest shows for it.

The checks of ``dsv41_rope.conformance.checks`` (bits against a reference, the norm-wise error bound, inputs left
unwritten) raise :class:`ConformanceFailure`, an ``AssertionError`` whose message is one line: the case, the
comparison, how many elements differ and the first of them with its input bits, what it got and what was expected. A
traceback through the checks adds nothing to that line, and formatting one (the reprs of the tensors in every frame)
costs more than the comparison itself, so the suite's pytest plugin reports such a failure by :func:`short_failure`
alone; the ulp-drift report keeps the details. Any other exception (a crash, a ``TypeError`` from the implementation,
a plain ``assert``) keeps pytest's traceback.

Nothing here imports torch: the plugin that reads these failures loads in every pytest session of an environment where
the suite is installed.
"""

from __future__ import annotations

import dataclasses

__all__ = ["ConformanceFailure", "ShortFailure", "short_failure"]


class ConformanceFailure(AssertionError):
    """A comparison of the suite failed: an implementation's bits, error or inputs are not what the contract says.

    Attributes:
        what: the comparison and the kind of difference that failed it, e.g. ``fused-vs-oracle: bit mismatches``; the
            grouped summary of failed tests groups by it.
        held_to: the reference the comparison held the implementation to (``dsv41_rope.conformance.references``),
            "" when none (a copy, an input left unwritten).
    """

    def __init__(self, message: str, *, what: str, held_to: str = "") -> None:
        super().__init__(message)
        self.what = what
        self.held_to = held_to


@dataclasses.dataclass(frozen=True)
class ShortFailure:
    """What pytest shows of a failure of the suite's own comparisons, in place of a traceback.

    Attributes:
        text: the failure's one line, then its notes (hypothesis's falsifying example, the code that rebuilds a
            generated case), one line each.
        what: the comparison and the kind of difference (:attr:`ConformanceFailure.what`); for several failures (a
            group that hypothesis raised), each distinct one, joined by ``"; "``.
    """

    text: str
    what: str


def short_failure(error: BaseException) -> ShortFailure | None:
    """The short form of a failure of the suite's own comparisons: a :class:`ConformanceFailure`, or an exception
    group made only of them (hypothesis raises one when it finds several distinct failures); None for anything else,
    whose traceback pytest shows as usual."""
    leaves = _leaves(error)
    if not leaves or not all(isinstance(leaf, ConformanceFailure) for leaf in leaves):
        return None
    lines: list[str] = []
    for leaf in leaves:
        lines.append(str(leaf))
        for note in getattr(leaf, "__notes__", ()):
            lines += [line for line in str(note).splitlines() if line.strip()]
    whats = dict.fromkeys(leaf.what for leaf in leaves if isinstance(leaf, ConformanceFailure))
    return ShortFailure("\n".join(lines), "; ".join(whats))


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
