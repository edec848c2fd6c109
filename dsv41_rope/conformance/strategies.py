"""Hypothesis strategies that draw generated conformance cases (``dsv41_rope.conformance.layouts.LayoutSpec``).

Each strategy is a small named ``@composite`` function for one part of a case, shared by every generated test:
values shapes (rank 3 or 4, sizes from 1, odd, small and large channel counts, pairs from 1 to all channels), strided
views (any storage order, slices with a start and a step on every dimension, storage offsets, size-1 dimensions with
any stride, expanded dimensions), angle tables (``[P]``, ``[S or 1, P]``, ``[B or 1, S or 1, P]``, in any of those
views) and upstream gradients (any view, or one element expanded to the whole shape, as ``output.sum()`` hands it
back). Every choice shrinks towards the plain case (contiguous, no slicing, shared angles, normal values), so a
failure shrinks to the one layout feature that causes it.

Tensors stay small for Triton's interpreter: at most ``MAX_VIEW_ELEMENTS`` values per view and
``MAX_STORAGE_ELEMENTS`` per storage.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from dsv41_rope.conformance.cases import REGIMES
from dsv41_rope.conformance.layouts import ANGLE_KINDS, LayoutSpec, StridedLayout

__all__ = [
    "LARGER_CHANNELS",
    "MAX_PADDING",
    "MAX_STEP",
    "MAX_STORAGE_ELEMENTS",
    "MAX_STORAGE_OFFSET",
    "MAX_VIEW_ELEMENTS",
    "VALUE_REGIMES",
    "angle_tables",
    "channel_counts",
    "gradient_layouts",
    "layout_specs",
    "storage_orders",
    "strided_views",
    "value_shapes",
]

MAX_VIEW_ELEMENTS = 1536
MAX_STORAGE_ELEMENTS = 16384
# The value regimes of the fixed matrix; huge angles are an angle kind of their own here.
VALUE_REGIMES = tuple(regime for regime in REGIMES if regime != "huge-angles")
# Channel counts beyond the small ones: the family's, odd ones, and rows that span several of the kernel's chunks.
LARGER_CHANNELS = (37, 64, 96, 128, 130, 257, 300)
MAX_STEP = 3  # slicing step on a dimension (x[:, ::3])
MAX_PADDING = 4  # elements of the buffer beyond the slice on a dimension
MAX_STORAGE_OFFSET = 3


def _rarely() -> st.SearchStrategy[bool]:
    """True about one time in four; shrinks to False."""
    return st.sampled_from((False, False, False, True))


@st.composite
def channel_counts(draw: st.DrawFn) -> int:
    """Channels per row: 2 to 24 (odd ones included), or a larger or odd count from ``LARGER_CHANNELS``."""
    return draw(st.one_of(st.integers(2, 24), st.sampled_from(LARGER_CHANNELS)))


@st.composite
def value_shapes(draw: st.DrawFn, rank: int) -> tuple[int, ...]:
    """``[B, S, C]`` or ``[B, S, H, C]`` with batch 1-3, sequence 1-8, heads 1-4, within ``MAX_VIEW_ELEMENTS``."""
    channels = draw(channel_counts())
    rows = max(1, MAX_VIEW_ELEMENTS // channels)
    batch = draw(st.integers(1, min(3, rows)))
    heads = draw(st.integers(1, max(1, min(4, rows // batch)))) if rank == 4 else 1
    sequence = draw(st.integers(1, max(1, min(8, rows // (batch * heads)))))
    return (batch, sequence, heads, channels) if rank == 4 else (batch, sequence, channels)


@st.composite
def storage_orders(draw: st.DrawFn, rank: int) -> tuple[int, ...]:
    """Dimensions from outermost to innermost in storage: the view's own order, a permutation of the dimensions
    before the channels (storage ``[B, H, S, C]`` viewed as ``[B, S, H, C]`` is ``(0, 2, 1, 3)``), or, rarely, any
    permutation (channels strided, which the kernel copies before it reads them)."""
    identity = tuple(range(rank))
    leading = st.permutations(identity[:-1]).map(lambda order: (*order, rank - 1))
    if draw(_rarely()):
        return tuple(draw(st.permutations(identity)))
    return tuple(draw(st.one_of(st.just(identity), leading)))


@st.composite
def strided_views(draw: st.DrawFn, shape: tuple[int, ...], expandable: tuple[int, ...] = ()) -> StridedLayout:
    """A view of ``shape`` cut from a larger buffer in any storage order.

    Each dimension is a slice ``start : start + (size - 1) * step + 1 : step`` of a buffer dimension with up to
    ``MAX_PADDING`` more elements; the buffer sits at a storage offset; a dimension in ``expandable`` may instead be
    expanded (stride 0), and a size-1 dimension may carry any stride (which addresses nothing).
    """
    rank = len(shape)
    order = draw(storage_orders(rank))
    expanded = [dim in expandable and shape[dim] > 1 and draw(_rarely()) for dim in range(rank)]
    kept = [1 if expanded[dim] else shape[dim] for dim in range(rank)]
    lengths, starts, steps = [0] * rank, [0] * rank, [1] * rank
    budget = MAX_STORAGE_ELEMENTS
    for index, dim in enumerate(order):
        room = budget // math.prod(kept[d] for d in order[index + 1 :])
        size = kept[dim]
        # A step on the last dimension (channels, pairs) is rare: the kernel copies such values before reading them.
        if size > 1 and draw(_rarely() if dim == rank - 1 else st.booleans()):
            steps[dim] = draw(st.integers(1, max(1, min(MAX_STEP, (room - 1) // (size - 1)))))
        span = (size - 1) * steps[dim] + 1
        padding = draw(st.integers(0, max(0, min(MAX_PADDING, room - span))))
        starts[dim] = draw(st.integers(0, padding))
        lengths[dim] = span + padding
        budget //= lengths[dim]
    buffer_strides = [0] * rank
    stride = 1
    for dim in reversed(order):
        buffer_strides[dim] = stride
        stride *= lengths[dim]
    storage_offset = draw(st.integers(0, MAX_STORAGE_OFFSET))
    strides = []
    for dim in range(rank):
        stride = 0 if expanded[dim] else buffer_strides[dim] * steps[dim]
        if shape[dim] == 1:
            canonical = math.prod(shape[dim + 1 :])
            stride = draw(st.sampled_from((stride, 0, 1, canonical)))
        strides.append(stride)
    offset = storage_offset + sum(
        start * buffer_stride for start, buffer_stride in zip(starts, buffer_strides, strict=True)
    )
    return StridedLayout(tuple(shape), tuple(strides), offset, storage_offset + math.prod(lengths))


@st.composite
def angle_tables(draw: st.DrawFn, values_shape: tuple[int, ...], pairs: int) -> StridedLayout:
    """The angle table's shape and view: ``[B or 1, S or 1, P]``, and for 3-D values also ``[P]`` and
    ``[S or 1, P]``; contiguous, expanded over batch or sequence, sliced from a longer table (with a step along the
    sequence, as angles of ``position_ids[:, ::ratio]`` are), strided along the pairs, or stored in another order."""
    batch, sequence = values_shape[0], values_shape[1]
    forms = ("3d", "1d", "2d") if len(values_shape) == 3 else ("3d",)
    form = draw(st.sampled_from(forms))
    if form == "1d":
        shape: tuple[int, ...] = (pairs,)
    elif form == "2d":
        shape = (draw(st.sampled_from((sequence, 1))), pairs)
    else:
        shape = (draw(st.sampled_from((1, batch))), draw(st.sampled_from((sequence, 1))), pairs)
    return draw(strided_views(shape, expandable=tuple(range(len(shape) - 1))))


@st.composite
def gradient_layouts(draw: st.DrawFn, shape: tuple[int, ...]) -> StridedLayout:
    """An upstream gradient: any view of the values' shape (expanded on any dimension), or a single element
    expanded to the whole shape, which is what ``output.sum()`` sends back."""
    if draw(_rarely()):
        return StridedLayout(tuple(shape), (0,) * len(shape), 0, 1)
    return draw(strided_views(shape, expandable=tuple(range(len(shape)))))


@st.composite
def layout_specs(draw: st.DrawFn, dtype_name: str, rank: int, inverse: bool) -> LayoutSpec:
    """A whole generated case of one dtype, rank and direction (a shard of the generated tests fixes those)."""
    shape = draw(value_shapes(rank))
    pairs = draw(st.integers(1, shape[-1] // 2))
    values = draw(strided_views(shape, expandable=(0, 2) if rank == 4 else (0,)))
    return LayoutSpec(
        dtype_name=dtype_name,
        inverse=inverse,
        regime=draw(st.sampled_from(VALUE_REGIMES)),
        values=values,
        angles=draw(angle_tables(shape, pairs)),
        gradient=draw(gradient_layouts(shape)),
        angle_kind=draw(st.sampled_from(ANGLE_KINDS)),
        position_start=draw(st.integers(0, 8192)),
        position_step=draw(st.integers(1, 4)),
        seed=draw(st.integers(0, 2**31 - 1)),
    )
