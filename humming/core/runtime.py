"""Loads CUBINs through the CUDA driver API (cuda-python) and launches them on torch's current stream.

Context-independent libraries (cuLibraryLoadData) are loaded once per process; the function handle
for each device is fetched on first use. Launches never synchronise the host.
"""
from __future__ import annotations

import ctypes
import os
import threading

from humming.errors import LaunchError

_lock = threading.Lock()


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # pragma: no cover - cuda-python is a dependency
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def _check(result, what: str):
    driver = _driver()
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != int(driver.CUresult.CUDA_SUCCESS):
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        text = text.decode() if isinstance(text, bytes) else text
        raise LaunchError(f"{what} failed: {name}: {text}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


class LoadedKernel:
    """One kernel of one CUBIN; launch(grid, block, smem, stream, args)."""

    def __init__(self, cubin: bytes, name: str, smem_bytes: int):
        self.cubin = cubin
        self.name = name
        self.smem_bytes = int(smem_bytes)
        self._library = None
        self._kernel = None
        self._functions: dict[int, object] = {}
        self._handles: dict[int, int] = {}  # device -> CUfunction as an integer, for the ctypes launch

    def _function(self, device: int):
        fn = self._functions.get(device)
        if fn is not None:
            return fn
        driver = _driver()
        with _lock:
            if self._library is None:
                _check(driver.cuInit(0), "cuInit")
                self._library = _check(
                    driver.cuLibraryLoadData(self.cubin, None, None, 0, None, None, 0), f"loading {self.name}"
                )
                self._kernel = _check(driver.cuLibraryGetKernel(self._library, self.name.encode()), f"finding {self.name}")
            dev = _check(driver.cuDeviceGet(device), "cuDeviceGet")
            if self.smem_bytes > 48 * 1024:
                attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(driver.cuKernelSetAttribute(attr, self.smem_bytes, self._kernel, dev), f"smem limit of {self.name}")
            fn = _check(driver.cuKernelGetFunction(self._kernel), f"function of {self.name}")
            self._handles[device] = int(fn)
            self._functions[device] = fn
        return fn

    def launch(self, device: int, grid: tuple[int, int, int], block: int, stream: int, args) -> None:
        """args: an ArgBlock, or a list of ctypes values (c_void_p, c_int, c_float) in parameter order."""
        if isinstance(args, ArgBlock):
            params = args.address
            raw = _raw_launch()
            if raw is not None:  # the hot path: the driver entry point called through ctypes
                handle = self._handles.get(device)
                if handle is None:
                    self._function(device)
                    handle = self._handles[device]
                err = raw(handle, grid[0], grid[1], grid[2], block, 1, 1, self.smem_bytes, stream, params, None)
                if err:
                    _check(_driver().CUresult(err), f"launching {self.name} grid={grid} block={block} smem={self.smem_bytes}")
                return
        else:
            pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
            params = ctypes.addressof(pointers)
        fn = self._function(device)
        driver = _driver()
        err = driver.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block, 1, 1, self.smem_bytes, stream, params, 0)
        if int(err[0]) != 0:
            _check(err, f"launching {self.name} grid={grid} block={block} smem={self.smem_bytes}")


_RAW_UNSET = object()
_raw = _RAW_UNSET


def _raw_launch():
    """libcuda's cuLaunchKernel as a ctypes function (None where the library cannot be opened, or with
    HUMMING_RAW_LAUNCH=0). cuda-bindings' wrapper converts every argument to an object on each call; this
    costs a few microseconds of host time per launch, which a decode step pays once per layer."""
    global _raw
    if _raw is _RAW_UNSET:
        fn = None
        if os.environ.get("HUMMING_RAW_LAUNCH", "1") != "0":
            for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
                try:
                    lib = ctypes.CDLL(name)
                except OSError:
                    continue
                fn = lib.cuLaunchKernel
                u = ctypes.c_uint
                fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
                fn.restype = ctypes.c_int
                break
        _raw = fn
    return _raw


class ArgBlock:
    """Kernel parameters built once per launch configuration: one ctypes slot per parameter and the array
    of their addresses that cuLaunchKernel reads (it copies the values at launch, so slots may be reused
    right after). The hot path only rewrites the slots that change between calls (under a lock)."""

    _CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "f": ctypes.c_float}

    def __init__(self, kinds: str, values: list):
        if len(kinds) != len(values):
            raise ValueError("one kind per value")
        self.slots = [self._CTYPES[k](v) for k, v in zip(kinds, values)]
        self._array = (ctypes.c_void_p * len(self.slots))(*[ctypes.addressof(v) for v in self.slots])
        self.address = ctypes.addressof(self._array)
        self.lock = threading.Lock()

    def set(self, index: int, value) -> None:
        self.slots[index].value = value

    def values(self) -> list:
        return [s.value for s in self.slots]


def ptr(t) -> ctypes.c_void_p:
    """Device pointer of a tensor, or NULL for None."""
    return ctypes.c_void_p(0 if t is None else t.data_ptr())
