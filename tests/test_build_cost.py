"""``tools.build_cost`` builds the kernel off the GPU as Triton would build it on one: integer arguments specialized
as Triton specializes them, every DeepSeek tensor's plan compiled for sm_90, and kernel sources of either layout (a
package directory, or a single file of the revisions before the package) compared by their SASS. Its command line
runs in a fresh python: it compiles for the GPU, where this process runs Triton's interpreter."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools.build_cost import specialization

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "dsv41_rope" / "kernel"


@dataclasses.dataclass
class _Param:
    is_constexpr: bool
    do_not_specialize: bool


class _Kernel:
    """A stand-in for Triton's JITFunction: its parameter names and which are constexprs; the arguments named
    ``unspecialized_*`` are its ``do_not_specialize``."""

    def __init__(self, runtime: list[str], constexprs: list[str]) -> None:
        self.arg_names = ["values_ptr", "frequencies_ptr", "output_ptr", *runtime, *constexprs]
        self.params = [_Param(name in constexprs, name.startswith("unspecialized")) for name in self.arg_names]


def _specialize(scalars: dict[str, object]) -> tuple[dict, dict, list[int]]:
    kernel = _Kernel([name for name in scalars if name != "BLOCK"], ["BLOCK"])
    signature, constexprs, attrs = specialization(kernel, scalars, torch.bfloat16)
    divisible = sorted(key[0] for key, value in attrs.items() if value == [["tt.divisibility", 16]])
    return signature, {key[0]: value for key, value in constexprs.items()}, divisible


def test_integers_are_specialized_as_triton_specializes_them() -> None:
    scalars = {"one": 1, "sixteen": 32, "seven": 7, "sign_bit": -(2**31), "huge": 2**33 + 16, "zero": 0}
    scalars |= {"unspecialized_one": 1, "unspecialized_sixteen": 48, "BLOCK": 64}
    signature, constexprs, divisible = _specialize(scalars)
    assert signature == {
        "values_ptr": "*bf16",
        "frequencies_ptr": "*fp32",
        "output_ptr": "*bf16",
        "one": "constexpr",
        "sixteen": "i32",
        "seven": "i32",
        "sign_bit": "i32",
        "huge": "i64",
        "zero": "i32",
        "unspecialized_one": "i32",
        "unspecialized_sixteen": "i32",
        "BLOCK": "constexpr",
    }, signature
    assert constexprs == {3: 1, 11: 64}, constexprs
    # Pointers aligned; 32, the sign bit, 2**33 + 16 and 0 divisible by 16; 7 not; 1 a constant; neither of the
    # arguments the kernel does not specialize.
    assert divisible == [0, 1, 2, 4, 6, 7, 8], divisible


def test_a_runtime_argument_that_is_no_integer_is_refused() -> None:
    with pytest.raises(TypeError, match="flag"):
        _specialize({"flag": True, "BLOCK": 4})


def _python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _has_nvidia_backend() -> bool:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return False
    return (Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump").is_file()


needs_nvidia_backend = pytest.mark.skipif(
    not _has_nvidia_backend(), reason="needs a Triton with its NVIDIA backend (ptxas, cuobjdump)"
)


@needs_nvidia_backend
def test_the_window_kv_plans_build_for_sm90_and_report_their_sass() -> None:
    result = _python("-m", "tools.build_cost", "--cases", "window_kv")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 specializations of the DeepSeek tensors" in result.stdout, result.stdout
    for dtype in ("bf16", "fp32"):
        line = next(line for line in result.stdout.splitlines() if line.split()[:2] == ["window_kv", dtype])
        assert int(line.split("instructions")[1].split()[0]) > 0, line


def _copy_kernel(destination: Path, edit: tuple[str, str, str] | None = None) -> Path:
    """A copy of the kernel package at ``destination``; ``edit`` = (file, old text, new text) changes one file."""
    shutil.copytree(KERNEL, destination, ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        name, old, new = edit
        source = (destination / name).read_text()
        assert source.count(old) == 1, f"{old!r} is not once in {name}"
        (destination / name).write_text(source.replace(old, new))
    return destination


@needs_nvidia_backend
def test_kernel_sources_are_told_apart_by_their_sass_and_not_by_the_kernels_name(tmp_path: Path) -> None:
    """A copy of the package builds the same SASS, also with its kernel function renamed, and so does a single file
    of the old layout (the private names); one whose rounded product rounds toward zero does not."""
    copy = _copy_kernel(tmp_path / "copy")
    renamed = _copy_kernel(
        tmp_path / "renamed",
        ("rotary_kernel.py", "    def rope_kernel(\n", "    def _rope_kernel_renamed(\n"),
    )
    with (renamed / "rotary_kernel.py").open("a") as file:
        file.write("\nif HAVE_TRITON:\n    rope_kernel = _rope_kernel_renamed\n")
    toward_zero = _copy_kernel(
        tmp_path / "toward_zero", ("float_ops.py", '"mul.rn.f32 $0, $1, $2;"', '"mul.rz.f32 $0, $1, $2;"')
    )
    single_file = tmp_path / "rope_triton.py"  # the old layout's names, over the package's code
    single_file.write_text(
        "from dsv41_rope.kernel.launch import KernelSettings\n"
        "from dsv41_rope.kernel.launch import make_plan as _make_plan\n"
        "from dsv41_rope.kernel.rotary_kernel import rope_kernel as _rope_kernel\n"
    )
    sources = ("dsv41_rope/kernel", str(copy), str(renamed), str(single_file), str(toward_zero))
    result = _python("-m", "tools.build_cost", *sources, "--cases", "window_kv")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(kernel " in result.stdout and ", _rope_kernel_renamed)" in result.stdout, result.stdout
    verdicts = [line.strip() for line in result.stdout.splitlines() if "SASS the same as" in line]
    assert verdicts == [
        "SASS the same as dsv41_rope/kernel's: 2 of 2 specializations",
        "SASS the same as dsv41_rope/kernel's: 2 of 2 specializations",
        "SASS the same as dsv41_rope/kernel's: 2 of 2 specializations",
        "SASS the same as dsv41_rope/kernel's: 0 of 2 specializations",
    ], result.stdout


def test_an_unknown_case_and_a_missing_source_are_refused() -> None:
    result = _python("-m", "tools.build_cost", "--cases", "no_such_tensor", timeout=120)
    assert result.returncode == 2 and "no_such_tensor" in result.stderr and "window_kv" in result.stderr, result.stderr
    missing = _python("-m", "tools.build_cost", "no/such/kernel", timeout=120)
    assert missing.returncode == 2 and "no such kernel source: no/such/kernel" in missing.stderr, missing.stderr


_A_LAUNCH = """
import torch
from dsv41_rope.kernel import apply_rope_triton

def test_three_launches():
    values = torch.randn(2, 5, 3, 40).to(torch.bfloat16)
    apply_rope_triton(values, torch.randn(1, 5, 8), inverse=True)
    apply_rope_triton(values, torch.randn(1, 5, 8), inverse=False)  # the same specialization: a runtime sign
    apply_rope_triton(torch.randn(4, 7, 24), torch.randn(1, 7, 4))
"""


def test_the_recorder_writes_the_rules_launches_and_build_cost_builds_them(tmp_path: Path) -> None:
    (tmp_path / "test_a_launch.py").write_text(_A_LAUNCH)
    launches = tmp_path / "launches"
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    environment |= {"DSV41_LAUNCH_RECORD": str(launches), "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tools.launch_recorder", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_a_launch.py")],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in (launches / "launches-main.jsonl").read_text().splitlines()]
    assert [record["negate_sin"] for record in records] == [True, False, False], records
    first, last = records[0], records[2]
    assert first["shape"] == [2, 5, 3, 40] and first["dtype"] == "bfloat16" and first["angles"] == [1, 5, 8], first
    assert last["shape"] == [4, 7, 24] and last["dtype"] == "float32" and not last["in_place"], last
    if _has_nvidia_backend():
        built = _python("-m", "tools.build_cost", "--launches", str(launches))
        assert built.returncode == 0, built.stdout + built.stderr
        assert "3 launches, 2 distinct specializations, 2 built" in built.stdout, built.stdout


def test_a_sample_without_launches_and_a_folder_without_launches_are_refused(tmp_path: Path) -> None:
    sample = _python("-m", "tools.build_cost", "--sample", "3", timeout=120)
    assert sample.returncode == 2 and "--launches" in sample.stderr, sample.stderr
    empty = _python("-m", "tools.build_cost", "--launches", str(tmp_path), timeout=120)
    assert empty.returncode == 2 and "launches-*.jsonl" in empty.stderr, empty.stderr
