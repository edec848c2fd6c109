"""The suite's pytest plugin, registered as the distribution's pytest11 entry point ``dsv41_rope``: the implementation
under test (``--rope-impl``, :mod:`dsv41_rope.harness.under_test`) and the ulp-drift report
(:mod:`dsv41_rope.report.pytest_hooks`), each a plugin module that pytest imports with this one.

``-p no:dsv41_rope`` keeps it out of a session. A checkout's root conftest registers it under the entry point's name
(:func:`register_once`), so pytest loads it once either way and the same option blocks it there too. Neither module
imports torch when it loads. Installed, it loads in every pytest session of the environment, and stays out of those
that do not ask for the suite (``dsv41_rope.harness.under_test.suite_requested``): their header, ``-n auto`` count and
outputs are what they would be without it; only its options are added."""

from __future__ import annotations

import sys

import pytest

__all__ = ["PLUGIN_NAME", "pytest_plugins", "register_once"]

# The pytest11 entry point's name (pyproject.toml), the name `-p no:` takes.
PLUGIN_NAME = "dsv41_rope"

pytest_plugins = ["dsv41_rope.harness.under_test", "dsv41_rope.report.pytest_hooks"]


def register_once(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Registers this plugin under :data:`PLUGIN_NAME` unless it is registered already (by the entry point, under any
    name) or blocked (``-p no:dsv41_rope``); pluggy refuses a module registered twice under two names.

    Returns:
        Whether this call registered it.
    """
    plugin = sys.modules[__name__]
    if pluginmanager.is_blocked(PLUGIN_NAME) or pluginmanager.is_registered(plugin):
        return False
    pluginmanager.register(plugin, PLUGIN_NAME)
    return True
