"""The ulp-drift report's data: one record per comparison, the whole run, and their strict-JSON form.

A report is read, written and compared the same way everywhere (a runner, an xdist controller, the shard merger), so
the schema, the record fields and the JSON codec live here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "COMPLETENESS",
    "DIFFERENCE_KINDS",
    "JSON_NAME",
    "MARKDOWN_NAME",
    "MISMATCH",
    "NAN_BITS",
    "PNG_NAME",
    "SCHEMA",
    "SIGNED_ZERO",
    "CaseRecord",
    "Report",
    "ReportError",
    "case_key",
    "decode_non_finite",
    "encode_non_finite",
    "plain",
    "portable_metadata",
    "portable_nodeid",
    "summary_value",
]

SCHEMA = "dsv41-rope/ulp-drift/1"
JSON_NAME = "ulp-drift.json"
MARKDOWN_NAME = "ulp-drift.md"
PNG_NAME = "ulp-drift.png"

# Where a merged report says whether its shards make up the whole selection (`dsv41_rope.report.shards`).
COMPLETENESS = "completeness"

# Names of the difference kinds a comparison may list in `allowed`; other words are kept and shown but match nothing.
MISMATCH = "mismatch"
NAN_BITS = "nan-bits"
SIGNED_ZERO = "signed-zero"
DIFFERENCE_KINDS = (MISMATCH, NAN_BITS, SIGNED_ZERO)

# Strict JSON has no inf/nan, yet an ulp error is infinite when a NaN meets a number; spell them as strings.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class ReportError(ValueError):
    """A report cannot be read, or several reports cannot be merged."""


def case_key(nodeid: str, comparison: str, device_name: str = "") -> str:
    """Returns the key of one record: the test's node id and the comparison label, joined by `::`.

    A report merged from several kinds of device keeps each device's cases apart: their keys start with the device's
    name in brackets, e.g.
    `[NVIDIA H200] dsv41_rope/conformance/test_forward_bits.py::test_forward[...]::fused-vs-eager`.
    """
    key = f"{nodeid}::{comparison}"
    return f"[{device_name}] {key}" if device_name else key


def portable_nodeid(nodeid: str, path: Path | None) -> str:
    """Returns a test's node id as a checkout of its package gives it, wherever the package is installed.

    pytest names a test by its file's path from the root directory, which for an installed suite (``--pyargs
    dsv41_rope.conformance`` from any folder) is not the checkout's. The report names it by the file's path from the
    folder above its top-level package (``dsv41_rope/conformance/test_forward_bits.py::test_fused_equals_oracle[...]``),
    so that runs of a checkout and of an installed suite share case keys, and an accepted baseline gates both. A test
    file outside a package keeps its node id.

    Args:
        nodeid: pytest's node id of the test.
        path: the test's file.
    """
    if path is None or not (path.parent / "__init__.py").is_file():
        return nodeid
    top = path.parent
    while (top.parent / "__init__.py").is_file():
        top = top.parent
    _, separator, rest = nodeid.partition("::")
    return f"{path.relative_to(top.parent).as_posix()}{separator}{rest}"


# An absolute path inside a metadata string: a slash that starts a word, up to the next space or quote.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:~-])/[^\s'\"]*")


def portable_metadata(value: Any, root: Path) -> Any:
    """Returns report metadata with no absolute path in it, for a baseline that ships: a path under ``root`` (the
    checkout) becomes relative to it, one inside a ``dsv41_rope`` package relative to the package's parent, and any
    other keeps its last component (``--ulp-report /tmp/x/report`` -> ``--ulp-report report``).

    Args:
        value: the metadata, or any part of it (dicts, lists and strings are walked; other values kept).
        root: the checkout the run was made in.
    """
    if isinstance(value, Mapping):
        return {key: portable_metadata(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable_metadata(item, root) for item in value]
    if not isinstance(value, str):
        return value
    prefix = root.resolve().as_posix().rstrip("/") + "/"

    def relative(match: re.Match[str]) -> str:
        path = match.group(0)
        if (path + "/").startswith(prefix):
            return path[len(prefix) :] or "."
        if "/dsv41_rope/" in path + "/":
            return path[path.rindex("/dsv41_rope") + 1 :]
        return path.rstrip("/").rsplit("/", 1)[-1] or path

    return _ABSOLUTE_PATH.sub(relative, value)


def plain(value: Any) -> Any:
    """Converts numpy/torch scalars and arrays inside `value` to Python numbers and lists, recursively.

    Args:
        value: a summary as `dsv41_rope.oracle.ulp.summarize` returns it, or any part of one.

    Returns:
        The same structure built from dict, list, str, int, float, bool and None only.
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays, torch tensors
        return plain(value.tolist())
    if isinstance(value, Sequence):
        return [plain(v) for v in value]
    raise TypeError(f"cannot store a {type(value).__name__} in the ulp-drift report: {value!r}")


def encode_non_finite(value: Any) -> Any:
    """Returns `value` with non-finite floats spelled "inf", "-inf", "nan" (recursively), as strict JSON needs."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: encode_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encode_non_finite(v) for v in value]
    return value


def decode_non_finite(value: Any) -> Any:
    """Undoes `encode_non_finite`: the strings "inf", "-inf" and "nan" become floats again (recursively)."""
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, dict):
        return {k: decode_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_non_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class CaseRecord:
    """What one test recorded about one comparison, plus the test's case id and outcome.

    Counts come from `dsv41_rope.oracle.ulp.compare_bits`; `elementwise` and `normwise` are
    `dsv41_rope.oracle.ulp.summarize` dicts (max, mean, p99, histogram, correctly_rounded_fraction, count) or None when
    the comparison has no float64 truth.
    """

    nodeid: str
    comparison: str
    case_id: str
    outcome: str
    dtype: str
    backend: str
    device: str
    elements: int
    mismatches: int
    nan_bit_differences: int = 0
    signed_zero_differences: int = 0
    max_distance: int = 0
    elementwise: dict[str, Any] | None = None
    normwise: dict[str, Any] | None = None
    allowed: str = ""
    detail: str = ""
    # The kind of device (e.g. "NVIDIA H200"), set only when a merge keeps several kinds apart; omitted from JSON when
    # empty, so a report of one kind of device reads as it always did.
    device_name: str = ""

    @property
    def key(self) -> str:
        """The record's key in the report: `<nodeid>::<comparison>`, prefixed by `[device_name] ` when it has one."""
        return case_key(self.nodeid, self.comparison, self.device_name)

    @property
    def allowed_kinds(self) -> frozenset[str]:
        """The words of `allowed`, e.g. {"signed-zero", "nan-bits"}."""
        return frozenset(word.strip() for word in self.allowed.split(",") if word.strip())

    def differences(self) -> dict[str, int]:
        """Returns the non-zero difference counts by kind (mismatch, nan-bits, signed-zero)."""
        counts = {
            MISMATCH: self.mismatches,
            NAN_BITS: self.nan_bit_differences,
            SIGNED_ZERO: self.signed_zero_differences,
        }
        return {kind: count for kind, count in counts.items() if count}

    def unexpected_differences(self) -> dict[str, int]:
        """Returns the non-zero difference counts whose kind `allowed` does not list."""
        return {kind: n for kind, n in self.differences().items() if kind not in self.allowed_kinds}

    def to_json(self) -> dict[str, Any]:
        """Returns the record as strict-JSON-ready data (non-finite floats spelled as strings)."""
        # A shallow dict: encode_non_finite copies the nested summaries (dataclasses.asdict deep-copied them first,
        # most of the time a report of 8495 cases took to write).
        data = {name: getattr(self, name) for name in _CASE_FIELDS}
        if not data["device_name"]:
            del data["device_name"]
        return encode_non_finite(data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseRecord:
        """Builds a record from `to_json` output; unknown keys are an error so schema drift is loud."""
        unknown = set(data) - set(_CASE_FIELDS)
        if unknown:
            raise ReportError(f"unknown case fields {sorted(unknown)}")
        return cls(**decode_non_finite(dict(data)))


_CASE_FIELDS = tuple(f.name for f in dataclasses.fields(CaseRecord))


@dataclass
class Report:
    """A whole ulp-drift run: its cases by key, run metadata, and the ulp histogram bin edges.

    Histograms inside the cases are counts over `histogram_edges`, so merging runs means summing lists; edges are
    None when no record carried a histogram or the edges were not known to the recording process.
    """

    cases: dict[str, CaseRecord] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    histogram_edges: list[float] | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns the report in its JSON form, cases sorted by key so equal runs give equal files."""
        return {
            "schema": SCHEMA,
            "metadata": encode_non_finite(self.metadata),
            "histogram_edges": encode_non_finite(self.histogram_edges),
            "cases": {key: self.cases[key].to_json() for key in sorted(self.cases)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "report") -> Report:
        """Reads `to_json` output back.

        Raises:
            ReportError: on another schema or malformed cases, naming `source`.
        """
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
            raise ReportError(f"{source}: expected schema {SCHEMA!r}, found {found!r}")
        cases: dict[str, CaseRecord] = {}
        for key, raw in data.get("cases", {}).items():
            try:
                record = CaseRecord.from_json(raw)
            except (TypeError, ReportError) as error:
                raise ReportError(f"{source}: case {key!r}: {error}") from error
            if record.key != key:
                raise ReportError(f"{source}: case stored under {key!r} has key {record.key!r}")
            cases[key] = record
        metadata = decode_non_finite(dict(data.get("metadata", {})))
        return cls(cases=cases, metadata=metadata, histogram_edges=decode_non_finite(data.get("histogram_edges")))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Reads a report (or a baseline, which is a report) from a JSON file.

        Raises:
            ReportError: when the file is missing, not JSON, or not an ulp-drift report.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ReportError(f"{path}: {error}") from error
        return cls.from_json(data, source=str(path))

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        """Writes the report as JSON (strict: no NaN/Infinity literals) and returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
        return path


def summary_value(summary: Mapping[str, Any] | None, name: str) -> float | None:
    """Returns one number of a `dsv41_rope.oracle.ulp.summarize` dict (e.g. "max") as a float, None when it is not
    there."""
    if summary is None or summary.get(name) is None:
        return None
    return float(summary[name])
