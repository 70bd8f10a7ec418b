"""Plans of the MoE WnA16 tile kernel: a token tile sized to the tokens each expert gets on average, channel and K
tiles that divide the padded weights, and the pipeline depth the profile's shared memory allows. The plan's M is the
number of tokens; its grid depends on the routing (humming.core.families.moe_wna16.launch)."""
from __future__ import annotations

from humming.core.common.paths import choose_mma
from humming.core.families.moe_wna16.activations import activation_step
from humming.core.families.moe_wna16.layout import moe_layout
from humming.core.plan import Plan, Tiles
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe_indexed"
FAMILY = "mma_sync_moe"


TOKEN_TILES = (16, 32, 64, 128)


def token_tile(tokens: int, top_k: int, experts: int, largest: int = 128) -> int:
    """Rows per block (the routing's padding): the smallest of TOKEN_TILES up to ``largest`` that holds the tokens
    an expert gets on average (tokens x top_k / experts), ``largest`` beyond."""
    per_expert = tokens * top_k / max(experts, 1)
    for bm in TOKEN_TILES:
        if per_expert <= bm or bm >= largest:
            return bm
    return largest


def _tile_shapes(bm: int, n_pad: int, k_pad: int) -> list[tuple[Tiles, str]]:
    """Candidate tiles for a token tile, best first. Small token tiles split K across warps (decode streams
    weights: more bytes in flight per block); 64-row tiles spread 4 warps over M and N."""
    atoms_k = k_pad // 64
    out: list[tuple[Tiles, str]] = []
    if bm <= 32:
        for wk in (4, 2, 1):
            if atoms_k % wk == 0:
                out.append((Tiles(bm, 64, 64 * wk, 4, 1, 1, wk),
                            f"{bm}-row token tile x 64 channels, {wk} warp(s) splitting each {64 * wk}-deep K stage"))
    elif bm == 64:
        if n_pad % 128 == 0:
            out.append((Tiles(64, 128, 64, 4, 2, 2, 1), "64-row token tile x 128 channels, 2 x 2 warps"))
        out.append((Tiles(64, 64, 64, 4, 4, 1, 1), "64-row token tile x 64 channels, 4 warps along M"))
    else:
        if n_pad % 128 == 0:
            out.append((Tiles(128, 128, 64, 4, 4, 2, 1), "128-row token tile x 128 channels, 4 x 2 warps"))
        out.append((Tiles(128, 64, 64, 4, 4, 1, 1), "128-row token tile x 64 channels, 4 warps along M"))
    return out


SPLIT_BLOCKS_PER_SM = 4  # split K until the tiles in use give each SM about this many blocks (token tiles <= 32)


def moe_splits(t: Tiles, n_pad: int, k_pad: int, tokens: int, top_k: int, experts: int, caps) -> tuple[int, str]:
    """Split-K for few rows per expert (decode): the tiles in use (the experts reached x channel tiles) are too few
    to keep every SM streaming weights, so K is split (partials added by the tile's last block, in split order)."""
    slots = tokens * top_k
    used = min(experts, slots) * max(1, -(-slots // max(1, min(experts, slots)) // t.bm)) * (n_pad // t.bn)
    sms = caps.limits.sms or 80
    target = SPLIT_BLOCKS_PER_SM * sms if t.bm <= 32 else sms  # (larger token tiles: one block per SM)
    splits = 1
    for s in (2, 4, 8):
        if used * splits >= target or k_pad % (t.bk * s) or k_pad // (t.bk * s) < 2:
            break
        splits = s
    if splits == 1:
        return 1, f"no split-K: about {used} tiles in use fill {sms} SMs (or K has no room to split)"
    return splits, (f"split-K {splits}: about {used} tiles in use (experts reached x channel tiles) for {sms} SMs; "
                    f"partials added by each tile's last block in split order")


def plan_moe(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int,
             forced: tuple[Tiles, int] | None = None) -> Plan:
    """The plan of an indexed MoE GEMM: ``tokens`` rows of x, each sent to ``top_k`` of ``experts`` weights [N, K];
    ``act``: the 16-bit type the kernel multiplies (quantized activations: the type they are changed to,
    humming.core.families.moe_wna16.activations). ``forced``: (tiles, splits) of a measured entry or a tuning
    candidate instead of the rules' (ShapeError where the shape or the profile cannot take them)."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    step, step_why = activation_step(scheme, n, k)
    layout = moe_layout(scheme.with_(act=None) if step != "x" else scheme, n, k, act)
    instruction, why = choose_mma(caps, act)
    if not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name} does not declare ldmatrix, which the mma.sync kernels use for A")
    reasons = [why, f"indexed MoE: rows of x gathered through the routing's sorted slots, the block's expert from the "
                    f"routing, weights padded to {layout.n}x{layout.k} once when prepared"]
    if step != "x":
        reasons.append(step_why)
    limit = caps.limits.smem_per_block_kb * 1024
    if forced is not None:
        return _forced_plan(caps, scheme, tokens, n, k, act, experts, top_k, layout, instruction, reasons, forced,
                            limit, step)
    bm = token_tile(tokens, top_k, experts, int(knobs.value("moe.max_token_tile", caps)))
    reasons.append(f"token tile {bm}: {tokens} token(s) x top-{top_k} over {experts} experts "
                   f"= {tokens * top_k / experts:.1f} rows per expert on average")
    for tiles, why in _tile_shapes(bm, layout.n, layout.k):
        for stages in range(tiles.stages, 1, -1):
            t = Tiles(tiles.bm, tiles.bn, tiles.bk, stages, tiles.warps_m, tiles.warps_n, tiles.warps_k)
            smem = t.smem_bytes(layout)
            if smem <= limit:
                splits, split_why = moe_splits(t, layout.n, layout.k, tokens, top_k, experts, caps)
                reasons += [why, f"{stages} stages: {smem // 1024} KiB of {caps.limits.smem_per_block_kb} KiB shared "
                                 f"memory per block", split_why]
                return _plan(caps, scheme, tokens, n, k, act, layout, instruction, t, splits, smem, reasons, step)
    raise UnsupportedOnDevice(f"no MoE tile fits {caps.name}'s {limit} B of shared memory per block")


def _plan(caps, scheme, tokens, n, k, act, layout, instruction, t: Tiles, splits: int, smem: int, reasons, step) -> Plan:
    return Plan(scheme=scheme.name, profile=caps.name, m=tokens, n=n, k=k, act=act, out=act, family=FAMILY,
                instruction=instruction, path=PATH, layout=layout, tiles=t, splits=splits,
                async_copy=bool(caps.memory.cp_async), smem_bytes=smem, reasons=tuple(reasons),
                row_scale=step == "codes16" and scheme.act_scale.mode == "dynamic_token")


SPLITS = (1, 2, 4, 8)


def _splits_fit(splits: int, k_pad: int, bk: int) -> bool:
    """Whether split-K ``splits`` cuts K into equal parts of whole stages, at least two each (one part: any K)."""
    return splits == 1 or (splits in SPLITS and k_pad % (bk * splits) == 0 and k_pad // (bk * splits) >= 2)


def _forced_plan(caps, scheme, tokens, n, k, act, experts, top_k, layout, instruction, reasons, forced, limit,
                 step) -> Plan:
    """The plan with a given (tiles, splits): the tile one of the kernel's shapes for its token tile, the stages
    within the shared memory, the splits dividing K into whole stages."""
    t, splits = forced
    shapes = {(c.bn, c.bk, c.warps_m, c.warps_n, c.warps_k): (c, why) for c, why in _tile_shapes(t.bm, layout.n, layout.k)}
    key = (t.bn, t.bk, t.warps_m, t.warps_n, t.warps_k)
    if t.bm not in TOKEN_TILES or key not in shapes:
        raise ShapeError(f"MoE tile {t.bm}x{t.bn}x{t.bk} with warps {t.warps_m}x{t.warps_n}x{t.warps_k} is not one of "
                         f"the tile kernel's shapes for {layout.n}x{layout.k}")
    if not 2 <= t.stages <= shapes[key][0].stages or t.smem_bytes(layout) > limit:
        raise ShapeError(f"{t.stages} stages of the MoE tile {t.bm}x{t.bn}x{t.bk} do not fit {caps.name}")
    if not _splits_fit(splits, layout.k, t.bk):
        raise ShapeError(f"split-K {splits} does not divide K={layout.k} into parts of at least two {t.bk}-deep "
                         f"stages")
    reasons = reasons + [f"token tile {t.bm} (measured): {tokens} token(s) x top-{top_k} over {experts} experts",
                         shapes[key][1], f"{t.stages} stages, split-K {splits} (measured)"]
    return _plan(caps, scheme, tokens, n, k, act, layout, instruction, t, splits, t.smem_bytes(layout), reasons, step)


def tile_candidates(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> list[Plan]:
    """Every plan of the tile kernel a tuner may time for this GEMM: each token tile, its tile shapes at the most
    stages that fit, each split-K that divides K."""
    step, _ = activation_step(scheme, n, k)
    layout = moe_layout(scheme.with_(act=None) if step != "x" else scheme, n, k, act)
    limit = caps.limits.smem_per_block_kb * 1024
    out = []
    for bm in TOKEN_TILES:
        for tiles, _ in _tile_shapes(bm, layout.n, layout.k):
            stages = next((s for s in range(tiles.stages, 1, -1)
                           if Tiles(bm, tiles.bn, tiles.bk, s, tiles.warps_m, tiles.warps_n, tiles.warps_k)
                           .smem_bytes(layout) <= limit), None)
            if stages is None:
                continue
            t = Tiles(bm, tiles.bn, tiles.bk, stages, tiles.warps_m, tiles.warps_n, tiles.warps_k)
            for splits in SPLITS:
                if _splits_fit(splits, layout.k, t.bk):
                    out.append(plan_moe(caps, scheme, tokens, n, k, act, experts, top_k, forced=(t, splits)))
    return out
