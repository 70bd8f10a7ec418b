"""Loads CUBINs through the CUDA driver API (cuda-python) and launches them on torch's current stream.

Context-independent libraries (cuLibraryLoadData) are loaded once per process; the function handle
for each device is fetched on first use. Launches never synchronise the host.
"""
from __future__ import annotations

import ctypes
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
            # above 48 KiB of shared memory per block a kernel must opt in; static shared memory (a few bytes of
            # flags in some kernels) counts against the same limit, so opt in from 46 KiB of dynamic memory
            if self.smem_bytes > 46 * 1024:
                attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(driver.cuKernelSetAttribute(attr, self.smem_bytes, self._kernel, dev), f"smem limit of {self.name}")
            fn = _check(driver.cuKernelGetFunction(self._kernel), f"function of {self.name}")
            self._handles[device] = int(fn)
            self._functions[device] = fn
        return fn

    def launch(self, device: int, grid: tuple[int, int, int], block: int, stream: int, args, pdl: bool = False,
               cluster: tuple[int, int, int] | None = None) -> None:
        """args: an ArgBlock, or a list of ctypes values (c_void_p, c_int, c_float) in parameter order. ``pdl``: launch
        with programmatic stream serialization (the kernel must griddepcontrol.wait before it reads what the previous
        kernel wrote, or writes). ``cluster``: the thread-block cluster shape (each grid dimension a multiple of it)."""
        if pdl or cluster:
            self._launch_ex(device, grid, block, stream, args, pdl, cluster)
            return
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


    def launcher(self, device: int, grid: tuple[int, int, int], block: int, args, pdl: bool = False,
                 cluster: tuple[int, int, int] | None = None):
        """A function of the stream that launches this kernel with everything else fixed (an ArgBlock whose slots
        the caller rewrites between launches): the launch configuration is built and checked once, so the hot path
        is one driver call through ctypes (host time on every decode call). Falls back to ``launch``."""
        if not isinstance(args, ArgBlock):
            raise LaunchError("a launcher takes an ArgBlock")
        if cluster and any(g % c for g, c in zip(grid, cluster)):
            raise LaunchError(f"launching {self.name}: grid {grid} is not a multiple of the cluster shape {cluster}")
        self._function(device)
        handle, params, what = self._handles[device], args.address, self._what(grid, block, pdl, cluster)
        raw_ex, raw = (_raw_launch_ex(), None) if pdl or cluster else (None, _raw_launch())
        if pdl or cluster:
            if raw_ex is None:
                return lambda stream: self._launch_ex(device, grid, block, stream, args, pdl, cluster)
            cfg = _new_ex_config(pdl, tuple(cluster) if cluster else None)
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
            cfg.blockDimX, cfg.sharedMemBytes = block, self.smem_bytes
            cfg_address = ctypes.addressof(cfg)

            def launch_ex(stream: int) -> None:
                cfg.hStream = stream
                err = raw_ex(cfg_address, handle, params, None)
                if err:
                    _check(_driver().CUresult(err), what)
            launch_ex.config = cfg  # keeps the configuration (and its attributes) alive with the function
            return launch_ex
        if raw is None:
            return lambda stream: self.launch(device, grid, block, stream, args)
        gx, gy, gz = grid
        smem = self.smem_bytes

        def launch(stream: int) -> None:
            err = raw(handle, gx, gy, gz, block, 1, 1, smem, stream, params, None)
            if err:
                _check(_driver().CUresult(err), what)
        return launch

    def _launch_ex(self, device: int, grid: tuple[int, int, int], block: int, stream: int, args, pdl: bool,
                   cluster: tuple[int, int, int] | None) -> None:
        """cuLaunchKernelEx with the PDL and / or cluster-dimension attributes."""
        if not isinstance(args, ArgBlock):
            raise LaunchError("PDL and cluster launches take an ArgBlock")
        if cluster and any(g % c for g, c in zip(grid, cluster)):
            raise LaunchError(f"launching {self.name}: grid {grid} is not a multiple of the cluster shape {cluster}")
        handle = self._handles.get(device)
        if handle is None:
            self._function(device)
            handle = self._handles[device]
        raw = _raw_launch_ex()
        if raw is not None:  # the hot path (every decode launch): no allocation beyond the call itself
            cfg = _ex_config(pdl, tuple(cluster) if cluster else None)
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
            cfg.blockDimX, cfg.sharedMemBytes, cfg.hStream = block, self.smem_bytes, stream
            err = raw(ctypes.byref(cfg), handle, args.address, None)
            if err:
                _check(_driver().CUresult(err), self._what(grid, block, pdl, cluster))
            return
        driver = _driver()
        attrs = []
        if pdl:
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        if cluster:
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            attrs.append(attr)
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes, cfg.hStream = self.smem_bytes, driver.CUstream(stream)
        cfg.attrs, cfg.numAttrs = attrs, len(attrs)
        _check(driver.cuLaunchKernelEx(cfg, self._function(device), args.address, 0),
               self._what(grid, block, pdl, cluster))

    def _what(self, grid, block, pdl: bool, cluster) -> str:
        return f"launching {self.name} ({'PDL, ' if pdl else ''}cluster {cluster}) grid={grid} block={block}"


# cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute (CUDA driver API; the attribute value is a 64-byte union)
class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4  # value: {x, y, z} unsigned
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # value: int programmaticStreamSerializationAllowed
_ex_local = threading.local()  # per thread, one config per (pdl, cluster) (the hot path rewrites grid, block and stream)


def _new_ex_config(pdl: bool, cluster: tuple[int, int, int] | None) -> _LaunchConfig:
    """A CUlaunchConfig with the PDL and / or cluster-dimension attributes (grid, block, memory and stream unset)."""
    wanted = ([(_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (1,))] if pdl else []) + \
             ([(_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cluster)] if cluster else [])
    attrs = (_LaunchAttribute * len(wanted))()
    for attr, (ident, values) in zip(attrs, wanted):
        attr.id = ident
        for i, v in enumerate(values):
            attr.value[i] = v
    cfg = _LaunchConfig()
    cfg.blockDimY = cfg.blockDimZ = 1
    cfg.attrs, cfg.numAttrs = ctypes.cast(attrs, ctypes.POINTER(_LaunchAttribute)), len(wanted)
    cfg._keep = attrs  # the attribute array lives as long as the config
    return cfg


def _ex_config(pdl: bool, cluster: tuple[int, int, int] | None) -> _LaunchConfig:
    configs = getattr(_ex_local, "configs", None)
    if configs is None:
        configs = _ex_local.configs = {}
    cfg = configs.get((pdl, cluster))
    if cfg is None:
        cfg = configs[(pdl, cluster)] = _new_ex_config(pdl, cluster)
    return cfg


_RAW_EX_UNSET = object()
_raw_ex = _RAW_EX_UNSET


def _raw_launch_ex():
    """libcuda's cuLaunchKernelEx through ctypes (None without libcuda)."""
    global _raw_ex
    if _raw_ex is _RAW_EX_UNSET:
        fn = None
        lib = _libcuda()
        if lib is not None and hasattr(lib, "cuLaunchKernelEx"):
            fn = lib.cuLaunchKernelEx
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        _raw_ex = fn
    return _raw_ex


_RAW_UNSET = object()
_raw = _RAW_UNSET


_LIBCUDA_UNSET = object()
_libcuda_handle = _LIBCUDA_UNSET


def _libcuda():
    """The CUDA driver library through ctypes (opened once), or None where it cannot be opened."""
    global _libcuda_handle
    if _libcuda_handle is _LIBCUDA_UNSET:
        _libcuda_handle = None
        for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
            try:
                _libcuda_handle = ctypes.CDLL(name)
                break
            except OSError:
                continue
    return _libcuda_handle


_encode_tiled = None


def _tensor_map_encoder():
    """libcuda's cuTensorMapEncodeTiled as a ctypes function (set up once), or LaunchError without libcuda."""
    global _encode_tiled
    if _encode_tiled is None:
        lib = _libcuda()
        if lib is None:
            raise LaunchError("TMA tensor maps need the CUDA driver library (libcuda), which could not be opened")
        fn = lib.cuTensorMapEncodeTiled
        p, u = ctypes.c_void_p, ctypes.c_uint32
        fn.argtypes = [p, ctypes.c_int, u, p, p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
        _encode_tiled = fn
    return _encode_tiled


def _raw_launch():
    """libcuda's cuLaunchKernel as a ctypes function (None where the library cannot be opened: then the launch
    goes through cuda-bindings). cuda-bindings' wrapper converts every argument to an object on each call; this
    costs a few microseconds of host time per launch, which a decode step pays once per layer."""
    global _raw
    if _raw is _RAW_UNSET:
        fn = None
        lib = _libcuda()
        if lib is not None:
            fn = lib.cuLaunchKernel
            u = ctypes.c_uint
            fn.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        _raw = fn
    return _raw


TensorMapBytes = ctypes.c_uint64 * 16  # CUtensorMap: 128 opaque bytes (64-byte aligned on the device side)
# CUtensorMapDataType UINT8 / UINT16, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
# CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (elements past the edges read as zeros): the
# CUDA driver API's enum values
_TMAP_TYPE = {1: 0, 2: 1}  # element bytes -> UINT8, UINT16
_TMAP_INTERLEAVE_NONE, _TMAP_SWIZZLE_NONE, _TMAP_SWIZZLE_128B, _TMAP_L2_256B, _TMAP_OOB_ZERO = 0, 0, 3, 3, 0


class TensorMap2D:
    """A tiled TMA tensor map over a row-major [rows, cols] tensor of 1- or 2-byte elements, boxes of box_rows x
    box_cols (128 bytes per box row with the 128-byte swizzle; swizzle=0: dense rows), zero fill past the edges; ``encode(buffer, address)`` rewrites
    ``buffer`` (a TensorMapBytes, e.g. an ArgBlock slot of kind "t") for a new base address. Everything but the
    address is built once."""

    def __init__(self, rows: int, cols: int, box_rows: int, box_cols: int, elem_bytes: int = 2, swizzle: int = 128):
        if elem_bytes not in _TMAP_TYPE or swizzle not in (0, 128):
            raise ValueError("TMA maps here hold 1- or 2-byte elements, 128-byte swizzled or not swizzled")
        if (swizzle and box_cols * elem_bytes != 128) or box_cols * elem_bytes % 16:
            raise ValueError("a box row is 128 bytes (128-byte swizzle) or a multiple of 16 bytes (no swizzle)")
        if cols * elem_bytes % 16 or not (1 <= box_rows <= 256):
            raise ValueError(f"TMA needs 16-byte row pitches and boxes of at most 256 rows (cols={cols}, box={box_rows})")
        self._type = _TMAP_TYPE[elem_bytes]
        self._swizzle = _TMAP_SWIZZLE_128B if swizzle else _TMAP_SWIZZLE_NONE
        self._dims = (ctypes.c_uint64 * 2)(cols, rows)  # innermost first
        self._strides = (ctypes.c_uint64 * 1)(cols * elem_bytes)  # bytes between rows
        self._box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
        self._estrides = (ctypes.c_uint32 * 2)(1, 1)
        self._fn = _tensor_map_encoder()
        self.address = None  # the base address the buffer was last encoded for

    def encode(self, buffer, address: int) -> None:
        if address % 16:
            raise LaunchError(f"a TMA tensor needs a 16-byte aligned base address, got {address:#x}")
        err = self._fn(ctypes.addressof(buffer), self._type, 2, address, ctypes.addressof(self._dims),
                       ctypes.addressof(self._strides), ctypes.addressof(self._box), ctypes.addressof(self._estrides),
                       _TMAP_INTERLEAVE_NONE, self._swizzle, _TMAP_L2_256B, _TMAP_OOB_ZERO)
        if err:
            _check(_driver().CUresult(err), "cuTensorMapEncodeTiled")
        self.address = address


class ArgBlock:
    """Kernel parameters built once per launch configuration: one ctypes slot per parameter and the array
    of their addresses that cuLaunchKernel reads (it copies the values at launch, so slots may be reused
    right after). The hot path only rewrites the slots that change between calls (under a lock)."""

    _CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "f": ctypes.c_float}

    def __init__(self, kinds: str, values: list):
        """kinds: p (pointer), i (int), f (float), t (a 128-byte TMA tensor map, filled later by TensorMap2D)."""
        if len(kinds) != len(values):
            raise ValueError("one kind per value")
        self.slots = [TensorMapBytes() if k == "t" else self._CTYPES[k](v) for k, v in zip(kinds, values)]
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
