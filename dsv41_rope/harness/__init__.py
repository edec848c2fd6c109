"""The suite's harness: which implementation it judges and where it runs, and where a result came from.

- `implementation`: the implementation under test (``--rope-impl``), its claims and its calling convention.
- `under_test`: the pytest plugin of the ``--rope-impl`` options, the report header, the one-line failures.
- `failures`: how the suite's own comparisons fail, and the line pytest shows for them.
- `backend`: a CUDA device or Triton's interpreter, each xdist worker's GPU, ``-n auto``.
- `devices`: this machine's CUDA, found without importing torch.
- `compile_lock`: one Triton compile per specialization across xdist workers.
- `provenance`: the machine, versions, GPUs, git state and kernel digest a result records.
- `accepted`: where the accepted baselines are (``python -m dsv41_rope.harness.accepted``).

It imports nothing of `dsv41_rope.report`, which imports `provenance` from here.
"""

__all__: list[str] = []
