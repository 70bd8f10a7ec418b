"""Which mma.sync-layout weights the register-A WnA16 kernels decode, and the block shape they read them in."""
from __future__ import annotations

BC = 128  # output channels per block: two warpgroups x 64 rows of A


BK = 64  # one 128-byte swizzle row of 16-bit activations per token per stage (one 64x64 weight atom)


# By default the kernel takes only the layouts its GPU tests ran: int4 codes with scale and zero tables per group of
# 64, 128 or 256 or per channel (-1), or none (0); other groups (multiples of 64, and the sub-atom groups of 16 and 32
# of MX and NVFP4) and e2m1 codes only with the tuning knob register_a.any_group.
DEFAULT_GROUPS = (64, 128, 256, -1, 0)
SUB_ATOM_GROUPS = (16, 32)  # scale groups inside one 64-wide atom: a table row per group of k16 steps


def int4_codes(d) -> bool:
    """4-bit integer codes decoded with the magic number (a WeightDecode)."""
    return (d.kind, d.bits, d.container, d.int_path) == ("int", 4, 4, "magic")


def e2m1_codes(d) -> bool:
    """e2m1 codes, one per 4 bits (a WeightDecode): bits placed under the activation type's mantissa (dq_raw)."""
    return (d.kind, d.bits, d.container, d.exp_bits, d.man_bits) == ("float", 4, 4, 2, 1)


def untested_refusal(layout) -> str:
    """Why a layout the kernel decodes has not run on a GPU yet ("" when it has): e2m1 codes, sub-atom groups."""
    if e2m1_codes(layout.decode):
        return "e2m1 codes: not yet run on a GPU; the tuning knob register_a.any_group takes them"
    if layout.scale_group in SUB_ATOM_GROUPS:
        return (f"scale group {layout.scale_group}: sub-atom groups have not run on a GPU yet; the tuning knob "
                "register_a.any_group takes them")
    return ""


def default_refusal(layout) -> str:
    """Why the default selection (register_a.any_group off) leaves a layout the kernel could run to the other
    kernels."""
    for what, group in (("scale", layout.scale_group), ("zero", layout.zero_group)):
        if group not in DEFAULT_GROUPS:
            return (f"{what} group {group}: by default only the GPU-tested groups (64, 128, 256, per channel) take this kernel; "
                    f"the tuning knob register_a.any_group takes it too")
    return untested_refusal(layout)


def scale_rows_per_atom(layout) -> int:
    """Scale table rows per 64-wide k atom: 2 or 4 for groups of 32 or 16, else 1 (a row per atom or fewer)."""
    g = layout.scale_group
    return BK // g if g in SUB_ATOM_GROUPS else 1


def layout_refusal(layout, bc: int = BC) -> str:
    """Why this kernel cannot run a WeightLayout ("" when it can) with ``bc`` channels per block (128; 64 for the
    small-M form)."""
    d = layout.decode
    if getattr(layout, "packing", ""):
        return "it reads the mma.sync atom layout (humming.core.common.layout.prepare), not " + layout.packing
    if not (int4_codes(d) or e2m1_codes(d)):
        return (f"it decodes 4-bit integer codes with the magic number or e2m1 codes, not {d.kind}{d.bits} "
                f"({d.int_path or 'float'})")
    if layout.zero_float:
        return "float zero points are not supported (integer zero points are)"
    for what, group in (("scale", layout.scale_group), ("zero", layout.zero_group)):
        if group > 0 and group % BK and not (what == "scale" and group in SUB_ATOM_GROUPS):
            return (f"{what} group {group} is not a multiple of {BK} (one table row per 64-wide weight atom)"
                    + (f" nor one of the sub-atom scale groups {SUB_ATOM_GROUPS}" if what == "scale" else ""))
    if layout.n % bc:
        return f"N={layout.n} is not a multiple of {bc}"
    if layout.k % BK:
        return f"K={layout.k} is not a multiple of {BK}"
    return ""


SMALL_BC = 64
