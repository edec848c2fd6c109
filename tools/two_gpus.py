"""Calls across two GPUs, on a host with two or more: ``python -m tools.two_gpus`` (``tools/gpu_gate.sh`` runs it
where two GPUs are visible). With the current device ``cuda:0`` throughout:

1. values on ``cuda:1`` with angles on ``cuda:0`` are refused with the kernel's clear error;
2. values and angles both on ``cuda:1`` give eager's bits on ``cuda:1``: forward, inverse, in place and the backward;
3. the launch runs on ``cuda:1``'s current stream, not on the current device's nor on ``cuda:1``'s default stream:
   that stream is held back by a sleep, and a copy of the output taken on ``cuda:1``'s default stream while it sleeps
   must not yet hold the result (it does once the stream is done).

Prints one line per check and exits 1 when any fails, 2 without two GPUs.
"""

from __future__ import annotations

import sys

import torch

from dsv41_rope.kernel import apply_rope_eager, apply_rope_triton, apply_rope_triton_
from dsv41_rope.oracle.rounding import bits

__all__ = ["SLEEP_CYCLES", "bits_differing", "inputs", "main"]

# About a second of GPU clock cycles: longer than a launch and a copy take to be issued from the host.
SLEEP_CYCLES = 2_000_000_000


def inputs(seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """An index-query-like BF16 tensor ``[2, 256, 8, 128]`` and its float32 angles ``[1, 256, 32]``."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(2, 256, 8, 128, generator=generator).to(torch.bfloat16)
    angles = torch.rand(1, 256, 32, generator=generator) * 1000
    return values.to(device), angles.to(device)


def bits_differing(got: torch.Tensor, expected: torch.Tensor) -> int:
    """How many elements' bits differ (NaN payloads and signs of zeros count)."""
    return int((bits(got) != bits(expected)).sum())


def main() -> int:
    """Runs the three checks; returns 0 when all pass, 1 when any fails, 2 without two CUDA devices."""
    if torch.cuda.device_count() < 2:
        print(f"tools.two_gpus: needs 2 CUDA devices, this host has {torch.cuda.device_count()}")
        return 2
    torch.cuda.set_device(0)
    failed = []

    values, angles = inputs(0, "cuda:1")
    try:
        apply_rope_triton(values, angles.to("cuda:0"))
        failed.append("cross-device: values on cuda:1 with angles on cuda:0 were accepted")
    except ValueError as error:
        print(f"cross-device: refused: {error}")

    for inverse in (False, True):
        expected = apply_rope_eager(values, angles, inverse=inverse)
        differ = bits_differing(apply_rope_triton(values, angles, inverse=inverse), expected)
        in_place = bits_differing(apply_rope_triton_(values.clone(), angles, inverse=inverse), expected)
        leaf = values.detach().requires_grad_(True)
        apply_rope_triton(leaf, angles, inverse=inverse).backward(expected)
        eager_leaf = values.detach().requires_grad_(True)
        apply_rope_eager(eager_leaf, angles, inverse=inverse).backward(expected)
        backward = bits_differing(leaf.grad, eager_leaf.grad)
        print(f"on cuda:1, inverse={inverse}: {differ} differ out of place, {in_place} in place, {backward} backward")
        if differ or in_place or backward:
            failed.append(f"on cuda:1, inverse={inverse}: bits differ from eager")
    print(f"current device during the calls: cuda:{torch.cuda.current_device()}")

    values, angles = inputs(1, "cuda:1")  # fresh inputs: no freed block of an earlier output holds these bits
    expected = apply_rope_eager(values, angles)
    torch.cuda.synchronize(1)
    side = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.device(1):
        torch.cuda.set_stream(side)
        torch.cuda._sleep(SLEEP_CYCLES)  # on side, cuda:1's current stream now
    torch.cuda.set_device(0)
    output = apply_rope_triton(values, angles)
    with torch.cuda.device(1), torch.cuda.stream(torch.cuda.default_stream(1)):
        early = output.to("cpu")  # on cuda:1's default stream, which nothing holds back
    side_was_busy = not side.query()
    torch.cuda.synchronize(1)
    late = bits_differing(output, expected)
    queued = side_was_busy and bits_differing(early, expected.cpu()) > 0
    print(
        f"stream: cuda:1's current stream busy while launching: {side_was_busy}; the output taken on its default "
        f"stream meanwhile {'did not yet hold' if queued else 'already held'} the result; after it, {late} differ"
    )
    with torch.cuda.device(1):
        torch.cuda.set_stream(torch.cuda.default_stream(1))
    if not queued or late:
        failed.append("stream: the launch did not wait on cuda:1's current stream, or its bits differ")

    for failure in failed:
        print(f"FAIL {failure}")
    print("tools.two_gpus:", "PASS" if not failed else f"FAIL ({len(failed)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
