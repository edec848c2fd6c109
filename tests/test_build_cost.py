"""``scripts/build_cost.py`` builds the kernel off the GPU as Triton would build it on one: integer arguments
specialized as Triton specializes them, and every DeepSeek tensor's plan compiled for sm_90. Run in fresh pythons, as
the scripts run (tests do not import scripts)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A stand-in kernel: its parameter names and which are constexprs, as Triton's JITFunction has them.
_SPECIALIZE = """
import dataclasses, json, torch
from scripts.build_cost import specialization

@dataclasses.dataclass
class Param:
    is_constexpr: bool
    do_not_specialize: bool

class Kernel:  # the arguments named unspecialized_* are the kernel's do_not_specialize
    def __init__(self, runtime, constexprs):
        self.arg_names = ["values_ptr", "frequencies_ptr", "output_ptr", *runtime, *constexprs]
        self.params = [Param(name in constexprs, name.startswith("unspecialized")) for name in self.arg_names]

scalars = json.loads(SCALARS)
kernel = Kernel([name for name in scalars if name != "BLOCK"], ["BLOCK"])
try:
    signature, constexprs, attrs = specialization(kernel, scalars, torch.bfloat16)
except TypeError as error:
    print(json.dumps({"error": str(error)}))
else:
    print(json.dumps({"signature": signature, "constexprs": {str(k[0]): v for k, v in constexprs.items()},
                      "divisible": sorted(k[0] for k, v in attrs.items() if v == [["tt.divisibility", 16]])}))
"""


def _python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _specialize(scalars: dict) -> dict:
    result = _python("-c", f"SCALARS = {json.dumps(json.dumps(scalars))}\n" + textwrap.dedent(_SPECIALIZE))
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_integers_are_specialized_as_triton_specializes_them() -> None:
    scalars = {"one": 1, "sixteen": 32, "seven": 7, "sign_bit": -(2**31), "huge": 2**33 + 16, "zero": 0}
    scalars |= {"unspecialized_one": 1, "unspecialized_sixteen": 48, "BLOCK": 64}
    found = _specialize(scalars)
    assert found["signature"] == {
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
    }, found
    assert found["constexprs"] == {"3": 1, "11": 64}, found
    # Pointers aligned; 32, the sign bit, 2**33 + 16 and 0 divisible by 16; 7 not; 1 a constant; neither of the
    # arguments the kernel does not specialize.
    assert found["divisible"] == [0, 1, 2, 4, 6, 7, 8], found


def test_a_runtime_argument_that_is_no_integer_is_refused() -> None:
    assert "flag" in _specialize({"flag": True, "BLOCK": 4}).get("error", ""), "a bool passed as an integer"


def _has_nvidia_backend() -> bool:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return False
    return (Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump").is_file()


@pytest.mark.skipif(not _has_nvidia_backend(), reason="needs a Triton with its NVIDIA backend (ptxas, cuobjdump)")
def test_the_window_kv_plans_build_for_sm90_and_report_their_sass() -> None:
    result = _python("-m", "scripts.build_cost", "--cases", "window_kv")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 specializations of the DeepSeek tensors" in result.stdout, result.stdout
    for dtype in ("bf16", "fp32"):
        line = next(line for line in result.stdout.splitlines() if line.split()[:2] == ["window_kv", dtype])
        assert int(line.split("instructions")[1].split()[0]) > 0, line


@pytest.mark.skipif(not _has_nvidia_backend(), reason="needs a Triton with its NVIDIA backend (ptxas, cuobjdump)")
def test_kernel_files_are_told_apart_by_their_sass(tmp_path: Path) -> None:
    """A copy of the kernel file builds the same SASS; one whose rounded product rounds toward zero does not."""
    source = (ROOT / "impl" / "rope_triton.py").read_text()
    copy, rounding_toward_zero = tmp_path / "copy.py", tmp_path / "rz.py"
    copy.write_text("# a copy\n" + source)
    assert source.count('"mul.rn.f32 $0, $1, $2;"') == 1
    rounding_toward_zero.write_text(source.replace('"mul.rn.f32 $0, $1, $2;"', '"mul.rz.f32 $0, $1, $2;"'))
    files = ("impl/rope_triton.py", str(copy), str(rounding_toward_zero))
    result = _python("-m", "scripts.build_cost", *files, "--cases", "window_kv")
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [line.strip() for line in result.stdout.splitlines() if "SASS the same as" in line]
    assert verdicts == [
        "SASS the same as impl/rope_triton.py's: 2 of 2 specializations",
        "SASS the same as impl/rope_triton.py's: 0 of 2 specializations",
    ], result.stdout


def test_an_unknown_case_is_refused_with_the_known_ones() -> None:
    result = _python("-m", "scripts.build_cost", "--cases", "no_such_tensor", timeout=120)
    assert result.returncode == 2 and "no_such_tensor" in result.stderr and "window_kv" in result.stderr, result.stderr


_A_LAUNCH = """
import torch
from impl.rope_triton import apply_rope_triton

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
        [sys.executable, "-m", "pytest", "-q", "-p", "scripts.launch_recorder", "-p", "no:cacheprovider"]
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
        built = _python("-m", "scripts.build_cost", "--launches", str(launches))
        assert built.returncode == 0, built.stdout + built.stderr
        assert "3 launches, 2 distinct specializations, 2 built" in built.stdout, built.stdout


def test_a_sample_without_launches_and_a_folder_without_launches_are_refused(tmp_path: Path) -> None:
    sample = _python("-m", "scripts.build_cost", "--sample", "3", timeout=120)
    assert sample.returncode == 2 and "--launches" in sample.stderr, sample.stderr
    empty = _python("-m", "scripts.build_cost", "--launches", str(tmp_path), timeout=120)
    assert empty.returncode == 2 and "launches-*.jsonl" in empty.stderr, empty.stderr
