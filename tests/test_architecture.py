"""The import rules of docs/architecture.md, checked on every Python file of the project by parsing it (ast).

Each part may import only what the map allows, and the controller side (the report side of `conformance/`, the
conftests and the backend's choice, which run in the xdist controller) imports no torch, triton, numpy, matplotlib,
oracle or kernel when its modules load, nor any other module of the project that might.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What each part must never import, at any level (docs/architecture.md says why).
FORBIDDEN = {
    "impl": frozenset({"oracle", "conformance", "tests", "benchmarks", "scripts"}),
    "oracle": frozenset({"impl", "conformance", "tests", "benchmarks", "scripts"}),
    "conformance": frozenset({"tests", "benchmarks", "scripts"}),
    "tests": frozenset({"benchmarks", "scripts"}),
    "benchmarks": frozenset({"tests", "scripts"}),
    "scripts": frozenset({"tests"}),
}
PARTS = tuple(FORBIDDEN)
# The controller side: loaded by the xdist controller and by `python -m conformance.merge`, neither of which imports
# torch; the suite's pytest entry point with what it loads, which an installed suite's environment loads in every
# session; and the conftests with the backend's choice, which the controller loads before it starts its workers.
CONTROLLER_SIDE = (
    "conftest.py",
    "conformance/__init__.py",
    "conformance/conftest.py",
    "conformance/backend.py",
    "conformance/devices.py",
    "conformance/report/",
    "conformance/plugin.py",
    "conformance/selection.py",
    "conformance/merge.py",
    "conformance/provenance.py",
    "conformance/pytest_plugin.py",
    "conformance/implementation.py",
    "conformance/failures.py",
    "conformance/accepted.py",
)
NOT_WHEN_LOADED = frozenset({"torch", "triton", "numpy", "matplotlib", "oracle", "impl"})


@dataclass(frozen=True)
class Import:
    """One imported module: its absolute dotted name, its line, whether it runs when the module loads, and the names a
    `from` import takes from it (each may be a submodule)."""

    module: str
    line: int
    when_loaded: bool
    names: tuple[str, ...] = ()


def module_name(path: Path, root: Path) -> str:
    """Returns the dotted name of a file under `root`: conformance/report/model.py -> conformance.report.model."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[Import]:
    """Returns every import of a file, relative ones resolved; an import inside a function or under
    `if TYPE_CHECKING:` does not run when the module loads."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, when_loaded: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            when_loaded = False
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, when_loaded)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, when_loaded) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append(Import(base, node.lineno, when_loaded, tuple(alias.name for alias in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child, when_loaded)

    visit(tree, True)
    return found


def project_files(root: Path) -> list[Path]:
    """Every Python file of the project: the parts' folders and the root's own files."""
    files = sorted(root.glob("*.py"))
    for part in PARTS:
        files += sorted(path for path in (root / part).rglob("*.py") if "__pycache__" not in path.parts)
    return files


def project_module_file(module: str, root: Path) -> str | None:
    """Returns the file of a project module relative to `root` (conformance.cases -> conformance/cases.py), None when
    the name is no module of the project (a function or constant a `from` import takes)."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path.relative_to(root).as_posix()
    return None


def violations(root: Path) -> list[str]:
    """Returns one line per import that breaks a rule: `file:line: what (rule)`; empty when the tree follows them."""
    found = []
    for path in project_files(root):
        relative = path.relative_to(root).as_posix()
        part = relative.split("/", 1)[0]
        controller_side = relative.startswith(CONTROLLER_SIDE)
        for imported in imports_of(path, root):
            top = imported.module.split(".", 1)[0]
            if top in FORBIDDEN.get(part, ()):
                found.append(f"{relative}:{imported.line}: imports {imported.module} ({part} must not import {top})")
            elif controller_side and imported.when_loaded and top in NOT_WHEN_LOADED:
                found.append(
                    f"{relative}:{imported.line}: imports {imported.module} when loaded (the controller side must not)"
                )
            elif controller_side and imported.when_loaded and top == "conformance":
                for module in (imported.module, *(f"{imported.module}.{name}" for name in imported.names)):
                    target = project_module_file(module, root)
                    if target is not None and not target.startswith(CONTROLLER_SIDE):
                        found.append(
                            f"{relative}:{imported.line}: imports {module} when loaded, which is not on the controller "
                            "side"
                        )
    return sorted(set(found))


def test_the_project_follows_its_import_rules() -> None:
    assert violations(REPO) == []


def test_every_part_is_checked() -> None:
    files = {path.relative_to(REPO).parts[0] for path in project_files(REPO)}
    assert {*PARTS, "conftest.py"} <= files
    assert REPO / "conformance" / "report" / "model.py" in project_files(REPO)


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


ALLOWED_TREE = {
    "impl/__init__.py": "",
    "impl/rope.py": "import torch\n",
    "oracle/__init__.py": "",
    "oracle/eager.py": "import numpy\nfrom oracle.fma import fma32\n",
    "conformance/__init__.py": "",
    "conformance/checks.py": "import torch\nfrom impl import rope\nfrom oracle import eager\n",
    "conformance/report/__init__.py": "from .model import Report\n",
    "conformance/report/model.py": "import json\n",
    "conformance/report/plot.py": "def plot():\n    from matplotlib.figure import Figure\n",
    "conformance/provenance.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
        "def gpus(torch_module=None):\n    import torch\n"
    ),
    "conformance/backend.py": "from conformance import devices\ndef device():\n    import torch\n",
    "conformance/devices.py": "import ctypes\n",
    "conformance/conftest.py": (
        "import pytest\nfrom conformance import backend\nfrom conformance.report import Report\n"
        "def pytest_configure(config):\n    from conformance import checks\n"
    ),
    "conftest.py": "from conformance import backend\n",
    "tests/test_oracle.py": "from oracle import eager\nfrom conformance.report import Report\n",
    "benchmarks/run.py": "from conformance import provenance\nfrom impl import rope\n",
    "scripts/parity.py": "from benchmarks import run\nfrom conformance import checks\n",
}


def test_a_tree_that_follows_the_rules_passes(tmp_path: Path) -> None:
    write_tree(tmp_path, ALLOWED_TREE)
    assert violations(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("impl/rope.py", "from oracle import eager\n", "impl/rope.py:1: imports oracle (impl must not import oracle)"),
        ("impl/rope.py", "def f():\n    import conformance.cases\n", "impl/rope.py:2: imports conformance.cases"),
        ("oracle/eager.py", "import impl.rope\n", "oracle/eager.py:1: imports impl.rope (oracle must not import impl)"),
        ("oracle/eager.py", "from conformance import checks\n", "oracle/eager.py:1: imports conformance"),
        ("conformance/checks.py", "from benchmarks.common import Timing\n", "imports benchmarks.common"),
        ("conformance/report/model.py", "from scripts import gpu_parity\n", "conformance must not import scripts"),
        ("tests/test_oracle.py", "import scripts.gpu_parity\n", "tests must not import scripts"),
        ("tests/test_oracle.py", "from benchmarks import oracle_speed\n", "tests must not import benchmarks"),
        ("conformance/report/model.py", "import torch\n", "model.py:1: imports torch when loaded"),
        ("conformance/report/plot.py", "import matplotlib.figure\n", "plot.py:1: imports matplotlib.figure when"),
        ("conformance/report/model.py", "class Record:\n    import triton\n", "model.py:2: imports triton when"),
        ("conformance/plugin.py", "from oracle.ulp import HISTOGRAM_EDGES\n", "plugin.py:1: imports oracle.ulp when"),
        ("conformance/provenance.py", "import numpy as np\n", "provenance.py:1: imports numpy when loaded"),
        ("conformance/report/summary.py", "from ..backend import device\nimport impl\n", "summary.py:2: imports impl"),
        (
            "conformance/report/summary.py",
            "from ..checks import run\n",
            "summary.py:1: imports conformance.checks when",
        ),
        (
            "conformance/conftest.py",
            "from conformance import backend, checks\n",
            "conftest.py:1: imports conformance.checks when",
        ),
        ("conftest.py", "import torch\n", "conftest.py:1: imports torch when loaded"),
    ],
    ids=[
        "impl-oracle",
        "impl-conformance-in-a-function",
        "oracle-impl",
        "oracle-conformance",
        "conformance-benchmarks",
        "report-scripts",
        "tests-scripts",
        "tests-benchmarks",
        "report-torch",
        "report-matplotlib",
        "report-triton-in-a-class",
        "plugin-oracle",
        "provenance-numpy",
        "report-impl",
        "report-a-module-that-imports-torch",
        "conftest-a-module-that-imports-torch",
        "root-conftest-torch",
    ],
)
def test_a_planted_bad_import_is_caught(tmp_path: Path, name: str, text: str, expected: str) -> None:
    write_tree(tmp_path, {**ALLOWED_TREE, name: text})
    found = violations(tmp_path)
    assert len(found) == 1 and expected in found[0], found


def test_relative_imports_resolve_to_their_package(tmp_path: Path) -> None:
    write_tree(tmp_path, {"conformance/report/render.py": "from . import model\nfrom ..checks import run\n"})
    modules = [i.module for i in imports_of(tmp_path / "conformance" / "report" / "render.py", tmp_path)]
    assert modules == ["conformance.report", "conformance.checks"]
