"""Installed use: the distribution's wheel, installed into a fresh virtual environment, judges a kernel outside this
checkout with ``python -m pytest --pyargs dsv41_rope.conformance --rope-impl MODULE -n 2`` from an empty directory,
gated by the accepted baseline it ships.

Nothing is downloaded: the wheel is built with this environment's setuptools (no build isolation), and the new
environment sees this one's torch, triton and pytest through a ``.pth`` file (and the system's through
``--system-site-packages``), while the suite itself comes from the wheel alone. The kernel judged is the project's
kernel package, vendored by the installed ``python -m dsv41_rope.vendor`` into a temporary folder as the package
``vendored_rope``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from dsv41_rope.conformance.judged.run import judge, passing_counts, slice_args
from dsv41_rope.harness import backend
from dsv41_rope.harness.provenance import kernel_sha256

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dsv41_rope"
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info")


def _run(command: list[str], **kwargs) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the sources, so that the build writes nothing into the checkout."""
    tmp_path = tmp_path_factory.mktemp("build")
    source = tmp_path / "source"
    shutil.copytree(PACKAGE, source / PACKAGE.name, ignore=IGNORED)
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
    _run([*pip, "--wheel-dir", str(wheels), str(source)])
    (built,) = wheels.glob("dsv41_rope-*.whl")
    return built


def _fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    """A virtual environment with the wheel installed, seeing this environment's packages but not the checkout."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "outer_environment.pth").write_text("\n".join(sorted(outer)) + "\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
    _run([*pip, str(wheel)], cwd=tmp_path)
    return python


def test_the_wheel_holds_the_suite_its_plugin_and_baselines(wheel):
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    sources = {path.relative_to(REPO).as_posix() for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert sources - names == set(), "modules of the checkout missing from the wheel (pyproject's package list)"
    data = {path.relative_to(REPO).as_posix() for path in PACKAGE.rglob("*.json")}
    assert any(name.startswith("dsv41_rope/baselines/") for name in data)
    assert data - names == set(), "data files of the package (baselines, the kernel's tuning) missing from the wheel"
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "[pytest11]\ndsv41_rope = dsv41_rope.pytest_plugin" in text, text


def test_p_no_dsv41_rope_keeps_the_installed_plugin_out(wheel, tmp_path):
    python = _fresh_environment(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHONPATH"))}
    pytest_command = [str(python), "-m", "pytest", "-p", "no:cacheprovider"]
    loaded = subprocess.run([*pytest_command, "--help"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert loaded.returncode == 0 and "--rope-impl" in loaded.stdout, "the entry point did not load the plugin"
    blocked = subprocess.run(
        [*pytest_command, "-p", "no:dsv41_rope", "--rope-impl", "their_rope"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert blocked.returncode == pytest.ExitCode.USAGE_ERROR, f"got exit {blocked.returncode}, expected 4 (usage error)"
    assert "unrecognized arguments: --rope-impl" in blocked.stderr, blocked.stderr[-2000:]


def test_installed_suite_judges_a_vendored_kernel_from_any_directory(wheel, tmp_path):
    python = _fresh_environment(tmp_path, wheel)
    vendor = tmp_path / "vendor"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outer = ("PYTEST_", "GITHUB_STEP", "TRITON_INTERPRET", "PYTHONPATH")
    env = {key: value for key, value in os.environ.items() if not key.startswith(outer)}
    env["PYTHONPATH"] = str(vendor)  # the kernel judged; the suite only from the wheel

    where = _run([str(python), "-c", "import dsv41_rope.conformance as c; print(c.__file__)"], cwd=elsewhere, env=env)
    assert Path(where.strip()).is_relative_to(tmp_path / "venv"), f"the suite came from {where}, not the wheel"
    baseline = Path(_run([str(python), "-m", "dsv41_rope.harness.accepted"], cwd=elsewhere, env=env).strip())
    assert baseline.is_relative_to(tmp_path / "venv") and baseline.name == f"ulp-drift-{backend.name()}.json"
    copy = ["-m", "dsv41_rope.vendor", str(vendor / "vendored_rope"), "--namespace", "vendored_rope"]
    _run([str(python), *copy], cwd=elsewhere, env=env)

    args = [*slice_args(pyargs=True), "-n", "2", "--ulp-baseline", str(baseline)]
    outcome = judge("vendored_rope", elsewhere, args, python=str(python), env=env)
    assert outcome.exit_status == 0, outcome.summary() + "\n" + outcome.output
    assert outcome.counts == passing_counts(backend.name()), outcome.summary()
    assert "dsv41-rope: judging vendored_rope:apply_rope_triton" in outcome.output, "the header names it"
    # The cases keep the checkout's keys, so the shipped baseline gated every one of them.
    assert ": 0 regressed, 0 new," in outcome.output, outcome.output
    report = json.loads((elsewhere / "report" / "ulp-drift.json").read_text())
    assert report["cases"] and all(key.startswith("dsv41_rope/conformance/test_") for key in report["cases"])
    judged = report["metadata"]["from_tests"]["implementation under test"]
    assert judged["source"] == str(vendor / "vendored_rope")
    assert judged["sha256"] == kernel_sha256(vendor / "vendored_rope")
    vendored = json.loads((vendor / "vendored_rope" / "VENDORED.json").read_text())
    assert vendored["kernel_sha256"] == kernel_sha256(PACKAGE / "kernel"), "the copy names the source it came from"
