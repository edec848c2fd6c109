"""GPU benchmarks of the fused rotary embedding: ``python -m benchmarks.run`` and ``python -m benchmarks.sweep``."""
