"""The planner: (weight layout, problem size, device capabilities) -> an execution Plan that explains itself.

Every choice records its reason. The planner asks the capabilities what is declared (an MMA of
these operand types, cp.async, the shared-memory limit, the SM count); it never tests an
architecture number or a device name.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace

from humming.core.common.layout import WeightLayout
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

# k16 steps are spelled from the largest declared shape first
_K16_SHAPES = ((16, 8, 16), (16, 8, 8))
_DEFAULT_SMS = 80  # used only when a profile does not know its SM count (said in the reasons)
TAIL_SPLITS = 4  # TileConfig.tail: blocks per tail tile of the two-warpgroup register-A form (one per quarter of K)


@dataclass(frozen=True)
class TileConfig:
    bm: int
    bn: int
    bk: int
    stages: int
    warps_m: int
    warps_n: int
    warps_k: int
    x_ring: int = 0  # stream path: 1 = activations also travel in the register ring (one atom ahead)
    fold: int = 0  # stream path: 1 = MMA on raw codes, zero point and scale applied per atom in fp32; 2 = the same
    #                with the 16-channel tiles outermost (fewer live registers; needs x_ring or bulk)
    bulk: int = 0  # stream path: 1 = weights, tables and activations reach a per-warp shared-memory ring of `stages`
    #                slots by bulk copy (TMA engine, mbarriers) instead of registers; register-A wgmma path: 1 = the
    #                activation stages arrive by TMA tensor copy instead of cp.async
    stagger: int = 0  # warp-specialised register-A wgmma kernels: 1 = the second consumer warpgroup issues its first
    #                   wgmmas after the first one's, so each promotes / decodes while the other's wgmmas run
    x_smem: int = 0  # stream path: 1 = the block's activations (tokens < M over its K range) and per-atom tables are
    #                  copied once into shared memory after the launch and read with shared loads per atom
    raster: int = 0  # register-A W4A8 kernel and two-warpgroup W4A16 form: token tiles per rasterization group (the
    #                  blocks of a group take its token tiles for one channel tile after another, sharing the
    #                  activations in L2); 0 = launch order
    cluster: int = 0  # small-M register-A wgmma form with TMA copies: blocks per thread-block cluster along the
    #                   channel slabs (2 or 4); each activation stage is read from L2 once per cluster and multicast
    #                   into every block's slot; 0 = no cluster
    prefetch: int = 0  # two-warpgroup register-A form: weight atoms in flight per lane (0 = the form's default PF)
    balance: int = 0  # stream path without split-K: the last `balance` slabs run as two blocks each, one per half of
    #                   K (the second to finish adds both); N/64 + balance blocks that fill whole rounds of blocks per
    #                   SM give every SM about the same bytes to stream
    occupancy: int = 0  # small-M register-A form: blocks per SM its registers are budgeted for (0: the form's own
    #                     rule); set, each stage waits for its own wgmmas so one set of decoded weights is live, and
    #                     the weight ring holds `prefetch` atoms (default OCCUPANCY_PF): more, shallower warpgroups
    tail: int = 0  # two-warpgroup register-A form: the last `tail` tiles in launch order run as TAIL_SPLITS blocks
    #                each (one per quarter of K, fp32 partials added by the last), so the round after the last
    #                whole one takes a quarter-tile granularity instead of whole tiles
    streamk: int = 0  # two-warpgroup register-A form and the wide register-A W4A8 form: this many persistent blocks
    #                   (one per SM) take the tiles in whole waves, then split the left-over tiles' k atoms evenly
    #                   (stream-K); 0 = one block per tile
    # stream-K of the two-warpgroup W4A16 form: 1 = the next segment's first weight atoms are loaded right after a
    # segment's last wgmmas (during its epilogue); not in the repr (the kernel key names it), so that the other plans'
    # kernel names stay as they were
    early: int = field(default=0, repr=False)
    # register-A W4A16 forms: 1 = the epilogue stages the output tile with stmatrix (.trans, four 8x8 matrices a
    # thread-quad instruction) instead of two 16-bit shared stores per value pair; not in the repr (see early)
    stsm: int = field(default=0, repr=False)
    # register-A W4A8 kernel: 1 = the wide form (weights by bulk copy into the stage's slot, each fragment widened once
    # for every chain) at a 128-token tile, which alone would read as the narrow form; not in the repr (see early)
    wide: int = field(default=0, repr=False)
    # wide register-A W4A8 form: N > 0 = converter warps of the producer warpgroup widen each stage's codes into a ring
    # of N shared-memory slots of e4m3 (or s8) A fragments that the consumers load, instead of widening them in the
    # consumer warps (whose ALU work slows their register-A wgmmas); not in the repr (see early)
    widened: int = field(default=0, repr=False)
    # wide register-A W4A8 form: 1 = its producer thread, once it has issued the tile's last stage, asks the L2 for the
    # first `stages` stages' codes and scales of the block launched one wave later; not in the repr (see early)
    l2next: int = field(default=0, repr=False)
    # register-A W4A8 kernel, per-channel scales: 1 = the wgmmas accumulate across every stage straight into the block's
    # accumulators (no partials, no promotion; int8: exact int32 sums by default, e4m3: GemmOptions.fast_accum;
    # humming.core.families.register_a8.direct); not in the repr (see early)
    direct: int = field(default=0, repr=False)

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n * self.warps_k

    def stage_bytes(self, layout: WeightLayout) -> int:
        a = self.bm * self.bk * 2
        b = self.bk * self.bn * layout.decode.container // 8
        rows = 0
        if layout.scale_group:
            rows += max(1, self.bk // layout.scale_group)
        if layout.zero_group:
            rows += 1 if layout.zero_group < 0 else max(1, self.bk // layout.zero_group)
        return a + b + rows * self.bn * 2

    def smem_bytes(self, layout: WeightLayout, path: str = "tile") -> int:
        if path == "stream":  # shared memory folds the warps' sums (and holds the bulk variant's rings)
            fold = (self.warps_k - 1) * 4 * (self.bm // 8) * 4 * 32 * 4
            if not self.bulk:
                return fold
            from humming.core.families.mma_wna16.stream import bulk_slot_bytes

            return max(fold, self.warps_k * self.stages * (bulk_slot_bytes(layout, self.bm) + 8))
        pipeline = self.stages * self.stage_bytes(layout)
        reduction = (self.warps_k - 1) * self.bm * self.bn * 4
        return max(pipeline, reduction)


@dataclass(frozen=True)
class Plan:
    scheme: str
    profile: str
    m: int
    n: int
    k: int
    act: str
    out: str
    family: str
    instruction: object  # MmaInstruction
    path: str
    layout: WeightLayout
    tiles: TileConfig
    splits: int
    async_copy: bool
    smem_bytes: int
    reasons: tuple[str, ...] = field(default=())
    # WnA16 kernels: GS is a per-row (per-token) fp32 vector [M] instead of a device scalar; W8A8/W4A8 activations
    # widened exactly to the activation type run on the weight-only kernels with their scales applied so
    row_scale: bool = False
    # programmatic dependent launch: the kernel prefetches its weights, then waits for the previous kernel of the
    # stream (griddepcontrol.wait) before it reads activations or writes anything; launched with the PDL attribute
    pdl: bool = False
    # split-K of the stream kernel or the small register-A form: the splits of a slab form one thread-block cluster
    # (1 x 1 x splits) and add their partials in the first block's shared memory (distributed shared memory) instead
    # of a workspace round trip (planner.with_cluster_splits)
    cluster_splits: bool = False

    @property
    def threads(self) -> int:
        return self.tiles.threads

    @property
    def grid(self) -> tuple[int, int, int]:
        t = self.tiles
        if getattr(t, "streamk", 0):  # persistent blocks along y
            return (1, t.streamk, 1)
        if getattr(t, "tail", 0):  # every tile in launch order along y, then the tail tiles' K quarters
            return (1, math.ceil(self.m / t.bm) * (self.n // t.bn) + t.tail * (TAIL_SPLITS - 1), 1)
        return (math.ceil(self.m / t.bm), self.n // t.bn + getattr(t, "balance", 0), self.splits)

    @property
    def partials(self) -> int:
        """Split-K partials per output tile the workspace must hold (1: none)."""
        if self.cluster_splits:
            return 1
        if getattr(self.tiles, "tail", 0):
            return TAIL_SPLITS
        return 2 if getattr(self.tiles, "balance", 0) else self.splits

    @property
    def workspace_floats(self) -> int:
        """fp32 split-K partials the launch's workspace must hold (0: none)."""
        t = self.tiles
        if getattr(t, "streamk", 0):  # per block: W4A8 two slots (its first and its last segment), W4A16 one (its
            return t.streamk * (2 if self.is_8bit else 1) * t.bm * t.bn  # first: the hand-over form)
        if getattr(t, "tail", 0):
            return t.tail * TAIL_SPLITS * t.bm * t.bn
        parts = self.partials
        return parts * self.grid[0] * t.bm * self.n if parts > 1 else 0

    @property
    def cluster_dims(self) -> tuple[int, int, int] | None:
        """The launch's thread-block cluster shape (blocks along x, y, z), or None for a launch without clusters."""
        if self.cluster_splits:
            return (1, 1, self.splits)
        c = getattr(self.tiles, "cluster", 0)
        return (1, c, 1) if c > 1 else None

    @property
    def acc_type(self) -> str:
        return "s32" if getattr(self.instruction, "a_type", "") in ("s8", "u8") else "f32"

    @property
    def is_8bit(self) -> bool:
        return getattr(self.instruction, "a_type", "") in ("s8", "e4m3", "e5m2")

    @property
    def kernel_key(self) -> str:
        """What the kernel source depends on (not M, N, K or the split count, which are launch arguments; the
        x_smem stream kernel compiles M and the K range of a split in, the stream-K kernels K)."""
        t = self.tiles
        # the stream-K schedule's k atoms per tile are a constant of the kernel (its block count is in t)
        streamk_k = ("streamk_k", self.k, *(("early",) if getattr(t, "early", 0) else ())) if getattr(t, "streamk", 0) else ()
        if self.is_8bit:
            parts8 = (self.family, self.path, tuple(self.instruction.shape), self.instruction.a_type, self.act, t,
                      self.async_copy, getattr(self.layout, "weight_bits", 8), getattr(self.layout, "group", 0),
                      *(("fast_accum",) if getattr(self.layout, "fast_accum", False) else ()),
                      *(("prmt",) if getattr(self.layout, "widen", "linear") == "prmt" else ()),
                      *(("block",) if getattr(self.layout, "weight_scale", "") == "block" else ()),
                      *(("e2m1",) if getattr(self.layout, "weight_format", "") == "e2m1" else ()),
                      *(("pdl",) if self.pdl else ()), *(("stsm",) if getattr(t, "stsm", 0) else ()),
                      *(("wide",) if getattr(t, "wide", 0) else ()),
                      *(("widened", t.widened) if getattr(t, "widened", 0) else ()),
                      *(("l2next",) if getattr(t, "l2next", 0) else ()),
                      *(("direct",) if getattr(t, "direct", 0) else ()), *streamk_k)
            return hashlib.sha1(repr(parts8).encode()).hexdigest()[:10]
        d = self.layout.decode
        parts = (
            self.family, self.path, tuple(self.instruction.shape), self.act, d, self.layout.scale_group,
            self.layout.zero_group, self.layout.zero_const, t, self.async_copy,
            *((True,) if getattr(self.layout, "zero_float", False) else ()),
            *(("tile_major",) if getattr(self.layout, "tile_major", False) else ()),
            *(("row_scale",) if self.row_scale else ()),
            *(("pdl",) if self.pdl else ()),
            *(("cluster_splits",) if self.cluster_splits else ()),
            *(("stsm",) if getattr(t, "stsm", 0) else ()),
            # x_smem reserves 1 token row (M=1) or the token tile's, over the K range of one split: compiled in
            *(("x_smem", 1 if self.m == 1 else t.bm, self.k // self.splits) if getattr(t, "x_smem", 0) else ()),
            *streamk_k,
        )
        return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        if self.is_8bit:
            w = "w4a8" if getattr(self.layout, "weight_bits", 8) == 4 else "w8a8"
            if getattr(self.layout, "weight_scale", "") == "block":
                w += "blk"  # 128x128 weight blocks, activations per 128 of K
            if self.family != "mma_sync":
                w += "_" + self.family  # e.g. hm_w8a8_wgmma_...
            return (f"hm_{w}_{self.instruction.a_type}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}"
                    f"w{t.warps_m}{t.warps_n}{t.warps_k}{'v' if getattr(t, 'wide', 0) else ''}"
                    f"{f'k{t.streamk}' if getattr(t, 'streamk', 0) else ''}{f'u{t.widened}' if getattr(t, 'widened', 0) else ''}"
                    f"{'m' if getattr(t, 'stsm', 0) else ''}{'d' if getattr(t, 'direct', 0) else ''}"
                    f"{'_pdl' if self.pdl else ''}_{self.kernel_key}")
        d = self.layout.decode
        w = f"{d.kind}{d.bits}"
        kind = "wgmma" if self.family == "wgmma" else "stream" if self.path == "stream" else "tile"
        if self.path == "wgmma-rs":
            kind = "wgmmars"  # register-A wgmma (bm = tokens, bn = channels)
        return (f"hm_wna16_{kind}_{w}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}w{t.warps_m}{t.warps_n}{t.warps_k}"
                f"{'x' if t.x_ring else ''}{'s' if t.x_smem else ''}{('f' if t.fold == 1 else f'f{t.fold}') if t.fold else ''}{'b' if t.bulk else ''}"
                f"{f'c{t.cluster}' if t.cluster else ''}{f'p{t.prefetch}' if t.prefetch else ''}"
                f"{f'v{t.balance}' if getattr(t, 'balance', 0) else ''}{f'o{t.occupancy}' if t.occupancy else ''}"
                f"{f'q{t.tail}' if getattr(t, 'tail', 0) else ''}{f'k{t.streamk}' if getattr(t, 'streamk', 0) else ''}"
                f"{'e' if getattr(t, 'early', 0) else ''}{'m' if getattr(t, 'stsm', 0) else ''}"
                f"{'_ts' if self.row_scale else ''}{'_pdl' if self.pdl else ''}{'_cs' if self.cluster_splits else ''}"
                f"_{self.kernel_key}")

    def summary(self) -> str:
        t = self.tiles
        shape = "x".join(str(v) for v in self.instruction.shape)
        if self.path == "stream":
            return (
                f"{self.scheme} M={self.m} N={self.n} K={self.k} on {self.profile}: {self.family} m{shape} "
                f"{self.instruction.a_type}x{self.instruction.b_type}->{self.acc_type}, stream (weights as A, registers only), "
                f"{t.bm // 8} token tile(s), {t.warps_k} warps per 64-channel slab, split-K {self.splits}"
            )
        return (
            f"{self.scheme} M={self.m} N={self.n} K={self.k} on {self.profile}: {self.family} m{shape} "
            f"{self.instruction.a_type}x{self.instruction.b_type}->{self.acc_type}, {self.path}, tile {t.bm}x{t.bn}x{t.bk}, "
            f"{t.stages} stages, {t.threads} threads (warps {t.warps_m}x{t.warps_n}x{t.warps_k}), split-K {self.splits}, "
            f"smem {self.smem_bytes // 1024} KiB"
        )

    def explain(self) -> str:
        return self.summary() + "\n" + "\n".join(f"  - {r}" for r in self.reasons)

    def to_dict(self) -> dict:
        return {
            "scheme": self.scheme, "profile": self.profile, "m": self.m, "n": self.n, "k": self.k,
            "act": self.act, "out": self.out, "family": self.family,
            "instruction": {"shape": list(self.instruction.shape), "a": self.instruction.a_type,
                            "b": self.instruction.b_type},
            "path": self.path, "tiles": asdict(self.tiles), "splits": self.splits, "grid": list(self.grid),
            "threads": self.threads, "smem_bytes": self.smem_bytes, "async_copy": self.async_copy,
            "kernel": self.kernel_name, "reasons": list(self.reasons),
            **({"row_scale": True} if self.row_scale else {}),
            **({"pdl": True} if self.pdl else {}),
            **({"cluster_splits": True} if self.cluster_splits else {}),
        }


def row_scale_refusal(plan) -> str:
    """Why the plan's kernel cannot take per-token scales in GS (``Plan.row_scale``); "" when it can: the WnA16
    stream, tile and register-A wgmma kernels can."""
    if plan.is_8bit or getattr(plan.instruction, "scale_format", None):
        return "the 8-bit and block-scaled kernels take their activation scales as such"
    if plan.family == "mma_sync" or plan.path == "wgmma-rs":
        return ""
    return f"the {plan.family} {plan.path} kernel has no per-token output scale"


def choose_mma(caps, act: str) -> tuple[object, str]:
    """The mma.sync instruction used for one k16 step with act x act operands and fp32 accumulation."""
    found = caps.find_mma(family="mma_sync", a_type=act, b_type=act, acc_type="f32")
    by_shape = {tuple(i.shape): i for i in found}
    for shape in _K16_SHAPES:
        if shape in by_shape:
            how = "one instruction per k16 step" if shape[2] == 16 else "two m16n8k8 per k16 step"
            return by_shape[shape], f"mma.sync m{shape[0]}n{shape[1]}k{shape[2]} {act} declared: {how}"
    have = sorted({i.a_type for i in caps.find_mma(family="mma_sync")})
    alt = " use float16 activations" if act == "bf16" and "f16" in have else ""
    raise UnsupportedOnDevice(
        f"{caps.name} declares no mma.sync m16n8k16/m16n8k8 with {act} operands and fp32 accumulation "
        f"(declared mma.sync A types: {', '.join(have) or 'none'});{alt or ' no WnA16 path'}"
    )


def _tile_candidates(m: int, n: int, k: int, layout: WeightLayout, sms: int) -> list[tuple[TileConfig, str]]:
    """Tile shapes for an M bucket, best first; the caller keeps the first that fits shared memory.
    The orders come from measured sweeps (bench/sweep_wna16.py, docs/performance.md)."""
    groups = [g for g in (layout.scale_group, layout.zero_group) if g > 0]

    def fits(t: TileConfig) -> bool:
        return k % t.bk == 0 and n % t.bn == 0 and all(g % t.bk == 0 or t.bk % g == 0 for g in groups)

    out: list[tuple[TileConfig, str]] = []
    if m <= 64:
        tm = math.ceil(m / 16)
        for warps_k in (4, 2, 1):
            for stages in (3, 4, 2):
                out.append((
                    TileConfig(16 * tm, 64, 64 * warps_k, stages, 1, 1, warps_k),
                    f"M={m} <= 64: memory-bound; {tm} m16 tile(s), 64-wide column slabs, "
                    f"{warps_k} warp(s) split each stage's K",
                ))
    else:
        big = TileConfig(128, 256, 64, 4, 2, 4, 1)
        tiles_big = math.ceil(m / 128) * (n // 256) if n % 256 == 0 else 0
        if m <= 128 and tiles_big < sms:
            out.append((TileConfig(64, 128, 128, 4, 1, 2, 2), f"M={m} <= 128 on {n // 128} column tiles: 64x128 tile, 4 warps (2 split K)"))
        if tiles_big >= sms or m > 128:
            out.append((big, f"M={m}: 128x256 block tile, 8 warps of 64x64 ({tiles_big} tiles for {sms} SMs)"))
        for stages in (3, 2):
            out.append((TileConfig(128, 128, 64, stages, 2, 2, 1), f"M={m}: 128x128 block tile, 4 warps of 64x64"))
            out.append((TileConfig(64, 64, 64, stages, 2, 1, 1), f"M={m}: 64x64 block tile, 2 warps"))
    out = [c for c in out if fits(c[0])]
    if not out:
        raise ShapeError(
            f"no tile fits N={n}, K={k} with group sizes {groups}: N and K must be multiples of 64 and each "
            f"group size a multiple or a divisor of 64"
        )
    return out


def _check_forced(t: TileConfig, m: int, n: int, k: int, layout: WeightLayout) -> None:
    groups = [g for g in (layout.scale_group, layout.zero_group) if g > 0]
    problems = []
    if t.bm % (16 * t.warps_m) or t.bn % (64 * t.warps_n) or t.bk % (64 * t.warps_k):
        problems.append("BM must be a multiple of 16*warps_m, BN of 64*warps_n, BK of 64*warps_k")
    if k % t.bk or n % t.bn:
        problems.append(f"BK={t.bk} must divide K={k} and BN={t.bn} must divide N={n}")
    if any(not (g % t.bk == 0 or t.bk % g == 0) for g in groups):
        problems.append(f"group sizes {groups} must divide or be multiples of BK={t.bk}")
    if t.stages < 2 or t.threads > 1024:
        problems.append("at least 2 stages and at most 1024 threads")
    if t.x_ring or t.fold or t.x_smem:
        problems.append("x_ring, x_smem and fold are stream-path options")
    if problems:
        raise ShapeError(f"tile {t} is not valid here: " + "; ".join(problems))


def _occupancy(tiles: TileConfig, smem: int, caps) -> int:
    limit = caps.limits.smem_per_block_kb * 1024
    per_sm_smem = max(limit, 1)
    by_smem = max(1, per_sm_smem // max(smem, 1))
    by_threads = max(1, 2048 // tiles.threads)
    return int(min(by_smem, by_threads, 4))


def _choose_splits(tiles_mn: int, k: int, bk: int, stages: int, sms: int, occ: int, memory_bound: bool) -> tuple[int, str]:
    best, best_score = 1, -1.0
    for s in range(1, 17):
        if k % (bk * s) or k // (bk * s) < 2 and s > 1:
            continue
        per_sm = tiles_mn * s / sms
        tail = per_sm / math.ceil(per_sm)
        target = occ if memory_bound else 1
        conc = min(1.0, per_sm / target)
        score = tail * math.sqrt(conc) / (1.0 + 0.03 * (s - 1))
        if score > best_score + 1e-9:
            best, best_score = s, score
    why = f"split-K {best}: {tiles_mn} output tiles x {best} splits over {sms} SMs (score {best_score:.2f})"
    return best, why


STREAM_MAX_M = 16
PDL_KNOB = "launch.pdl"  # false: no programmatic dependent launch; true: where the profile declares griddepcontrol


def pdl_wanted(caps=None) -> bool:
    """The tuning knob launch.pdl: programmatic dependent launch where the profile declares griddepcontrol."""
    return bool(knobs.value(PDL_KNOB, caps))


PDL_PREFILL_KNOB = "launch.pdl_prefill"  # false: not for the two-warpgroup register-A form (the prefill kernels)


def with_pdl(caps, plan: Plan) -> Plan:
    """The plan with programmatic dependent launch where it applies: the register-ring stream kernel, the small-M
    register-A wgmma form (64-channel tiles) and the two-warpgroup register-A form (128-channel tiles, plain,
    pairs, stream-K and tail; the knob launch.pdl_prefill off: not these) on a profile declaring griddepcontrol (the
    knob launch.pdl off: never). Their weight prefetch then overlaps the previous kernel's tail."""
    wanted = pdl_wanted(caps)
    prefill = plan.path == "wgmma-rs" and plan.tiles.bn == 128 and bool(knobs.value(PDL_PREFILL_KNOB, caps))
    kernel = ((plan.path == "stream" and not plan.tiles.bulk)
              or (plan.path == "wgmma-rs" and plan.tiles.bn == 64 and plan.tiles.bulk != 2) or prefill)
    if not wanted or plan.pdl or not kernel or not caps.memory.griddepcontrol:
        return plan
    return replace(plan, pdl=True, reasons=plan.reasons + (
        f"programmatic dependent launch ({PDL_KNOB}"
        + (f", {PDL_PREFILL_KNOB}" if prefill else "") + "; griddepcontrol declared): launched with the PDL attribute, "
        "the kernel prefetches its first weight atoms while the previous kernel of the stream finishes, then "
        "waits for it (griddepcontrol.wait) before reading activations or writing",))


CLUSTER_SPLITS_KNOB = "launch.cluster_splits"  # 0: split-K partials through the workspace; N: by cluster up to N
# split counts that go through a cluster by default: measured on the H200 (2026-11-30, docs/performance.md, eleventh
# session), 2 splits in a cluster beat the workspace (4096x14336 M=1 13.4-13.6 -> 11.9-12.0 us) but 4 lost
# (4096x14336 M=4, x_smem, 8 warps: 14.7 -> 18.8 us): the cluster's blocks must be placed together


def cluster_splits_bytes(plan: Plan) -> int:
    """Shared memory the first block of a split cluster sets aside for the other splits' partials: one fp32 tile
    of the block's 64 channels x token tiles (4 values per lane and 16-channel tile) per other split."""
    return (plan.splits - 1) * 4 * (plan.tiles.bm // 8) * 32 * 16


def with_cluster_splits(caps, plan: Plan) -> Plan:
    """The plan with its split-K partials added inside a thread-block cluster where that applies: the register-ring
    stream kernel with 2 .. launch.cluster_splits splits and no balance (with room in shared memory), or the small-M
    register-A wgmma form without its multicast cluster (the partials land in the first block's activation slots),
    on a profile declaring cluster_dsmem. The tuning knob launch.cluster_splits: 0 never; N (2..8): up to N splits."""
    most = knobs.value(CLUSTER_SPLITS_KNOB, caps)
    t = plan.tiles
    if plan.cluster_splits or not 1 < plan.splits <= most or not caps.memory.cluster_dsmem:
        return plan
    why = (f"split-K in clusters ({CLUSTER_SPLITS_KNOB}; cluster_dsmem declared): the {plan.splits} splits of a slab "
           f"run as one thread-block cluster and add their partials in the first block's shared memory")
    if plan.path == "wgmma-rs" and t.bn == 64 and not t.cluster and not t.stagger:
        # the other splits' accumulators (BT / 2 fp32 per thread, 128 threads) must fit the STAGES activation slots
        if (plan.splits - 1) * t.bm * 256 > t.stages * t.bm * 128:
            return plan
        workspace = "split-K partials added by the last block in a fixed order"  # (planner_wgmma_rs's reason)
        reasons = tuple(r.replace(workspace, "split-K partials added in split order in a cluster (below)")
                        for r in plan.reasons)
        return replace(plan, cluster_splits=True, reasons=reasons + (
            why + " (its activation slots, free after the main loop) instead of a global workspace and a counter",))
    if plan.path != "stream" or t.bulk or getattr(t, "balance", 0):
        return plan
    extra = cluster_splits_bytes(plan)
    limit = (caps.limits.smem_per_block_kb or 0) * 1024
    if plan.smem_bytes + extra > limit:
        return plan
    return replace(plan, cluster_splits=True, smem_bytes=plan.smem_bytes + extra, reasons=plan.reasons + (
        why + f" ({extra} B) instead of a round trip through a global workspace and a counter",))


def launch_options(caps, plan: Plan) -> Plan:
    """The plan as the runtime launches it: programmatic dependent launch and split-K clusters where they apply."""
    return with_cluster_splits(caps, with_pdl(caps, plan))


STREAM_BULK_KNOB = "mma_wna16.stream_bulk"  # the default stream plans use the bulk-copy ring where declared


def _bulk_declared(caps) -> bool:
    return bool(caps.memory.tma and caps.memory.mbarrier)


def _bulk_ring_slots(layout: WeightLayout, warps_k: int, bm: int, limit: int) -> int:
    """Ring slots per warp of the bulk stream kernel: 8 (eight atoms in flight per warp), fewer where the block's
    rings would take more than half the shared memory (two blocks per SM)."""
    from humming.core.families.mma_wna16.stream import bulk_slot_bytes

    slots = 8
    while slots > 2 and warps_k * slots * (bulk_slot_bytes(layout, bm) + 8) > limit // 2:
        slots -= 1
    return slots


def _stream_config(n: int, k: int, m: int, container: int, sms: int) -> tuple[int, int, int, str]:
    """(warps per slab, atoms in flight per warp, split-K, why) for the stream path. Measured on an H200
    (bench/sweep_wna16.py): 8-16 warps per SM with two atoms in flight per warp stream best."""
    slabs = n // 64
    warps_k = 8 if slabs <= sms else 4
    while warps_k > 1 and (k % (64 * warps_k) or k // (64 * warps_k) < 2):
        warps_k //= 2
    in_flight = 2 if m <= 8 and container <= 4 else 1
    atoms = k // 64 // warps_k
    splits = 1
    while slabs * warps_k * splits < 6 * sms and atoms % (splits * 2) == 0 and atoms // (splits * 2) >= 2:
        splits *= 2
    warps = slabs * warps_k * splits
    return warps_k, in_flight, splits, (
        f"{warps_k} warps per 64-channel slab, {in_flight} atom(s) in flight per warp, split-K {splits}: "
        f"{warps} warps for {sms} SMs"
    )


# x_smem by rule (no tuned entry): a split's K range at most this long, so the staged activations stay small
X_SMEM_RULE_MAX_K = 4096


def _x_smem_default(layout: WeightLayout, m: int, k: int, warps_k: int, auto_splits: int, forced_splits,
                    smem_limit: int) -> int | None:
    """The split count for the stream kernel's x_smem variant by rule (codes of at most 4 bits, groups of 64 or
    more, a split's K range <= X_SMEM_RULE_MAX_K, at most half of X_SMEM_MAX_COPIES activation copies per thread,
    the staging within the profile's shared memory per block), or None where the rule does not take it. H200 measurements (2026-11-30, tune --only x_smem): with those
    settings x_smem with fold=2 ran at or ahead of the register-ring default at M 1, 2, 4 and 8 on 8192x8192,
    28672x8192 and 4096x14336 (e.g. 28672x8192 M=1 38.4 against 48.3 us)."""
    from humming.core.families.mma_wna16.stream import X_SMEM_MAX_COPIES, x_smem_layout, x_smem_tokens

    if layout.decode.container > 4:
        return None
    atoms = k // 64 // warps_k
    choices = [forced_splits] if forced_splits else [s for s in (1, 2, 4, 8, 16) if s >= auto_splits]
    for splits in choices:
        if atoms % splits or k // splits > X_SMEM_RULE_MAX_K:
            continue
        if x_smem_tokens(m, 8) * (k // splits) * 2 // 16 > X_SMEM_MAX_COPIES // 2 * 32 * warps_k:
            continue
        fold_area = TileConfig(8, 64, 64 * warps_k, 3, 1, 1, warps_k).smem_bytes(layout, "stream")
        staged = x_smem_layout(layout, x_smem_tokens(m, 8), k // splits, fold_area, 32 * warps_k)
        if isinstance(staged, str) or staged["total"] > smem_limit:
            return None
        return splits
    return None


def plan_wna16(caps, layout: WeightLayout, m: int, act: str, out: str = "", scheme: str = "",
               tiles: TileConfig | None = None, splits: int | None = None, path: str | None = None) -> Plan:
    """Plan a WnA16 GEMM C[M, N] = A[M, K] @ W[N, K]^T for a prepared weight layout on a profile.

    ``tiles``/``splits`` force a configuration (measured tuning); it is still checked against the limits."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    n, k = layout.n, layout.k
    reasons: list[str] = []
    instruction, why = choose_mma(caps, act)
    reasons.append(why)
    reasons.append(f"path dequant-to-activation: {layout.decode.kind}{layout.decode.bits} codes widened to {act} in registers")
    async_copy = bool(caps.memory.cp_async)
    reasons.append("cp.async declared: multi-stage asynchronous pipeline" if async_copy
                   else "cp.async not declared: synchronous global->shared copies")
    if not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name} does not declare ldmatrix, which the mma.sync kernels use for A")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms
    if not sms:
        sms = _DEFAULT_SMS
        reasons.append(f"the profile does not know its SM count; tiles and split-K assume {sms}")
    if path is None:
        path = "stream" if m <= STREAM_MAX_M and tiles is None else "tile"
    if path == "stream":
        if m > STREAM_MAX_M:
            raise ShapeError(f"the stream path takes M <= {STREAM_MAX_M}, got M={m}")
        warps_k, in_flight, auto_splits, why = _stream_config(n, k, m, layout.decode.container, sms)
        x_ring = fold = x_smem_rule = 0
        bulk_wanted = tiles is None and bool(knobs.value(STREAM_BULK_KNOB, caps)) and _bulk_declared(caps)
        if tiles is None and m <= 8:
            from humming.core.families.mma_wna16.stream import fold_applies

            if not fold_applies(layout):  # measured on the H200 (2026-11-30): 10-15% faster at M=1 on every shape
                x_ring = fold = 1
                why += "; M <= 8: codes multiplied raw, zero point and scale per atom in fp32 (fold), activations in flight"
                staged = None if bulk_wanted else _x_smem_default(layout, m, k, warps_k, auto_splits, splits, limit)
                if staged is not None:
                    x_ring, x_smem_rule, fold, auto_splits = 0, 1, 2, staged
                    why += (f"; activations and tables staged in shared memory instead (x_smem, channel tiles outermost) "
                            f"over {k // staged} of K per split (X_SMEM_RULE_MAX_K; see _x_smem_default for the "
                            f"measurements)")
        bulk = 0
        if bulk_wanted:
            bulk = 1
            in_flight = _bulk_ring_slots(layout, warps_k, 8 if m <= 8 else 16, limit) - 1
            x_ring = 0
            why += (f"; {STREAM_BULK_KNOB}: weights, tables and activations bulk-copied into a ring of "
                    f"{in_flight + 1} shared-memory slots per warp")
        x_smem, balance = x_smem_rule, 0
        if tiles is not None:
            warps_k, in_flight, x_ring, fold, bulk = tiles.warps_k, tiles.stages - 1, tiles.x_ring, tiles.fold, tiles.bulk
            x_smem, balance = tiles.x_smem, tiles.balance
            why = f"{warps_k} warps per slab, {in_flight} atom(s) in flight forced (tuned)"
            if x_ring:
                why += ", activations in flight with them"
            if x_smem:
                if x_ring or bulk:
                    raise ShapeError("x_smem excludes x_ring and bulk: the activations come from one place")
                why += ", activations and tables staged once in shared memory"
            if bulk:
                if not _bulk_declared(caps):
                    raise UnsupportedOnDevice(f"{caps.name} does not declare tma and mbarrier, which the bulk-copy "
                                              f"stream kernel uses")
                if x_ring:
                    raise ShapeError("bulk and x_ring exclude each other: with bulk the activations arrive in the slot")
                in_flight += 1  # every slot of the ring is in flight while the warp computes on registers
                why = (f"{warps_k} warps per slab, weights, tables and activations bulk-copied into a ring of "
                       f"{in_flight} shared-memory slots per warp, forced (tuned)")
            if fold:
                from humming.core.families.mma_wna16.stream import fold_applies

                if fold_applies(layout):
                    raise ShapeError(fold_applies(layout))
                if fold == 2 and not (x_ring or bulk or x_smem):
                    raise ShapeError("fold=2 (channel tiles outermost) needs x_ring, x_smem or bulk: every k16 step's "
                                     "activations at hand")
                if fold == 2:
                    why += " with the channel tiles outermost (fewer live registers)"
                why += ", codes multiplied raw, zero point and scale applied per atom in fp32 (fold)"
        if k % (64 * warps_k):
            raise ShapeError(f"K={k} must be a multiple of {64 * warps_k} for {warps_k} warps per slab")
        if bulk:
            st = TileConfig(8 if m <= 8 else 16, 64, 64 * warps_k, in_flight, 1, 1, warps_k, 0, fold, 1)
            if st.smem_bytes(layout, "stream") > limit:
                raise UnsupportedOnDevice(f"{warps_k} warps x {in_flight} slots need {st.smem_bytes(layout, 'stream')} B "
                                          f"of shared memory; {caps.name} allows {limit}")
            reasons.append(f"M={m} <= {STREAM_MAX_M}: stream path: weights are the MMA's A operand, bulk-copied into "
                           f"shared memory and read once per atom into registers")
        else:
            st = TileConfig(8 if m <= 8 else 16, 64, 64 * warps_k, in_flight + 1, 1, 1, warps_k, x_ring, fold,
                            x_smem=x_smem, balance=balance)
            reasons.append(f"M={m} <= {STREAM_MAX_M}: stream path: weights are the MMA's A operand, loaded straight "
                           f"into registers with 16-byte loads" + ("" if x_smem else "; no shared-memory staging"))
        if splits is None:
            splits = auto_splits
        elif (k // 64 // warps_k) % splits:
            raise ShapeError(f"split-K {splits} does not divide the {k // 64 // warps_k} atoms per warp")
        else:
            why += f"; split-K {splits} forced (tuned)"
        if balance:
            if bulk:
                raise ShapeError("balance is written for the register-ring stream kernel, not bulk")
            if splits != 1:
                raise ShapeError(f"balance splits some slabs in two halves of K itself; split-K {splits} excludes it")
            if not 0 < balance <= n // 64:
                raise ShapeError(f"balance {balance}: between 1 and the {n // 64} slabs of N={n}")
            if (k // 64 // warps_k) % 2:
                raise ShapeError(f"balance halves K: the {k // 64 // warps_k} atoms per warp must be even")
            why += (f"; balance {balance}: the last {balance} of {n // 64} slabs run as two blocks each (one per half "
                    f"of K), {n // 64 + balance} blocks")
        reasons.append(why)
        smem = st.smem_bytes(layout, "stream")
        if x_smem:
            from humming.core.families.mma_wna16.stream import x_smem_layout, x_smem_tokens

            rows = x_smem_tokens(m, st.bm)
            staged = x_smem_layout(layout, rows, k // splits, smem, st.threads)
            if isinstance(staged, str):
                raise ShapeError(staged)
            smem = staged["total"]
            if smem > limit:
                raise UnsupportedOnDevice(f"staging {rows} token row(s) x {k // splits} of K in shared memory needs "
                                          f"{smem} B; {caps.name} allows {limit}")
            reasons.append(f"x_smem: {staged['x_bytes']} B of activations ({rows} token row(s) reserved) and "
                           f"{staged['table_bytes']} B of tables per block copied into shared memory once, after the launch")
        return Plan(
            scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=out or act, family="mma_sync",
            instruction=instruction, path="stream", layout=layout, tiles=st, splits=splits,
            async_copy=async_copy, smem_bytes=smem, reasons=tuple(reasons),
        )
    candidates = _tile_candidates(m, n, k, layout, sms)
    if tiles is not None:
        _check_forced(tiles, m, n, k, layout)
        candidates = [(tiles, f"tile {tiles.bm}x{tiles.bn}x{tiles.bk} forced (tuned)")]
    fitting = [c for c in candidates if c[0].smem_bytes(layout) <= limit]
    if not fitting:
        t0 = candidates[-1][0]
        raise UnsupportedOnDevice(
            f"the smallest tile {t0.bm}x{t0.bn}x{t0.bk} needs {t0.smem_bytes(layout)} B of shared memory; "
            f"{caps.name} allows {limit}"
        )
    tiles, why = fitting[0]
    reasons.append(why)
    smem = tiles.smem_bytes(layout)
    reasons.append(f"{tiles.stages} stages: {smem // 1024} KiB of {caps.limits.smem_per_block_kb} KiB shared memory per block")
    occ = _occupancy(tiles, smem, caps)
    tiles_mn = math.ceil(m / tiles.bm) * (n // tiles.bn)
    if splits is not None:
        if splits < 1 or k % (tiles.bk * splits):
            raise ShapeError(f"split-K {splits} does not divide K={k} into multiples of BK={tiles.bk}")
        why = f"split-K {splits} forced (tuned)"
    else:
        splits, why = _choose_splits(tiles_mn, k, tiles.bk, tiles.stages, sms, occ, m <= 64)
    reasons.append(why)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=out or act, family="mma_sync",
        instruction=instruction, path="dequant-to-activation", layout=layout, tiles=tiles, splits=splits,
        async_copy=async_copy, smem_bytes=smem, reasons=tuple(reasons),
    )


def plan_w8a8(caps, layout, m: int, act: str, choice, scheme: str = "",
              tiles: TileConfig | None = None, splits: int | None = None) -> Plan:
    """Plan the 8-bit tile kernel (mma.sync 16x8x32 on int8 or e4m3 operands as stored) for a path choice
    from humming.core.common.paths (native or legacy mma_sync)."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    int4 = getattr(layout, "weight_bits", 8) == 4
    block = getattr(layout, "weight_scale", "") == "block"  # 128x128 weight blocks: fp32 sums next to the partials
    if choice.family != "mma_sync" or choice.a_type not in ("s8", "e4m3") or choice.b_type != choice.a_type:
        raise UnsupportedOnDevice(f"{scheme}: the 8-bit kernel runs mma_sync s8/e4m3 paths, not {choice.describe()}")
    n, k = layout.n, layout.k
    if k % 128:
        raise ShapeError(f"K={k} must be a multiple of 128 for the 8-bit kernel")
    reasons = list(choice.reasons)
    async_copy = bool(caps.memory.cp_async)
    if not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name} does not declare ldmatrix, which the 8-bit kernel uses for A")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    if tiles is None:
        tm = math.ceil(m / 16)
        if int4 or block:  # partials and fp32 sums both live in registers: at most 2 m16 tiles per warp
            cands = ([TileConfig(16 * tm, 64, 128, st, 1, 1, 2) for st in (4, 3, 2)] if m <= 32 else
                     [TileConfig(64, 128, 128, st, 2, 2, 1) for st in (4, 3, 2)])
            if block and m > 32:  # N % 128 == 64 (block tables have a part-filled last block): 64-wide tiles
                cands += [TileConfig(64, 64, 128, st, 2, 1, 2) for st in (4, 3, 2)]
        else:
            cands = ([TileConfig(16 * tm, 64, 128, st, 1, 1, 2) for st in (4, 3, 2)] if m <= 64 else
                     [TileConfig(128, 128, 128, st, 2, 2, 1) for st in (3, 2)] + [TileConfig(64, 128, 128, 2, 1, 2, 1)])
        cands = [t for t in cands if n % t.bn == 0]

        def smem(t: TileConfig) -> int:
            b = t.bk * t.bn // (2 if int4 else 1)
            return max(t.stages * (t.bm * t.bk + b), (t.warps_k - 1) * t.bm * t.bn * 4)

        fitting = [t for t in cands if smem(t) <= limit]
        if not fitting:
            raise UnsupportedOnDevice(f"no 8-bit tile fits {caps.name}'s {limit} B of shared memory with N={n}")
        tiles = fitting[0]
        reasons.append(f"8-bit tile {tiles.bm}x{tiles.bn}x{tiles.bk}, {tiles.stages} stages")
    else:
        reasons.append(f"tile {tiles.bm}x{tiles.bn}x{tiles.bk} forced (tuned)")
    if block:
        reasons.append("128x128 weight blocks: each stage's partial (one k block) is added into fp32 sums times "
                       "activation scale (row, k block) x weight scale (n block, k block)")
    b_bytes = tiles.bk * tiles.bn // (2 if int4 else 1)
    smem_bytes = max(tiles.stages * (tiles.bm * tiles.bk + b_bytes), (tiles.warps_k - 1) * tiles.bm * tiles.bn * 4)
    group = getattr(layout, "group", 0)
    if int4 and not (group % tiles.bk == 0 or tiles.bk % group == 0):
        raise ShapeError(f"group size {group} must divide or be a multiple of the {tiles.bk}-wide k tile")
    if int4 and (getattr(layout, "weight_format", ""), getattr(layout, "a_type", "")) == ("int4", "e4m3"):
        from humming.core.common.layout import LINEAR_WIDENING_REASON

        reasons.append("int4 -> e4m3 by tables (GemmOptions.w4a8_widen='prmt'): two byte-permute lookups per 4 codes"
                       if getattr(layout, "widen", "linear") == "prmt" else LINEAR_WIDENING_REASON)
    if splits is None:
        tiles_mn = math.ceil(m / tiles.bm) * (n // tiles.bn)
        occ = max(1, min(limit // max(smem_bytes, 1), 2048 // tiles.threads, 4))
        splits, why = _choose_splits(tiles_mn, k, tiles.bk, tiles.stages, sms, occ, m <= 64)
        reasons.append(why)
    elif k % (tiles.bk * splits):
        raise ShapeError(f"split-K {splits} does not divide K={k} into multiples of BK={tiles.bk}")
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="mma_sync",
        instruction=choice.instruction, path=choice.path, layout=layout, tiles=tiles, splits=splits,
        async_copy=async_copy, smem_bytes=smem_bytes, reasons=tuple(reasons),
    )
