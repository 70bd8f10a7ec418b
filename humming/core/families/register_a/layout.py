"""Which mma.sync-layout weights the register-A WnA16 kernels decode, and the block shape they read them in."""
from __future__ import annotations

BC = 128  # output channels per block: two warpgroups x 64 rows of A


BK = 64  # one 128-byte swizzle row of 16-bit activations per token per stage (one 64x64 weight atom)


# By default the kernel takes only the layouts its GPU tests ran: scale and zero tables per group of 64, 128 or 256 or
# per channel (-1), or none (0); other multiples of 64 only with the tuning knob register_a.any_group.
DEFAULT_GROUPS = (64, 128, 256, -1, 0)


def default_refusal(layout) -> str:
    """Why the default selection (register_a.any_group off) leaves a layout the kernel could run to the other
    kernels."""
    for what, group in (("scale", layout.scale_group), ("zero", layout.zero_group)):
        if group not in DEFAULT_GROUPS:
            return (f"{what} group {group}: by default only the GPU-tested groups (64, 128, 256, per channel) take this kernel; "
                    f"the tuning knob register_a.any_group takes it too")
    return ""


def layout_refusal(layout, bc: int = BC) -> str:
    """Why this kernel cannot run a WeightLayout ("" when it can) with ``bc`` channels per block (128; 64 for the
    small-M form)."""
    d = layout.decode
    if getattr(layout, "packing", ""):
        return "it reads the mma.sync atom layout (humming.core.common.layout.prepare), not " + layout.packing
    if (d.kind, d.bits, d.container, d.int_path) != ("int", 4, 4, "magic"):
        return f"it decodes 4-bit integer codes with the magic number, not {d.kind}{d.bits} ({d.int_path})"
    if layout.zero_float:
        return "float zero points are not supported (integer zero points are)"
    for what, group in (("scale", layout.scale_group), ("zero", layout.zero_group)):
        if group > 0 and group % BK:
            return f"{what} group {group} is not a multiple of {BK} (one table row per 64-wide weight atom)"
    if layout.n % bc:
        return f"N={layout.n} is not a multiple of {bc}"
    if layout.k % BK:
        return f"K={layout.k} is not a multiple of {BK}"
    return ""


SMALL_BC = 64
