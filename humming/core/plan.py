"""The planner: (weight layout, problem size, device capabilities) -> an execution Plan that explains itself.

Every choice records its reason. The planner asks the capabilities what is declared (an MMA of
these operand types, cp.async, the shared-memory limit, the SM count); it never tests an
architecture number or a device name.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields

from humming.core.common.layout import WeightLayout
from humming.core.tuning import knobs

_DEFAULT_SMS = 80  # used only when a profile does not know its SM count (said in the reasons)
TAIL_SPLITS = 4  # RegisterATiles.tail: blocks per tail tile of the two-warpgroup register-A form (one per quarter of K)


# The fields every family's tiles had when all families shared one config: kernel keys (and so kernel names and cache
# keys) spell a family's tiles with this field list, the fields a family does not have as 0, so that they stay stable.
KEY_FIELDS = ("bm", "bn", "bk", "stages", "warps_m", "warps_n", "warps_k", "x_ring", "fold", "bulk", "stagger",
              "x_smem", "raster", "cluster", "prefetch", "balance", "occupancy", "tail", "streamk")


class _KeyText(str):
    """A string whose repr is itself (the tiles' part of a kernel key)."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Tiles:
    """What every kernel family's tiles have: the block's output tile ``bm`` x ``bn`` (tokens x channels, or the
    family's own orientation), the K step ``bk``, pipeline ``stages`` and the warps along M, N and K. A family with
    options of its own subclasses it (``humming/core/families/<family>/tiles.py``); the others use it as it is."""

    bm: int
    bn: int
    bk: int
    stages: int
    warps_m: int
    warps_n: int
    warps_k: int

    def option(self, name: str) -> int:
        """An option field of the family's tiles, 0 where the family has no such option."""
        return getattr(self, name, 0)

    def key_text(self) -> _KeyText:
        """The tiles as kernel keys spell them (KEY_FIELDS)."""
        return _KeyText("TileConfig(" + ", ".join(f"{f}={self.option(f)!r}" for f in KEY_FIELDS) + ")")

    @classmethod
    def from_fields(cls, fields: dict, where: str = "tiles"):
        """The tiles of this class from a mapping that may name other families' fields (a tuned entry, a recorded
        plan): those must be 0."""
        names = {f.name for f in dataclass_fields(cls)}
        extra = {k: v for k, v in fields.items() if k not in names and v}
        if extra:
            raise ValueError(f"{where}: {cls.__name__} has no field {', '.join(sorted(extra))}")
        return cls(**{k: int(v) for k, v in fields.items() if k in names})

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

    def smem_bytes(self, layout: WeightLayout) -> int:
        """The tile kernel's shared memory: its pipeline stages, or the split warps' reduction."""
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
    tiles: Tiles  # the family's tiles (Tiles or its subclass)
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
    # a weight padded to whole atoms (humming.core.quant.padding): N and K above are the padded sizes; the kernel
    # stores n_out columns (the output's row length) and reads k_act columns of A (its row length); 0: not padded
    n_out: int = 0
    k_act: int = 0

    @property
    def padded(self) -> bool:
        return bool(self.n_out or self.k_act)

    @property
    def threads(self) -> int:
        return self.tiles.threads

    @property
    def grid(self) -> tuple[int, int, int]:
        t = self.tiles
        if t.option("streamk"):  # persistent blocks along y
            return (1, t.option("streamk"), 1)
        if t.option("tail"):  # every tile in launch order along y, then the tail tiles' K quarters
            return (1, math.ceil(self.m / t.bm) * (self.n // t.bn) + t.option("tail") * (TAIL_SPLITS - 1), 1)
        # (channel tiles rounded up: the MoE register-A form's last one may be half past N)
        return (math.ceil(self.m / t.bm), -(-self.n // t.bn) + t.option("balance"), self.splits)

    @property
    def partials(self) -> int:
        """Split-K partials per output tile the workspace must hold (1: none)."""
        if self.cluster_splits:
            return 1
        if self.tiles.option("tail"):
            return TAIL_SPLITS
        return 2 if self.tiles.option("balance") else self.splits

    @property
    def workspace_floats(self) -> int:
        """fp32 split-K partials the launch's workspace must hold (0: none)."""
        t = self.tiles
        if t.option("streamk"):  # per block: W4A8 two slots (its first and its last segment), W4A16 one (its
            return t.option("streamk") * (2 if self.is_8bit else 1) * t.bm * t.bn  # first: the hand-over form)
        if t.option("tail"):
            return t.option("tail") * TAIL_SPLITS * t.bm * t.bn
        parts = self.partials
        return parts * self.grid[0] * t.bm * self.n if parts > 1 else 0

    @property
    def cluster_dims(self) -> tuple[int, int, int] | None:
        """The launch's thread-block cluster shape (blocks along x, y, z), or None for a launch without clusters."""
        if self.cluster_splits:
            return (1, 1, self.splits)
        c = self.tiles.option("cluster")
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
        streamk_k = ("streamk_k", self.k, *(("early",) if t.option("early") else ())) if t.option("streamk") else ()
        if self.is_8bit:
            parts8 = (self.family, self.path, tuple(self.instruction.shape), self.instruction.a_type, self.act, t.key_text(),
                      self.async_copy, getattr(self.layout, "weight_bits", 8), getattr(self.layout, "group", 0),
                      *(("fast_accum",) if getattr(self.layout, "fast_accum", False) else ()),
                      *(("prmt",) if getattr(self.layout, "widen", "linear") == "prmt" else ()),
                      *(("block",) if getattr(self.layout, "weight_scale", "") == "block" else ()),
                      *(("e2m1",) if getattr(self.layout, "weight_format", "") == "e2m1" else ()),
                      *(("pdl",) if self.pdl else ()), *(("stsm",) if t.option("stsm") else ()),
                      *(("wide",) if t.option("wide") else ()),
                      *(("widened", t.option("widened")) if t.option("widened") else ()),
                      *(("l2next",) if t.option("l2next") else ()),
                      *(("direct",) if t.option("direct") else ()), *streamk_k)
            return hashlib.sha1(repr(parts8).encode()).hexdigest()[:10]
        d = self.layout.decode
        parts = (
            self.family, self.path, tuple(self.instruction.shape), self.act, d, self.layout.scale_group,
            self.layout.zero_group, self.layout.zero_const, t.key_text(), self.async_copy,
            *((True,) if getattr(self.layout, "zero_float", False) else ()),
            *(("tile_major",) if getattr(self.layout, "tile_major", False) else ()),
            *(("row_scale",) if self.row_scale else ()),
            *(("pdl",) if self.pdl else ()),
            *(("cluster_splits",) if self.cluster_splits else ()),
            *(("stsm",) if t.option("stsm") else ()),
            # the register-A form's last 128-channel block half past N (the MoE form; register_a.kernel.ragged_n)
            *(("ragged_n",) if t.bn == 128 and self.path == "moe-wgmma-rs" and self.layout.n % 128 else ()),
            # x_smem reserves 1 token row (M=1) or the token tile's, over the K range of one split: compiled in
            *(("x_smem", 1 if self.m == 1 else t.bm, self.k // self.splits) if t.option("x_smem") else ()),
            *streamk_k,
        )
        return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        o = t.option

        def tag(letter: str, name: str) -> str:  # the letter and the option's value where it is set
            return f"{letter}{o(name)}" if o(name) else ""

        def flag(letter: str, name: str) -> str:
            return letter if o(name) else ""

        if self.is_8bit:
            w = "w4a8" if getattr(self.layout, "weight_bits", 8) == 4 else "w8a8"
            if getattr(self.layout, "weight_scale", "") == "block":
                w += "blk"  # 128x128 weight blocks, activations per 128 of K
            if self.family != "mma_sync":
                w += "_" + self.family  # e.g. hm_w8a8_wgmma_...
            return (f"hm_{w}_{self.instruction.a_type}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}"
                    f"w{t.warps_m}{t.warps_n}{t.warps_k}{flag('v', 'wide')}{tag('k', 'streamk')}{tag('u', 'widened')}"
                    f"{flag('m', 'stsm')}{flag('d', 'direct')}{'_pdl' if self.pdl else ''}_{self.kernel_key}")
        d = self.layout.decode
        w = f"{d.kind}{d.bits}"
        kind = "wgmma" if self.family == "wgmma" else "stream" if self.path == "stream" else "tile"
        if self.path == "wgmma-rs":
            kind = "wgmmars"  # register-A wgmma (bm = tokens, bn = channels)
        elif self.path == "moe-wgmma-rs":
            kind = "moewgmmars"  # the register-A kernel's rows routed to experts (humming.core.families.moe_register_a)
        elif self.path == "moe_indexed":
            kind = "moe"  # the tile kernel's rows routed to experts (humming.core.families.moe_wna16)
        fold = "f" if o("fold") == 1 else tag("f", "fold")
        return (f"hm_wna16_{kind}_{w}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}w{t.warps_m}{t.warps_n}{t.warps_k}"
                f"{flag('x', 'x_ring')}{flag('s', 'x_smem')}{fold}{flag('b', 'bulk')}{tag('c', 'cluster')}"
                f"{tag('p', 'prefetch')}{tag('v', 'balance')}{tag('o', 'occupancy')}{tag('q', 'tail')}"
                f"{tag('k', 'streamk')}{flag('e', 'early')}{flag('m', 'stsm')}"
                f"{'_ts' if self.row_scale else ''}{'_pdl' if self.pdl else ''}{'_cs' if self.cluster_splits else ''}"
                f"{f'_o{self.n_out}a{self.k_act}' if self.padded else ''}_{self.kernel_key}")

    @property
    def dims(self) -> str:
        """N and K as the summary spells them (a padded weight: the real sizes and the padded ones)."""
        if self.padded:
            return f"N={self.n_out} K={self.k_act} (padded to {self.n}x{self.k})"
        return f"N={self.n} K={self.k}"

    def summary(self) -> str:
        t = self.tiles
        shape = "x".join(str(v) for v in self.instruction.shape)
        if self.path == "stream":
            return (
                f"{self.scheme} M={self.m} {self.dims} on {self.profile}: {self.family} m{shape} "
                f"{self.instruction.a_type}x{self.instruction.b_type}->{self.acc_type}, stream (weights as A, registers only), "
                f"{t.bm // 8} token tile(s), {t.warps_k} warps per 64-channel slab, split-K {self.splits}"
            )
        return (
            f"{self.scheme} M={self.m} {self.dims} on {self.profile}: {self.family} m{shape} "
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
            **({"n_out": self.n_out, "k_act": self.k_act} if self.padded else {}),
        }


def row_scale_refusal(plan) -> str:
    """Why the plan's kernel cannot take per-token scales in GS (``Plan.row_scale``); "" when it can: the WnA16
    stream, tile, MoE tile, register-A wgmma and MoE register-A kernels can."""
    if plan.is_8bit or getattr(plan.instruction, "scale_format", None):
        return "the 8-bit and block-scaled kernels take their activation scales as such"
    if plan.family in ("mma_sync", "mma_sync_moe") or plan.path in ("wgmma-rs", "moe-wgmma-rs"):
        return ""
    return f"the {plan.family} {plan.path} kernel has no per-token output scale"


def _occupancy(tiles: Tiles, smem: int, caps) -> int:
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
    kernel = ((plan.path == "stream" and not plan.tiles.option("bulk"))
              or (plan.path == "wgmma-rs" and plan.tiles.bn == 64 and plan.tiles.option("bulk") != 2) or prefill)
    if not wanted or plan.pdl or not kernel or not caps.memory.griddepcontrol:
        return plan
    return replace(plan, pdl=True, reasons=plan.reasons + (
        f"programmatic dependent launch ({PDL_KNOB}"
        + (f", {PDL_PREFILL_KNOB}" if prefill else "") + "; griddepcontrol declared): launched with the PDL attribute, "
        "the kernel prefetches its first weight atoms while the previous kernel of the stream finishes, then "
        "waits for it (griddepcontrol.wait) before reading activations or writing",))


CLUSTER_SPLITS_KNOB = "launch.cluster_splits"  # 0: split-K partials through the workspace; N: by cluster up to N
# split counts that go through a cluster by default (launch.cluster_splits): measured on the H200 (docs/performance.md),
# 2 splits in a cluster beat the workspace (4096x14336 M=1 13.4-13.6 -> 11.9-12.0 us) but 4 lost
# (4096x14336 M=4, x_smem, 8 warps: 14.7 -> 18.8 us): the cluster's blocks must be placed together


def cluster_splits_bytes(plan: Plan) -> int:
    """Shared memory the first block of a split cluster sets aside for the other splits' partials: one fp32 tile
    of the block's 64 channels x token tiles (4 values per lane and 16-channel tile) per other split."""
    return (plan.splits - 1) * 4 * (plan.tiles.bm // 8) * 32 * 16


def with_cluster_splits(caps, plan: Plan) -> Plan:
    """The plan with its split-K partials added inside a thread-block cluster where that applies: the register-ring
    stream kernel with 2 .. launch.cluster_splits splits and no balance (with room in shared memory), or the small-M
    register-A wgmma form without its multicast cluster (the partials land in the first block's activation slots),
    on a profile declaring cluster_dsmem. The tuning knob launch.cluster_splits: 0 never; N (2..8): up to N splits (and
    at most the profile's max_cluster_size)."""
    most = knobs.value(CLUSTER_SPLITS_KNOB, caps) or 0
    if caps.limits.max_cluster_size is not None:  # the splits of a slab are one cluster
        most = min(most, caps.limits.max_cluster_size)
    t = plan.tiles
    if plan.cluster_splits or not 1 < plan.splits <= most or not caps.memory.cluster_dsmem:
        return plan
    why = (f"split-K in clusters ({CLUSTER_SPLITS_KNOB}; cluster_dsmem declared): the {plan.splits} splits of a slab "
           f"run as one thread-block cluster and add their partials in the first block's shared memory")
    if plan.path == "wgmma-rs" and t.bn == 64 and not t.option("cluster") and not t.option("stagger"):
        # the other splits' accumulators (BT / 2 fp32 per thread, 128 threads) must fit the STAGES activation slots
        if (plan.splits - 1) * t.bm * 256 > t.stages * t.bm * 128:
            return plan
        workspace = "split-K partials added by the last block in a fixed order"  # (the register_a planner's reason)
        reasons = tuple(r.replace(workspace, "split-K partials added in split order in a cluster (below)")
                        for r in plan.reasons)
        return replace(plan, cluster_splits=True, reasons=reasons + (
            why + " (its activation slots, free after the main loop) instead of a global workspace and a counter",))
    if plan.path != "stream" or t.option("bulk") or t.option("balance"):
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


