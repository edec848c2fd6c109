"""The DeepSeek V4 RoPE conformance matrix: every adapted peer judged bit for bit and timed side by side on DeepSeek
V4.1's tensors. :mod:`.timing` is the GPU timer (``benchmarks`` time with it too); nothing here imports torch when this
package loads.
"""
