"""pytest glue for sharded runs: which tests the whole, unsplit run selects, and which part of them a shard runs.

The ulp-drift session (`dsv41_rope.report.run_session`) registers a `SelectionRecorder` at the start of each session;
in every process that collects (a serial run, each xdist worker) it records, for the report's metadata:

- ``selection``: the tests the unsplit run would select (after ``-k``, ``-m`` and ``--deselect``, before pytest-split
  deselects the other groups), as a count and a fingerprint of their sorted node ids, and the implementation the run
  was asked to test (``--rope-impl`` or ``DSV41_ROPE_IMPL``);
- ``shard``, under pytest-split (``--splits N --group G``): the group, the count and fingerprint of the tests this
  shard runs, and the count and fingerprint of every group, split by pytest-split's own algorithm from the same
  selection and durations file, so that the merge can prove the shards make up the whole (`dsv41_rope.report.shards`).

It also keeps the node ids (as the report names them) of the tests this process runs once every plugin has deselected
its part (``selected``): the baseline gate expects the baseline's cases of those tests only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

import pytest

from dsv41_rope.report import SELECTION, SHARD, digest, portable_nodeid, selection_record, shard_record

__all__ = [
    "PYTEST_SPLIT_PLUGIN",
    "RECORDER_PLUGIN",
    "ROPE_IMPL_ENV",
    "SelectionRecorder",
    "load_durations",
    "register_recorder",
    "requested_implementation",
    "split_groups",
]

# The environment variable that names the implementation under test when --rope-impl is not given.
ROPE_IMPL_ENV = "DSV41_ROPE_IMPL"
# The names pytest-split registers its splitting plugin under, and this module its recorder under.
PYTEST_SPLIT_PLUGIN = "pytestsplitplugin"
RECORDER_PLUGIN = "ulp-drift-selection"


def requested_implementation(config: pytest.Config) -> str | None:
    """Returns the implementation the run was asked to test: ``--rope-impl``, else ``$DSV41_ROPE_IMPL``, else None."""
    return config.getoption("--rope-impl", None) or os.environ.get(ROPE_IMPL_ENV) or None


def load_durations(path: str | os.PathLike[str] | None) -> dict[str, float]:
    """Reads a pytest-split durations file (a dict, or the older list of pairs); an absent file gives no durations."""
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except FileNotFoundError:
        return {}
    return dict(data)


def split_groups(items: Sequence[Any], splits: int, algorithm: str, durations: dict[str, float]) -> list[list[str]]:
    """Returns the node ids of each group as pytest-split's algorithm splits `items` (pytest items, in order)."""
    from pytest_split import algorithms

    groups = algorithms.Algorithms[algorithm].value(splits, list(items), durations)
    return [[item.nodeid for item in group.selected] for group in groups]


def register_recorder(config: pytest.Config) -> SelectionRecorder:
    """Registers a `SelectionRecorder` where it sees the unsplit selection, and returns it.

    Both it and pytest-split's plugin choose tests in a trylast ``pytest_collection_modifyitems``, after ``-k``, ``-m``
    and ``--deselect``; pluggy calls trylast implementations in the order their plugins were registered. So
    pytest-split's plugin, when registered already, is registered again after the recorder: the recorder then sees the
    selection before pytest-split keeps one group, whatever order the plugins were loaded in. The recorder checks the
    group it sees run against the one it recorded, and the merge checks it again.
    """
    recorder = SelectionRecorder()
    manager = config.pluginmanager
    split = manager.get_plugin(PYTEST_SPLIT_PLUGIN)
    if split is not None:
        manager.unregister(split)
    manager.register(recorder, RECORDER_PLUGIN)
    if split is not None:
        manager.register(split, PYTEST_SPLIT_PLUGIN)
    return recorder


class SelectionRecorder:
    """Records the selection and, under pytest-split, the shard of the process's collection; see the module docstring
    and `register_recorder` for where it must sit among the plugins."""

    def __init__(self) -> None:
        self.selection: dict[str, Any] | None = None
        self.shard: dict[str, Any] | None = None
        # The tests this process runs, by the node ids their records carry; None before collection finishes.
        self.selected: list[str] | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Records the selection and, under pytest-split, every group of the split."""
        nodeids = [item.nodeid for item in items]
        self.selection = selection_record(nodeids, requested_implementation(config))
        splits, group = config.getoption("splits", None), config.getoption("group", None)
        if not (splits and group):
            return
        algorithm = config.getoption("splitting_algorithm")
        durations = load_durations(config.getoption("durations_path"))
        relevant = {nodeid: durations[nodeid] for nodeid in sorted(nodeids) if nodeid in durations}
        self.shard = shard_record(
            group=group,
            splits=splits,
            algorithm=algorithm,
            groups=split_groups(items, splits, algorithm, durations),
            durations_sha256=hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:16] if relevant else None,
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Records the tests this process runs (and, under pytest-split, this shard's record of them): what is left
        once every plugin has deselected its part.

        Raises:
            pytest.UsageError: when they are not the group recorded for it, which would make the shard unprovable.
        """
        self.selected = [portable_nodeid(item.nodeid, getattr(item, "path", None)) for item in session.items]
        if self.shard is None:
            return
        nodeids = [item.nodeid for item in session.items]
        self.shard.update(tests=len(nodeids), tests_sha256=digest(nodeids))
        group = self.shard["group"]
        if self.shard["tests_sha256"] != self.shard["group_sha256"][group - 1]:
            raise pytest.UsageError(
                f"ulp-drift: this shard runs {len(nodeids)} tests that are not group {group} of the split recorded "
                f"before pytest-split deselected ({self.shard['group_tests'][group - 1]} tests): another plugin "
                "changed the selection after the split was recorded"
            )

    def metadata(self) -> dict[str, Any]:
        """Returns what was recorded, as report metadata (``selection`` and ``shard``); empty before collection."""
        found = {SELECTION: self.selection, SHARD: self.shard}
        return {key: value for key, value in found.items() if value is not None}
