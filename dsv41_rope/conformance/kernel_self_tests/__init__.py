"""The project kernel's self-tests: its calibration, dispatch, contraction variants and own cos/sin, vendoring, and the
suite's power to catch mutations of it and the plumbing of its generated-case check.

They run when the project's kernel is judged (``./run conformance``, ``python -m pytest --pyargs
dsv41_rope.conformance`` with no ``--rope-impl``), beside the contract suite, and share its fixtures and report. For
another implementation they are not collected at all (``dsv41_rope/conformance/conftest.py``,
``pytest_ignore_collect``): a certification counts only what judged the implementation.
"""
