"""Shared-memory arithmetic of the stream kernel's variants (the planner sizes them, the generator lays them out):
the fold variant's precision limit, the bulk-copy ring's slots, the x_smem staging of activations and tables."""
from __future__ import annotations

# Largest magic offset per code level that fold keeps within the fp16 tolerance: measured on the H200
# (512x2048 g64, M=1, relative error against the reference): uint1 in f16 (1024 / 2 levels) 1.2e-3 relative
# error against 2.2e-4 without fold; uint2 in f16 (1024 / 4) 2.7e-4; 1-bit codes in bf16 (128 / 2) unchanged.
FOLD_MAX_MAGIC_PER_LEVEL = 256


def fold_applies(layout) -> str:
    """Why the *fold* variant cannot run this layout ("" when it can). Fold multiplies the raw codes (exact
    act-typed ``magic + q``) and applies ``(sum + zz * sum(x)) * ss`` once per atom in fp32, so it needs integer
    codes decoded as add-then-multiply, with scales and zeros constant over a 64-wide atom."""
    dec = layout.decode
    if dec.kind != "int" or getattr(layout, "zero_float", False):
        return "fold needs integer codes with integer (or no) zero points"
    for what, group in (("scale", layout.scale_group), ("zero", layout.zero_group)):
        if 0 < group < 64:
            return f"fold needs {what} groups of at least 64 (one value per atom), not {group}"
    if dec.zero_bias > FOLD_MAX_MAGIC_PER_LEVEL * (1 << dec.bits):
        return (f"fold loses precision with {dec.bits}-bit codes in {dec.act}: the raw codes carry the magic offset "
                f"{dec.zero_bias:g}, which swamps {1 << dec.bits} levels in the fp32 tensor-core sums")
    return ""


X_PITCH = 144  # bytes between activation rows in a slot: 128 + 16, so the 8 rows of an ldmatrix hit distinct banks


def _bulk_table_rows(lay) -> list[tuple[str, str]]:
    """(table pointer, C expression of the row for atom ``a_``) of every 128-byte table row an atom's slot holds:
    the scale rows, then the zero rows (one row per atom for groups of 64 or more or a single row; 64 / group
    rows for smaller groups)."""
    rows = []
    for ptr, group in (("S", lay.scale_group), ("Z", lay.zero_group)):
        if not group:
            continue
        if group < 0:
            rows.append((ptr, "0"))
        elif group >= 64:
            rows.append((ptr, f"a_ * 64 / {group}"))
        else:
            rows += [(ptr, f"a_ * 64 / {group} + {r}") for r in range(64 // group)]
    return rows


def bulk_slot_bytes(lay, bm: int) -> int:
    """Bytes of one ring slot: the atom's weights, its table rows and bm activation rows."""
    return 16 * 32 * lay.decode.container + 128 * len(_bulk_table_rows(lay)) + X_PITCH * bm


# ------------------------------------------------------------------------------------------------ x_smem
# x_smem: the block's activations (tokens < M over its K range) and its rows of the per-atom tables are copied
# once into shared memory, after the weight prefetch; the main loop then reads them with shared loads instead of
# an L2 round trip per atom (measured on the H200: with activation and scale loads removed outright,
# the M=1 28672x8192 kernel ran 39.7 -> 36.2 us).
X_SMEM_MAX_COPIES = 32  # 16-byte copies of activations per thread (four round trips of 8)


def _table_rows(group: int, k_split: int) -> int:
    """Rows of a table (one per `group` of K; one for per-channel values) that a block's K range touches."""
    if group < 0:
        return 1
    return k_split // group if k_split % group == 0 else k_split // group + 2


def x_smem_tokens(m: int, bm: int) -> int:
    """Token rows an x_smem kernel reserves: 1 for M=1, else the token tile (8 or 16), so that one kernel serves
    every M of its tuning bucket (2-8, 9-16) and a layer's first call compiles no more kernels than before."""
    return 1 if m == 1 else bm


def x_smem_layout(layout, m: int, k_split: int, fold_bytes: int, threads: int) -> dict | str:
    """Shared-memory offsets of the x_smem staging of ``m`` reserved token rows (after the warps' fold area), or
    why it cannot stage this."""
    tables = [(var, group) for var, group in (("ss", layout.scale_group), ("zz", layout.zero_group)) if group]
    for _, group in tables:
        if 0 < group < 64:
            return f"x_smem stages tables with groups of at least 64 (one row per atom), not {group}"
    x_bytes = m * k_split * 2
    copies = -(-x_bytes // 16 // threads)
    if copies > X_SMEM_MAX_COPIES:
        return (f"x_smem: {m} token(s) x {k_split} of K is {copies} 16-byte copies per thread (at most "
                f"{X_SMEM_MAX_COPIES}); use fewer tokens or more splits")
    offset = -(-fold_bytes // 128) * 128
    out = {"x_offset": offset, "x_bytes": x_bytes, "tables": [], "table_bytes": 0}
    offset += -(-x_bytes // 128) * 128
    for var, group in tables:
        rows = _table_rows(group, k_split)
        out["tables"].append({"var": var, "group": group, "rows": rows, "offset": offset})
        out["table_bytes"] += rows * 128
        offset += rows * 128
    out["total"] = offset
    return out


def stream_smem_bytes(tiles, layout) -> int:
    """The stream kernel's shared memory: where the warps splitting a slab's K fold their sums (and the bulk
    variant's rings of slots)."""
    fold = (tiles.warps_k - 1) * 4 * (tiles.bm // 8) * 4 * 32 * 4
    if not tiles.bulk:
        return fold
    return max(fold, tiles.warps_k * tiles.stages * (bulk_slot_bytes(layout, tiles.bm) + 8))
