"""The README and the docs name only what exists: every dotted ``dsv41_rope...`` name resolves to a module or an
attribute of one (``python -m dsv41_rope.report``, ``dsv41_rope.kernel:apply_rope_triton``, and ``merge_cli.EXIT_*`` as
a prefix), every path of the checkout they give is a file or folder (braces and ``*`` expanded), and every private name
in backticks (``_interpreter_config``) is defined in the module it is given with (``merge_cli._x``), else somewhere in
the package. Names of other projects that the docs give are listed in :data:`NOT_OURS`, each with why."""

from __future__ import annotations

import ast
import functools
import importlib
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dsv41_rope"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# Private names the docs give that are not this project's to define.
NOT_OURS = {
    "_apply_rope": "NeMo Automodel's eager function, the one the kernel replaces",
    "_private": "the word for any private name, in the import rules",
}
# Paths the docs give that a run makes (the checkout ignores them), each with what makes it.
MADE_BY_A_RUN = {".ci/.venv": "the CI scripts' tools, installed on first use"}
DOTTED = re.compile(r"\bdsv41_rope(?:\.[A-Za-z_]\w*)*\*?(?::[A-Za-z_][\w.]*)?")
# A path of the checkout: a top-level folder of it, then anything a path holds, braces and globs included; one after
# `REV:` (git show 34d07f5:benchmarks/...) is of that revision's tree.
PATH = re.compile(
    r"(?<![\w./-])(?<![0-9a-f]:)(?<!\^:)(?:dsv41_rope|tests|tools|benchmarks|docs|\.ci|\.github)/[\w./*{},<>-]*"
)
BACKTICKED = re.compile(r"`([^`\n]+)`")
PRIVATE = re.compile(r"^(?:(?P<module>[A-Za-z_][\w.]*)\.)?(?P<name>_[A-Za-z]\w*)\b")


def doc_id(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def resolve(name: str) -> str | None:
    """Why a dotted name (``module[.attribute...][:function]``, a last part ending in ``*`` a prefix) does not resolve,
    or None where it does."""
    dotted, _, function = name.partition(":")
    parts = dotted.split(".")
    for count in range(len(parts), 0, -1):
        module_name = ".".join(parts[:count])
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                continue
            return f"importing {module_name} fails: {error}"
        break
    else:
        return "no module of that name"
    attributes = parts[count:] + (function.split(".") if function else [])
    for attribute in attributes:
        if attribute.endswith("*"):
            if not any(candidate.startswith(attribute[:-1]) for candidate in dir(target)):
                return f"{getattr(target, '__name__', target)!s} has no attribute starting {attribute[:-1]!r}"
            return None
        if not hasattr(target, attribute):
            return f"{getattr(target, '__name__', target)!s} has no attribute {attribute!r}"
        target = getattr(target, attribute)
    return None


def expanded(pattern: str) -> list[str]:
    """A path as a doc writes it, braces expanded and ``<placeholder>`` parts as ``*``."""
    pattern = re.sub(r"<[^<>/]+>", "*", pattern)
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    return list(
        itertools.chain.from_iterable(
            expanded(pattern[: match.start()] + choice + pattern[match.end() :]) for choice in match.group(1).split(",")
        )
    )


def missing_path(path: str) -> bool:
    return not any(
        any(REPO.glob(candidate)) if "*" in candidate else (REPO / candidate).exists() for candidate in expanded(path)
    )


@functools.cache
def defined_names(file: Path) -> frozenset[str]:
    """Every name a Python file defines: functions, classes, assigned names and attributes, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return frozenset(names)


def package_files(module: str | None = None) -> list[Path]:
    """The package's Python files, or those of the modules whose dotted name ends with ``module`` (``merge_cli``,
    ``report.merge_cli``, ``dsv41_rope.report.merge_cli``)."""
    files = [path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts]
    if module is None:
        return files

    def dotted(path: Path) -> str:
        parts = path.relative_to(REPO).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return [path for path in files if f".{dotted(path)}".endswith(f".{module}")]


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_dotted_name_resolves(doc: Path) -> None:
    names = sorted(set(DOTTED.findall(doc.read_text(encoding="utf-8"))))
    problems = {name: problem for name in names if (problem := resolve(name))}
    assert not problems, f"{doc_id(doc)} names what does not exist (got: why, expected: a module or attribute):\n" + (
        "\n".join(f"  {name}: {problem}" for name, problem in problems.items())
    )


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_path_exists(doc: Path) -> None:
    paths = {path.rstrip(".,") for path in PATH.findall(doc.read_text(encoding="utf-8"))}
    missing = sorted(path for path in paths - set(MADE_BY_A_RUN) if missing_path(path))
    assert not missing, f"{doc_id(doc)} gives paths the checkout does not have: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_private_name_is_defined(doc: Path) -> None:
    problems = []
    for span in BACKTICKED.findall(doc.read_text(encoding="utf-8")):
        match = PRIVATE.match(span)
        if match is None or match["name"] in NOT_OURS or match["name"].startswith("__"):
            continue
        module, name = match["module"], match["name"]
        if module is not None and module.split(".")[0] == "dsv41_rope":
            continue  # a dotted name: test_every_dotted_name_resolves
        files = package_files(module)
        if module is not None and not files:
            continue  # another project's module
        if not any(name in defined_names(file) for file in files):
            problems.append(f"`{span}`: no {name} in {module or 'the package'}")
    assert not problems, f"{doc_id(doc)} gives private names nothing defines: {problems}"
