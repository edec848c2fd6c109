"""The DeepSeek V4 RoPE conformance matrix: the suite run against the rotary kernels the field runs
(``dsv41_rope.peers``), side by side with this project's, and what it finds, published (``dsv41-rope matrix``,
docs/matrix.md)."""
