"""Spellings of the T-Head PPU vendor extensions, emitted only for the extensions a profile declares.

What is spelled here comes from public code that targets the PPU SDK (FACTS.md §2 and docs/porting.md,
"T-Head PPU: what is known"); none of it has been assembled or run by humming. Every helper is therefore

* named apart from the portable helpers the generator calls (``ppu_mma_k16_n16``, ``ppu_ldmatrix_x4_swzl``,
  ``ppu_bulk_copy_2d_b16``, ``ppu_mma_k16_pair``), so the portable kernel never depends on it, and
* inside ``#if HUMMING_PPU_EXTENSIONS`` (see ``GUARD``), a macro only the vendor compile route defines, so
  the same source still compiles with NVRTC for the portable sm_80 subset.

Instruction mnemonics come from the extension's ``spelling`` (``ppu.mma.sync``: public code also shows an
``alippu.`` prefix, so the prefix is data). Layout differences come from the extension's ``data``:
``b_channel_order`` (required for the NVIDIA-layout bridge) and ``a_register_order`` (optional; without it
the bridge is not emitted, because the A-register order is known from a single public source only).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

GUARD = "HUMMING_PPU_EXTENSIONS"

MMA_EXTENSION = "ppu_mma_m16n16k16"
LDMATRIX_EXTENSION = "ppu_ldmatrix_swizzle"
BULK_COPY_EXTENSION = "ppu_bulk_copy"

# PTX-style type suffix of the extension MMA, per activation type the profile may declare for it.
_MMA_TYPE = {"f16": "f16", "bf16": "bf16"}
_MNEMONIC = re.compile(r"^[A-Za-z_]\w*(\.[\w:]+)+$")


def native_acc_position(lane: int, reg: int) -> tuple[int, int]:
    """(row, column) of accumulator register ``reg`` (0..7) of ``lane`` in the native m16n16 accumulator.

    The instruction's own layout, as two independent public sources use it (not profile data: it is the
    reason the B channel order exists). Columns of one lane are 4 apart, not adjacent as in mma.sync."""
    return lane // 4 + 8 * ((reg >> 2) & 1), lane % 4 + 4 * (reg % 4)


def native_operand_position(lane: int, reg: int) -> tuple[int, int]:
    """(outer, k) of register ``reg`` (0..3) of ``lane`` for the native A (outer = row) and B (outer = column)
    operands; each register holds k and k + 1."""
    return lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + 8 * (reg % 2)


def bridge_binding(b_channel_order: Sequence[int]) -> list[tuple[int, int]] | None:
    """Which mma.sync-layout accumulator (tile h in {0, 1}, element e in 0..3) each native accumulator register
    0..7 is, when every 8-column half of B carries its logical columns in ``b_channel_order`` (physical
    column p holds logical column order[p]). None when no lane-independent binding exists for that order.

    The mma.sync m16n8 layout puts element e of a lane (g = lane/4, t = lane%4) at row g + 8*(e//2),
    column 2t + e%2; the native layout puts register r at column t + 4*(r%4) (``native_acc_position``)."""
    order = [int(v) for v in b_channel_order]
    if sorted(order) != list(range(8)):
        return None
    binding = []
    for reg in range(8):
        h = (reg % 4) // 2  # which 8-column half the register's physical column falls in (t < 4)
        found = None
        for e in range(4):
            if e // 2 != (reg >> 2) & 1:
                continue
            if all(order[(t + 4 * (reg % 4)) % 8] == 2 * t + e % 2 for t in range(4)):
                found = (h, e)
        if found is None:
            return None
        binding.append(found)
    return binding


def _mnemonic(ext) -> str | None:
    """The instruction prefix an extension's ``spelling`` names ("ppu.ldmatrix ... swzl" -> "ppu.ldmatrix")."""
    head = (ext.spelling or "").split()
    return head[0] if head and _MNEMONIC.match(head[0]) else None


def _nibbles(order: Sequence[int]) -> int:
    return sum(int(v) << (4 * i) for i, v in enumerate(order))


def _declared_types(caps, ext) -> list[str]:
    """Activation types the profile declares for this extension's m16n16k16 f32-accumulating MMA."""
    if caps is None:
        return []
    return [ins.a_type for ins in caps.mma
            if ins.extension == ext.name and tuple(ins.shape) == (16, 16, 16) and ins.a_type == ins.b_type
            and "f32" in ins.acc_types and ins.a_type in _MMA_TYPE]


def _spell_mma(ext, caps, act: str) -> str:
    mnemonic = _mnemonic(ext)
    if mnemonic is None:
        return f"// {ext.name}: spelling {ext.spelling!r} is not an instruction mnemonic; not spelled\n"
    types = _declared_types(caps, ext)
    if act not in types:
        return (f"// {ext.name}: the profile declares {mnemonic} m16n16k16 for {', '.join(types) or 'no'} operands, "
                f"not {act}: not spelled for this kernel\n")
    t = _MMA_TYPE[act]
    confirmed = "" if ext.confirmed else " (declared confirmed: false)"
    out = [rf"""
// {mnemonic} m16n16k16 {t} -> f32, vendor extension {ext.name}{confirmed}.
// Native layouts (public code; not run by humming): A and B are 4 registers each, register r of lane L holding
// row/column L/4 + 8*(r/2) at k = 2*(L%4) + 8*(r%2) (+1); accumulator l of lane L sits at row L/4 + 8*(l/4),
// column L%4 + 4*(l%4).
__device__ __forceinline__ void ppu_mma_k16_n16(float (&d)[8], const uint32_t (&a)[4], const uint32_t (&b)[4]) {{
  asm volatile("{mnemonic}.aligned.m16n16k16.row.col.f32.{t}.{t}.f32 "
               "{{%0,%1,%2,%3,%4,%5,%6,%7}}, {{%8,%9,%10,%11}}, {{%12,%13,%14,%15}}, {{%0,%1,%2,%3,%4,%5,%6,%7}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]));
}}
"""]
    order = ext.data.get("b_channel_order")
    if order is None:
        out.append(f"// {ext.name}: no b_channel_order in the profile data: no mma.sync-layout bridge\n")
        return "".join(out)
    binding = bridge_binding(order)
    if binding is None:
        out.append(f"// {ext.name}: b_channel_order {list(order)} gives no lane-independent accumulator binding: "
                   "no mma.sync-layout bridge\n")
        return "".join(out)
    order_text = ", ".join(str(int(v)) for v in order)
    out.append(rf"""
// B-operand channel order (profile data b_channel_order = [{order_text}]): physical column p of each 8-column
// half of B carries logical column ppu_b_channel(p). With B packed so, the native accumulators are mma.sync's.
__device__ __forceinline__ int ppu_b_channel(int p) {{ return (int)((0x{_nibbles(order):08X}u >> (4 * p)) & 0xFu); }}
""")
    a_order = ext.data.get("a_register_order")
    if a_order is None or sorted(int(v) for v in a_order) != [0, 1, 2, 3]:
        out.append(f"// {ext.name}: no valid a_register_order in the profile data: no mma.sync-layout bridge "
                   "(the A-register order of the native instruction is not declared)\n")
        return "".join(out)
    a_regs = ", ".join(f'"r"(a[{int(v)}])' for v in a_order)
    acc = ", ".join(f'"+f"(d{h}[{e}])' for h, e in binding)
    out.append(rf"""
// Two mma.sync-layout m16n8k16 steps (columns 0-7 into d0, 8-15 into d1) as one native m16n16k16. Operands in
// mma.sync layout: a from ldmatrix_x4 (passed in a_register_order [{", ".join(str(int(v)) for v in a_order)}]),
// b0 b1 / b2 b3 the k-halves of the two column tiles, which the caller must have packed in ppu_b_channel order.
__device__ __forceinline__ void ppu_mma_k16_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1, uint32_t b2, uint32_t b3) {{
  asm volatile("{mnemonic}.aligned.m16n16k16.row.col.f32.{t}.{t}.f32 "
               "{{%0,%1,%2,%3,%4,%5,%6,%7}}, {{%8,%9,%10,%11}}, {{%12,%13,%14,%15}}, {{%0,%1,%2,%3,%4,%5,%6,%7}};\n"
               : {acc}
               : {a_regs}, "r"(b0), "r"(b1), "r"(b2), "r"(b3));
}}
""")
    return "".join(out)


def _spell_ldmatrix(ext, caps, act: str) -> str:
    mnemonic = _mnemonic(ext)
    if mnemonic is None:
        return f"// {ext.name}: spelling {ext.spelling!r} is not an instruction mnemonic; not spelled\n"
    return rf"""
// {mnemonic} with hardware swizzle (vendor extension {ext.name}): reads a tile the bulk copy engine wrote in its
// swizzled form. The six descriptor operands are passed through unchanged: their meaning is not established
// from public sources (see docs/porting.md), so nothing in humming builds them yet.
__device__ __forceinline__ void ppu_ldmatrix_x4_swzl(uint32_t (&r)[4], const void* tile, const int (&desc)[6]) {{
  asm volatile("{mnemonic}.sync.aligned.m8n8.x4.swzl.shared.b16 {{%0,%1,%2,%3}}, [%4], {{%5,%6,%7,%8,%9,%10}};\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "l"(tile), "r"(desc[0]), "r"(desc[1]), "r"(desc[2]), "r"(desc[3]), "r"(desc[4]), "r"(desc[5]));
}}
"""


def _spell_bulk_copy(ext, caps, act: str) -> str:
    mnemonic = _mnemonic(ext)
    if mnemonic is None:
        return f"// {ext.name}: spelling {ext.spelling!r} is not an instruction mnemonic; not spelled\n"
    return rf"""
// {mnemonic} (vendor extension {ext.name}): one thread starts an asynchronous 2-D b16 tile copy global -> shared,
// zero-padded and swizzled, completed through the cp.async groups. The tensor (6) and tile (4) operand vectors
// are passed through unchanged: their exact meaning is not established from public sources (docs/porting.md).
__device__ __forceinline__ void ppu_bulk_copy_2d_b16(uint32_t dst, const void* src, const int (&tensor)[6],
                                                     const int (&tile)[4]) {{
  asm volatile("{mnemonic}.shared.global.padz.swzl.2d.b16 [%0], [%1], {{%2,%3,%4,%5,%6,%7}}, {{%8,%9,%10,%11}};\n"
               :: "r"(dst), "l"(src), "r"(tensor[0]), "r"(tensor[1]), "r"(tensor[2]), "r"(tensor[3]),
                  "r"(tensor[4]), "r"(tensor[5]), "r"(tile[0]), "r"(tile[1]), "r"(tile[2]), "r"(tile[3]) : "memory");
}}
"""


SPELLERS: dict[str, Callable[..., str]] = {
    MMA_EXTENSION: _spell_mma,
    LDMATRIX_EXTENSION: _spell_ldmatrix,
    BULK_COPY_EXTENSION: _spell_bulk_copy,
}


def extension_block(caps, act: str) -> str:
    """The guarded source of every extension the profile declares ("" when it declares none)."""
    if caps is None or not caps.vendor_extensions:
        return ""
    parts = []
    for ext in caps.vendor_extensions:
        speller = SPELLERS.get(ext.name)
        if speller is None:
            parts.append(f"// {ext.name}: declared by the profile, but this backend knows no spelling for it\n")
        else:
            parts.append(speller(ext, caps, act))
    names = ", ".join(ext.name for ext in caps.vendor_extensions)
    return (
        f"\n// ===== T-Head PPU vendor extensions declared by {caps.name}: {names}\n"
        "// Spelled from public code, never run by humming. Compiled only where the compile route defines\n"
        f"// {GUARD} (the PPU SDK route); NVRTC builds of the portable sm_80 subset skip this block.\n"
        f"#if defined({GUARD}) && {GUARD}\n" + "".join(parts) + f"#endif  // {GUARD}\n"
    )
