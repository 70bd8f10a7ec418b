"""Locate, load and call NVRTC (CUDA 12 and CUDA 13) through its C API with ctypes.

Every libnvrtc found is loaded side by side (their sonames and symbol versions differ, so a CUDA 12 and a
CUDA 13 library coexist in one process). Only the small, stable C API is used, so a library works whatever
major version of cuda-bindings is installed -- or none.

Where we look, in priority order:
  1. ``HUMMING_NVRTC_PATH``: ``os.pathsep``-separated libnvrtc files or directories. When set, selection
     considers only these libraries (an explicit pin), though ``available_toolchains()`` lists all; an item that
     gives no loadable NVRTC (missing, an empty directory, not a library, not NVRTC) makes selection raise
     SettingsError listing what was tried -- never a fallback to another NVRTC.
  2. pip wheels on every ``sys.path`` entry: ``nvidia/cu13/lib/libnvrtc.so.13*`` (nvidia-cuda-nvrtc 13.x) and
     ``nvidia/cuda_nvrtc/lib/libnvrtc.so.12*`` (nvidia-cuda-nvrtc-cu12).
  3. a system CUDA: ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda*``, ``LD_LIBRARY_PATH`` and
     ``ctypes.util.find_library('nvrtc')``.
Libraries are de-duplicated by real path and by (major, minor) version (the first found wins).

Selection (``select_toolchain``): ``HUMMING_NVRTC=12|13|12.9|auto`` (default auto) restricts the major (or
major.minor); among the rest, the newest library whose target list contains the requested ``sm_*`` target.

The target knowledge below is data taken from ../shared/FACTS.md section 3 and checked by probing
NVRTC 12.9.86 and 13.5.37. Base architecture numbers come from ``nvrtcGetSupportedArchs``; the tables only
say which bases take the ``a`` / ``f`` suffixes and, for error messages, which NVRTC release added or removed
a base. A base that is missing from the suffix tables is probed once with a tiny compile.
"""
# hal: allow-file (NVRTC's own vocabulary: which compiler release accepts which `sm_XX[a|f]` target string.
# This is toolchain knowledge, not device policy: targets come from profiles, and nothing here chooses a path.)

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from humming import settings
from humming.errors import SettingsError, UnsupportedOnDevice

# --------------------------------------------------------------------------------------------------------
# Data: NVRTC target tables (FACTS.md section 3; verified against NVRTC 12.9.86 and 13.5.37)
# --------------------------------------------------------------------------------------------------------

#: Base architectures that accept the arch-specific ``a`` suffix (sm_90a, sm_100a, ...), with the first NVRTC
#: release that accepts that suffixed target.
ARCH_SPECIFIC_SUFFIX_SINCE: dict[int, tuple[int, int]] = {
    90: (12, 0),
    100: (12, 8),
    101: (12, 8),
    120: (12, 8),
    103: (12, 9),
    121: (12, 9),
    110: (13, 0),
    107: (13, 4),
}

#: Base architectures that accept the family ``f`` suffix (sm_100f, sm_103f, ...), with the first release.
FAMILY_SUFFIX_SINCE: dict[int, tuple[int, int]] = {
    100: (12, 9),
    101: (12, 9),
    103: (12, 9),
    120: (12, 9),
    121: (12, 9),
    110: (13, 0),
    107: (13, 4),
}

#: For messages only: (first NVRTC that accepts the base target, last one or None while still accepted).
#: The authority for a loaded library is its own nvrtcGetSupportedArchs list.
TARGET_NVRTC_RANGE: dict[int, tuple[tuple[int, int], tuple[int, int] | None]] = {
    50: ((11, 0), (12, 9)),
    52: ((11, 0), (12, 9)),
    53: ((11, 0), (12, 9)),
    60: ((11, 0), (12, 9)),
    61: ((11, 0), (12, 9)),
    62: ((11, 0), (12, 9)),
    70: ((11, 0), (12, 9)),
    72: ((11, 0), (12, 9)),
    75: ((11, 0), None),
    80: ((11, 0), None),
    86: ((11, 1), None),
    87: ((11, 4), None),
    88: ((13, 0), None),
    89: ((11, 8), None),
    90: ((11, 8), None),
    100: ((12, 8), None),
    101: ((12, 8), (12, 9)),  # renamed sm_110 in CUDA 13.0
    120: ((12, 8), None),
    103: ((12, 9), None),
    121: ((12, 9), None),
    110: ((13, 0), None),
    107: ((13, 4), None),
}

#: pip package that provides each NVRTC major version.
PIP_PACKAGE: dict[int, str] = {
    12: "nvidia-cuda-nvrtc-cu12",
    13: "nvidia-cuda-nvrtc",
}

#: Wheel layouts: (sub-directory under a sys.path entry, library glob). Matches both .so.MAJOR and .so.MAJOR.x.
WHEEL_LAYOUTS: tuple[tuple[str, str], ...] = (
    ("nvidia/cu13/lib", "libnvrtc.so.13*"),
    ("nvidia/cuda_nvrtc/lib", "libnvrtc.so.12*"),
)

#: System CUDA locations (relative library dirs under each CUDA root).
SYSTEM_CUDA_ROOT_GLOBS: tuple[str, ...] = ("/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda")
SYSTEM_LIB_SUBDIRS: tuple[str, ...] = ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")

ENV_SELECT = "HUMMING_NVRTC"
ENV_PATH = "HUMMING_NVRTC_PATH"

_ARCH_RE = re.compile(r"^sm_(\d+)([af]?)$")
_LIB_RE = re.compile(r"^libnvrtc\.so(\.\d+)*$")

# --------------------------------------------------------------------------------------------------------
# Target strings
# --------------------------------------------------------------------------------------------------------


def parse_arch(arch: str) -> tuple[int, str]:
    """``"sm_90a"`` -> ``(90, "a")``; ``"sm_75"`` -> ``(75, "")``; ``"sm_103f"`` -> ``(103, "f")``."""
    m = _ARCH_RE.match(arch.strip()) if isinstance(arch, str) else None
    if not m:
        raise UnsupportedOnDevice(
            f"{arch!r} is not an NVRTC CUBIN target; expected 'sm_' and the compute capability's digits, optionally "
            "followed by 'a' (arch-specific features) or 'f' (a family's common features)"
        )
    return int(m.group(1)), m.group(2)


def _fmt(version: tuple[int, int] | None) -> str:
    return "?" if version is None else f"{version[0]}.{version[1]}"


def _target_requirement(arch: str) -> str:
    """Human-readable NVRTC requirement for a target, from the data tables ('' when unknown)."""
    base, suffix = parse_arch(arch)
    if base not in TARGET_NVRTC_RANGE:
        return ""
    first, last = TARGET_NVRTC_RANGE[base]
    if suffix == "a":
        if base not in ARCH_SPECIFIC_SUFFIX_SINCE:
            return f"sm_{base} has no arch-specific 'a' variant"
        first = max(first, ARCH_SPECIFIC_SUFFIX_SINCE[base])
    elif suffix == "f":
        if base not in FAMILY_SUFFIX_SINCE:
            return f"sm_{base} has no family 'f' variant"
        first = max(first, FAMILY_SUFFIX_SINCE[base])
    text = f"{arch} needs NVRTC >= {_fmt(first)}"
    if last is not None:
        text += f" and <= {_fmt(last)}"
    return text


# --------------------------------------------------------------------------------------------------------
# The C API through ctypes
# --------------------------------------------------------------------------------------------------------

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_char_pp = ctypes.POINTER(ctypes.c_char_p)


def _bind(lib: ctypes.CDLL) -> None:
    """Declare argument and result types of the NVRTC entry points we use."""
    res = ctypes.c_int  # nvrtcResult
    prog = ctypes.c_void_p  # nvrtcProgram (opaque pointer)
    sig = {
        "nvrtcVersion": (res, [_c_int_p, _c_int_p]),
        "nvrtcGetNumSupportedArchs": (res, [_c_int_p]),
        "nvrtcGetSupportedArchs": (res, [_c_int_p]),
        "nvrtcGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
        "nvrtcCreateProgram": (
            res,
            [ctypes.POINTER(prog), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, _c_char_pp, _c_char_pp],
        ),
        "nvrtcCompileProgram": (res, [prog, ctypes.c_int, _c_char_pp]),
        "nvrtcGetProgramLogSize": (res, [prog, _c_size_p]),
        "nvrtcGetProgramLog": (res, [prog, ctypes.c_char_p]),
        "nvrtcGetCUBINSize": (res, [prog, _c_size_p]),
        "nvrtcGetCUBIN": (res, [prog, ctypes.c_char_p]),
        "nvrtcGetPTXSize": (res, [prog, _c_size_p]),
        "nvrtcGetPTX": (res, [prog, ctypes.c_char_p]),
        "nvrtcDestroyProgram": (res, [ctypes.POINTER(prog)]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


class NvrtcCallError(RuntimeError):
    """An NVRTC API call other than the compile itself failed (out of memory, bad library, ...)."""


@dataclass(frozen=True)
class NvrtcOutput:
    """What one NVRTC compile produced. ``ok`` is False when nvrtcCompileProgram rejected the source."""

    ok: bool
    log: str
    cubin: bytes | None
    ptx: str | None
    result_name: str


class _Library:
    """A loaded libnvrtc: ctypes handle plus typed calls. One instance per library file."""

    def __init__(self, path: str):
        self.path = path
        self.builtins = _preload_builtins(path)
        self.lib = ctypes.CDLL(path)
        _bind(self.lib)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        count = ctypes.c_int()
        self._check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * max(count.value, 1))()
        self._check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        self.archs = frozenset(int(a) for a in archs[: count.value])

    def error_string(self, code: int) -> str:
        s = self.lib.nvrtcGetErrorString(code)
        return s.decode(errors="replace") if s else f"NVRTC_ERROR_{code}"

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise NvrtcCallError(f"{what} failed in {self.path}: {self.error_string(code)} ({code})")

    def compile(self, source: str, name: str, options: Sequence[str], want_ptx: bool = True) -> NvrtcOutput:
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = [o.encode() for o in options]
            c_opts = (ctypes.c_char_p * max(len(opts), 1))(*opts)
            rc = self.lib.nvrtcCompileProgram(prog, len(opts), c_opts)
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            buf = ctypes.create_string_buffer(max(size.value, 1))
            self._check(self.lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
            log = buf.raw[: max(size.value - 1, 0)].decode(errors="replace")
            if rc != 0:
                return NvrtcOutput(False, log, None, None, self.error_string(rc))
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            buf = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            cubin = buf.raw[: size.value]
            ptx = None
            if want_ptx:
                self._check(self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
                buf = ctypes.create_string_buffer(size.value)
                self._check(self.lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
                ptx = buf.raw[: max(size.value - 1, 0)].decode(errors="replace")
            return NvrtcOutput(True, log, cubin, ptx, "NVRTC_SUCCESS")
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _preload_builtins(lib_path: str) -> list[str]:
    """Load libnvrtc-builtins from the library's own directory with RTLD_GLOBAL so that libnvrtc's later
    dlopen by soname finds it (the 13.x wheels need this). Their symbols carry the version in their names,
    so several builtins libraries coexist."""
    directory, name = os.path.split(lib_path)
    alt = ".alt." in name
    loaded = []
    for candidate in sorted(glob.glob(os.path.join(directory, "libnvrtc-builtins*.so*"))):
        if (".alt." in os.path.basename(candidate)) != alt:
            continue
        try:
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            loaded.append(candidate)
        except OSError:
            pass  # a builtins of another version or a broken link: libnvrtc reports it at compile time
    return loaded


# --------------------------------------------------------------------------------------------------------
# Toolchains
# --------------------------------------------------------------------------------------------------------

_PROBE_SOURCE = 'extern "C" __global__ void humming_probe(int* p) { p[0] = 1; }\n'


@dataclass(frozen=True, eq=False)
class NvrtcToolchain:
    """One loaded NVRTC library.

    ``supported_archs`` is the library's own base-architecture list (ints such as 75, 90, 100);
    ``arch_specific_archs`` / ``family_archs`` are those bases that also accept ``sm_XXa`` / ``sm_XXf``.
    ``origin`` says how it was found: ``"HUMMING_NVRTC_PATH"``, ``"wheel"`` or ``"system"``.
    """

    version: tuple[int, int]
    path: str
    supported_archs: frozenset[int]
    arch_specific_archs: frozenset[int]
    family_archs: frozenset[int]
    origin: str
    _lib: _Library = field(repr=False, compare=False)
    _probed: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    @property
    def major(self) -> int:
        return self.version[0]

    @property
    def pip_package(self) -> str:
        return PIP_PACKAGE.get(self.version[0], "nvidia-cuda-nvrtc")

    def supports(self, arch: str) -> bool:
        """Whether this NVRTC can produce a CUBIN for ``arch`` (``"sm_75"``, ``"sm_90a"``, ``"sm_103f"``)."""
        base, suffix = parse_arch(arch)
        if base not in self.supported_archs:
            return False
        if suffix == "":
            return True
        table = ARCH_SPECIFIC_SUFFIX_SINCE if suffix == "a" else FAMILY_SUFFIX_SINCE
        if base in table or base in TARGET_NVRTC_RANGE:  # known base: the tables decide
            return base in (self.arch_specific_archs if suffix == "a" else self.family_archs)
        # A base architecture newer than our tables: ask the library once.
        if arch not in self._probed:
            out = self._lib.compile(_PROBE_SOURCE, "humming_probe.cu", [f"--gpu-architecture={arch}"], False)
            self._probed[arch] = out.ok
        return self._probed[arch]

    def targets(self) -> list[str]:
        """Every ``sm_*`` CUBIN target this library accepts, sorted."""
        out = []
        for base in sorted(self.supported_archs):
            out.append(f"sm_{base}")
            out += [f"sm_{base}{s}" for s in ("a", "f") if self.supports(f"sm_{base}{s}")]
        return out

    def compile(self, source: str, name: str, options: Sequence[str], want_ptx: bool = True) -> NvrtcOutput:
        """Run nvrtcCompileProgram once. Returns the CUBIN/PTX or, when rejected, ``ok=False`` and the log."""
        return self._lib.compile(source, name, list(options), want_ptx)

    def describe(self) -> str:
        return f"NVRTC {_fmt(self.version)} at {self.path} ({self.origin})"


def _make_toolchain(lib: _Library, origin: str) -> NvrtcToolchain:
    v = lib.version
    a = frozenset(b for b, since in ARCH_SPECIFIC_SUFFIX_SINCE.items() if b in lib.archs and v >= since)
    f = frozenset(b for b, since in FAMILY_SUFFIX_SINCE.items() if b in lib.archs and v >= since)
    return NvrtcToolchain(v, lib.path, lib.archs, a, f, origin, lib)


# --------------------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------------------


def _libs_in_dir(directory: str, pattern: str = "libnvrtc.so*") -> list[str]:
    found = []
    for p in sorted(glob.glob(os.path.join(directory, pattern))):
        if _LIB_RE.match(os.path.basename(p)) and os.path.isfile(p):
            found.append(p)
    # prefer the shortest name (libnvrtc.so.13 over libnvrtc.so.13.0.88 over libnvrtc.so): same file anyway
    return sorted(found, key=lambda p: (os.path.basename(p) == "libnvrtc.so", len(p)))


def _env_path_items() -> list[tuple[str, list[str], str]]:
    """``HUMMING_NVRTC_PATH``'s items: (item, the library files it names, why it names none or '')."""
    out: list[tuple[str, list[str], str]] = []
    for item in filter(None, (s.strip() for s in settings.raw(ENV_PATH).split(os.pathsep))):
        if os.path.isdir(item):
            libs = _libs_in_dir(item)
            out.append((item, libs, "" if libs else "a directory with no libnvrtc.so* file in it"))
        elif os.path.exists(item):
            out.append((item, [item], ""))
        else:
            out.append((item, [], "does not exist"))
    return out


def _wheel_candidates() -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for entry in list(sys.path):
        if not entry or not os.path.isdir(entry):
            continue
        for subdir, pattern in WHEEL_LAYOUTS:
            d = os.path.join(entry, subdir)
            if d in seen or not os.path.isdir(d):
                continue
            seen.add(d)
            out += _libs_in_dir(d, pattern)
    return out


def _system_candidates() -> list[str]:
    roots: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if settings.system(var):
            roots.append(settings.system(var))
    for g in SYSTEM_CUDA_ROOT_GLOBS:
        roots += sorted(glob.glob(g), reverse=True)
    dirs = [os.path.join(r, s) for r in roots for s in SYSTEM_LIB_SUBDIRS]
    dirs += [d for d in settings.system("LD_LIBRARY_PATH").split(os.pathsep) if d]
    out: list[str] = []
    for d in dirs:
        if os.path.isdir(d):
            out += _libs_in_dir(d)
    name = ctypes.util.find_library("nvrtc")
    if name:
        out.append(name)  # a soname; resolved to a path after loading
    return out


def _loaded_path(lib: ctypes.CDLL, symbol: str = "nvrtcVersion") -> str | None:
    """Real path of a library loaded by soname, via dladdr on one of its functions."""

    class DlInfo(ctypes.Structure):
        _fields_ = [
            ("dli_fname", ctypes.c_char_p),
            ("dli_fbase", ctypes.c_void_p),
            ("dli_sname", ctypes.c_char_p),
            ("dli_saddr", ctypes.c_void_p),
        ]

    try:
        libdl = ctypes.CDLL(ctypes.util.find_library("dl") or "libdl.so.2")
        info = DlInfo()
        addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
        if libdl.dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError):
        pass
    return None


@dataclass
class _Discovery:
    toolchains: list[NvrtcToolchain]
    pinned: list[NvrtcToolchain]
    problems: list[str]
    pin_failures: list[str]  # HUMMING_NVRTC_PATH items that gave no loadable library, with what was tried


_lock = threading.RLock()
_loaded: dict[str, _Library] = {}  # real path -> library (never unloaded)
_discovery: dict[str, _Discovery] = {}  # keyed by HUMMING_NVRTC_PATH value


def _elf_problem(path: str) -> str:
    """Why ``path`` cannot be a whole ELF shared library ('' when its headers and loadable segments lie inside the
    file). Checked before dlopen, which maps a truncated library and dies of SIGBUS instead of failing."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or len(head) < 64:
                return "not an ELF shared library"
            if head[4] != 2 or head[5] != 1:
                return "not a 64-bit little-endian ELF library"
            phoff, shoff = struct.unpack_from("<QQ", head, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
            if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
                return f"truncated ELF file ({size} bytes; its headers reach past the end)"
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError as e:
        return f"cannot be read ({e})"
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD
            return f"truncated ELF file ({size} bytes; a loadable segment ends at {p_offset + p_filesz})"
    return ""


def _load(candidate: str) -> _Library:
    if os.sep in candidate:
        problem = _elf_problem(candidate)
        if problem:
            raise OSError(problem)
    if os.sep not in candidate:  # a soname from find_library: load it and find out where it lives
        probe = ctypes.CDLL(candidate)
        real = _loaded_path(probe)
        if real is None:
            raise OSError(f"cannot resolve the path of {candidate}")
        candidate = real
    real = os.path.realpath(candidate)
    if real not in _loaded:
        _loaded[real] = _Library(candidate)
    return _loaded[real]


def _try_load(cand: str, problems: list[str]) -> _Library | None:
    try:
        return _load(cand)
    except (OSError, AttributeError, NvrtcCallError) as e:
        problems.append(f"{cand}: {e}")
        return None


def _discover() -> _Discovery:
    key = settings.raw(ENV_PATH)
    with _lock:
        if key in _discovery:
            return _discovery[key]
        toolchains: list[NvrtcToolchain] = []
        pinned: list[NvrtcToolchain] = []
        problems: list[str] = []
        pin_failures: list[str] = []
        by_path: dict[str, NvrtcToolchain] = {}
        seen_versions: set[tuple[int, int]] = set()

        def add(lib: _Library, origin: str) -> NvrtcToolchain:
            real = os.path.realpath(lib.path)
            known = real in by_path
            if not known:
                by_path[real] = _make_toolchain(lib, origin)
            tc = by_path[real]
            if not known and lib.version not in seen_versions:  # (first found of a version wins)
                seen_versions.add(lib.version)
                toolchains.append(tc)
            return tc

        for item, candidates, why in _env_path_items():
            tried: list[str] = []
            loaded = [lib for lib in (_try_load(c, tried) for c in candidates) if lib is not None]
            problems += tried
            for lib in loaded:
                tc = add(lib, ENV_PATH)
                if tc not in pinned:
                    pinned.append(tc)
            if not loaded:
                pin_failures.append(f"{item}: {why}" if why else "; ".join(tried))
        for origin, candidates in (("wheel", _wheel_candidates()), ("system", _system_candidates())):
            for cand in candidates:
                lib = _try_load(cand, problems)
                if lib is not None:
                    add(lib, origin)
        toolchains.sort(key=lambda t: t.version, reverse=True)
        result = _Discovery(toolchains, pinned, problems, pin_failures)
        _discovery[key] = result
        return result


def _check_pin(disc: _Discovery) -> None:
    """SettingsError where ``HUMMING_NVRTC_PATH`` names something that gives no loadable NVRTC (a missing path, a
    directory without libnvrtc, a file that is not a library or not NVRTC): a pin is never silently replaced by
    another NVRTC. The message lists every item tried and why it failed, and the libraries that do load."""
    if not disc.pin_failures:
        return
    others = [t for t in disc.toolchains if t.origin != ENV_PATH]
    found = ("; NVRTC libraries that do load: " + ", ".join(t.path for t in others)) if others else ""
    raise SettingsError(
        f"{ENV_PATH}={settings.raw(ENV_PATH)!r} pins NVRTC, but "
        f"{'it gives' if len(disc.pin_failures) == 1 else 'these give'} no loadable libnvrtc:\n"
        + "\n".join("  - " + f for f in disc.pin_failures)
        + f"\nway out: point {ENV_PATH} at a libnvrtc.so.* file or a directory holding one (e.g. a CUDA toolkit's "
        f"lib64), or unset it to use the installed wheels{found}")


def available_toolchains(refresh: bool = False) -> list[NvrtcToolchain]:
    """Every loadable NVRTC, newest first (one per (major, minor) version). ``refresh`` searches again. (A broken
    ``HUMMING_NVRTC_PATH`` is not an error here, so diagnostics can list what loads: ``pin_problems`` says why.)"""
    if refresh:
        with _lock:
            _discovery.clear()
    return list(_discover().toolchains)


def discovery_problems() -> list[str]:
    """Libraries that were found but could not be loaded, with the reason (for diagnostics)."""
    return list(_discover().problems)


def pin_problems() -> list[str]:
    """The ``HUMMING_NVRTC_PATH`` items that give no loadable NVRTC, each with what was tried and why it failed
    (empty where it is unset or every item loads)."""
    return list(_discover().pin_failures)


def _selection_env() -> tuple[int, int | None] | None:
    """``HUMMING_NVRTC`` as humming.settings reads it: None for auto, else (major, minor or None); SettingsError for
    a value it cannot read."""
    return settings.value(ENV_SELECT)


def _way_out(arch: str, min_version: tuple[int, int] | None, installed: Sequence[NvrtcToolchain]) -> str:
    """What to do about it: a ``pip install ...`` line for an NVRTC that accepts ``arch`` (from the data tables),
    or another spelling of the target when the suffix does not exist for that architecture."""
    base, suffix = parse_arch(arch)
    suffix_table = {"a": ARCH_SPECIFIC_SUFFIX_SINCE, "f": FAMILY_SUFFIX_SINCE}.get(suffix, {})
    newest_major = max(PIP_PACKAGE)
    if base not in TARGET_NVRTC_RANGE:
        newest = max((t.version for t in installed), default=None)
        extra = f" (newer than the installed {_fmt(newest)}, if one exists that knows sm_{base})" if newest else ""
        return f"pip install -U {PIP_PACKAGE[newest_major]}{extra}"
    if suffix and base not in suffix_table:
        variants = [f"sm_{base}"] + [f"sm_{base}{s}" for s, t in
                                     (("a", ARCH_SPECIFIC_SUFFIX_SINCE), ("f", FAMILY_SUFFIX_SINCE)) if base in t]
        return (f"target {variants[0]} instead" if len(variants) == 1 else "target one of " + ", ".join(variants))
    first, ceiling = TARGET_NVRTC_RANGE[base]
    floor = max(tuple(min_version) if min_version else (0, 0), first, suffix_table.get(base, (0, 0)))
    major = ceiling[0] if ceiling is not None else max(floor[0], newest_major)
    floor = max(floor, (major, 0))
    return f"pip install -U '{PIP_PACKAGE.get(major, PIP_PACKAGE[newest_major])}>={_fmt(floor)}'"


def select_toolchain(arch: str, min_version: tuple[int, int] | None = None) -> NvrtcToolchain:
    """The NVRTC to compile ``arch`` with: honours ``HUMMING_NVRTC`` and ``HUMMING_NVRTC_PATH``; otherwise the
    newest installed library that accepts ``arch`` (and is at least ``min_version``).

    Raises ``UnsupportedOnDevice`` naming what is installed, what the target needs and what to install, and
    ``SettingsError`` where ``HUMMING_NVRTC_PATH`` names something that does not load (``_check_pin``)."""
    parse_arch(arch)  # validate early with a clear message
    disc = _discover()
    _check_pin(disc)
    want = _selection_env()
    pool = disc.pinned if disc.pinned else disc.toolchains
    reasons = []
    if disc.pinned:
        reasons.append(f"{ENV_PATH} pins the choice to: {', '.join(t.describe() for t in disc.pinned)}")
    if want is not None:
        major, minor = want
        pool = [t for t in pool if t.version[0] == major and (minor is None or t.version[1] == minor)]
        reasons.append(f"{ENV_SELECT}={settings.raw(ENV_SELECT)} restricts the choice to NVRTC {major}"
                       + (f".{minor}" if minor is not None else ""))
    if min_version is not None:
        pool = [t for t in pool if t.version >= tuple(min_version)]
        reasons.append(f"the caller needs NVRTC >= {_fmt(tuple(min_version))}")
    fits = [t for t in pool if t.supports(arch)]
    if fits:
        return max(fits, key=lambda t: t.version)

    installed = disc.toolchains
    if installed:
        lines = [
            f"  - NVRTC {_fmt(t.version)} ({t.origin}, {t.path}): {'accepts' if t.supports(arch) else 'rejects'} {arch}"
            for t in installed
        ]
        have = "installed:\n" + "\n".join(lines)
    else:
        have = "no NVRTC library was found (searched HUMMING_NVRTC_PATH, nvidia/*/lib in sys.path, system CUDA)"
    if disc.problems:
        have += "\n  libraries that failed to load:\n" + "\n".join("  - " + p for p in disc.problems)
    need = _target_requirement(arch)
    msg = f"no usable NVRTC can compile for {arch}"
    if need:
        msg += f" ({need})"
    if reasons:
        msg += "; " + "; ".join(reasons)
    usable = [t for t in installed if t.supports(arch) and (min_version is None or t.version >= tuple(min_version))]
    if usable:  # only the environment stands in the way
        best = max(usable, key=lambda t: t.version)
        fixes = []
        if disc.pinned:
            fixes.append(f"unset {ENV_PATH} (or point it at {best.path})")
        if want is not None:
            fixes.append(f"set {ENV_SELECT}={best.version[0]} or auto")
        way = f"the installed {best.describe()} accepts {arch}: " + " and ".join(fixes)
    else:
        way = _way_out(arch, min_version, installed)
    msg += f".\n{have}\nway out: {way}"
    raise UnsupportedOnDevice(msg)


__all__ = [
    "ARCH_SPECIFIC_SUFFIX_SINCE",
    "FAMILY_SUFFIX_SINCE",
    "TARGET_NVRTC_RANGE",
    "PIP_PACKAGE",
    "NvrtcToolchain",
    "NvrtcOutput",
    "NvrtcCallError",
    "available_toolchains",
    "discovery_problems",
    "pin_problems",
    "parse_arch",
    "select_toolchain",
]
