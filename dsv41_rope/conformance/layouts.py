"""Layout specs: a generated conformance case as plain data, the tensors it builds, and the code that rebuilds them.

A :class:`LayoutSpec` names everything an input of ``apply_rope_triton`` can vary in: dtype, direction, value regime,
the strided view of the values, the shape and strided view of the angle table, the angles themselves, and the
strided view of the upstream gradient. Each view is a :class:`StridedLayout` (sizes, strides, storage offset,
storage size) over a flat storage of its own, so any view PyTorch can make (slices with a start and a step on every
dimension, permuted storage orders, size-1 dimensions with any stride, expanded dimensions with stride 0) is one.

:func:`build_inputs` makes the tensors deterministically from the spec: values and gradient storages are filled whole
(gaps between the view's elements included) with ``dsv41_rope.conformance.regimes.regime_values``; the angle storage is
NaN except under the view, so a kernel reading an angle it should not gets a NaN and shows it. The failure message of a
generated case prints :meth:`LayoutSpec.reproduction`, Python code that rebuilds the same bits.

The hypothesis strategies that draw specs live in ``dsv41_rope.conformance.strategies``; the check that runs one in
``dsv41_rope.conformance.generated_checks.check_generated_case``.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from dsv41_rope.conformance.cases import DTYPES
from dsv41_rope.conformance.regimes import huge_angles, regime_values, rope_angles

__all__ = ["ANGLE_KINDS", "GeneratedInputs", "LayoutSpec", "StridedLayout", "angle_values", "build_inputs"]

ANGLE_KINDS = ("rope", "huge")
# Position offsets of the batch rows are below this (as in cases.make_angles), so batch rows get different angles.
_POSITION_OFFSETS = 4096


@dataclasses.dataclass(frozen=True)
class StridedLayout:
    """A strided view ``storage.as_strided(shape, strides, offset)`` of a flat storage of ``storage_size`` elements."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    storage_size: int

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.strides):
            raise ValueError(f"shape {self.shape} and strides {self.strides} differ in rank")
        if min(self.strides, default=0) < 0 or self.offset < 0:
            raise ValueError(f"negative stride or offset in {self}")
        extent = self.offset + sum((size - 1) * stride for size, stride in zip(self.shape, self.strides, strict=True))
        if math.prod(self.shape) and extent >= self.storage_size:
            raise ValueError(f"{self} reaches element {extent}, past its storage")

    @classmethod
    def of(cls, view: torch.Tensor) -> StridedLayout:
        """The layout of an existing view (its storage size included), e.g. ``StridedLayout.of(x[:, 5:6])``."""
        storage_size = view.untyped_storage().nbytes() // view.element_size()
        return cls(tuple(view.shape), tuple(view.stride()), view.storage_offset(), storage_size)

    @classmethod
    def contiguous(cls, shape: tuple[int, ...]) -> StridedLayout:
        """A fresh contiguous tensor of ``shape``."""
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        return cls(tuple(shape), tuple(reversed(strides)), 0, max(step, 1))

    @property
    def expanded_dims(self) -> tuple[int, ...]:
        """Dimensions of more than one element with stride 0 (``expand``): they read one storage element."""
        return tuple(
            dim
            for dim, (size, stride) in enumerate(zip(self.shape, self.strides, strict=True))
            if size > 1 and stride == 0
        )

    @property
    def written_shape(self) -> tuple[int, ...]:
        """``shape`` with expanded dimensions of size 1: the view that holds each element once."""
        return tuple(1 if dim in self.expanded_dims else size for dim, size in enumerate(self.shape))

    def overlapping(self) -> bool:
        """Whether two elements of the view share a storage element (an in-place op must refuse such a view)."""
        addresses = torch.arange(self.storage_size).as_strided(self.shape, self.strides, self.offset)
        return addresses.unique().numel() < addresses.numel()

    def view(self, storage: torch.Tensor) -> torch.Tensor:
        """This view of a flat ``storage``."""
        return storage.as_strided(self.shape, self.strides, self.offset)

    def python(self) -> str:
        """The ``as_strided`` arguments, as Python."""
        return f"{self.shape}, {self.strides}, {self.offset}"


@dataclasses.dataclass(frozen=True)
class LayoutSpec:
    """One generated case: every tensor of a forward and backward call, as data (see the module docstring).

    ``angles.shape`` is the angle table's shape: ``[pairs]``, ``[S or 1, pairs]`` (3-D values only) or
    ``[B or 1, S or 1, pairs]``. Angles are RoPE angles of positions ``position_start + position_step * s`` plus an
    offset per batch row drawn from ``seed``, or huge ones (``regimes.huge_angles``).
    """

    dtype_name: str
    inverse: bool
    regime: str
    values: StridedLayout
    angles: StridedLayout
    gradient: StridedLayout
    angle_kind: str = "rope"
    position_start: int = 0
    position_step: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype_name not in DTYPES or self.angle_kind not in ANGLE_KINDS:
            raise ValueError(f"unknown dtype or angle kind in {self}")
        if self.gradient.shape != self.values.shape:
            raise ValueError(f"gradient {self.gradient.shape} and values {self.values.shape} differ in shape")
        leading, batch_sequence = self.angles.shape[:-1], self.values.shape[:2]
        leading_ranks = (2,) if len(self.values.shape) == 4 else (0, 1, 2)  # [B or 1, S or 1, P]; [P], [S or 1, P]
        if len(leading) not in leading_ranks or not 1 <= self.pairs <= self.values.shape[-1] // 2:
            raise ValueError(f"angles {self.angles.shape} do not fit values {self.values.shape}")
        if any(
            size not in (1, wanted) for size, wanted in zip(leading, batch_sequence[2 - len(leading) :], strict=True)
        ):
            raise ValueError(f"angles {self.angles.shape} do not broadcast to values {self.values.shape}")

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    @property
    def pairs(self) -> int:
        return self.angles.shape[-1]

    @property
    def id(self) -> str:
        """A short description for failure messages: dtype, direction, regime and the three layouts."""
        direction = "inverse" if self.inverse else "forward"
        return (
            f"{self.dtype_name}-{len(self.values.shape)}d-{direction}-{self.regime} values "
            f"{_describe(self.values)} angles {_describe(self.angles)} ({self.angle_kind}) "
            f"gradient {_describe(self.gradient)}"
        )

    def reproduction(
        self, device: torch.device, function: str = "dsv41_rope.kernel:apply_rope_triton", *, in_place: bool = False
    ) -> str:
        """Python that rebuilds this case's inputs bit for bit and calls the implementation judged on them.

        Args:
            device: where the inputs live.
            function: the function judged, ``MODULE:FUNCTION`` (a dotted FUNCTION is an attribute path).
            in_place: whether it is an in-place function (``values`` then holds the result); an out-of-place one is
                called with autograd too, for the gradient of the upstream gradient ``grad_output``.

        The code chooses the backend as the suite does (Triton's interpreter without a CUDA device), so it runs
        wherever ``conformance`` and the function's module import, a checkout's root or an installed suite's
        environment. It ends by comparing the forward with what the suite expects, the oracle's reproduction of the
        device's eager path (``diffs``), and printing how many elements differ.
        """
        module, _, attribute = function.partition(":")
        head = attribute.split(".", 1)[0]
        dtype = str(self.dtype).removeprefix("torch.")
        direction = "inverse=True" if self.inverse else "inverse=False"
        angles_written = StridedLayout(
            self.angles.written_shape, self.angles.strides, self.angles.offset, self.angles.storage_size
        )
        if in_place:
            call = [f"output = {attribute}(values, angles, {direction})  # in place: values holds the result"]
        else:
            call = [
                "leaf = values.detach().requires_grad_(True)",
                f"output = {attribute}(leaf, angles, {direction})",
                "(gradient,) = torch.autograd.grad(output, leaf, grad_output)",
            ]
        return "\n".join(
            [
                "import torch",
                "from dsv41_rope.harness import backend",
                "backend.choose()  # Triton's interpreter without a CUDA device, before the implementation imports",
                "from dsv41_rope.conformance.regimes import regime_values",
                "from dsv41_rope.conformance.layouts import angle_values",
                f"from {module} import {head}",
                "",
                f"device = torch.device({str(device)!r})",
                f"values_storage = regime_values(({self.values.storage_size},), torch.{dtype}, {self.regime!r}, "
                f"torch.Generator(device).manual_seed({self.seed}), device)",
                f"values = values_storage.as_strided({self.values.python()})",
                f"angles_storage = torch.full(({self.angles.storage_size},), float('nan'), device=device)",
                f"angles_storage.as_strided({angles_written.python()}).copy_(angle_values("
                f"{self.angles.written_shape}, {self.angle_kind!r}, {self.position_start}, {self.position_step}, "
                f"{self.seed}, device))",
                f"angles = angles_storage.as_strided({self.angles.python()})",
                f"gradient_storage = regime_values(({self.gradient.storage_size},), torch.{dtype}, {self.regime!r}, "
                f"torch.Generator(device).manual_seed({self.seed + 1}), device)",
                f"grad_output = gradient_storage.as_strided({self.gradient.python()})",
                "values_before = values.clone()",
                *call,
                "",
                "# What the suite expects: the oracle's reproduction of this device's eager path, fed the cos/sin the",
                "# implementation uses.",
                "from dsv41_rope.conformance import checks",
                "from dsv41_rope.harness.implementation import load",
                "from dsv41_rope.oracle import eager as oracle_eager, ulp",
                f"frequencies = checks.kernel_frequencies_of(angles, load({function!r})).cpu()",
                f"expected = oracle_eager.apply_rope(values_before.cpu(), frequencies, {direction}, "
                "contraction=checks.contraction_of(device))",
                "diffs = ulp.compare_bits(output.detach().cpu(), expected)",
                'print(f"forward: {diffs.mismatches} of {diffs.elements} elements differ from the oracle (largest '
                '{diffs.max_distance} ulp; first at flat index {diffs.first_mismatch_index})")',
            ]
        )


def _describe(layout: StridedLayout) -> str:
    return f"{list(layout.shape)}:{list(layout.strides)}+{layout.offset}"


@dataclasses.dataclass
class GeneratedInputs:
    """The tensors of a :class:`LayoutSpec`: each view with the flat storage it is a view of."""

    values: torch.Tensor
    angles: torch.Tensor
    grad_output: torch.Tensor
    values_storage: torch.Tensor
    angles_storage: torch.Tensor
    gradient_storage: torch.Tensor


def angle_values(
    shape: tuple[int, ...], kind: str, position_start: int, position_step: int, seed: int, device: torch.device
) -> torch.Tensor:
    """Contiguous float32 angles of ``shape`` (``[..., pairs]``, leading dimensions sequence, or batch and sequence).

    ``"rope"``: RoPE angles of positions ``position_start + position_step * s`` (a step like the compressed angles'
    ``position_ids[:, ::ratio]``), plus an offset per batch row drawn from ``seed`` (sequences of a packed batch).
    ``"huge"``: ``regimes.huge_angles`` drawn from ``seed``.
    """
    pairs = shape[-1]
    batch_sequence = (1,) * (3 - len(shape)) + tuple(shape[:-1])
    batch, sequence = batch_sequence[-2], batch_sequence[-1]
    generator = torch.Generator(device=device).manual_seed(seed + 7)
    if kind == "huge":
        return huge_angles((batch, sequence, pairs), generator, device).reshape(shape)
    if kind != "rope":
        raise ValueError(f"unknown angle kind {kind!r}")
    positions = position_start + position_step * torch.arange(sequence, device=device, dtype=torch.float32)
    offsets = torch.randint(0, _POSITION_OFFSETS, (batch, 1, 1), generator=generator, device=device).float()
    return rope_angles(positions[None, :, None] + offsets, pairs).reshape(shape)


def build_inputs(spec: LayoutSpec, device: torch.device) -> GeneratedInputs:
    """The spec's tensors on ``device``, exactly as :meth:`LayoutSpec.reproduction` rebuilds them."""
    values_storage = regime_values(
        (spec.values.storage_size,), spec.dtype, spec.regime, _generator(device, spec.seed), device
    )
    angles_storage = torch.full((spec.angles.storage_size,), math.nan, device=device)
    written = spec.angles.written_shape
    angles_storage.as_strided(written, spec.angles.strides, spec.angles.offset).copy_(
        angle_values(written, spec.angle_kind, spec.position_start, spec.position_step, spec.seed, device)
    )
    gradient_storage = regime_values(
        (spec.gradient.storage_size,), spec.dtype, spec.regime, _generator(device, spec.seed + 1), device
    )
    return GeneratedInputs(
        values=spec.values.view(values_storage),
        angles=spec.angles.view(angles_storage),
        grad_output=spec.gradient.view(gradient_storage),
        values_storage=values_storage,
        angles_storage=angles_storage,
        gradient_storage=gradient_storage,
    )


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
