"""The rules of docs/architecture.md, checked on every Python file of the project by parsing it (ast).

Each part may import only what the map allows; the kernel imports its own modules relatively, so that it can be
copied out as a package of its own; the controller side imports no torch, triton, numpy, matplotlib, oracle or
kernel when its modules load, nor any other module of the project that might; no module takes another module's
``_private`` name; no Python file is over 400 lines; and no two modules of the package share a file name.
"""

from __future__ import annotations

import ast
import collections
import graphlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "dsv41_rope"
SUBPACKAGES = ("kernel", "vendor", "oracle", "harness", "report", "conformance", "peers", "matrix")
LIBRARY = frozenset({PACKAGE, *(f"{PACKAGE}.{name}" for name in SUBPACKAGES)})
# What each part may import of the project besides itself; "dsv41_rope" is the package's own face (its `__init__`, its
# command line and the pytest entry point), "root" the checkout's root files (conftest.py). The map has no cycle.
MAY_IMPORT = {
    "dsv41_rope.kernel": frozenset(),
    "dsv41_rope.vendor": frozenset({"dsv41_rope.kernel", "dsv41_rope.harness"}),
    "dsv41_rope.oracle": frozenset(),
    "dsv41_rope.harness": frozenset({"dsv41_rope.oracle"}),
    "dsv41_rope.report": frozenset({"dsv41_rope.harness"}),
    "dsv41_rope.peers": frozenset({"dsv41_rope.kernel"}),
    "dsv41_rope": frozenset({"dsv41_rope.kernel", "dsv41_rope.vendor", "dsv41_rope.harness", "dsv41_rope.report"}),
    "dsv41_rope.conformance": LIBRARY - {"dsv41_rope.matrix"},
    "dsv41_rope.matrix": frozenset(f"dsv41_rope.{p}" for p in ("peers", "harness", "report", "conformance", "kernel")),
    "root": LIBRARY,
    "benchmarks": LIBRARY,
    "tools": LIBRARY | {"benchmarks"},
    "tests": LIBRARY | {"benchmarks", "tools"},
}
TOP_LEVEL_PARTS = ("tests", "benchmarks", "tools")
# The controller side: what xdist's controller (which only hands tests out) and `python -m dsv41_rope.report` load,
# and what the pytest11 entry point loads in every pytest session of an environment where the suite is installed.
CONTROLLER_SIDE = (
    "conftest.py",
    "tests/conftest.py",
    "dsv41_rope/__init__.py",
    "dsv41_rope/pytest_plugin.py",
    "dsv41_rope/conformance/__init__.py",
    "dsv41_rope/conformance/conftest.py",
    *(f"dsv41_rope/harness/{name}.py" for name in ("__init__", "accepted", "backend", "devices", "failures")),
    *(f"dsv41_rope/harness/{name}.py" for name in ("implementation", "provenance", "under_test")),
    "dsv41_rope/report/",
)
NOT_WHEN_LOADED = frozenset({"torch", "triton", "numpy", "matplotlib"})
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One imported module: its absolute dotted name, its line, whether it runs when the module loads, the names a
    `from` import takes from it (each may be a submodule), whether it was written relative, and what it binds."""

    module: str
    line: int
    when_loaded: bool
    names: tuple[str, ...] = ()
    relative: bool = False
    bound: tuple[str, ...] = ()  # the names the statement binds in the module, one per name it imports


def module_name(path: Path, root: Path) -> str:
    """Returns the dotted name of a file under `root`: dsv41_rope/report/model.py -> dsv41_rope.report.model."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[Import]:
    """Returns every import of a file, relative ones resolved, and the plugins a module-level `pytest_plugins` lists
    (pytest imports them with the module); an import inside a function or under `if TYPE_CHECKING:` does not run when
    the module loads."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, when_loaded: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            when_loaded = False
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child, loaded in [*((child, False) for child in node.body), *((c, when_loaded) for c in node.orelse)]:
                visit(child, loaded)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = (alias.asname or alias.name.split(".")[0],)
                found.append(Import(alias.name, node.lineno, when_loaded, bound=bound))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = tuple(alias.name for alias in node.names)
            bound = tuple(alias.asname or alias.name for alias in node.names)
            found.append(Import(base, node.lineno, when_loaded, names, bool(node.level), bound))
        elif isinstance(node, ast.Assign) and when_loaded and ast.unparse(node.targets[0]) == "pytest_plugins":
            if isinstance(node.value, ast.List | ast.Tuple):
                plugins = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                found.extend(Import(plugin, node.lineno, True) for plugin in plugins)
        for child in ast.iter_child_nodes(node):
            visit(child, when_loaded)

    visit(tree, True)
    return found


def file_part(relative: str) -> str | None:
    """The part a file belongs to (see `MAY_IMPORT`), None outside the parts; dsv41_rope/<other>/ names a part the
    map lacks, which `violations` reports."""
    head, _, rest = relative.partition("/")
    if head == PACKAGE:
        inner = rest.split("/")
        name = inner[0].removesuffix(".py")
        return f"{PACKAGE}.{name}" if len(inner) > 1 or name in SUBPACKAGES else PACKAGE
    if head in TOP_LEVEL_PARTS:
        return head
    return "root" if not rest and relative.endswith(".py") else None


def module_part(module: str) -> str | None:
    """The part a dotted module name belongs to, None for anything outside the project."""
    parts = module.split(".")
    if parts[0] == PACKAGE:
        return f"{PACKAGE}.{parts[1]}" if len(parts) > 1 and parts[1] in SUBPACKAGES else PACKAGE
    return parts[0] if parts[0] in TOP_LEVEL_PARTS else None


def project_files(root: Path) -> list[Path]:
    """Every Python file of the project: the package, tests, benchmarks, tools and the root's own files."""
    files = sorted(root.glob("*.py"))
    for folder in (PACKAGE, *TOP_LEVEL_PARTS):
        files += sorted(path for path in (root / folder).rglob("*.py") if "__pycache__" not in path.parts)
    return files


def project_module_file(module: str, root: Path) -> str | None:
    """Returns the file of a project module relative to `root` (dsv41_rope.report.model -> dsv41_rope/report/model.py),
    None when the name is no module of the project (a function or constant a `from` import takes)."""
    if module_part(module) is None:
        return None
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path.relative_to(root).as_posix()
    return base.relative_to(root).as_posix() if base.is_dir() else None  # a package without its __init__ yet


def imported_modules(imported: Import, root: Path) -> list[str]:
    """The modules an import takes: the one named, or, for each name a `from` import takes, the submodule it names
    (the package above it is loaded too, but is no dependency of its own)."""
    if not imported.names:
        return [imported.module]
    submodules = [f"{imported.module}.{name}" for name in imported.names]
    return list(dict.fromkeys(m if project_module_file(m, root) else imported.module for m in submodules))


def violations(root: Path) -> list[str]:
    """Returns one line per import that breaks a rule: `file:line: what (rule)`; empty when the tree follows them."""
    found = []
    for path in project_files(root):
        relative = path.relative_to(root).as_posix()
        part = file_part(relative)
        if part not in MAY_IMPORT:
            found.append(f"{relative}: in {part}, which the import map does not know")
            continue
        controller_side = relative.startswith(CONTROLLER_SIDE)
        for imported in imports_of(path, root):
            where = f"{relative}:{imported.line}: imports {imported.module}"
            if part == module_part(imported.module) == "dsv41_rope.kernel" and not imported.relative:
                found.append(f"{where} (the kernel imports its own modules relatively, and nothing else of ours)")
            for module in imported_modules(imported, root):
                target = module_part(module)
                if target not in (None, part) and target not in MAY_IMPORT[part]:
                    found.append(f"{relative}:{imported.line}: imports {module} ({part} must not import {target})")
                elif controller_side and imported.when_loaded:
                    found += controller_violations(f"{relative}:{imported.line}", module, root)
    return sorted(set(found))


def controller_violations(where: str, module: str, root: Path) -> list[str]:
    """What a load-time import of `module` on the controller side breaks: a heavy library, or a module of the project
    (or a package above it) that is not on the controller side."""
    if module.split(".", 1)[0] in NOT_WHEN_LOADED:
        return [f"{where}: imports {module} when loaded (the controller side must not)"]
    parts = module.split(".")
    loaded = [project_module_file(".".join(parts[:end]), root) for end in range(1, len(parts) + 1)]
    outside = [file for file in loaded if file is not None and not file.startswith(CONTROLLER_SIDE)]
    return (
        [f"{where}: imports {module} when loaded, and {outside[-1]} is not on the controller side"] if outside else []
    )


def is_private(name: str) -> bool:
    """Whether a name is private: a leading underscore, but not a dunder name nor `_` alone."""
    return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))


def private_name_uses(root: Path) -> list[str]:
    """Returns one line per use of another project module's private name: `from m import _x`, or `m._x` where `m`
    is bound by importing a project module; names the module itself binds otherwise (a class, a parameter) are its
    own objects, not modules."""
    found = []
    for path in project_files(root):
        relative = path.relative_to(root).as_posix()
        own_module = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules: dict[str, str] = {}  # a name bound by an import -> the project module it is
        for imported in imports_of(path, root):
            if not imported.names and imported.bound and module_part(imported.module):  # import a.b [as c]
                top = imported.module.split(".")[0]
                modules[imported.bound[0]] = top if imported.bound[0] == top else imported.module
            for name, bound in zip(imported.names, imported.bound if imported.names else (), strict=True):
                if project_module_file(f"{imported.module}.{name}", root):
                    modules[bound] = f"{imported.module}.{name}"
                elif is_private(name) and project_module_file(imported.module, root) and imported.module != own_module:
                    found.append(f"{relative}:{imported.line}: from {imported.module} import {name}")
        rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        rebound |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        rebound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
                continue
            chain = ast.unparse(node.value)
            head, _, rest = chain.partition(".")
            if head not in modules or head in rebound or not all(p.isidentifier() for p in chain.split(".")):
                continue
            target = ".".join(filter(None, [modules[head], rest]))
            if project_module_file(target, root) and target != own_module:
                found.append(f"{relative}:{node.lineno}: {chain}.{node.attr} ({target}'s private name)")
    return sorted(set(found))


def tree_python_files(root: Path) -> list[str]:
    """The Python files git tracks in `root`, and those it would track (not ignored), that exist."""
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"]
    listed = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def long_files(root: Path, names: list[str]) -> list[str]:
    """Returns `file: N lines` for each of `names` (relative to `root`) over `MAX_LINES` lines."""
    lengths = {name: len((root / name).read_text(encoding="utf-8").splitlines()) for name in names}
    return [f"{name}: {lines} lines" for name, lines in lengths.items() if lines > MAX_LINES]


def test_the_project_follows_its_import_rules() -> None:
    assert violations(REPO) == []


def test_no_module_takes_another_modules_private_name() -> None:
    assert private_name_uses(REPO) == []


def test_no_python_file_is_over_400_lines() -> None:
    assert long_files(REPO, tree_python_files(REPO)) == []


def test_no_two_modules_of_the_package_share_a_file_name() -> None:
    names = collections.Counter(path.name for path in (REPO / PACKAGE).rglob("*.py") if "__pycache__" not in path.parts)
    shared = sorted(name for name, count in names.items() if count > 1)
    assert [name for name in shared if name not in ("__init__.py", "__main__.py")] == []


def test_every_part_is_checked_and_the_map_has_no_cycle() -> None:
    parts = {file_part(path.relative_to(REPO).as_posix()) for path in project_files(REPO)}
    assert {"dsv41_rope", "dsv41_rope.kernel", "dsv41_rope.report", "dsv41_rope.harness", "tests", "root"} <= parts
    assert REPO / "dsv41_rope" / "report" / "model.py" in project_files(REPO)
    graphlib.TopologicalSorter({part: allowed - {part} for part, allowed in MAY_IMPORT.items()}).prepare()


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


ALLOWED_TREE = {
    "dsv41_rope/__init__.py": "def __getattr__(name):\n    from dsv41_rope import kernel\n",
    "dsv41_rope/pytest_plugin.py": 'pytest_plugins = ["dsv41_rope.harness.under_test", "dsv41_rope.report.hooks"]\n',
    "dsv41_rope/kernel/__init__.py": "from .api import rotate\n",
    "dsv41_rope/kernel/api.py": "import torch\nfrom . import launch\nfrom .launch import run\n",
    "dsv41_rope/kernel/launch.py": "import triton\ndef run():\n    pass\n",
    "dsv41_rope/vendor.py": "from dsv41_rope.kernel import api\n",
    "dsv41_rope/oracle/__init__.py": "",
    "dsv41_rope/oracle/eager.py": "import numpy\nfrom dsv41_rope.oracle.fma import fma32\n",
    "dsv41_rope/oracle/fma.py": "def fma32():\n    pass\n",
    "dsv41_rope/conformance/__init__.py": "",
    "dsv41_rope/conformance/checks.py": "import torch\nfrom dsv41_rope.kernel import api\nfrom ..oracle import eager\n",
    "dsv41_rope/conformance/conftest.py": "from dsv41_rope.report import Report\ndef f():\n    from . import checks\n",
    "dsv41_rope/report/__init__.py": "from .model import Report\n",
    "dsv41_rope/report/model.py": "import json\n",
    "dsv41_rope/report/plot.py": "def plot():\n    from matplotlib.figure import Figure\n",
    "dsv41_rope/report/hooks.py": "import pytest\nfrom dsv41_rope.harness.provenance import record\n",
    "dsv41_rope/harness/__init__.py": "",
    "dsv41_rope/harness/provenance.py": "if TYPE_CHECKING:\n    import torch\ndef record():\n    import torch\n",
    "dsv41_rope/harness/backend.py": "from . import devices\ndef device():\n    from ..oracle import fma\n",
    "dsv41_rope/harness/devices.py": "import ctypes\n",
    "dsv41_rope/harness/under_test.py": "import pytest\nfrom dsv41_rope.harness import provenance\n",
    "conftest.py": "from dsv41_rope.harness import backend\npytest_plugins = ['dsv41_rope.pytest_plugin']\n",
    "tests/test_oracle.py": "from dsv41_rope.oracle import eager\nfrom dsv41_rope import report\nimport tools.probe\n",
    "benchmarks/run.py": "from dsv41_rope.harness import provenance\nfrom dsv41_rope.kernel import api\n",
    "tools/probe.py": "from benchmarks import run\nfrom dsv41_rope.conformance import checks\n",
}


def test_a_tree_that_follows_the_rules_passes(tmp_path: Path) -> None:
    write_tree(tmp_path, ALLOWED_TREE)
    assert violations(tmp_path) == []
    assert private_name_uses(tmp_path) == []


KER, ORA, HAR, REP = (f"dsv41_rope/{part}/" for part in ("kernel", "oracle", "harness", "report"))
BAD_IMPORTS = {
    "kernel-oracle": (KER + "api.py", "from dsv41_rope.oracle import eager\n", "api.py:1: imports dsv41_rope.oracle"),
    "kernel-in-def": (KER + "api.py", "def f():\n    import dsv41_rope.report\n", "api.py:2: imports dsv41_rope"),
    "kernel-absolute": (KER + "api.py", "import dsv41_rope.kernel.launch\n", "(the kernel imports its own"),
    "kernel-out": (KER + "api.py", "from .. import harness\n", "(dsv41_rope.kernel must not import dsv41_rope.harn"),
    "vendor-oracle": ("dsv41_rope/vendor.py", "import dsv41_rope.oracle\n", "(dsv41_rope.vendor must not"),
    "oracle-kernel": (ORA + "eager.py", "import dsv41_rope.kernel.api\n", "(dsv41_rope.oracle must not import"),
    "oracle-kernel-by-name": (ORA + "eager.py", "from dsv41_rope import kernel\n", "eager.py:1: imports dsv41_rope.k"),
    "harness-report": (HAR + "backend.py", "from dsv41_rope.report import model\n", "(dsv41_rope.harness must not"),
    "report-conformance": (REP + "model.py", "from ..conformance import checks\n", "(dsv41_rope.report must not"),
    "conformance-benchmarks": ("dsv41_rope/conformance/checks.py", "from benchmarks import run\n", "must not import"),
    "benchmarks-tests": ("benchmarks/run.py", "import tests.test_oracle\n", "(benchmarks must not import tests)"),
    "benchmarks-tools": ("benchmarks/run.py", "from tools import probe\n", "(benchmarks must not import tools)"),
    "tools-tests": ("tools/probe.py", "from tests import test_oracle\n", "(tools must not import tests)"),
    "report-torch": (REP + "model.py", "import torch\n", "model.py:1: imports torch when loaded"),
    "report-matplotlib": (REP + "plot.py", "import matplotlib.figure\n", "plot.py:1: imports matplotlib.figure when"),
    "report-triton-in-a-class": (REP + "model.py", "class Record:\n    import triton\n", "model.py:2: imports trit"),
    "provenance-numpy": (HAR + "provenance.py", "import numpy as np\n", "provenance.py:1: imports numpy when loaded"),
    "backend-oracle": (HAR + "backend.py", "from dsv41_rope.oracle import fma\n", "oracle/fma.py is not on the"),
    "report-compile-lock": (REP + "hooks.py", "from ..harness import compile_lock\n", "compile_lock.py is not on the"),
    "entry-point-plugin": ("dsv41_rope/pytest_plugin.py", "pytest_plugins = ['dsv41_rope.harness.lock']\n", "lock.py"),
    "conftest-checks": ("dsv41_rope/conformance/conftest.py", "from . import checks\n", "checks.py is not on the"),
    "root-conftest-torch": ("conftest.py", "import torch\n", "conftest.py:1: imports torch when loaded"),
    "unknown-part": ("dsv41_rope/extra/x.py", "", "x.py: in dsv41_rope.extra, which the import map does not know"),
}


@pytest.mark.parametrize(("name", "text", "expected"), BAD_IMPORTS.values(), ids=BAD_IMPORTS)
def test_a_planted_bad_import_is_caught(tmp_path: Path, name: str, text: str, expected: str) -> None:
    tree = {**ALLOWED_TREE, name: text, "dsv41_rope/harness/lock.py": "import triton\n"}
    write_tree(tmp_path, {**tree, "dsv41_rope/harness/compile_lock.py": "import triton\n"})
    found = violations(tmp_path)
    assert len(found) == 1 and expected in found[0], found


PRIVATE_USES = {
    "from-import": (
        "from dsv41_rope.oracle.fma import _widen\n",
        "eager.py:1: from dsv41_rope.oracle.fma import _widen",
    ),
    "relative": ("from .fma import _widen as widen\n", "eager.py:1: from dsv41_rope.oracle.fma import _widen"),
    "attribute": (
        "from dsv41_rope.oracle import fma\nfma._widen(1)\n",
        "eager.py:2: fma._widen (dsv41_rope.oracle.fma's",
    ),
    "aliased": (
        "import dsv41_rope.oracle.fma as f\nf._LIMIT\n",
        "eager.py:2: f._LIMIT (dsv41_rope.oracle.fma's private",
    ),
    "dotted": (
        "import dsv41_rope.oracle.fma\nx = dsv41_rope.oracle.fma._LIMIT\n",
        "eager.py:2: dsv41_rope.oracle.fma._L",
    ),
}


@pytest.mark.parametrize(("text", "expected"), PRIVATE_USES.values(), ids=PRIVATE_USES)
def test_a_planted_private_name_use_is_caught(tmp_path: Path, text: str, expected: str) -> None:
    write_tree(tmp_path, {**ALLOWED_TREE, "dsv41_rope/oracle/eager.py": text})
    found = private_name_uses(tmp_path)
    assert len(found) == 1 and expected in found[0], found


def test_own_objects_dunders_and_underscore_are_not_private_uses(tmp_path: Path) -> None:
    text = (
        "from dsv41_rope.oracle import fma\nfrom dsv41_rope.oracle.fma import __doc__, _\n"
        "class Kept:\n    _cache = {}\nKept._cache\nfma.__name__\n"
        "def run(fma):\n    return fma._widen\n"
    )
    write_tree(tmp_path, {**ALLOWED_TREE, "dsv41_rope/oracle/eager.py": text})
    assert private_name_uses(tmp_path) == []


def test_long_files_are_listed(tmp_path: Path) -> None:
    write_tree(tmp_path, {"short.py": "x = 1\n" * MAX_LINES, "long.py": "x = 1\n" * (MAX_LINES + 1)})
    assert long_files(tmp_path, ["short.py", "long.py"]) == [f"long.py: {MAX_LINES + 1} lines"]
