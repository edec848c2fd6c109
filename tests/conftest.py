"""Fixtures of the self-tests: a pytester project that loads the ulp-drift plugin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def report_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project whose conftest loads the ulp-drift plugin (test modules using it load `pytester`)."""
    # An outer CI job sets this; the inner runs must not append fake reports to its page.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.syspathinsert(REPO)
    pytester.makeconftest('pytest_plugins = ["dsv41_rope.report.pytest_hooks"]\n')
    return pytester
