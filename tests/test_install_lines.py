"""The README's install lines give what they promise: every ``pip install`` in it works as written from a clone's root
(a path that exists there or a wheel an earlier line builds, else a valid requirement) and names extras the package
has, the ``conformance`` extra holds everything the installed suite imports outside torch, and hypothesis is pinned to
the one version ``./run`` installs and the baselines' generated cases were drawn with."""

from __future__ import annotations

import ast
import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
# Import names whose distribution differs from the name.
DISTRIBUTIONS = {"xdist": "pytest-xdist", "pytest_split": "pytest-split", "yaml": "pyyaml"}
# What the installed package may import that no requirement provides: the standard library and the package itself.
PROVIDED = set(sys.stdlib_module_names) | {"dsv41_rope", "_pytest"}


def readme_commands() -> list[str]:
    """Every command of README.md's shell code blocks, in order, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.split("#")[0].strip()]


def readme_install_lines() -> list[str]:
    """Every ``pip install`` command of README.md's code blocks."""
    return [line for line in readme_commands() if "pip install" in line]


def built_wheel() -> str:
    """The file ``python -m build`` writes for this package: ``dist/{name}-{version}-py3-none-any.whl``."""
    name = canonicalize_name(PROJECT["name"]).replace("-", "_")
    return f"dist/{name}-{PROJECT['version']}-py3-none-any.whl"


def requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def resolved(extras: set[str]) -> dict[str, str]:
    """The package's requirements with ``extras`` (self-references followed), by distribution name."""
    requirements, pending, seen = list(PROJECT["dependencies"]), set(extras), set()
    while pending:
        extra = pending.pop()
        seen.add(extra)
        for requirement in PROJECT["optional-dependencies"][extra]:
            if requirement_name(requirement) == PROJECT["name"]:
                pending |= set(re.search(r"\[(.*)\]", requirement).group(1).split(",")) - seen
            else:
                requirements.append(requirement)
    return {requirement_name(requirement): requirement for requirement in requirements}


def imports_of_the_installed_suite() -> set[str]:
    """Top-level modules that the package's modules import when they load or inside functions."""
    found = set()
    for path in (REPO / "dsv41_rope").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return found - PROVIDED


@pytest.mark.parametrize("line", readme_install_lines())
def test_each_readme_install_line_names_extras_the_package_has(line: str) -> None:
    extras = [extra for group in re.findall(r"\[([\w,-]+)\]", line) for extra in group.split(",")]
    assert extras, f"{line!r} installs no extra: the suite's tools would be missing"
    assert set(extras) <= set(PROJECT["optional-dependencies"]), f"{line!r}: unknown extras"


@pytest.mark.parametrize("line", readme_install_lines())
def test_each_readme_install_line_works_from_a_clones_root(line: str) -> None:
    words = shlex.split(line)
    targets = [word for word in words[words.index("install") + 1 :] if not word.startswith("-")]
    assert targets, f"{line!r} installs nothing"
    for target in targets:
        path = re.sub(r"\[[\w,-]+\]$", "", target)
        if path == built_wheel():
            earlier = readme_commands()[: readme_commands().index(line)]
            assert any(command.startswith("python -m build") for command in earlier), f"{line!r}: nothing builds {path}"
        elif path.startswith((".", "/")) or "/" in path or path.endswith(".whl"):
            assert (REPO / path).exists(), (
                f"{line!r}: {path} is not a path in a clone's root (expected . or {built_wheel()})"
            )
        else:
            try:
                Requirement(target)
            except InvalidRequirement as error:
                pytest.fail(f"{line!r}: {target!r} is neither a path in a clone's root nor a requirement: {error}")


def test_the_readme_has_a_line_for_a_gpu_runner_and_one_for_a_checkout() -> None:
    lines = readme_install_lines()
    assert any("[conformance]" in line and "-e" not in line for line in lines), lines
    assert any("-e" in line and "test" in line for line in lines), lines


def test_the_conformance_extra_holds_what_the_installed_suite_imports() -> None:
    provided = set(resolved({"conformance", "report"})) | {"torch", "triton"}
    imported = imports_of_the_installed_suite()
    missing = {module for module in imported if DISTRIBUTIONS.get(module, module) not in provided}
    assert not missing, f"the installed suite imports {sorted(missing)}, which no requirement provides"
    assert {"pytest", "pytest-xdist", "pytest-split", "hypothesis"} <= set(resolved({"conformance"}))


def test_hypothesis_is_pinned_to_the_version_run_installs() -> None:
    pinned = resolved({"conformance"})["hypothesis"]
    installed_by_run = re.search(r"^hypothesis_version=(\S+)$", (REPO / "run").read_text(), re.M).group(1)
    assert pinned == f"hypothesis=={installed_by_run}"
    assert resolved({"test"})["hypothesis"] == pinned, "the project's own tests draw the same cases"
