"""What the register-A kernel generator accepts: the tile shapes of its two forms and which options go with which
form (ValueError naming the first thing a plan asks that the kernel is not written for)."""
from __future__ import annotations

from humming.core.families.register_a.planner import BC, BK, PATH, SMALL_BC, cluster_refusal, layout_refusal


def check_plan(plan, caps, path: str = PATH) -> None:
    """Raise ValueError unless the kernel is written for ``plan`` (``caps``: the profile, None to skip its
    capabilities; ``path``: the plan's path, the MoE form's own)."""
    t = plan.tiles
    small = t.bn == SMALL_BC  # the small-M form: one warpgroup (64 channels), BT = 16..128 tokens, split-K
    if small:
        if plan.path != path or (t.bk, t.threads) != (BK, 160 if t.cluster else 128) or t.stages < 4 or t.bm % 16 \
                or t.bm > 128:
            raise ValueError(f"the small-M register-A wgmma kernel is written for 16..128 tokens (a multiple of 16) x "
                             f"64 channels x 64 k, 128 threads (160 with cluster), >= 4 stages; got {t}")
    elif plan.path != path or (t.bn, t.bk, t.threads) != (BC, BK, 384 if t.bulk == 2 else 256) or t.stages < 4 \
            or t.bm % (16 if t.bulk else 32) or not 64 <= t.bm <= 256:
        raise ValueError(f"the register-A wgmma kernel is written for 64..256 tokens (a multiple of 16, of 32 with "
                         f"cp.async copies) x 128 channels x 64 k, 256 threads (384 with the producer warpgroup), >= 4 "
                         f"stages; got {t}")
    # the MoE form takes N in whole 64-channel slabs: its last block may hold one (ragged_n)
    why = layout_refusal(plan.layout, SMALL_BC if path != PATH else t.bn)
    if why:
        raise ValueError(f"the register-A wgmma kernel cannot run this layout: {why}")
    if t.raster and small:
        raise ValueError("block rasterization is an option of the two-warpgroup form (the small form splits K over z)")
    if t.stagger and (small or t.bulk != 2):
        raise ValueError("the staggered start is an option of the two-warpgroup form with the producer warpgroup")
    cluster = t.cluster if small else 0  # the small form's multicast clusters
    pair = 0 if small else t.cluster     # the two-warpgroup form's pairs (humming.core.families.register_a.pair_cluster)
    if t.early and (small or not t.streamk):
        raise ValueError("early (the next segment's weights loaded before the epilogue) is a stream-K option")
    if pair and (pair != 2 or t.bulk != 2 or t.tail or t.streamk % 2):
        raise ValueError(f"the two-warpgroup form's cluster option is written for pairs with the producer warpgroup, "
                         f"without tail (stream-K over an even block count), not {t}")
    why = cluster_refusal(caps, plan.n, t.stages, t.bulk == 1, cluster)  # the planner's own check
    if why:
        raise ValueError(why)
    if t.occupancy and not small:
        raise ValueError("occupancy is an option of the small-M form")
    if t.fold and not small:
        raise ValueError("fold (the scale, and with fold=2 the zero point, applied per group in fp32) is a small-M option")
    if small:
        if plan.cluster_splits and cluster:
            raise ValueError("split-K clusters exclude the multicast cluster option (one cluster shape per launch)")
    elif t.streamk:  # the planner's streamk_refusal: the producer warpgroup, no stagger, no tail
        if t.bulk != 2 or t.stagger or t.tail:
            raise ValueError("stream-K is written for the producer-warpgroup form without the staggered start or tail")
    elif t.tail:  # the planner's tail_refusal: the producer warpgroup, whole K quarters
        if t.bulk != 2 or t.raster:
            raise ValueError("tail is written for the producer-warpgroup form in launch order")
    if t.bulk == 2 and (small or t.fold):
        raise ValueError("the producer-warp variant (bulk = 2) is written for the two-warpgroup form")
