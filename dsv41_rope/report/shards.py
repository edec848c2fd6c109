"""Shards: what each run records about its part of the suite, and the merge's proof that the parts make up the whole.

Every run records ``metadata["selection"]``: how many tests the unsplit run would select (after ``-k``/``-m``,
before pytest-split deselects) and a fingerprint of their sorted node ids. A run split by pytest-split
(``--splits N --group G``) also records ``metadata["shard"]``: its group, the number of groups, the algorithm, how many
tests it selected and their fingerprint, and the size and fingerprint of every group of the split (computed by
pytest-split's own algorithm from the same selection and durations), so that the merge can name a missing group and
the tests it should have held without a baseline.

`check_shards` judges the inputs of a merge. Reports of several kinds of device (say H200 and B200 runners) are checked
device by device, each device's shards on their own:

- incomplete: a group missing or given twice; a shard interrupted, with tests not run or xdist workers without data;
- inconsistent: shards of different selections, splits, implementations under test or kernel sources, or, for one
  device, of different builds (git commit, torch, triton, CUDA: a baseline holds for one build).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsv41_rope.report.added_metadata import FROM_TESTS
from dsv41_rope.report.model import Report
from dsv41_rope.report.verdict import verdict_status

__all__ = [
    "COMPLETE",
    "IMPLEMENTATION",
    "INCOMPLETE",
    "INCONSISTENT",
    "NOT_CHECKED",
    "SAME_EVERYWHERE",
    "SAME_PER_DEVICE",
    "SELECTION",
    "SHARD",
    "Completeness",
    "ShardRow",
    "check_shards",
    "device_label",
    "digest",
    "selection_record",
    "shard_record",
]

SELECTION = "selection"
SHARD = "shard"
# The key under which the tests record the implementation they judged (`add_run_metadata`).
IMPLEMENTATION = "implementation"
# Run metadata (`dsv41_rope.harness.provenance`) that must agree across every shard of a merge, and across those of
# one device.
SAME_EVERYWHERE = ("kernel_sha256", "git_commit")
SAME_PER_DEVICE = ("torch", "triton", "cuda")

COMPLETE = "complete"
INCOMPLETE = "incomplete"
INCONSISTENT = "inconsistent"
NOT_CHECKED = "not checked"


def digest(nodeids: Iterable[str]) -> str:
    """Returns the fingerprint of a set of tests: the first 16 hex digits of the SHA-256 of their sorted node ids."""
    return hashlib.sha256("\n".join(sorted(nodeids)).encode()).hexdigest()[:16]


def selection_record(nodeids: Sequence[str], rope_impl: str | None) -> dict[str, Any]:
    """Returns ``metadata["selection"]`` of a run.

    Args:
        nodeids: the tests the unsplit run selects.
        rope_impl: the implementation the run was asked to test (``--rope-impl``/``DSV41_ROPE_IMPL``), None for the
            default.
    """
    return {"tests": len(nodeids), "sha256": digest(nodeids), "rope_impl": rope_impl}


def shard_record(
    *,
    group: int,
    splits: int,
    algorithm: str,
    groups: Sequence[Sequence[str]],
    durations_sha256: str | None,
) -> dict[str, Any]:
    """Returns ``metadata["shard"]`` of a run split by pytest-split, before its own tests are known.

    Args:
        group: this run's group, from 1.
        splits: the number of groups.
        algorithm: pytest-split's splitting algorithm.
        groups: the node ids of every group, as pytest-split's algorithm splits the selection.
        durations_sha256: fingerprint of the durations the split used.
    """
    return {
        "group": group,
        "splits": splits,
        "algorithm": algorithm,
        "tests": None,
        "tests_sha256": None,
        "group_tests": [len(g) for g in groups],
        "group_sha256": [digest(g) for g in groups],
        "durations_sha256": durations_sha256,
    }


def device_label(metadata: Mapping[str, Any]) -> str:
    """Returns the kind of device a report ran on, from its provenance: the GPU models ("NVIDIA H200") or "cpu"."""
    gpus = metadata.get("gpu")
    if not gpus:
        return "cpu"
    names = {entry.strip().partition(" ")[2] or entry.strip() for entry in str(gpus).split(",") if entry.strip()}
    return " + ".join(sorted(names))


@dataclass(frozen=True)
class ShardRow:
    """One input of a merge, as the merged report lists it."""

    source: str
    device: str
    group: str
    tests: int | None
    cases: int
    status: str

    def to_json(self) -> dict[str, Any]:
        """Returns the row as plain data."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Completeness:
    """The verdict on a merge's inputs: whether they make up the whole selection, each device on its own."""

    incomplete: tuple[str, ...]
    inconsistent: tuple[str, ...]
    checked: bool
    devices: tuple[str, ...]
    rows: tuple[ShardRow, ...]

    @property
    def status(self) -> str:
        """ "inconsistent", "incomplete", "complete", or "not checked" when no input was split by pytest-split."""
        if self.inconsistent:
            return INCONSISTENT
        if self.incomplete:
            return INCOMPLETE
        return COMPLETE if self.checked else NOT_CHECKED

    @property
    def problems(self) -> tuple[str, ...]:
        """Every problem found, inconsistencies first."""
        return self.inconsistent + self.incomplete

    def to_json(self) -> dict[str, Any]:
        """Returns ``metadata["completeness"]`` of the merged report."""
        return {
            "status": self.status,
            "problems": list(self.problems),
            "devices": list(self.devices),
            "shards": [row.to_json() for row in self.rows],
        }


@dataclass(frozen=True)
class _Input:
    source: str
    report: Report
    device: str

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.report.metadata

    @property
    def shard(self) -> Mapping[str, Any] | None:
        shard = self.metadata.get(SHARD)
        return shard if isinstance(shard, Mapping) else None

    def where(self) -> str:
        shard = self.shard
        part = f", group {shard.get('group')} of {shard.get('splits')}" if shard else ""
        return f"{self.source} ({self.device}{part})"


def check_shards(
    reports: Sequence[Report], sources: Sequence[str], *, expect_splits: int | None = None
) -> Completeness:
    """Checks that the reports of a merge make up whole runs of one selection; see the module docstring.

    Args:
        reports: the inputs of the merge.
        sources: their names (paths), for the messages.
        expect_splits: the number of groups each device's run must have been split into, when the caller knows it
            (a CI workflow's shard count); None accepts what the shards say.
    """
    inputs = [_Input(s, r, device_label(r.metadata)) for s, r in zip(sources, reports, strict=True)]
    incomplete = [problem for item in inputs for problem in _interruption(item)]
    inconsistent = []
    for field in SAME_EVERYWHERE:
        inconsistent += _disagreement(field, inputs, lambda item, f=field: item.metadata.get(f))
    inconsistent += _disagreement(
        "implementation under test", inputs, lambda item: (item.metadata.get(FROM_TESTS) or {}).get(IMPLEMENTATION)
    )
    inconsistent += _disagreement(
        "requested implementation (--rope-impl)",
        inputs,
        lambda item: (item.metadata.get(SELECTION) or {}).get("rope_impl", "not recorded") or "default",
    )
    inconsistent += _disagreement("selection", [item for item in inputs if item.shard], _selection_text)
    devices = sorted({item.device for item in inputs})
    for device in devices:
        of_device = [item for item in inputs if item.device == device]
        for field in SAME_PER_DEVICE:
            inconsistent += _disagreement(f"{field} ({device})", of_device, lambda item, f=field: item.metadata.get(f))
        found_incomplete, found_inconsistent = _check_split(device, of_device, expect_splits)
        incomplete += found_incomplete
        inconsistent += found_inconsistent
    rows = tuple(
        ShardRow(
            source=item.source,
            device=item.device,
            group=f"{item.shard.get('group')}/{item.shard.get('splits')}" if item.shard else "-",
            tests=(item.shard or {}).get("tests", (item.metadata.get(SELECTION) or {}).get("tests")),
            cases=len(item.report.cases),
            status=verdict_status(item.report),
        )
        for item in inputs
    )
    return Completeness(
        incomplete=tuple(incomplete),
        inconsistent=tuple(inconsistent),
        checked=any(item.shard for item in inputs),
        devices=tuple(devices),
        rows=rows,
    )


def _interruption(item: _Input) -> list[str]:
    metadata = item.metadata
    why = []
    if metadata.get("interrupted"):
        not_run = metadata.get("tests_not_run")
        why.append(f"interrupted, {not_run} tests not run" if not_run else "interrupted")
    elif metadata.get("tests_not_run"):
        why.append(f"{metadata['tests_not_run']} tests not run")
    if metadata.get("workers_without_data"):
        why.append("no data from xdist workers " + ", ".join(map(str, metadata["workers_without_data"])))
    return [f"{item.where()}: {'; '.join(why)}"] if why else []


def _disagreement(label: str, inputs: Sequence[_Input], value_of: Any) -> list[str]:
    """One message when the inputs' known (not None) values of something differ, naming which input has which."""
    by_value: dict[str, list[str]] = {}
    for item in inputs:
        value = value_of(item)
        if value is not None:
            by_value.setdefault(str(value), []).append(item.source)
    if len(by_value) < 2:
        return []
    listed = "; ".join(f"{value} ({', '.join(sources)})" for value, sources in sorted(by_value.items()))
    return [f"shards differ in {label}: {listed}"]


def _check_split(device: str, inputs: Sequence[_Input], expect_splits: int | None) -> tuple[list[str], list[str]]:
    """Checks one device's shards: one split of one selection, every group exactly once, each running its group."""
    incomplete: list[str] = []
    inconsistent: list[str] = []
    shards = [item for item in inputs if item.shard]
    unsplit = [item.source for item in inputs if not item.shard]
    if not shards:
        if expect_splits is not None:
            inconsistent.append(f"{device}: {expect_splits} shards expected, but no report was split (--splits)")
        return incomplete, inconsistent
    if unsplit:
        inconsistent.append(f"{device}: split shards merged with reports not split by --splits: {', '.join(unsplit)}")
    inconsistent += _disagreement(
        f"split ({device})",
        shards,
        lambda item: (
            f"{item.shard.get('splits')} groups, {item.shard.get('algorithm')}, "
            f"durations {item.shard.get('durations_sha256')}, groups {item.shard.get('group_sha256')}"
        ),
    )
    if inconsistent or any(_selection_text(item) != _selection_text(shards[0]) for item in shards):
        return incomplete, inconsistent
    reference = shards[0].shard
    splits = int(reference["splits"])
    if expect_splits is not None and splits != expect_splits:
        inconsistent.append(f"{device}: {expect_splits} shards expected, the reports were split into {splits} groups")
    for item in shards:
        group = item.shard.get("group")
        expected = reference["group_sha256"][group - 1] if isinstance(group, int) and 1 <= group <= splits else None
        if item.shard.get("tests_sha256") != expected:
            inconsistent.append(
                f"{item.where()} ran {item.shard.get('tests')} tests that are not group {group} of the recorded split"
            )
    by_group: dict[int, list[str]] = {}
    for item in shards:
        by_group.setdefault(item.shard["group"], []).append(item.source)
    for group in range(1, splits + 1):
        given = by_group.get(group, [])
        if not given:
            incomplete.append(
                f"{device}: group {group} of {splits} missing: it should have held "
                f"{reference['group_tests'][group - 1]} tests"
            )
        elif len(given) > 1:
            incomplete.append(f"{device}: group {group} of {splits} given {len(given)} times: {', '.join(given)}")
    return incomplete, inconsistent


def _selection_text(item: _Input) -> str | None:
    selection = item.metadata.get(SELECTION)
    if not isinstance(selection, Mapping):
        return "not recorded"
    return f"{selection.get('tests')} tests, {selection.get('sha256')}"
