"""The suite's pytest plugin, registered as the distribution's pytest11 entry point: the implementation under test
(``--rope-impl``, :mod:`dsv41_rope.harness.under_test`) and the ulp-drift report
(:mod:`dsv41_rope.report.pytest_hooks`), each a plugin module that pytest imports with this one.

A checkout's root conftest loads it by the same name, so pytest loads it once either way. Neither module imports torch
when it loads. Installed, it loads in every pytest session of the environment, and stays out of those that do not ask
for the suite (``dsv41_rope.harness.under_test.suite_requested``): their header, ``-n auto`` count and outputs are
what they would be without it; only its options are added."""

__all__ = ["pytest_plugins"]

pytest_plugins = ["dsv41_rope.harness.under_test", "dsv41_rope.report.pytest_hooks"]
