"""Standalone reproductions of a peer's deviations: for each column a peer fails, its first failing fixed case, cut to
the row of the first differing element, as a Python file of at most 30 lines that imports only torch and the peer
and prints how many elements differ from eager on the device it runs on, and the first ones' got, expected and the
float64 truth: what the peer's maintainers need in a bug report.

The peer's call is the adapter's, inlined (``dsv41_rope.peers.repro_call``); the expected bits are the eager formula
of Automodel's ``_apply_rope``, inlined. The matrix runs every reproduction it writes and records whether it still
shows the deviation standalone (a deviation that needs more than one row, or a generated layout, may not).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Repro", "failing_row", "repro_file_name", "reproduction", "run_reproduction", "write_reproductions"]

_COORDINATES = re.compile(r"first at \(([\d, ]+)\)")
_DIFFER = re.compile(r"^(\d+) of (\d+) elements differ", re.MULTILINE)
# How each fixed layout is rebuilt around a contiguous row (the case's own layouts: cases._layout).
_LAYOUT_LINES = {
    "contiguous": "",
    "transposed": "values = values.transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, S, C] storage\n",
    "padded-rows": "values = torch.nn.functional.pad(values, (0, 8))[..., : values.shape[-1]]  # rows of a wider one\n",
    "channel-strided": "values = values.repeat_interleave(2, -1)[..., ::2]  # every other channel of a wider buffer\n",
}
_INTEGER = {"bfloat16": "int16", "float16": "int16", "float32": "int32", "float64": "int64"}


@dataclasses.dataclass(frozen=True)
class Repro:
    """One reproduction the matrix wrote: the column, the failing test, the file, whether it reproduced, and where
    it ran (the matrix's own device, or where a published run's reproductions were run)."""

    column: str
    test: str
    path: str
    reproduced: bool
    output: str
    ran_on: str = "the matrix's device"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def repro_file_name(column: str) -> str:
    """The file a column's reproduction is written to: ``forward-bf16.py``, ``nan-payloads.py``, ..."""
    return f"{re.sub(r'[^A-Za-z0-9]+', '-', column).strip('-').lower()}.py"


def failing_row(message: str) -> tuple[int, ...] | None:
    """The coordinates of the first differing element a failure line names (``first at (0, 3, 1, 62)``)."""
    found = _COORDINATES.search(message)
    return tuple(int(part) for part in found[1].split(",")) if found else None


def _tensor_line(name: str, tensor: Any) -> str:
    """``name = <tensor>`` rebuilt bit for bit from its bytes (one line, on ``device``)."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    data = tensor.detach().contiguous().cpu().view(getattr(__import__("torch"), _INTEGER[dtype])).numpy().tobytes()
    shape = tuple(tensor.shape)
    return (
        f'{name} = torch.frombuffer(bytearray.fromhex("{data.hex()}"), dtype=torch.{_INTEGER[dtype]})'
        f".view(torch.{dtype}).reshape({shape}).to(device)\n"
    )


def reproduction(title: str, call: str, values: Any, angles: Any, inverse: bool, layout: str, backward: bool) -> str:
    """The source of one reproduction: the inputs, the peer's call (``call`` sets ``got``), eager's bits and the
    float64 truth (the exact inputs rotated by float64 cos/sin of the float32 angles), and a print of the differing
    elements (the gradient's, for ``backward``, for an upstream gradient of ones)."""
    width = 2 * angles.shape[-1]
    unsqueeze = ".unsqueeze(2)" if values.dim() == 4 else ""
    grad = ".requires_grad_(True)" if angles.requires_grad else ""
    # Eager's bits and the truth first: a peer may rotate its input in place (as Liger's does a contiguous block).
    rotated, conj = ("upstream", ".conj()") if backward else ("values.detach()", "")
    bits = f"torch.{_INTEGER[str(values.dtype).removeprefix('torch.')]}"
    mask = hex((1 << (8 * values.element_size())) - 1)  # the bit pattern, not the signed integer's value
    lines = [
        f'"""{title}"""\n',
        "import torch\n",
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n',
        _tensor_line("values", values),
        _LAYOUT_LINES[layout],
        _tensor_line("angles", angles).replace(".to(device)\n", f".to(device){grad}\n"),
        f"inverse, upstream = {inverse}, torch.ones_like(values)\n",
        f"factors, exact = (torch.polar(torch.ones_like(a), a){unsqueeze}.detach() for a in (angles, angles.double()))"
        "\n",
        "factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)\n",
        f"pairs = torch.view_as_complex({rotated}[..., -{width}:].float().unflatten(-1, (-1, 2)).clone())\n",
        f"expected, truth = {rotated}.clone(), {rotated}.double()\n",
        f"expected[..., -{width}:] = torch.view_as_real(pairs * factors{conj}).flatten(-2).to(values.dtype)\n",
        f"truth[..., -{width}:] = torch.view_as_real(pairs.to(torch.complex128) * exact{conj}).flatten(-2)\n",
        "values.requires_grad_(True)\n" if backward else "",
        call.rstrip("\n") + "\n",
        "got = torch.autograd.grad(got, values, upstream)[0]\n" if backward else "",
        f"got, differ = got.detach(), (got.detach().view({bits}) != expected.view({bits})).nonzero().tolist()\n",
        'print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")\n',
        "for i in map(tuple, differ[:3]):\n",
        f'    print(i, f"got {{got[i].item()!r}} ({{got.view({bits})[i].item() & {mask}:#x}}) expected '
        f'{{expected[i].item()!r}} ({{expected.view({bits})[i].item() & {mask}:#x}}) truth {{truth[i].item()!r}}")\n',
    ]
    return "".join(lines)


def run_reproduction(path: Path, *, timeout: float = 60) -> tuple[bool, str]:
    """Runs one reproduction with this python; whether it printed a deviation, and its output (last lines)."""
    try:
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    output = (done.stdout + done.stderr).strip()
    found = _DIFFER.search(output)
    return bool(found and int(found[1]) > 0), "\n".join(output.splitlines()[-6:])


def write_reproductions(
    peer_title: str,
    call: str,
    failed: Mapping[str, list[tuple[str, str]]],
    directory: Path,
    device: Any,
) -> list[Repro]:
    """Writes and runs one reproduction per column: ``failed`` maps a column title to its failed tests (node id and
    failure line, in the suite's order); the first one whose case is a fixed case with coordinates is reproduced.

    Args:
        peer_title: the peer and its version, for each file's docstring.
        call: the peer's call (sets ``got`` from ``values``, ``angles`` and ``inverse``).
        failed: per column, its failed tests.
        directory: where the files go (``<column>.py``).
        device: where the suite ran (the case's inputs are rebuilt there, as the suite built them).
    """
    from dsv41_rope.conformance.cases import all_cases, input_class_cases, make_angles, make_values
    from dsv41_rope.matrix.columns import parse_test

    known = {case.id: case for case in (*all_cases(), *input_class_cases())}
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for column, tests in failed.items():
        for nodeid, message in tests:
            test = parse_test(nodeid)
            case, coordinates = known.get(test.case), failing_row(message)
            if case is None or coordinates is None or len(coordinates) != len(case.values_shape(device)):
                continue
            backward = "backward" in message.split(":", 1)[0] or test.function.startswith("test_backward")
            values, angles = make_values(case, device), make_angles(case, device)
            row = tuple(slice(index, index + 1) for index in coordinates[:-1])
            row_angles = _angle_row(angles, coordinates, values.dim())
            title = f"{peer_title}: {column}, from {test.function}[{case.id}] (row {coordinates[:-1]})"
            source = reproduction(
                title, call, values[row].contiguous(), row_angles, case.inverse, case.layout, backward
            )
            path = directory / repro_file_name(column)
            path.write_text(source)
            reproduced, output = run_reproduction(path)
            written.append(Repro(column, nodeid, str(path), reproduced, output))
            break
    return written


def _angle_row(angles: Any, coordinates: tuple[int, ...], rank: int) -> Any:
    """The angles of the row at ``coordinates`` as ``[1, 1, P]`` (the peers' calls take 3-D angles), keeping their
    dtype and whether they need a gradient."""
    table = angles.detach()
    table = table.reshape((1,) * (3 - table.dim()) + tuple(table.shape))
    batch = coordinates[0] if table.shape[0] > 1 else 0
    position = coordinates[1] if table.shape[1] > 1 else 0
    row = table[batch : batch + 1, position : position + 1].clone()
    return row.requires_grad_(angles.requires_grad)
