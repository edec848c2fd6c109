"""Calibration: how a device's eager path computes RoPE, measured, so that the kernel reproduces it bit for bit.

The complex multiply ``(x0 + i x1) * (c + i s)`` is contracted into fmas as nvcc chose when PyTorch was built: per
part, an fma of the first product (``first``), of the second (``second``), or both products rounded (``none``). On a
device's first use, :func:`calibrate` runs its eager multiply on crafted operands and keeps the variant that
reproduces it; it also checks the kernel's libdevice cos/sin against ``torch.polar``. :func:`settings` says what the
kernel then uses; ``DSV41_ROPE_CONTRACTION=<real>/<imag>`` and ``DSV41_ROPE_FREQUENCIES=in-kernel|table`` force it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings

import torch

from .configs import LaunchConfig
from .launch import KernelSettings, launch_kernel
from .runtime import HAVE_TRITON, INTERPRETED, triton

if HAVE_TRITON:
    from .rotary_kernel import frequencies_kernel

__all__ = [
    "CALIBRATIONS",
    "CONTRACTIONS",
    "CONTRACTION_VARIABLE",
    "FREQUENCIES_VARIABLE",
    "MEASURED_CONTRACTION",
    "WARNED",
    "Calibration",
    "calibrate",
    "contraction_probe",
    "frequency_probe_angles",
    "kernel_frequencies",
    "kernel_settings",
    "settings",
]

CONTRACTIONS = ("first", "second", "none")
# The eager CUDA contraction measured on the H200 (torch 2.11.0+cu130): the default where nothing is calibrated.
MEASURED_CONTRACTION = ("first", "first")
CONTRACTION_VARIABLE = "DSV41_ROPE_CONTRACTION"
FREQUENCIES_VARIABLE = "DSV41_ROPE_FREQUENCIES"
_FREQUENCY_SOURCES = {"in-kernel": True, "table": False}


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` established for one device.

    Attributes:
        device: the device, e.g. ``cuda:0``.
        contraction: the variant ``(real, imag)`` whose bits equal the device's eager multiply on every probe
            segment, or None when no single variant does (the eager path then runs on this device).
        in_kernel_frequencies: the kernel's cos/sin equal ``torch.polar``'s on every sampled angle.
        observed: what the probes saw: per segment and part, the variants that matched; the frequency mismatches.
    """

    device: str
    contraction: tuple[str, str] | None
    in_kernel_frequencies: bool
    observed: str


CALIBRATIONS: dict[torch.device, Calibration] = {}
WARNED: set[torch.device] = set()


def _crafted_floats(count: int, seed: int) -> list[float]:
    """``count`` floats in [1, 2) with 23 pseudo-random fraction bits (an LCG: the same on every machine)."""
    state, floats = seed, []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        floats.append(1.0 + (state >> 41) / 2**23)
    return floats


def _crafted_values(factors: torch.Tensor) -> torch.Tensor:
    """complex64 values whose products with ``factors`` nearly cancel, the real part at even and the imaginary part
    at odd positions. In a near-cancellation the three contraction variants round to three different results
    (fma of the first product: ``P - RN(Q)``; of the second: ``RN(P) - Q``; none: ``RN(P) - RN(Q)``, all exact),
    so a few elements tell every pair of variants apart."""
    flat = factors.resolve_conj().reshape(-1).to(torch.complex128)
    cos, sin = flat.real, flat.imag
    first = torch.tensor(_crafted_floats(flat.numel(), seed=flat.numel()), dtype=torch.float64)
    even = torch.arange(flat.numel()) % 2 == 0
    # x0 * cos ~ x1 * sin cancels the real part; x0 * sin ~ -x1 * cos the imaginary part.
    second = torch.where(even, first * cos / sin, -first * sin / cos)
    return torch.complex(first.float(), second.float()).reshape(factors.shape)


def contraction_probe(device: torch.device | str) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The calibration's operands: ``(segment, values, factors)``, complex64 on ``device``, whose eager product
    covers each way PyTorch's elementwise kernels can run it: a vectorized body, a body with a tail, a tensor
    shorter than a vector, a factor broadcast over heads (the RoPE multiply), and a conjugated factor (inverse and
    backward)."""
    cos = torch.tensor(_crafted_floats(4101, seed=1), dtype=torch.float32) - 1.5
    sin = torch.tensor(_crafted_floats(4101, seed=2), dtype=torch.float32) - 0.5
    factors = torch.complex(torch.where(cos.abs() < 1e-3, 0.25, cos), torch.where(sin.abs() < 1e-3, 0.75, sin))
    heads_factors = factors[: 32 * 32].reshape(32, 1, 32)
    segments = [
        ("vector-body", factors[:4096]),
        ("body-and-tail", factors[:4101]),
        ("short", factors[:3]),
        ("broadcast-over-heads", heads_factors),
        ("conjugate", factors[:4096].conj()),
    ]
    probe = []
    for name, segment_factors in segments:
        operand_shape = (32, 4, 32) if name == "broadcast-over-heads" else segment_factors.shape
        values = _crafted_values(segment_factors.expand(operand_shape))
        probe.append((name, values.to(device), segment_factors.to(device)))
    return probe


def _eager_multiply(values: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    return values * factors


def _variant_products(
    probe: list[tuple[str, torch.Tensor, torch.Tensor]], contraction: tuple[str, str]
) -> torch.Tensor:
    """The kernel's products of every probe segment, concatenated, as float32 ``[elements, 2]``."""
    values = torch.cat([v.reshape(-1) for _, v, _ in probe])
    factors = torch.cat([f.expand(v.shape).resolve_conj().reshape(-1) for _, v, f in probe])
    values = torch.view_as_real(values)[None]  # [1, N, 2]: one pair per row
    table = torch.view_as_real(factors)[None, :, None, :]  # [1, N, 1, 2]
    output = torch.empty_like(values)
    settings = KernelSettings(contraction, in_kernel_frequencies=False, source="probe")
    config = LaunchConfig(block_rows=1024, copy_channels=2, rotary_channels=2, num_warps=4)
    launch_kernel(values, table, output, negate_sin=False, settings=settings, config=config)
    return output[0]


def _matching_contraction(
    probe: list[tuple[str, torch.Tensor, torch.Tensor]], multiply
) -> tuple[tuple[str, str] | None, str]:
    """The variant whose bits equal ``multiply``'s on every segment, and what each segment matched."""
    eager = torch.view_as_real(torch.cat([multiply(v, f).reshape(-1) for _, v, f in probe]))
    eager_bits = eager.contiguous().view(torch.int32)
    variants = {name: _variant_products(probe, (name, name)).view(torch.int32) for name in CONTRACTIONS}
    chosen, seen = [], []
    for part, label in enumerate(("real", "imag")):
        uniform, start = set(CONTRACTIONS), 0
        per_segment = []
        for segment, values, _ in probe:
            end = start + values.numel()
            matched = {
                name: bool(torch.equal(bits[start:end, part], eager_bits[start:end, part]))
                for name, bits in variants.items()
            }
            names = [name for name in CONTRACTIONS if matched[name]]
            per_segment.append(f"{segment}={'|'.join(names) or 'none of them'}")
            uniform &= set(names)
            start = end
        seen.append(f"{label}: " + " ".join(per_segment))
        chosen.append(next(iter(uniform)) if len(uniform) == 1 else None)
    contraction = (chosen[0], chosen[1]) if None not in chosen else None
    return contraction, "; ".join(seen)


def frequency_probe_angles(device: torch.device | str) -> torch.Tensor:
    """float32 angles the calibration checks the kernel's cos/sin on: the specials, every sign/exponent/leading
    mantissa bits pattern (subnormals, huge and non-finite angles included) with pseudo-random low bits, and RoPE
    angles of positions up to 2**20."""
    high = torch.arange(2**16, dtype=torch.int64) << 16
    low = torch.tensor([int(f * 2**23) & 0xFFFF for f in _crafted_floats(2**16, seed=3)], dtype=torch.int64)
    patterns = (high | low).to(torch.int32).view(torch.float32)
    specials = torch.tensor(
        [0x0, 0x80000000, 0x1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000],
        dtype=torch.int64,
    )
    positions = torch.arange(0, 2**20, 61, dtype=torch.float32)
    inverse_frequencies = 10000.0 ** (-torch.arange(32, dtype=torch.float32) / 32)
    rope = (positions[:, None] * inverse_frequencies).reshape(-1)
    return torch.cat([specials.to(torch.int32).view(torch.float32), patterns, rope]).to(device)


def kernel_frequencies(angles: torch.Tensor) -> torch.Tensor:
    """The (cos, sin) pairs ``[..., 2]`` the kernel computes in place of ``torch.polar(ones, angles)``."""
    flat = angles.contiguous().reshape(-1)
    output = torch.empty((flat.numel(), 2), dtype=torch.float32, device=angles.device)
    if flat.numel():
        frequencies_kernel[(triton.cdiv(flat.numel(), 1024),)](flat, output, flat.numel(), BLOCK=1024)
    return output.reshape(*angles.shape, 2)


def _libdevice_matches_polar(device: torch.device) -> tuple[bool, str]:
    angles = frequency_probe_angles(device)
    polar = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    differ = (kernel_frequencies(angles).view(torch.int32) != polar.view(torch.int32)).any(-1)
    count = int(differ.sum())
    if not count:
        return True, f"kernel cos/sin == torch.polar on {angles.numel()} sampled angles"
    first = angles[differ][:3].view(torch.int32).tolist()
    examples = ", ".join(f"0x{bits & 0xFFFFFFFF:08X}" for bits in first)
    return False, f"kernel cos/sin differ from torch.polar on {count} of {angles.numel()} angles (e.g. {examples})"


def calibrate(device: torch.device | str | None = None, *, multiply=None) -> Calibration:
    """Measure how ``device``'s eager path computes RoPE, so that the kernel reproduces it bit for bit.

    Runs the device's eager complex multiply on crafted operands (:func:`contraction_probe`) and the kernel's three
    contraction variants on the same ones, and keeps the variant that matches in every segment; checks the kernel's
    cos/sin against ``torch.polar`` on sampled angles (CUDA only: the interpreter keeps torch.polar's table). The
    answer is cached per device; :func:`apply_rope_triton` calls this on its first eager call on a device. Call it
    yourself before capturing CUDA graphs or compiling with torch.compile, where it cannot run.

    Args:
        device: the device; default the current CUDA device (the CPU under the interpreter).
        multiply: the eager complex multiply to reproduce, ``(values, factors) -> product``; default torch's own.
            Passing one (tests pass fakes of known contraction) returns its calibration without caching it.

    Returns:
        The :class:`Calibration`.

    Raises:
        RuntimeError: inside torch.compile tracing or CUDA-graph capture, or without Triton.
    """
    if not HAVE_TRITON:
        raise RuntimeError("calibrate() needs triton")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if torch.compiler.is_compiling() or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        raise RuntimeError(
            "calibrate() runs the eager path and reads its bits back, which torch.compile tracing and CUDA-graph "
            f"capture do not allow: call {_calibrate_call(device)} before them"
        )
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        contraction, seen = _matching_contraction(contraction_probe(device), multiply or _eager_multiply)
        if device.type == "cuda" and not INTERPRETED:
            in_kernel, frequencies_seen = _libdevice_matches_polar(device)
        else:
            in_kernel, frequencies_seen = False, "interpreter: torch.polar's table (its cos/sin are numpy's)"
    calibration = Calibration(str(device), contraction, in_kernel, f"{seen}; {frequencies_seen}")
    if multiply is None:
        CALIBRATIONS[device] = calibration
    return calibration


def _forced(variable: str, allowed: dict[str, object] | None = None) -> object:
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    if allowed is not None:
        if text not in allowed:
            raise ValueError(f"{variable}={text!r}: expected one of {', '.join(allowed)}")
        return allowed[text]
    parts = tuple(text.split("/"))
    if len(parts) != 2 or any(part not in CONTRACTIONS for part in parts):
        raise ValueError(f"{variable}={text!r}: expected <real>/<imag>, each one of {', '.join(CONTRACTIONS)}")
    return parts


def _calibrate_call(device: torch.device) -> str:
    """The call that calibrates ``device`` ahead, as the caller names this package: a vendored copy is imported under
    its own name, e.g. ``rope.calibrate('cuda:0')``, not ``dsv41_rope.kernel.calibrate('cuda:0')``."""
    package = __name__.rpartition(".")[0]
    return f"{package}.calibrate({str(device)!r})"


def settings(device: torch.device | str) -> KernelSettings:
    """The contraction variant and frequency source the kernel uses on ``device`` now (calibrating a CUDA device on
    first use; a forcing environment variable wins)."""
    return kernel_settings(torch.device(device))


def kernel_settings(device: torch.device) -> KernelSettings:
    contraction = _forced(CONTRACTION_VARIABLE)
    in_kernel = _forced(FREQUENCIES_VARIABLE, _FREQUENCY_SOURCES)
    forced = contraction is not None or in_kernel is not None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    calibration = CALIBRATIONS.get(device)
    if calibration is None and device.type == "cuda" and not INTERPRETED:
        if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
            if contraction is None:
                _warn_once(
                    device,
                    f"{device} is not calibrated yet, which cannot happen inside torch.compile tracing or a CUDA-graph "
                    f"capture: the eager path runs; call {_calibrate_call(device)} before them",
                )
            return KernelSettings(contraction, bool(in_kernel), "forced" if forced else "not calibrated: eager path")
        calibration = calibrate(device)
    if calibration is None:  # the interpreter: no eager path of a GPU to measure
        source = "forced" if forced else "interpreter default: the H200's variant"
        return KernelSettings(contraction or MEASURED_CONTRACTION, bool(in_kernel), source)
    if calibration.contraction is None and contraction is None:
        _warn_once(
            device,
            f"the eager complex multiply of {device} matches no single contraction variant, so the eager path runs "
            f"there. The probe saw: {calibration.observed}",
        )
    return KernelSettings(
        contraction or calibration.contraction,
        calibration.in_kernel_frequencies if in_kernel is None else in_kernel,
        "forced" if forced else "calibrated",
    )


def _warn_once(device: torch.device, message: str) -> None:
    if device not in WARNED:
        WARNED.add(device)
        warnings.warn(f"dsv41 rope: {message}", RuntimeWarning, stacklevel=3)
