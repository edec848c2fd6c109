"""tox's smoke environments for the oldest and the newest torch the project supports, and CI's step that runs the
newest (`.ci/smoke-torch-newest`, the last of `.ci/run`): each installs the package beside a torch it pins and the
triton that torch requires, then certifies the project's kernel and the eager reference with the smoke selection."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
ENVS = ("smoke-torch-oldest", "smoke-torch-newest")
SMOKE_COMMANDS = (
    "dsv41-rope certify dsv41_rope.kernel:apply_rope_triton --smoke",
    "dsv41-rope certify dsv41_rope:apply_rope_eager --smoke",
)


def tox_ini() -> configparser.ConfigParser:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini", encoding="utf-8")
    return tox


def torch_pin(env: str) -> Version:
    """The torch version a smoke environment pins (``torch==X``)."""
    dependencies = [Requirement(line) for line in tox_ini()[f"testenv:{env}"]["deps"].splitlines() if line.strip()]
    (requirement,) = [dependency for dependency in dependencies if dependency.name == "torch"]
    assert len(requirement.specifier) == 1, requirement
    (specifier,) = requirement.specifier
    assert specifier.operator == "==", f"{env} should pin torch, got {requirement}"
    return Version(specifier.version)


def oldest_supported_torch() -> Version:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (torch,) = [Requirement(d) for d in dependencies if Requirement(d).name == "torch"]
    (specifier,) = torch.specifier
    assert specifier.operator == ">=", torch
    return Version(specifier.version)


def test_the_oldest_env_pins_the_oldest_torch_pyproject_accepts_and_the_newest_a_later_one() -> None:
    assert torch_pin("smoke-torch-oldest") == oldest_supported_torch()
    assert torch_pin("smoke-torch-newest") > torch_pin("smoke-torch-oldest")


@pytest.mark.parametrize("env", ENVS)
def test_each_smoke_env_certifies_the_kernel_and_the_eager_reference_outside_the_checkout(env: str) -> None:
    tox = tox_ini()
    section = tox[f"testenv:{env}"]
    assert section["commands"] == "{[smoke]commands}" and section["changedir"] == "{[smoke]changedir}"
    assert section["extras"] == "{[smoke]extras}" and tox["smoke"]["extras"] == "conformance"
    commands = [line.strip() for line in tox["smoke"]["commands"].splitlines() if line.strip()]
    for expected in SMOKE_COMMANDS:
        assert any(command.startswith(expected) for command in commands), f"got {commands}, expected {expected!r}"
    assert tox["smoke"]["changedir"] == "{envtmpdir}", "run from the checkout, pytest would judge its files instead"
    assert "triton" not in section["deps"], "triton comes as torch requires it"


def test_tox_ini_names_no_package_index() -> None:
    text = (REPO / "tox.ini").read_text(encoding="utf-8")
    assert not re.search(r"://|index-url|--index|find-links", text), "tox.ini names a package index"


def test_ci_runs_the_newest_torch_env_after_the_tests() -> None:
    steps = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.startswith(".")]
    assert steps[-1] == ".ci/smoke-torch-newest", steps
    assert "tox_version=" in (REPO / ".ci" / "smoke-torch-newest").read_text(encoding="utf-8")


@pytest.mark.parametrize("tox_status", [0, 1])
def test_the_ci_step_runs_tox_on_the_newest_env_and_passes_its_status_on(tmp_path: Path, tox_status: int) -> None:
    script = (REPO / ".ci" / "smoke-torch-newest").read_text(encoding="utf-8")
    version = re.search(r"^tox_version=(\S+)$", script, re.M).group(1)
    log = tmp_path / "calls.log"
    tox = tmp_path / "venv" / "bin" / "tox"
    tox.parent.mkdir(parents=True)
    tox.write_text(
        f'#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "{version} from here"; exit 0; fi\n'
        f'echo "$*" >> "{log}"\nexit {tox_status}\n'
    )
    tox.chmod(0o755)
    done = subprocess.run(
        [".ci/smoke-torch-newest"],
        cwd=REPO,
        env={**os.environ, "DSV41_TOX_VENV": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == tox_status, f"got exit {done.returncode}, expected tox's {tox_status}: {done.stderr}"
    assert "installing" not in done.stdout, "the pinned tox was there"
    assert log.read_text(encoding="utf-8").split() == ["-e", "smoke-torch-newest"]
