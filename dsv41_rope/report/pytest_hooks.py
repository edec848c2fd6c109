"""The ulp-drift report's pytest plugin: the ``--ulp-*`` options, the ``ulp_drift`` fixture and `add_run_metadata`.

Listed by :mod:`dsv41_rope.pytest_plugin` (the distribution's pytest11 entry point); a project that wants the report
alone loads it with ``pytest_plugins = ["dsv41_rope.report.pytest_hooks"]``. Tests call ``ulp_drift.record(...)`` with
the numbers ``dsv41_rope.oracle.ulp`` computed; the run ends with a summary table, and optionally a report directory
(``--ulp-report``), a baseline gate (``--ulp-baseline``) and a new baseline (``--ulp-save-baseline``). Code running in
the session (a fixture, a hook) adds run-level metadata to the report with `add_run_metadata`.

Each process of a run (a serial run, an xdist worker, the controller) gets one `UlpDriftSession`, registered here for
the run's other hooks. The modules of the plugin, one concern each:

- `options`: the ``--ulp-*`` options;
- `run_session`: the session object, which keeps each test's records until its outcome is known;
- `xdist_transfer`: records and metadata from xdist workers to the controller;
- `run_end`: the merged report with its provenance, the baseline gate, the files written, the terminal section;
- `selection`: which tests the run selected and, under pytest-split, which group it ran.

Data model, comparison and rendering live in the rest of the `dsv41_rope.report` package, which never imports pytest.
"""

from __future__ import annotations

from typing import Any

import pytest

from dsv41_rope.report.options import add_options
from dsv41_rope.report.recording import UlpDriftRecorder
from dsv41_rope.report.run_session import UlpDriftSession
from dsv41_rope.report.selection import RECORDER_PLUGIN

__all__ = ["add_run_metadata", "pytest_addoption", "pytest_configure", "pytest_unconfigure", "ulp_drift"]

_SESSION = pytest.StashKey[UlpDriftSession]()
_SESSION_PLUGIN = "ulp-drift-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds the --ulp-* options."""
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Creates the per-run session object and registers it for the run's hooks."""
    session = UlpDriftSession(config)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, _SESSION_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregisters the session object (pytester runs many configs in one process)."""
    session = config.stash.get(_SESSION, None)
    if session is not None:
        recorder = session.selection_recorder
        if recorder is not None and config.pluginmanager.get_plugin(RECORDER_PLUGIN) is recorder:
            config.pluginmanager.unregister(recorder)
        config.pluginmanager.unregister(session)
        del config.stash[_SESSION]


def add_run_metadata(config: pytest.Config, key: str, value: Any) -> None:
    """Adds run-level metadata to this run's ulp-drift report, from anywhere in the session (a fixture, a hook).

    It ends up in the report's JSON as ``metadata["from_tests"][key]`` and at the top of the Markdown, as a line
    "key: value" or, for a dict, a small table. On an xdist worker the value travels to the controller with the
    worker's records. Values of one key from several calls, workers or shards merge: dicts key by key (so each worker
    can add one entry per device), equal values collapse to one, different values become a sorted list of them.

    A fixture calls it with its request's config::

        @pytest.fixture(scope="session")
        def contraction(request, device):
            variant = calibrate(device)
            add_run_metadata(request.config, "contraction variant", {f"{device} ({name(device)})": variant})
            return variant

    Args:
        config: the session's config (``request.config``, the ``pytestconfig`` fixture).
        key: a non-empty name, shown as it is.
        value: JSON-able data: None, a bool, number or string, a list of them (taken as several values), or a dict
            with string keys of such values; numpy and torch scalars are converted.

    Raises:
        ValueError: on an empty key.
        TypeError: on a value JSON cannot hold.
        RuntimeError: when this plugin is not active in the session.
    """
    session = config.stash.get(_SESSION, None)
    if session is None:
        raise RuntimeError(
            'the ulp-drift plugin is not active: load it with pytest_plugins = ["dsv41_rope.report.pytest_hooks"]'
        )
    session.add_run_metadata(key, value)


@pytest.fixture
def ulp_drift(request: pytest.FixtureRequest) -> UlpDriftRecorder:
    """Records the ulp-drift of the comparisons the test makes; see `UlpDriftRecorder.record`."""
    callspec = getattr(request.node, "callspec", None)
    session = request.config.stash[_SESSION]
    return UlpDriftRecorder(
        session,
        nodeid=session.report_nodeid(request.node),
        case_id=callspec.id if callspec is not None else "",
        # junit XML readers see each comparison's mismatch count too, without parsing the ulp-drift report.
        properties=request.node.user_properties,
    )
