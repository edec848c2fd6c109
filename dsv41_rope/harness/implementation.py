"""The implementation under test: which RoPE function the suite judges, what it claims, and where its source is.

The suite judges any function with the contract of NeMo Automodel's eager ``_apply_rope(values, angles, *,
inverse=False)``, named ``MODULE[:FUNCTION]`` (``--rope-impl``, ``DSV41_ROPE_IMPL``; the function defaults to
``apply_rope_triton``), and optionally an in-place variant ``(values, angles, *, inverse=False) -> values``
(``--rope-impl-in-place``). ``inverse`` is always passed by keyword. By default it judges the project's kernel,
``dsv41_rope.kernel:apply_rope_triton`` with ``apply_rope_triton_`` in place.

The project's kernel is also the only implementation whose internals (dispatch, calibration, contraction variants,
its own cos/sin) the kernel-specific suites read: :attr:`Implementation.kernel` holds its module, and is None for any
other implementation, a copy of the kernel imported under another module name included.

Behaviour beyond the eager contract is judged where the implementation claims it (:data:`CLAIMS`): by
``--rope-impl-claims``, else by the module's ``ROPE_CONFORMANCE_CLAIMS`` (a sequence of claim names), else all of
them for the project's kernel and none for another.

Which reference a computation is held to is decided from what the call runs (``dsv41_rope.conformance.references``);
``--rope-reference`` (:data:`REFERENCE_CHOICES`) overrides that decision for runs on a CPU.

Nothing here imports torch when it loads: the plugin that parses the options loads in every pytest session of an
environment where the suite is installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dsv41_rope.harness.provenance import kernel_sha256

__all__ = [
    "CLAIMS",
    "CLAIMS_ATTRIBUTE",
    "PROJECT_FUNCTION",
    "PROJECT_IN_PLACE_FUNCTION",
    "PROJECT_MODULE",
    "REFERENCE_CHOICES",
    "FunctionName",
    "Implementation",
    "ImplementationError",
    "Judged",
    "check_calling_convention",
    "judged",
    "load",
    "of_kernel_module",
    "parse_claims",
    "parse_reference",
    "resolve",
    "source_file",
]

PROJECT_MODULE = "dsv41_rope.kernel"
PROJECT_FUNCTION = "apply_rope_triton"
PROJECT_IN_PLACE_FUNCTION = "apply_rope_triton_"
# Behaviour beyond the eager contract that an implementation may claim, and what each claim means (for skip reasons).
CLAIMS = {
    "compile": "torch.compile(fullgraph=True) gives eager-mode bits",
    "cuda-graphs": "CUDA-graph replay gives the direct call's bits",
    "double-backward": "the backward is differentiable (create_graph=True) and its gradient is the forward rotation",
}
CLAIMS_ATTRIBUTE = "ROPE_CONFORMANCE_CLAIMS"
# What a computation on a CPU is held to (``--rope-reference``); on a GPU, always that GPU's own eager path.
REFERENCE_CHOICES = {
    "auto": "eager CUDA's bits as the oracle emulates them for a call that launched a Triton kernel (which stands in "
    "for the GPU's), else the CPU's own eager PyTorch path",
    "cuda-emulated": "eager CUDA's bits as the oracle emulates them, whatever the call runs",
    "cpu-eager": "the CPU's own eager PyTorch path, whatever the call runs",
}


class ImplementationError(ValueError):
    """The implementation named cannot be used: a malformed name, a module that does not import, a missing function."""


@dataclasses.dataclass(frozen=True)
class FunctionName:
    """``MODULE:FUNCTION``, as named on the command line."""

    module: str
    function: str

    @classmethod
    def parse(cls, text: str, *, default_function: str | None, option: str) -> FunctionName:
        """Reads ``MODULE[:FUNCTION]``.

        Args:
            text: what was given.
            default_function: the function when the text names only a module; None makes the function required.
            option: the option or variable the text came from, for messages.

        Raises:
            ImplementationError: on an empty module or function, more than one colon, or a missing required function.
        """
        module, colon, function = text.strip().partition(":")
        if not colon:
            function = default_function or ""
        identifiers = [*module.split("."), *function.split(".")]
        if ":" in function or not all(part.isidentifier() for part in identifiers):
            expected = "MODULE:FUNCTION" if default_function is None else "MODULE[:FUNCTION]"
            example = f"{PROJECT_MODULE}:{PROJECT_FUNCTION}"
            raise ImplementationError(f"{option}={text!r}: expected {expected}, e.g. {example}")
        return cls(module, function)

    def __str__(self) -> str:
        return f"{self.module}:{self.function}"


def resolve(name: FunctionName, option: str) -> tuple[Callable[..., Any], types.ModuleType]:
    """Imports ``name.module`` and returns its callable ``name.function`` (dotted: an attribute path) and the module.

    Raises:
        ImplementationError: naming what was looked up, when the module does not import or has no such callable.
    """
    try:
        module = importlib.import_module(name.module)
    except Exception as error:  # any failure to import is the user's to see, with its own words
        raise ImplementationError(
            f"{option} {name}: cannot import module {name.module!r}: {type(error).__name__}: {error}"
        ) from error
    target: Any = module
    for part in name.function.split("."):
        if not hasattr(target, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            where = getattr(module, "__file__", None) or "a module without a file"
            raise ImplementationError(
                f"{option} {name}: module {name.module!r} ({where}) has no attribute {name.function!r}; its public "
                f"callables: {', '.join(public) or 'none'}"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ImplementationError(f"{option} {name}: {name.function!r} is not callable (a {type(target).__name__})")
    return target, module


def parse_claims(text: str | Iterable[str], option: str) -> frozenset[str]:
    """Reads claims, comma-separated (``compile,cuda-graphs``) or a sequence; ``none`` or nothing claims none.

    Raises:
        ImplementationError: on a claim not in :data:`CLAIMS`.
    """
    words = text.split(",") if isinstance(text, str) else list(text)
    claims = frozenset(word.strip() for word in words if word.strip() and word.strip() != "none")
    unknown = sorted(claims - set(CLAIMS))
    if unknown:
        raise ImplementationError(f"{option}: unknown claims {unknown}; known: {', '.join(CLAIMS)} (or none)")
    return claims


@dataclasses.dataclass(frozen=True)
class Implementation:
    """The RoPE implementation a session judges.

    Attributes:
        function_name: the out-of-place function, ``(values, angles, *, inverse=False) -> tensor``.
        function: that function.
        in_place_name: the in-place function, if one is judged.
        in_place_function: that function, ``(values, angles, *, inverse=False) -> values``, or None.
        claims: the names of :data:`CLAIMS` the implementation claims.
        kernel: the project kernel's module (or a copy the gating-power test made of it) when that is what is judged,
            for the suites of its internals; None for any other implementation.
        reference: a key of :data:`REFERENCE_CHOICES`: what a computation on a CPU is held to.
    """

    function_name: FunctionName
    function: Callable[..., Any]
    in_place_name: FunctionName | None = None
    in_place_function: Callable[..., Any] | None = None
    claims: frozenset[str] = frozenset()
    kernel: types.ModuleType | None = None
    reference: str = "auto"

    @property
    def name(self) -> str:
        """``MODULE:FUNCTION`` of the out-of-place function."""
        return str(self.function_name)

    @property
    def is_project_kernel(self) -> bool:
        """Whether the project's kernel is judged: its internals are then checked too."""
        return self.kernel is not None

    @property
    def runs_triton_kernels(self) -> bool:
        """Whether the implementation's module (or the module that defines its function) holds Triton objects, its
        kernels (``@triton.jit``, autotuned or not): under the interpreter, their casts are the interpreter's."""
        modules = {getattr(self.function, "__module__", None), self.function_name.module}
        for module in filter(None, (sys.modules.get(name or "") for name in modules)):
            if any(type(value).__module__.partition(".")[0] == "triton" for value in vars(module).values()):
                return True
        return False

    def forward(self, values: Any, angles: Any, inverse: Any = False) -> Any:
        """Calls the out-of-place function, ``inverse`` by keyword (Automodel's ``_apply_rope`` takes it so)."""
        return self.function(values, angles, inverse=inverse)

    def calling_convention_error(self, values: Any, angles: Any, inverse: Any = False) -> str | None:
        """Why the out-of-place function cannot be called as ``fn(values, angles, inverse=inverse)`` at all (its
        signature does not take that call: a ``TypeError`` it raises then rejects nothing), or None; None too for a
        callable without a signature to read."""
        try:
            signature = inspect.signature(self.function)
        except (TypeError, ValueError):
            return None
        try:
            signature.bind(values, angles, inverse=inverse)
        except TypeError as error:
            return f"{self.name}{signature} cannot take (values, angles, inverse={inverse!r}): {error}"
        return None

    def in_place(self, values: Any, angles: Any, inverse: Any = False) -> Any:
        """Calls the in-place function, ``inverse`` by keyword.

        Raises:
            RuntimeError: when no in-place function is judged (the in-place suites skip before that).
        """
        if self.in_place_function is None:
            raise RuntimeError(f"{self.name}: no in-place implementation is judged")
        return self.in_place_function(values, angles, inverse=inverse)

    def require(self, claim: str) -> None:
        """Skips the calling test, saying why, unless the implementation claims ``claim`` (a key of :data:`CLAIMS`)."""
        if claim not in CLAIMS:
            raise ValueError(f"unknown claim {claim!r}; known: {', '.join(CLAIMS)}")
        if claim not in self.claims:
            import pytest

            pytest.skip(
                f"{self.name} does not claim {claim} ({CLAIMS[claim]}); claim it with --rope-impl-claims or the "
                f"module's {CLAIMS_ATTRIBUTE}"
            )

    def describe(self) -> dict[str, str]:
        """What a report records of the implementation: functions, source files and their SHA-256 (16 hex digits)."""
        source = source_file(self.function, self.function_name)
        record = {
            "function": self.name,
            "source": str(source) if source else "-",
            "sha256": kernel_sha256(source) or "-",
            "in place": str(self.in_place_name) if self.in_place_name else "none judged",
            "claims": ", ".join(sorted(self.claims)) or "none",
        }
        if self.in_place_name is not None:
            in_place_source = source_file(self.in_place_function, self.in_place_name)
            if in_place_source != source:
                record["in-place source"] = str(in_place_source) if in_place_source else "-"
                record["in-place sha256"] = kernel_sha256(in_place_source) or "-"
        return record


def source_file(function: Callable[..., Any] | None, name: FunctionName) -> Path | None:
    """The source a report names for ``function``: where the module named is a package (or inside one) whose
    submodule defines it, as the kernel package and its vendored copies do, that submodule's package folder; else the
    file of the module that defines it (it may be re-exported by the module named), else of the module named; None for
    modules without a file."""
    defining = getattr(function, "__module__", None) or ""
    package = defining.rpartition(".")[0]
    if package and (package == name.module or package.startswith(f"{name.module}.")):
        folders = list(getattr(sys.modules.get(package), "__path__", None) or ())
        if folders:
            return Path(folders[0])
    for module in (defining, name.module):
        origin = getattr(sys.modules.get(module or ""), "__file__", None)
        if origin:
            return Path(origin)
    return None


def load(
    forward: str | None, in_place: str | None = None, claims: str | None = None, reference: str | None = None
) -> Implementation:
    """Imports the implementation named by the options (each None when not given) and checks that it can be judged.

    Args:
        forward: ``MODULE[:FUNCTION]`` of the out-of-place function; the project's kernel when None.
        in_place: ``MODULE:FUNCTION`` of an in-place function; the project kernel's own when None and the out-of-place
            function is the project's, none otherwise.
        claims: comma-separated claims; see the module docstring for the default.
        reference: a key of :data:`REFERENCE_CHOICES`; ``auto`` when None.

    Raises:
        ImplementationError: naming what was looked up, when anything named cannot be imported or is not callable,
            or an unknown reference.
    """
    reference = parse_reference(reference or "auto", "--rope-reference")
    name = FunctionName.parse(forward or PROJECT_MODULE, default_function=PROJECT_FUNCTION, option="--rope-impl")
    function, module = resolve(name, "--rope-impl")
    project = module.__name__ == PROJECT_MODULE and name.function == PROJECT_FUNCTION
    in_place_name = None
    if in_place:
        in_place_name = FunctionName.parse(in_place, default_function=None, option="--rope-impl-in-place")
    elif project:
        in_place_name = FunctionName(PROJECT_MODULE, PROJECT_IN_PLACE_FUNCTION)
    in_place_function = resolve(in_place_name, "--rope-impl-in-place")[0] if in_place_name else None
    if claims is not None:
        claimed = parse_claims(claims, "--rope-impl-claims")
    elif hasattr(module, CLAIMS_ATTRIBUTE):
        claimed = parse_claims(getattr(module, CLAIMS_ATTRIBUTE), f"{name.module}.{CLAIMS_ATTRIBUTE}")
    else:
        claimed = frozenset(CLAIMS) if project else frozenset()
    kernel = module if project else None
    return Implementation(name, function, in_place_name, in_place_function, claimed, kernel, reference)


def parse_reference(text: str, option: str) -> str:
    """Reads a reference choice (a key of :data:`REFERENCE_CHOICES`).

    Raises:
        ImplementationError: on another word.
    """
    choice = text.strip()
    if choice not in REFERENCE_CHOICES:
        raise ImplementationError(f"{option}={text!r}: expected one of {', '.join(REFERENCE_CHOICES)}")
    return choice


def of_kernel_module(module: types.ModuleType) -> Implementation:
    """The project's kernel as loaded in ``module`` (itself, or a copy the gating-power test mutated), internals and
    all claims included."""
    return Implementation(
        FunctionName(module.__name__, PROJECT_FUNCTION),
        module.apply_rope_triton,
        FunctionName(module.__name__, PROJECT_IN_PLACE_FUNCTION),
        module.apply_rope_triton_,
        frozenset(CLAIMS),
        module,
    )


# What a check accepts as the implementation it judges.
Judged = Implementation | types.ModuleType


def judged(implementation: Judged) -> Implementation:
    """The implementation a check judges: an :class:`Implementation` as it is, a kernel module as
    :func:`of_kernel_module` (the gating-power test hands the checks its mutated copies so)."""
    if isinstance(implementation, types.ModuleType):
        return of_kernel_module(implementation)
    return implementation


def _describe_tensor(tensor: Any) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)} on {tensor.device}"


def check_calling_convention(implementation: Implementation, device: Any) -> None:
    """Calls the implementation as the suite will, once each way, on a tiny valid input: the out-of-place function
    ``fn(values, angles, inverse=False)`` and ``inverse=True`` must return a tensor of the values' shape and dtype,
    the in-place one (if judged) must return ``values``. A function that cannot be called so would fail every test
    with the same ``TypeError``, and pass the bad-input tests for the wrong reason.

    Args:
        implementation: what is judged.
        device: where the suite's tensors live (``dsv41_rope.harness.backend.device()``).

    Raises:
        ImplementationError: naming the call tried, its inputs and what it raised or returned.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    values = torch.randn((1, 2, 2, 8), generator=generator).to(device)
    angles = torch.rand((1, 2, 2), generator=generator).to(device)
    calls = [(implementation.name, implementation.function, False)]
    if implementation.in_place_function is not None:
        calls.append((str(implementation.in_place_name), implementation.in_place_function, True))
    for name, function, in_place in calls:
        for inverse in (False, True):
            given = values.clone()
            call = (
                f"{name}(values, angles, inverse={inverse}) with values {_describe_tensor(given)}, angles "
                f"{_describe_tensor(angles)}"
            )
            try:
                result = function(given, angles, inverse=inverse)
            except Exception as error:  # whatever it raised is what the user must see
                raise ImplementationError(
                    f"--rope-impl{'-in-place' if in_place else ''} {name}: cannot be judged: {call} raised "
                    f"{type(error).__name__}: {error}; the suite calls fn(values, angles, *, inverse=False) with "
                    "inverse by keyword, as Automodel's _apply_rope is called"
                ) from error
            wanted = "values itself" if in_place else "a tensor of the values' shape and dtype"
            if in_place:
                fine = result is given
            else:
                fine = isinstance(result, torch.Tensor) and result.shape == given.shape and result.dtype == given.dtype
            if not fine:
                got = _describe_tensor(result) if isinstance(result, torch.Tensor) else type(result).__name__
                raise ImplementationError(f"--rope-impl {name}: cannot be judged: {call} returned {got}, not {wanted}")
