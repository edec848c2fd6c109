"""The conformance case matrix: dtype x shape x layout x direction x value regime, and the inputs of each case.

A case's id reads like its specification (``bf16-4d-transposed-inverse-output-inverse-special``) and seeds its
inputs, so a case sees the same values under any xdist split. Shapes are the DeepSeek V4.1 Flash family (4096 local
tokens) at full size on a GPU and with short sequences and fewer heads under the CPU interpreter, plus edge shapes
that are the same everywhere. A GPU runs the whole matrix; the interpreter a cover of it (:func:`runs_here`).

Beside the matrix, :func:`input_class_cases` crosses every other input class the API accepts (angles in float64,
angles that need a gradient, every broadcast form of the angles) and the value classes where rounding and cos/sin
meet their edges (exact ties of the final rounding, subnormal angles) with every dtype and both directions, on small
shapes, the same on every backend (docs/conformance.md, "Coverage").
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import zlib

import torch

from dsv41_rope.conformance.regimes import TIE_ANGLE, huge_angles, regime_values, rope_angles, subnormal_angles
from dsv41_rope.harness import backend

__all__ = [
    "DTYPES",
    "FINITE_REGIMES",
    "ANGLE_CLASSES",
    "CASE_SIZE_VARIABLE",
    "EDGE_REGIMES",
    "INTERPRETER_FULL_SHAPE",
    "REGIMES",
    "SHAPES",
    "Case",
    "Shape",
    "all_cases",
    "case_params",
    "in_interpreter_cover",
    "input_class_cases",
    "input_class_params",
    "make_angles",
    "make_values",
    "runs_here",
]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# "small": every case at the interpreter's size on a GPU too (the conformance matrix's runs of other projects' kernels).
CASE_SIZE_VARIABLE = "DSV41_ROPE_CASE_SIZE"


@dataclasses.dataclass(frozen=True)
class Shape:
    """A values shape ``[B, S, C]`` or ``[B, S, H, C]`` on the GPU and under the interpreter, with its pairs."""

    gpu: tuple[int, ...]
    cpu: tuple[int, ...]
    pairs: int
    layouts: tuple[str, ...] = ("contiguous",)


SHAPES = {
    # DeepSeek V4.1 Flash, 4096 local tokens, 32 rotary pairs.
    "query": Shape((1, 4096, 64, 512), (1, 12, 4, 512), 32, ("contiguous", "padded-rows", "channel-strided")),
    "inverse-output": Shape((1, 4096, 64, 512), (1, 12, 4, 512), 32, ("transposed",)),
    "window-kv": Shape((1, 4096, 512), (1, 24, 512), 32),
    "compressed-kv": Shape((1, 2048, 512), (1, 12, 512), 32),
    "index-query": Shape((1, 4096, 32, 128), (1, 12, 8, 128), 32),
    "index-keys": Shape((1, 1024, 128), (1, 6, 128), 32),
    # Edge shapes, the same on every backend.
    "sequence1": Shape((2, 1, 3, 64), (2, 1, 3, 64), 32),
    "batch3": Shape((3, 7, 2, 96), (3, 7, 2, 96), 16, ("contiguous", "transposed")),
    "odd-channels": Shape((2, 5, 3, 37), (2, 5, 3, 37), 5, ("contiguous", "padded-rows")),
    "pairs1": Shape((1, 6, 2, 64), (1, 6, 2, 64), 1),
    "all-rotary": Shape((1, 6, 2, 64), (1, 6, 2, 64), 32),
    "channels2": Shape((2, 5, 2), (2, 5, 2), 1),
}
REGIMES = ("normal", "large", "tiny", "special", "huge-angles")
FINITE_REGIMES = ("normal", "large", "tiny", "huge-angles")
# Value classes run on small shapes only (input_class_cases): full-size random values already hold both.
EDGE_REGIMES = ("ties", "subnormal-angles")
# The angles a case hands the implementation: the matrix's RoPE angles (float32 [1, S, P], or [B, S, P] with
# per_batch_angles), and every other class the API accepts.
ANGLE_CLASSES = {
    "rope": "float32 [1 or B, S, P]",
    "float64": "float64 [1 or B, S, P]",
    "require-grad": "float32 [1 or B, S, P] that need a gradient",
    "one-position": "float32 [1 or B, 1, P], broadcast over the sequence",
    "sequence-by-pairs": "float32 [S, P], for 3-D values",
    "pairs-only": "float32 [P], for 3-D values",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One conformance case; ``id`` names every axis."""

    dtype_name: str
    shape_name: str
    layout: str
    inverse: bool
    regime: str
    per_batch_angles: bool = False
    small: bool = False  # the interpreter's size on every device: for checks of many kernel builds, not of size
    # A key of ANGLE_CLASSES.
    angles: str = "rope"

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    @property
    def shape(self) -> Shape:
        return SHAPES[self.shape_name]

    @property
    def id(self) -> str:
        rank = len(self.shape.cpu)
        direction = "inverse" if self.inverse else "forward"
        angles = "-per-batch-angles" if self.per_batch_angles else ""
        size = "-small" if self.small else ""
        angle_class = "" if self.angles == "rope" else f"-angles-{self.angles}"
        return (
            f"{self.dtype_name}-{rank}d-{self.layout}-{self.shape_name}{size}-{direction}-{self.regime}{angles}"
            f"{angle_class}"
        )

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    def values_shape(self, device: torch.device) -> tuple[int, ...]:
        """The full-size shape on a GPU, the interpreter's on a CPU, and everywhere for a small case and where
        :data:`CASE_SIZE_VARIABLE` says ``small``."""
        small = self.small or os.environ.get(CASE_SIZE_VARIABLE, "full") == "small"
        return self.shape.gpu if device.type == "cuda" and not small else self.shape.cpu


def all_cases(regimes: tuple[str, ...] = REGIMES) -> list[Case]:
    """Every dtype x shape x layout x direction x regime, plus per-batch angles where the batch is above one."""
    cases = []
    for dtype_name, (shape_name, shape), inverse, regime in itertools.product(
        DTYPES, SHAPES.items(), (False, True), regimes
    ):
        for layout in shape.layouts:
            cases.append(Case(dtype_name, shape_name, layout, inverse, regime))
            if shape.cpu[0] > 1:
                cases.append(Case(dtype_name, shape_name, layout, inverse, regime, per_batch_angles=True))
    return cases


# Per regime, how far the interpreter's cover turns the dtype (of DTYPES) and the direction from those of a variant's
# index: normal and special turn alike, so one variant shows a defect with and without special values in one dtype.
_COVER_TURNS = {"normal": (1, 0), "large": (2, 1), "tiny": (0, 0), "special": (1, 0), "huge-angles": (2, 1)}
# The shape whose whole dtype x direction x regime product the interpreter runs too: the smallest one, which the smoke
# selection of `dsv41-rope certify --smoke` (dsv41_rope/cli.py) takes in every dtype.
INTERPRETER_FULL_SHAPE = "pairs1"


def in_interpreter_cover(case: Case) -> bool:
    """Whether the CPU interpreter runs ``case`` of the full matrix: one dtype and direction for each shape, layout,
    angle layout and regime, turned so that every regime meets all six dtype x direction pairs (over the shapes and
    layouts) and every shape and layout all three dtypes and both directions (over the regimes); per-batch angles take
    the combination of their shape and layout; ``INTERPRETER_FULL_SHAPE`` runs in every combination. The GPU runs the
    whole product (docs/ci.md, "What the CPU run leaves to the GPU")."""
    if case.shape_name == INTERPRETER_FULL_SHAPE:
        return not case.small
    layouts = [(name, layout) for name, shape in SHAPES.items() for layout in shape.layouts]
    index = layouts.index((case.shape_name, case.layout))
    dtype_turn, direction_turn = _COVER_TURNS[case.regime]
    dtype_name = list(DTYPES)[(index + dtype_turn) % len(DTYPES)]
    return not case.small and case.dtype_name == dtype_name and case.inverse == bool((index + direction_turn) % 2)


def runs_here(cases: list[Case]) -> list[Case]:
    """The cases of the full matrix this backend runs: all of them on a GPU, the cover under the interpreter, whose
    every kernel program is Python."""
    if backend.name() == "cuda":
        return cases
    return [case for case in cases if in_interpreter_cover(case)]


def input_class_cases() -> list[Case]:
    """Every dtype and direction for each input class outside the matrix (the angle classes of
    :data:`ANGLE_CLASSES` but ``rope``, in 4-D and 3-D values as each applies, broadcast over the batch or per batch),
    each of :data:`EDGE_REGIMES` (in a transposed and an odd-channel padded layout), and the padded-rows and
    channel-strided layouts, on small shapes: every backend runs all of them."""
    cases = []
    for dtype_name, inverse in itertools.product(DTYPES, (False, True)):
        for angles in ("float64", "require-grad", "one-position"):
            cases.append(Case(dtype_name, "batch3", "contiguous", inverse, "normal", angles=angles))
        cases.append(Case(dtype_name, "batch3", "transposed", inverse, "normal", True, angles="one-position"))
        for angles in ("sequence-by-pairs", "pairs-only"):
            cases.append(Case(dtype_name, "window-kv", "contiguous", inverse, "normal", small=True, angles=angles))
        for regime in EDGE_REGIMES:
            cases.append(Case(dtype_name, "batch3", "transposed", inverse, regime, per_batch_angles=True))
            cases.append(Case(dtype_name, "odd-channels", "padded-rows", inverse, regime))
        # The layouts the matrix gives one shape each: the CPU's cover of it meets only some dtype x direction there.
        for layout in ("padded-rows", "channel-strided"):
            cases.append(Case(dtype_name, "batch3", layout, inverse, "normal"))
    return cases


def input_class_params(*, finite: bool = False, float32_angles: bool = False) -> list:
    """``pytest.param`` objects of :func:`input_class_cases` (those of finite values, or of float32 angles, only)."""
    import pytest

    return [
        pytest.param(case, id=case.id)
        for case in input_class_cases()
        if (case.regime != "special" or not finite) and (case.angles != "float64" or not float32_angles)
    ]


def case_params(regimes: tuple[str, ...] = REGIMES) -> list:
    """``pytest.param`` objects with readable ids, for ``@pytest.mark.parametrize("case", ...)``: the cases of
    :func:`all_cases` this backend runs (:func:`runs_here`)."""
    import pytest

    return [pytest.param(case, id=case.id) for case in runs_here(all_cases(regimes))]


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _layout(storage: torch.Tensor, layout: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A view of ``shape`` over fresh storage in ``layout`` (the storage is filled afterwards through the view)."""
    if layout == "contiguous":
        return storage
    if layout == "transposed":  # the attention output: [B, H, S, D] -> [B, S, H, D]
        batch, sequence, heads, channels = shape
        return storage.new_empty((batch, heads, sequence, channels)).transpose(1, 2)
    if layout == "padded-rows":  # rows of a wider buffer: channels contiguous, rows strided
        return storage.new_empty((*shape[:-1], shape[-1] + 8))[..., : shape[-1]]
    if layout == "channel-strided":  # every other channel of a buffer twice as wide
        return storage.new_empty((*shape[:-1], 2 * shape[-1]))[..., ::2]
    raise ValueError(f"unknown layout {layout!r}")


def make_values(case: Case, device: torch.device, *, salt: int = 0) -> torch.Tensor:
    """The case's values (or, with a salt, another tensor of the same regime, e.g. an upstream gradient)."""
    shape = case.values_shape(device)
    generator = _generator(device, case.seed + salt)
    contiguous = regime_values(shape, case.dtype, case.regime, generator, device)
    view = _layout(contiguous, case.layout, shape)
    if view is not contiguous:
        view.copy_(contiguous)
    return view


def make_angles(case: Case, device: torch.device) -> torch.Tensor:
    """The case's angles, of its class (:data:`ANGLE_CLASSES`): RoPE angles of the positions (``[1 or B, S, P]``),
    huge and near-multiple-of-pi/2 ones, :data:`TIE_ANGLE`, or subnormal ones, by regime; then as the class says
    (float64, needing a gradient, or broadcast over the sequence, the batch or both)."""
    shape = case.values_shape(device)
    batch = shape[0] if case.per_batch_angles else 1
    sequence, pairs = shape[1], case.shape.pairs
    generator = _generator(device, case.seed + 7)
    if case.regime == "huge-angles":
        angles = huge_angles((batch, sequence, pairs), generator, device)
    elif case.regime == "ties":
        angles = torch.full((batch, sequence, pairs), TIE_ANGLE, device=device)
    elif case.regime == "subnormal-angles":
        angles = subnormal_angles((batch, sequence, pairs), generator, device)
    else:
        positions = torch.arange(sequence, device=device, dtype=torch.float32)
        offsets = torch.randint(0, 4096, (batch, 1, 1), generator=generator, device=device).float() if batch > 1 else 0
        angles = rope_angles(positions[None, :, None] + offsets, pairs)
    return _of_class(angles, case.angles)


def _of_class(angles: torch.Tensor, angle_class: str) -> torch.Tensor:
    """``[1 or B, S, P]`` float32 angles as the class hands them over (the last position where one is kept)."""
    if angle_class == "rope":
        return angles
    if angle_class == "float64":
        return angles.double()
    if angle_class == "require-grad":
        return angles.requires_grad_(True)
    if angle_class == "one-position":
        return angles[:, -1:].contiguous()
    if angle_class == "sequence-by-pairs":
        return angles[0].contiguous()
    if angle_class == "pairs-only":
        return angles[0, -1].contiguous()
    raise ValueError(f"unknown angle class {angle_class!r}: expected one of {', '.join(ANGLE_CLASSES)}")
