"""The T-Head PPU (Zhenwu) backend: the portable sm_80 spelling, plus vendor extensions a profile declares.

A PPU is CUDA-compatible and reports compute capability 8.0, so the generated kernels are spelled with the
same sm_80 PTX helpers as on NVIDIA (imported from the NVIDIA backend, not copied). Vendor extensions
(``ppu.mma.sync`` m16n16k16, swizzled ``ppu.ldmatrix``, the bulk copy engine) are spelled only when the
profile declares them, under separate helper names and a preprocessor guard (see ``extensions``), so the
portable kernel is the same, and correct, with or without them.

Compile route: the vendor SDK's nvcc (``$PPU_SDK/bin/nvcc``) when the profile's ``target.compiler`` is
``vendor_nvcc`` and that file exists and is executable; otherwise NVRTC for the portable sm_80 subset when
the profile names it as ``target.fallback_compiler``. ``compile_with_vendor_nvcc`` runs the SDK compiler.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import struct
import subprocess
import tempfile
from pathlib import Path

from humming import settings
from humming.devices.base import Backend, CompileRoute, HelperRequest
from humming.devices.nvidia.backend import NvidiaBackend
from humming.devices.thead_ppu import detect
from humming.devices.thead_ppu.extensions import GUARD, extension_block
from humming.errors import CompileError, UnsupportedOnDevice

# nvcc options of the vendor route when the profile does not give its own (target.compiler_flags, if the
# schema grows that key); -arch=<target.arch> is added unless the flags name an architecture.
DEFAULT_VENDOR_FLAGS: tuple[str, ...] = ("-cubin", "-O3", "-std=c++17")
ENV_EXTRA_FLAGS = "HUMMING_PPU_NVCC_FLAGS"   # extra nvcc options, shell-quoted, appended last
ENV_EXTENSIONS = GUARD                        # "0" keeps the vendor-extension block out of SDK builds too
VENDOR_TIMEOUT_S = 600

_PORTABLE = NvidiaBackend()
# the helper groups the mma.sync kernels ask for beyond the prelude, spelled as on NVIDIA (each checks that the profile
# declares what it uses); the wgmma, tcgen05 and block-scaled groups are not offered (their generators are never asked
# for a PPU profile), and neither is any spelling data
PORTABLE_HELPERS = frozenset({"stream_bulk", "cluster_dsmem", "grid_dependency", "e4m3_of_labels", "actquant",
                              "actquant_encoder", "elementwise"})


def vendor_nvcc() -> tuple[str | None, str]:
    """($PPU_SDK/bin/nvcc, "") when it exists and is executable, else (None, why not)."""
    sdk = detect.sdk_path()
    if not sdk:
        return None, f"{detect.SDK_ENV} is not set"
    path = Path(sdk) / "bin" / "nvcc"
    if not path.is_file():
        return None, f"{detect.SDK_ENV}={sdk} has no bin/nvcc"
    if not os.access(path, os.X_OK):
        return None, f"{path} is not executable"
    return str(path), ""


def _extensions_enabled(caps) -> bool:
    return bool(caps.vendor_extensions) and settings.flag(ENV_EXTENSIONS)


def vendor_flags(caps) -> tuple[str, ...]:
    """The SDK nvcc options for a profile: its flags (or the defaults), -arch from target.arch, the extension
    guard when the profile declares extensions, then $HUMMING_PPU_NVCC_FLAGS."""
    flags = list(getattr(caps.target, "compiler_flags", None) or DEFAULT_VENDOR_FLAGS)
    if not any(f.startswith(("-arch", "--gpu-architecture", "-gencode")) for f in flags):
        flags.append(f"-arch={caps.target.arch}")
    if _extensions_enabled(caps):
        flags.append(f"-D{GUARD}=1")
    flags += shlex.split(settings.raw(ENV_EXTRA_FLAGS))
    return tuple(flags)


class PPUBackend(Backend):
    name = "thead_ppu"

    def supports(self, caps) -> bool:
        return caps.backend == "thead_ppu"

    def compile_route(self, caps) -> CompileRoute:
        arch = caps.target.arch
        if arch is None:
            state = "an unverified roadmap profile" if not caps.verified else "a profile"
            raise UnsupportedOnDevice(
                f"{caps.name} is {state} without a compile target (target.arch is null): nothing can be compiled "
                f"for it until the target is known; use a verified PPU profile such as thead-zhenwu-810e"
            )
        primary, fallback = caps.target.compiler, caps.target.fallback_compiler
        if primary == "vendor_nvcc":
            nvcc, why_not = vendor_nvcc()
            if nvcc is not None:
                ext = " with its vendor extensions enabled" if _extensions_enabled(caps) else ""
                return CompileRoute(
                    compiler="vendor_nvcc", arch=arch, options=vendor_flags(caps),
                    reason=f"PPU SDK nvcc at {nvcc} (from ${detect.SDK_ENV}) to CUBIN for {arch}{ext}",
                )
            if fallback == "nvrtc":
                return self._nvrtc(caps, f"{why_not}: NVRTC to CUBIN for {arch}, the portable subset "
                                         f"(the profile's fallback_compiler); vendor extensions unused")
            raise UnsupportedOnDevice(
                f"{caps.name} compiles only with the PPU SDK nvcc and {why_not}; set {detect.SDK_ENV} to the SDK "
                f"root (the directory holding bin/nvcc)"
            )
        if primary == "nvrtc":
            return self._nvrtc(caps, f"NVRTC to CUBIN for {arch} (the profile's target.compiler)")
        raise UnsupportedOnDevice(f"{caps.name}: the PPU backend has no compile route for compiler {primary!r}")

    @staticmethod
    def _nvrtc(caps, reason: str) -> CompileRoute:
        return CompileRoute(
            compiler="nvrtc", arch=caps.target.arch,
            min_nvrtc=tuple(caps.target.min_nvrtc) if caps.target.min_nvrtc else None, reason=reason,
        )

    def prelude(self, request: HelperRequest) -> str:
        family = getattr(request.mma, "family", "mma_sync")
        if family != "mma_sync":
            raise UnsupportedOnDevice(
                f"the PPU backend spells the generated kernels' k16 steps with the portable mma.sync; "
                f"the plan chose {request.mma.describe()}"
            )
        head = "// T-Head PPU backend: portable sm_80 spelling (shared with the NVIDIA backend)\n"
        if request.caps is None:
            tail = "// (the profile was not passed to the backend: vendor extensions not considered)\n"
        else:
            tail = extension_block(request.caps, request.act)
        return head + _PORTABLE.prelude(request) + tail

    def helpers(self, name: str, request: HelperRequest | None = None, **params) -> str:
        if name in PORTABLE_HELPERS:  # CUDA-compatible: the NVIDIA spelling, around this backend's own prelude
            return NvidiaBackend.spell(self, name, request, **params)
        return super().helpers(name, request, **params)  # wgmma, tcgen05, block-scaled: UnsupportedOnDevice

    def compile_source(self, source: str, caps, route: CompileRoute | None = None) -> bytes:
        """The cubin of ``source`` by the vendor route (see ``compile_with_vendor_nvcc``), for callers that hold
        only the backend (``humming.core.runtime.compiled.compile_plan`` when ``route.compiler == "vendor_nvcc"``)."""
        return compile_with_vendor_nvcc(source, caps, route=route)

    def describe(self) -> str:
        return "thead_ppu (portable sm_80 PTX; vendor extensions when declared)"


# ---------------------------------------------------------------- the vendor compiler
def cubin_machine(data: bytes) -> int | None:
    """The ELF e_machine of a cubin (190 = NVIDIA EM_CUDA; PPU SDK cubins are reported as 0x10E), or None."""
    if len(data) < 20 or not data.startswith(b"\x7fELF"):
        return None
    return struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)[0]


def _save_failed(source: str, log: str) -> str | None:
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = Path(tempfile.gettempdir()) / "humming-failed"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"ppu-{key}.log").write_text(log)
        path = directory / f"ppu-{key}.cu"
        path.write_text(source)
        return str(path)
    except OSError:
        return None


def compile_with_vendor_nvcc(source: str, caps, *, route: CompileRoute | None = None,
                             timeout: float = VENDOR_TIMEOUT_S) -> bytes:
    """Compile ``source`` with the PPU SDK nvcc (``-cubin``, arch from the profile) and return the CUBIN bytes.

    Raises ``UnsupportedOnDevice`` when the profile's route is not the vendor compiler (no ``$PPU_SDK``), and
    ``CompileError`` (with the compiler log and the saved source) when the compiler fails or writes no cubin."""
    route = route or PPUBackend().compile_route(caps)
    if route.compiler != "vendor_nvcc":
        raise UnsupportedOnDevice(f"{caps.name}: the compile route is {route.compiler} ({route.reason}), "
                                  f"not the PPU SDK nvcc")
    nvcc, why_not = vendor_nvcc()
    if nvcc is None:
        raise UnsupportedOnDevice(f"{caps.name}: the PPU SDK nvcc is not usable: {why_not}")
    options = list(route.options)
    if "-cubin" not in options:
        options.insert(0, "-cubin")
    env = settings.child_environment(path_first=str(Path(nvcc).parent))
    with tempfile.TemporaryDirectory(prefix="humming-ppu-") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, *options, "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"PPU SDK nvcc did not finish within {timeout:g} s: {shlex.join(cmd)}",
                               log=str(exc.stderr or ""), source_path=_save_failed(source, "timeout")) from None
        except OSError as exc:
            raise CompileError(f"could not run the PPU SDK nvcc {nvcc}: {exc}") from None
        log = (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode != 0:
            raise CompileError(
                f"PPU SDK nvcc rejected the source for {route.arch} (exit status {proc.returncode}); "
                f"command: {shlex.join(cmd)}",
                log=log, source_path=_save_failed(source, log),
            )
        if not out.is_file():
            raise CompileError(f"PPU SDK nvcc exited 0 but wrote no cubin; command: {shlex.join(cmd)}",
                               log=log, source_path=_save_failed(source, log))
        data = out.read_bytes()
    if cubin_machine(data) is None:
        raise CompileError(f"PPU SDK nvcc wrote {len(data)} bytes that are not an ELF cubin; "
                           f"command: {shlex.join(cmd)}", log=log, source_path=_save_failed(source, log))
    return data
