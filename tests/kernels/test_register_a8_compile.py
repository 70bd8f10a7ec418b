"""CPU: the register-A W4A8 family's kernels (humming.core.families.register_a8) compile with NVRTC for sm_90a over
their variants: narrow and wide forms, producer and lock-step, both chain widths, e4m3 and s8, groups of 128 and per
channel, PDL, both int4 widenings, direct accumulation, the L2 prefetch, weight rings, staggered starts, stream-K,
clusters, 192- and 128-token wide tiles and converter warps; each with the instructions and source text its variant
must have, no spills, no injected waits and no serialized wgmmas."""
import itertools
import re

import pytest
from test_register_a8_plans import FAST, H200, NATIVE, SCHEME, _caps, _give_after, _per_channel, _plan, _rs8

import humming
from humming import GemmOptions, api
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.register_a8.layout import WgmmaRs8Layout
from humming.core.families.register_a8.planner import (
    A_SLOT_BYTES,
    CHAIN_KNOB,
    CLUSTER_KNOB,
    DIRECT_S8_KNOB,
    NARROW_PF_KNOB,
    PATH,
    PDL_RS8_KNOB,
    PF,
    RASTER_KNOB,
    STAGGER_CHAINS_KNOB,
    STREAMK_KNOB,
    WIDE_FROM_KNOB,
    WIDENED_KNOB,
    plan_w4a8_wgmma_rs,
    smem_bytes,
)
from humming.core.plan import PDL_KNOB
from humming.core.tuning import knobs
from humming.errors import UnsupportedOnDevice


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _ptxas(src: str, name: str):
    return compile_cuda(src, [name], "sm_90a", options=("--ptxas-options=-v",), cache=False)


CASES = list(itertools.product(("e4m3", "s8"), (128, None), ("f16", "bf16"), (True, False), (128, 64)))


@pytest.mark.parametrize("a_type,group,act,producer,chain", CASES,
                         ids=[f"{a}-g{g}-{c}-{'producer' if w else 'lockstep'}-n{n}" for a, g, c, w, n in CASES])
def test_narrow_form_compiles(a_type, group, act, producer, chain, set_knobs):
    """The narrow form (128 tokens), both variants: the default producer warpgroup (TMA copies of the activation
    codes, mbarrier slots, 384 threads) and the lock-step one (every thread's cp.async, a block barrier per stage);
    each with one m64n128k32 chain per stage or two m64n64k32 halves into two partials (register_a8.chain 64,
    wait_group 1); the register-A 8-bit wgmma form, no ldmatrix, no spills and no serialized wgmmas."""
    _need_sm90a()
    # (s8 per channel: promoted, not the default int32 sums)
    set_knobs({CHAIN_KNOB: chain, DIRECT_S8_KNOB: False})
    caps = _caps()
    k = 4096
    p = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 1024, k, group or k), 1024, act, scheme=SCHEME[a_type],
                           producer=producer, tokens=128)
    assert p.path == PATH and p.threads == (384 if producer else 256) and p.tiles.bm == 128 and p.tiles.bn == 128
    assert p.tiles.bulk == (2 if producer else 0)
    mod = _ptxas(api.source(p, caps), p.kernel_name)
    ptx, log = mod.ptx, mod.log
    acc = "s32" if a_type == "s8" else "f32"
    tail = r"p;" if a_type == "s8" else r"p, 1, 1;"
    rs = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{chain}k32\.{acc}\.{a_type}\.{a_type} \{{[^}}]*\}}, "
                    rf"\{{%r\d+, ?%r\d+, ?%r\d+, ?%r\d+\}}, %rd\d+, {re.escape(tail)}", ptx)
    assert rs and len(rs) == ptx.count("wgmma.mma_async") and len(rs) % (4 * 128 // chain) == 0  # per unrolled stage
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx)
    assert sorted(set(waits)) == (["0"] if chain == 128 else ["0", "1"]), waits
    assert "C7517" not in log, log
    copy = "cp.async.bulk.tensor.2d" if producer else "cp.async.cg.shared.global"
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
                copy, "ld.global.nc.L1::no_allocate.v4.u32", "st.global.v4.u32",
                # the epilogue's staging: stmatrix where declared (the default), else 16-bit shared stores
                "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" if p.tiles.stsm else "st.shared.u16"):
        assert ins in ptx, ins
    if producer:
        assert "cp.async.cg" not in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx and "bar.sync 1, 256" in ptx
        assert api.tma_boxes(p) == ((1024, k, 128, 128, 1), None)
    assert "ldmatrix" not in ptx and "mma.sync" not in ptx
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log


WIDE_CASES = list(itertools.product(("e4m3", "s8"), (128, None), ("f16", "bf16")))


@pytest.mark.parametrize("chain", [128, 64], ids=["halves", "quarters"])
@pytest.mark.parametrize("a_type,group,act", WIDE_CASES, ids=[f"{a}-g{g}-{c}" for a, g, c in WIDE_CASES])
def test_wide_form_compiles(a_type, group, act, chain, set_knobs):
    """The wide form (256 tokens, the default from M 1024): two m64n128k32 register-A chains per stage sharing one
    widened fragment (or four m64n64k32 chains into two partials, register_a8.chain 64: each chain issued before the
    previous one is waited for with wait_group 1), the codes and group scales by bulk copy into the slot (no global
    weight loads in the main loop), the activations by one 256-row tensor copy; no spills (the consumers' 128 + 64
    accumulators fit under setmaxnreg 232), no wait that ptxas had to inject and no serialized wgmma."""
    _need_sm90a()
    # (s8 per channel: promoted, not the default int32 sums)
    set_knobs({CHAIN_KNOB: chain, DIRECT_S8_KNOB: False})
    caps = _caps()
    k = 4096
    p = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 1024, k, group or k), 4096, act, scheme=SCHEME[a_type])
    assert (p.tiles.bm, p.tiles.bn, p.threads, p.tiles.bulk, p.instruction.shape) == (256, 128, 384, 2, (64, chain, 32))
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024 and "wide form" in p.explain()
    assert api.tma_boxes(p) == ((4096, k, 256, 128, 1), None)
    src = api.source(p, caps)
    mod = _ptxas(src, p.kernel_name)
    ptx, log = mod.ptx, mod.log
    acc = "s32" if a_type == "s8" else "f32"
    rs = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{chain}k32\.{acc}\.{a_type}\.{a_type} ", ptx)
    assert len(rs) == 4 * 256 // chain == ptx.count("wgmma.mma_async")  # 4 k32 steps x 2 token halves / 4 quarters
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx)
    assert sorted(set(waits)) == (["0"] if chain == 128 else ["0", "1"]), waits
    assert "C7517" not in log and "injected" not in log and "C7514" not in log, log
    bulk = ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
    # two slabs of codes (+ the group scales), in the producer loop and (PDL) in the loop of the first stages
    assert bulk == (3 if group else 2) * (2 if p.pdl else 1), bulk
    assert "st.shared.f32" in ptx and "ld.shared.f32" in ptx  # the token scales through shared memory (+ group scales)
    if a_type == "e4m3":  # the linear widening (the default): no tables (the prmt widening loads them once)
        assert "int4_to_e4m3x8(wq[j >> 2][j & 3], a[j >> 1][2 * (j & 1)], a[j >> 1][2 * (j & 1) + 1]);" in src
        assert "int4n8_to_e4m3x8_x(" not in src.split("__global__")[1] and "la0 = lds_32" not in src
    # the lane's slot addresses carry a loaded zero, so ptxas keeps them in registers instead of recomputing them
    assert "zero = lds_32(held0 + 16);" in src and "lane * 16 + zero;" in src
    assert ("lds_f32(slane + s * S_BYTES + 32)" in src) == bool(group)  # the group scales (per channel: loaded once)
    for ins in ("cp.async.bulk.tensor.2d", "setmaxnreg.inc.sync.aligned.u32 232", "bar.sync 1, 256",
                "ld.shared.v4.u32", "fence.proxy.async.shared::cta", "st.global.v4.u32"):
        assert ins in ptx, ins
    assert "ld.global.nc.L1::no_allocate.v4.u32" not in ptx and "ldmatrix" not in ptx and "cp.async.cg" not in ptx
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log


@pytest.mark.parametrize("a_type,group", [("e4m3", 128), ("s8", None)])
def test_wide_form_programmatic_dependent_launch(a_type, group, compiled_without_spills, set_knobs):
    """register_a8.pdl (off by default: measured slower): the wide form is launched with PDL behind the activation
    quantizer where the profile declares griddepcontrol: its producer copies the first STAGES stages' codes and
    scales, then griddepcontrol.wait, then every activation tensor copy; the token-scale warp waits before reading
    them, the consumers before their loop. launch.pdl false gives back the kernel without PDL (another name);
    stream-K and cluster plans are never PDL-launched."""
    caps = _caps()
    lay = WgmmaRs8Layout(a_type, 1024, 4096, group or 4096)
    assert not plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type]).pdl  # the default
    set_knobs({PDL_RS8_KNOB: True})
    p = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert p.pdl and "_pdl_" in p.kernel_name and "griddepcontrol.wait" in p.explain()
    src = api.source(p, caps)
    producer = src[src.index("// programmatic dependent launch: the first stages' weights"):src.index("} else if (warp")]
    wait = producer.index("pdl_wait();")
    assert "mbar_expect_tx(full, STAGE_TX);" in producer[:wait] and "bulk_copy_g2s(w0" in producer[:wait]
    assert "tma_load_2d" not in producer[:wait] and "tma_load_2d" in producer[wait:]
    tokens = src[src.index("} else if (warp == THREADS / 32 + 1)"):src.index("return;")]
    assert tokens.index("pdl_wait();") < tokens.index("load_f32(TS")
    consumers = src[src.index("setmaxnreg_inc<232>();"):]
    assert consumers.count("pdl_wait();") == 1 and consumers.index("pdl_wait();") < consumers.index("for (int kt")
    mod = compiled_without_spills(p, caps)
    assert "griddepcontrol.wait" in mod.ptx and "C75" not in mod.log
    with knobs.override({PDL_KNOB: False}):
        off = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert not off.pdl and off.kernel_name != p.kernel_name and "pdl_wait" not in api.source(off, caps)
    sk = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 8192, 8192, group or 8192), 768, "f16",
                            scheme=SCHEME[a_type])
    assert sk.tiles.streamk and not sk.pdl
    set_knobs({CLUSTER_KNOB: 2})
    cl = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert cl.tiles.cluster and not cl.pdl


def test_widening_option_picks_layout_and_kernel():
    """GemmOptions.w4a8_widen: by default the linear widening (no tables, scales times 2^9); "prmt", the table
    widening (its four tables held in registers), a kernel of its own name; anything else is refused with the
    choices. The table form compiles for sm_90a without spills."""
    _need_sm90a()
    linear = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile=H200)
    assert linear.layout.widen == "linear" and "int4 -> e4m3, linear" in linear.explain()
    src = api.source(linear, _caps())
    body = src.split("__global__")[1]
    assert "int4_to_e4m3x8(" in body and "int4n8_to_e4m3x8_x(" not in body and "la0" not in body
    table = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile=H200, options=GemmOptions(w4a8_widen="prmt"))
    assert table.layout.widen == "prmt" and table.kernel_name != linear.kernel_name
    assert "int4 -> e4m3 by tables (GemmOptions.w4a8_widen='prmt')" in table.explain()
    src = api.source(table, _caps())
    body = src.split("__global__")[1]
    assert "int4n8_to_e4m3x8_x(" in body and "const uint32_t la0 = lds_32(held0), la1 = lds_32(held0 + 4);" in body
    log = _ptxas(src, table.kernel_name).log
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log
    s8 = humming.plan("w4a8-int8", 4096, 8192, 8192, profile=H200, options=GemmOptions(w4a8_widen="prmt"))
    assert s8.layout.widen == "linear"  # s8: one widening
    with pytest.raises(ValueError, match="linear, prmt"):
        GemmOptions(w4a8_widen="lut")


# (variant, scheme, M, N, K, options, the plan attribute the variant sets)
COMPILE_VARIANTS = [
    *(("direct", s, m, n, k, FAST, "direct")
      for s in ("channel", "int8-channel")
      for m, n, k in ((4096, 8192, 8192), (512, 8192, 8192), (300, 8192, 8192), (160, 28672, 8192),
                      (512, 4096, 14336))),
    *(("l2next", s, m, 8192, 8192, NATIVE, "l2next")
      for s, m in (("w4a8-fp8", 4096), ("w4a8-int8", 4096), ("w4a8-fp8", 300))),
]


@pytest.mark.parametrize("variant,scheme,m,n,k,options,attr", COMPILE_VARIANTS,
                         ids=[f"{v}-{s}-{m}x{n}x{k}" for v, s, m, n, k, _, _ in COMPILE_VARIANTS])
def test_variant_compiles_without_spills(variant, scheme, m, n, k, options, attr, compiled_without_spills):
    """Direct accumulation (per-channel scales: e4m3 with GemmOptions.fast_accum, int8 by default; the wide form, its
    fitted tiles and the narrow form) and the next wave's L2 prefetch (the default wide form, fitted too) plan and
    compile without spills."""
    sch = {"channel": _per_channel(), "int8-channel": _per_channel("w4a8-int8")}.get(scheme, scheme)
    p = _plan(sch, m, n, k, options=options)
    assert getattr(p.tiles, attr) == 1, p.explain()
    compiled_without_spills(p, _caps())


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("ring", [None, 2, 4], ids=["default", "ring2", "ring4"])
def test_narrow_rings_compile_without_spills(scheme, ring, compiled_without_spills, set_knobs):
    """register_a8.narrow_prefetch: the narrow form's weight stages in flight per lane (RegisterA8Tiles.prefetch; unset:
    PF, 6). The generated ring follows it, the wide form (codes through shared memory) ignores it, and every depth
    compiles without spills."""
    if ring is None:
        p = _plan(scheme, 128)
        assert p.path == PATH and p.tiles.bm == 128 and p.tiles.prefetch == 0 and PF == 6
        assert f"constexpr int PF = {PF}, R = PF + 1;" in api.source(p)
    else:
        set_knobs({NARROW_PF_KNOB: ring})
        p = _plan(scheme, 128)
        assert p.tiles.prefetch == ring and any(f"{ring} stages ahead ({NARROW_PF_KNOB})" in r for r in p.reasons)
        src = api.source(p)
        assert f"constexpr int PF = {ring}, R = PF + 1;" in src and "uint32_t wq[R][2][4];" in src
    compiled_without_spills(p, _caps())
    if ring is not None:
        wide = _plan(scheme, 4096)
        assert wide.tiles.bm == 256 and wide.tiles.prefetch == 0


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("behind", [2, 3])
def test_deeper_stagger_moves_the_give_and_compiles(scheme, behind, compiled_without_spills, set_knobs):
    """register_a8.stagger_chains: warpgroup 0 gives the turn right after it issues chain N - 1 of its first stage."""
    set_knobs({STAGGER_CHAINS_KNOB: behind})
    p = _plan(scheme)
    assert p.tiles.stagger == behind and any(f"{behind} chains after" in r for r in p.reasons), p.explain()
    src = api.source(p)
    assert _give_after(src) == behind - 1 and f"start {behind} wgmma chains behind" in src
    assert src.count("consumer_turn_give();") == 1
    compiled_without_spills(p, _caps())


def test_stagger_stream_k_form_follows(compiled_without_spills, set_knobs):
    set_knobs({STAGGER_CHAINS_KNOB: 2, STREAMK_KNOB: 132})
    p = _plan()
    assert p.tiles.streamk == 132 and p.tiles.stagger == 2
    src = api.source(p)
    assert _give_after(src) == 1 and "wg == 0 && it0 + kt == 0" in src
    compiled_without_spills(p, _caps())


@pytest.mark.parametrize("a_type,chain,group", [("e4m3", 64, 128), ("s8", 64, None), ("e4m3", 128, None),
                                                ("s8", 128, 128)])
def test_streamk_kernels_compile(a_type, chain, group, compiled_without_spills, set_knobs):
    """Stream-K for both operand types and both chain widths: the schedule, the slot ring position, the per-tile
    counters and the warpgroup barrier; no spills, no serialized wgmmas."""
    set_knobs({CHAIN_KNOB: chain})
    p = _rs8(a_type=a_type, group=group or 8192, streamk=132)
    src = api.source(p)
    assert "streamk_segment(StreamK(M, N), block_y(), seg, tile, kt0, ktiles, it0)" in src
    assert f"static constexpr int P = 132, katoms = {p.k // p.tiles.bk};" in src
    assert "mbar_wait(xbar0 + 8 * s, ((it0 + kt) / STAGES) & 1)" in src and "const int s = (it0 + kt) % STAGES;" in src
    assert "atomic_add_i32(counter, ktiles)" in src and "warpgroup_sync(wg);" in src
    # the staggered start: warpgroup 1 waits for the turn once, warpgroup 0 gives it at the block's first stage (so
    # every block needs a segment: test_register_a8_plans.test_every_streamk_block_has_a_segment)
    assert src.count("consumer_turn_take();") == 1 and src.count("consumer_turn_give();") == 1
    assert "if (wg == 0 && it0 + kt == 0" in src
    # the linear widening (the default): no tables, the lane's slot addresses on the held zero
    assert "la0 = lds_32" not in src and ("int4_to_e4m3x8(wq[j >> 2][j & 3]" in src) == (a_type == "e4m3")
    assert "zero = lds_32(held0 + 16);" in src and "lane * 16 + zero;" in src
    mod = compiled_without_spills(p, _caps())
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas
    assert mod.ptx.count("wgmma.mma_async") >= 4 and re.search(r"bar\.sync\s+%r", mod.ptx)  # the warpgroup barrier


@pytest.mark.parametrize("a_type,chain,raster", [("e4m3", 64, 4), ("s8", 128, 0)])
def test_cluster_option(a_type, chain, raster, compiled_without_spills, set_knobs):
    """register_a8.cluster 2: clusters of two blocks (1 x 2 x 1) taking turns multicasting the activation stages; the
    pair shares a token tile (the tile of block formula in Python: every pair's two channel tiles are adjacent, every
    tile once); compiles for sm_90a without spills; not planned beside stream-K and on odd tile counts."""
    set_knobs({CLUSTER_KNOB: 2, CHAIN_KNOB: chain, RASTER_KNOB: raster})
    p = _rs8(a_type=a_type, streamk=0)
    assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and p.grid == (16, 64, 1)
    src = api.source(p)
    assert "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full, (uint16_t)3);" in src
    assert "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);" in src and "cluster_sync();" in src
    assert src.count("mbar_arrive_peer(xbar0 + 8 * (STAGES + s), ") == 2 and "kt + STAGES < ktiles" in src
    mod = compiled_without_spills(p, _caps())
    assert not re.search(r"C75\d\d", mod.log), mod.log
    # the pair mapping (the kernel's _CLUSTER_TILE) covers every tile once, the pair on one token tile
    gx, gy, r = 16, 64, raster
    seen = set()
    for by in range(gy):
        for bx in range(gx):
            crank, pairs_y = by & 1, gy >> 1
            if r:
                bid, per_group = bx + (by >> 1) * gx, r * pairs_y
                first = bid // per_group * r
                rows = min(gx - first, r)
                m0, n0 = first + bid % per_group % rows, 2 * (bid % per_group // rows) + crank
            else:
                m0, n0 = bx, by
            seen.add((m0, n0))
            if crank == 1:
                assert (m0, n0 - 1) in seen  # the rank-0 block of the pair: same token tile, the channel tile before
    assert len(seen) == gx * gy
    assert _rs8(streamk=132).tiles.cluster == 0  # stream-K first
    assert _rs8(n=128 * 3, m=4096, streamk=0).tiles.cluster == 0  # 3 channel tiles: no pairs


@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
@pytest.mark.parametrize("streamk", [0, 132])
def test_wide_192_token_kernels_compile(a_type, streamk, compiled_without_spills, set_knobs):
    """The wide form at 192 tokens (three 64-token chains, fitted to M=300), plain and with stream-K, compiles for
    sm_90a without spills or serialized wgmmas; the loop issues three chains a stage."""
    set_knobs({STREAMK_KNOB: streamk})
    p = _rs8(m=300, a_type=a_type)
    assert p.tiles.bm == 192 and p.tiles.streamk == streamk
    src = api.source(p)
    assert "tokens 128..191: slot rows + 128" in src and "tokens 192..255" not in src
    mod = compiled_without_spills(p, _caps())
    assert not re.search(r"C751\d", mod.log), mod.log


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("streamk", [0, 132])
def test_wide_form_at_128_tokens_compiles(scheme, streamk, compiled_without_spills, set_knobs):
    """register_a8.wide_from 128 (RegisterA8Tiles.wide; the kernel name's 'v'): the wide form at a 128-token tile on
    8192x8192 (64 blocks, the narrow form by default), plain and stream-K: codes by bulk copy, two chains."""
    set_knobs({WIDE_FROM_KNOB: 128, STREAMK_KNOB: streamk})
    p = _plan(scheme, 128)
    assert p.tiles.bm == 128 and p.tiles.wide == 1 and p.tiles.streamk == streamk and "wide form" in p.explain()
    assert re.search(r"w1121v(k132)?m?_", p.kernel_name), p.kernel_name
    src = api.source(p)
    assert "constexpr int BT = 128, WT = 64" in src and "bulk_copy_g2s(" in src  # codes by bulk copy, two chains
    mod = compiled_without_spills(p, _caps())
    assert not re.search(r"C751\d", mod.log), mod.log


def _widened_consumer_loop(src: str) -> str:
    """The consumers' stage loop: from the widened stage head to the consumers' barrier after it."""
    start = src.index("const int s = kt % STAGES, u = kt % A_SLOTS;\n    mbar_wait(xbar0")
    return src[start:src.index("consumer_sync();", start)]


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("slots,stages", [(1, 5), (2, 4)])
def test_converters_widen_into_the_slots(scheme, slots, stages, compiled_without_spills, set_knobs):
    """register_a8.widened_slots: three converter warps of the producer warpgroup widen the weights into 1 or 2
    shared-memory slots of A fragments. The plan budgets the slots (2 slots: 4 stages, 1 slot: 5); the consumers'
    loop keeps no widening and one wait and one release a stage (FULL completes with the converters' arrivals; they
    wait for the codes' mbarrier and for the release of the stage whose slot they refill); the converters widen with
    the consumers' helper, each lane's fragment where that lane loads it; no spills."""
    set_knobs({WIDENED_KNOB: slots})
    p = _plan(scheme)
    t = p.tiles
    assert (t.bm, t.widened, t.stages, t.streamk) == (256, slots, stages, 0), p.explain()
    assert p.smem_bytes == smem_bytes(stages, 256, False, True, slots) <= 227 * 1024
    assert smem_bytes(stages, 256, False, True, slots) - smem_bytes(stages, 256, False, True) == slots * A_SLOT_BYTES
    assert any("converter warps" in r for r in p.reasons) and f"u{slots}" in p.kernel_name
    src = api.source(p)
    loop = _widened_consumer_loop(src)
    widen = "int4_to_e4m3x8(" if scheme == "w4a8-fp8" else "s8x16_lo("
    assert widen not in loop and "prmt" not in loop  # the consumers only load their fragments
    assert loop.count("lds_128(a[ks], alane + u * A_BYTES + ks * (THREADS * 16));") == 1
    assert loop.count("mbar_wait(") == 1 and "mbar_arrive(xbar0 + 8 * (STAGES + s))" in loop  # one wait, one release
    conv = src[src.index("// ---- the converter warps"):src.index("setmaxnreg_inc<232>();")]
    assert widen in conv and "for (int l = c; l < THREADS; l += CONVERTERS)" in conv
    # the converters wait for the codes' own mbarrier and the release of stage kt - A_SLOTS, then complete FULL
    assert "mbar_wait(cbar0 + 8 * s, (kt / STAGES) & 1);" in conv and "mbar_arrive(xbar0 + 8 * s);" in conv
    assert "mbar_init(xbar0 + 8 * s, 1 + CONVERTERS / 32);" in src and "mbar_expect_tx(cfull, W_BYTES);" in src
    # consumer lane l's 16 bytes of step ks: the converters store where the consumers load (alane = aw0 + tid * 16)
    assert "sts_128(aw0 + u * A_BYTES + ks * (THREADS * 16) + l * 16," in conv
    assert "const uint32_t alane = aw0 + tid * 16 + zero;" in src
    # the lane's words as the consumers' own widening reads them (wlane = w0 + wg * SLAB + w * 1024 + lane * 16)
    assert "(l >> 7) * SLAB_BYTES + ((l >> 5) & 3) * 1024 + (l & 31) * 16" in conv
    compiled_without_spills(p, _caps())
