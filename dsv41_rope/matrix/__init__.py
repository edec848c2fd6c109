"""The DeepSeek V4 RoPE conformance matrix: every adapted peer judged bit for bit and timed side by side on DeepSeek
V4.1's tensors. :mod:`.timing` is the GPU timer (``benchmarks`` time with it too) and :mod:`.speed` the speed part
(``python -m dsv41_rope.matrix.speed``); nothing here imports torch when this package loads.
"""
