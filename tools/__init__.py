"""Maintained developer tools of dsv41-rope, run from a checkout and never installed by the wheel.

- :mod:`tools.build_cost`: the kernel built for sm_90 off the GPU: build seconds, and whether every DeepSeek
  specialization builds to another kernel source's SASS.
- :mod:`tools.kernel_source`: one interface over a kernel source, a package directory or an old single file.
- :mod:`tools.launch_recorder`: a pytest plugin recording the launches the kernel's launch rule configures.
- :mod:`tools.suite_profile`: a pytest plugin and summary of where the conformance suite's time goes.
- :mod:`tools.same_cases`: whether two ulp-drift reports hold the same cases with the same numbers.
- :mod:`tools.memcheck`: small edge cases through every entry point, for ``compute-sanitizer``.
- :mod:`tools.two_gpus`: calls across two GPUs (device checks, the current stream of the values' device).
- ``tools/gpu_gate.sh``: the GPU gate on any CUDA machine; ``tools/export_kernel.sh``: a revision's kernel source;
  ``tools/fetch_flash_rotary.sh``: flash-attention's Triton rotary kernel, the benchmarks' peer.
"""

__all__: list[str] = []
