"""What a CUBIN says about its kernels, read from the ELF without a GPU: registers per thread (what ptxas reports as
"Used N registers", and what the driver gives as CU_FUNC_ATTRIBUTE_NUM_REGS).

    register_counts(mod.cubin)  ->  {"hm_wna16_...": 168}

ptxas writes one EIATTR_REGCOUNT record per kernel into the ELF's ``.nv.info`` section: (symbol index, registers).
Anything that is not such an ELF (a vendor compiler's binary, a truncated file) gives an empty dict.
"""
from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_EIATTR_REGCOUNT = 0x2F
# .nv.info records: format (u8), attribute (u8), then a u16 (no value, a byte or a half-word), or for the sized
# format a u16 size and that many bytes
_EIFMT_SVAL = 4


def _sections(data: bytes) -> list[tuple[str, int, int, int, int, int]]:
    """(name, type, offset, size, link, entsize) of each section of a 64-bit little-endian ELF."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]
    out = []
    for name, typ, _flags, _addr, offset, size, link, _info, _align, entsize in raw:
        out.append((_cstr(data, names_at + name), typ, offset, size, link, entsize))
    return out


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode("utf-8", "replace")


def register_counts(cubin: bytes) -> dict[str, int]:
    """Registers per thread of each kernel in a CUBIN ({} where the binary is not a CUDA ELF this can read)."""
    if not cubin.startswith(_ELF_MAGIC) or len(cubin) < 0x40 or cubin[4] != 2 or cubin[5] != 1:
        return {}
    try:
        sections = _sections(cubin)
        info = next((s for s in sections if s[0] == ".nv.info"), None)
        symtab = next((s for s in sections if s[1] == _SHT_SYMTAB), None)
        if info is None or symtab is None:
            return {}
        strtab_at = sections[symtab[4]][2]
        counts: dict[str, int] = {}
        at, end = info[2], info[2] + info[3]
        while at + 2 <= end:
            fmt, attr = cubin[at], cubin[at + 1]
            at += 2
            if fmt == _EIFMT_SVAL:
                size = struct.unpack_from("<H", cubin, at)[0]
                at += 2
                if attr == _EIATTR_REGCOUNT and size >= 8:
                    symbol, regs = struct.unpack_from("<II", cubin, at)
                    name_at = struct.unpack_from("<I", cubin, symtab[2] + symbol * symtab[5])[0]
                    counts[_cstr(cubin, strtab_at + name_at)] = regs
                at += size
            elif 1 <= fmt <= 3:
                at += 2
            else:
                break  # a format this reader does not know: keep what was read
        return counts
    except (struct.error, ValueError, IndexError):
        return {}


__all__ = ["register_counts"]
