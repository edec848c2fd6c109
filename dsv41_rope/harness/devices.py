"""This machine's CUDA, found without importing torch: the CUDA version torch was built for, and the GPUs the driver
lists.

Importing torch and initializing CUDA takes 3-7 s a process on the H200 (docs/ci.md). The processes that never run a
test, `./run` deciding which python and baseline to use and the xdist controller that only hands tests out to its
workers (its worker count, its header, its report's metadata), ask here instead: torch's own ``version.py`` says
what it was built for, and the CUDA driver (``libcuda``, through ctypes) lists the devices as the CUDA runtime numbers
them (``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` apply), with their names and memory, without creating a
context. ``python -m dsv41_rope.harness.devices`` exits 0 when a python can run the kernel on a GPU: CUDA torch,
triton and a device (what `./run` asks of each python).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "CudaDevice",
    "cuda_usable",
    "driver_devices",
    "listed_devices",
    "main",
    "torch_cuda_version",
    "torch_version",
]

# torch's version.py assigns each field of its build (`__version__ = '2.11.0+cu130'`, `cuda: Optional[str] = '13.0'`).
_BUILD_FIELD = r"^{name}\b[^=\n]*=\s*['\"]([^'\"]+)['\"]"
_NAME_BYTES = 256


@dataclasses.dataclass(frozen=True)
class CudaDevice:
    """A GPU as the driver lists it: its CUDA index, name (as ``torch.cuda.get_device_name`` gives it) and memory."""

    index: int
    name: str
    total_memory: int


def torch_version() -> str | None:
    """torch's version with its build tag (``torch.__version__``, e.g. ``2.11.0+cu130``, which its package metadata
    may leave out), None without torch."""
    return _torch_build("__version__")


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built for (``torch.version.cuda``), None for a CPU build or without torch."""
    return _torch_build("cuda")


def _torch_build(field: str) -> str | None:
    """A field of ``torch.version``: from the imported module when a caller already imported torch, else read from
    its ``version.py``; None when it is None or there is no torch."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        value = getattr(torch.version, field, None)
        return None if value is None else str(value)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = Path(list(spec.submodule_search_locations)[0], "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(_BUILD_FIELD.format(name=re.escape(field)), text, re.MULTILINE)
    return found.group(1) if found else None


@functools.cache
def driver_devices() -> tuple[CudaDevice, ...]:
    """The GPUs the CUDA driver lists for this process, empty without a driver or a device (once a process)."""
    try:
        return listed_devices(ctypes.CDLL("libcuda.so.1"))
    except (OSError, AttributeError):  # no driver, or one without a call (a broken install must not stop a run)
        return ()


def listed_devices(driver: Any) -> tuple[CudaDevice, ...]:
    """The GPUs a CUDA driver (``libcuda`` loaded by ctypes) lists, empty when any call fails.

    Args:
        driver: the library, or a stand-in with its ``cuInit``, ``cuDeviceGetCount``, ``cuDeviceGet``,
            ``cuDeviceGetName`` and ``cuDeviceTotalMem_v2``, each returning a CUresult (0: success).
    """
    if driver.cuInit(0) != 0:  # CUDA_ERROR_NO_DEVICE (100) on a machine without GPUs, others on a broken driver
        return ()
    count = ctypes.c_int()
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    devices = []
    for index in range(count.value):
        handle, memory = ctypes.c_int(), ctypes.c_size_t()
        name = ctypes.create_string_buffer(_NAME_BYTES)
        if (
            driver.cuDeviceGet(ctypes.byref(handle), index) != 0
            or driver.cuDeviceGetName(name, _NAME_BYTES, handle) != 0
            or driver.cuDeviceTotalMem_v2(ctypes.byref(memory), handle) != 0
        ):
            return ()
        devices.append(CudaDevice(index, name.value.decode(errors="replace"), memory.value))
    return tuple(devices)


def cuda_usable() -> bool:
    """Whether torch here can run on a GPU: it was built for CUDA and the driver lists a device (what
    ``torch.cuda.is_available()`` answers, without importing torch)."""
    return torch_cuda_version() is not None and bool(driver_devices())


def main() -> int:
    """Exit status 0 when this python has CUDA torch, triton and a GPU to run them on; 1 otherwise."""
    return 0 if cuda_usable() and importlib.util.find_spec("triton") is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
