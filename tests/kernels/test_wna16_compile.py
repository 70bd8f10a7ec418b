"""CPU: WnA16 kernels are planned, generated and compiled with NVRTC for every shipped profile that has an
mma.sync path; the PTX holds the intended instructions and nothing from other families."""
import contextvars
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

DEVICE_PROFILES = [p for p in list_profiles(include_abstract=False) if p.find_mma(family="mma_sync")]
# (scheme, act, M): int4/int8 with and without zeros, fp4/fp8 floats, bf16, every M bucket
GRID = [("w4a16", "f16", 1), ("w4a16-zp", "f16", 33), ("w8a16", "f16", 128), ("w4a16-fp4", "f16", 16),
        ("w8a16-fp8", "bf16", 1), ("w2a16", "bf16", 200), ("w4a16-nvfp4", "bf16", 7), ("w4a16", "f16", 48),
        ("w1a16", "f16", 1), ("w1a16", "f16", 100)]


def _compile(profile, scheme, act, m):
    try:
        plan = api.plan(scheme, m, 1024, 2048, profile=profile, act=act)
    except UnsupportedOnDevice as exc:
        return plan_refused(profile, act, exc)
    route = get_backend(profile).compile_route(profile)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        return ("skip", f"{profile.name}: installed NVRTC cannot target {route.arch}: {exc}".splitlines()[0])
    mod = compile_cuda(api.source(plan, profile), [plan.kernel_name], route.arch, min_nvrtc=route.min_nvrtc)
    return ("ok", plan, mod)


def plan_refused(profile, act, exc):
    # the only acceptable refusal here: bf16 on a profile without bf16 mma.sync (Turing)
    assert act == "bf16" and not profile.find_mma(family="mma_sync", a_type="bf16"), str(exc)
    return ("refused", str(exc))


@pytest.mark.parametrize("profile", DEVICE_PROFILES, ids=[p.name for p in DEVICE_PROFILES])
def test_compiles_with_intended_instructions(profile, set_knobs):
    set_knobs({"wgmma_wna16.enabled": False})  # this family only (sm_90a profiles plan wgmma kernels otherwise)
    with ThreadPoolExecutor(2) as pool:  # (each task in a copy of this context: the knob override holds there too)
        futures = [pool.submit(contextvars.copy_context().run, _compile, profile, *g) for g in GRID]
        results = [f.result() for f in futures]
    compiled = [r for r in results if r[0] == "ok"]
    skipped = [r for r in results if r[0] == "skip"]
    if skipped and not compiled:
        pytest.skip(skipped[0][1])
    assert compiled, results
    k16 = bool(profile.find_mma(family="mma_sync", a_type="f16", shape=(16, 8, 16)))
    for _, plan, mod in compiled:
        ptx = mod.ptx
        assert mod.cubin[:4] == b"\x7fELF"
        mma = set(re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))
        assert mma == ({"m16n8k16"} if k16 else {"m16n8k8"}), (plan.kernel_name, mma)
        assert "wgmma" not in ptx and "tcgen05" not in ptx
        if plan.path != "stream":  # the shared-memory pipeline; the stream path (M <= 16) uses registers only
            assert ("cp.async.cg" in ptx) == bool(profile.memory.cp_async)
            assert "ldmatrix.sync.aligned.m8n8.x4" in ptx
        else:
            assert "ld.global.nc.L1::no_allocate.v4.u32" in ptx and "ldmatrix" not in ptx
        assert f".target {mod.arch}" in ptx


def test_turing_refuses_bf16_with_reason():
    t4 = humming.capabilities.get_profile("nvidia-t4")
    with pytest.raises(UnsupportedOnDevice, match="bf16"):
        api.plan("w4a16", 16, 1024, 2048, profile=t4, act="bf16")


def test_plan_explains_itself():
    p = api.plan("w4a16", 1, 8192, 8192, profile="nvidia-h200")
    text = p.explain()
    assert "mma.sync m16n8k16 f16 declared" in text and "split-K" in text and "cp.async declared" in text
    d = p.to_dict()
    assert d["grid"][2] == p.splits and d["threads"] == p.tiles.threads


@pytest.mark.parametrize("n,k,match", [(1000, 4096, "N=1000 is not a multiple of 16"),
                                       (4096, 4004, "K=4004 is not a multiple of 16"),
                                       (4096, 4096 + 64, "group_size 128 does not divide K")])
def test_shape_errors_name_the_constraint(n, k, match):
    with pytest.raises(humming.ShapeError, match=match):
        api.plan("w4a16", 1, n, k, profile="nvidia-h200")


def test_generated_source_is_readable_and_spelled_by_backend():
    p = api.plan("w4a16-zp", 32, 1024, 2048, profile="nvidia-a100")
    src = api.source(p)
    body = src[src.index("namespace cfg"):]
    assert "asm" not in body, "the core kernel body must not spell instructions itself"
    for helper in ("mma_k16(", "ldmatrix_x4(", "copy_16_async(", "dq_raw("):
        assert helper in body
    p = api.plan("w4a16-zp", 1, 1024, 2048, profile="nvidia-a100")
    src = api.source(p)
    body = src[src.index("namespace cfg"):]
    assert p.path == "stream" and "asm" not in body
    for helper in ("mma_k16(", "load_g128(", "dq_raw("):
        assert helper in body


@pytest.mark.parametrize("scheme", ["w4a16", "w4a16[group_size=32]", "w4a16-zp", "w8a16", "w4a16-nvfp4"])
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("x_ring,fold", [(1, 0), (0, 1), (1, 1), (1, 2)])
def test_stream_variants_compile(scheme, m, x_ring, fold):
    """The tuner's stream options compile without spills: x_ring=1 (activations and per-atom tables loaded one
    atom ahead, with the weights) and fold=1 (raw codes into the MMA, zero point and scale applied per atom in
    fp32; integer codes with per-atom groups only, refused with the reason otherwise)."""
    from humming.core.families.mma_wna16.candidates import candidates
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.errors import ShapeError

    caps = api.resolve_profile("nvidia-h200")
    base = api.plan(scheme, m, 1024, 4096, profile=caps)
    t = base.tiles
    forced = MmaWnA16Tiles(t.bm, t.bn, t.bk, 2, 1, 1, t.warps_k, x_ring, fold)  # one atom in flight
    if fold and ("group_size=32" in scheme or "nvfp4" in scheme):
        with pytest.raises(ShapeError, match="fold needs"):
            plan_wna16(caps, base.layout, m, "f16", scheme=scheme, path="stream", splits=1, tiles=forced)
        return
    p = plan_wna16(caps, base.layout, m, "f16", scheme=scheme, path="stream", splits=1, tiles=forced)
    plain = plan_wna16(caps, base.layout, m, "f16", scheme=scheme, path="stream", splits=1,
                       tiles=MmaWnA16Tiles(t.bm, t.bn, t.bk, 2, 1, 1, t.warps_k, 0, 0))
    assert (p.tiles.x_ring, p.tiles.fold) == (x_ring, fold) and p.kernel_name != plain.kernel_name
    src = api.source(p)
    assert ("xr[R][4][TOKEN_TILES][2]" in src) == bool(x_ring) and "xr[R]" not in api.source(plain)
    assert ("sx[TOKEN_TILES][4]" in src) == bool(fold) and "sx[TOKEN_TILES]" not in api.source(plain)
    assert ("float tmp[TOKEN_TILES][4];" in src) == (fold == 2)  # fold 2: one channel tile's sums live at a time
    route = get_backend(caps).compile_route(caps)
    mod = compile_cuda(src, [p.kernel_name], route.arch, options=[*route.options, "--ptxas-options=-v"], cache=False)
    assert "ld.global.nc.L1::no_allocate.v4.u32" in mod.ptx
    if p.layout.scale_group >= 64 or m == 1:  # per-k16-step tables at M=16 spill a little: the tuner times it
        assert " 0 bytes spill stores" in mod.log, mod.log
    assert any((c.tiles.x_ring, c.tiles.fold) == (x_ring, fold) for c in candidates(caps, base.layout, m, "f16", scheme=scheme))


def test_stream_default_folds_at_small_m_where_it_can():
    """Without a tuned entry, M <= 8 takes fold where the layout allows it (measured faster at M=1 on the H200), and
    says so: with 4-bit codes and a split's K range of at most 4096 the activations and tables staged in shared memory
    (x_smem, fold 2), else the register ring (x_ring, fold 1); groups of 32 keep the plain decode."""
    caps = api.resolve_profile("nvidia-a100")  # no tuned entries for this profile
    p = api.plan("w4a16", 1, 4096, 4096, profile=caps)
    assert (p.tiles.x_ring, p.tiles.fold, p.tiles.x_smem) == (0, 2, 1) and any("(fold)" in r for r in p.reasons)
    assert any("x_smem" in r for r in p.reasons) and p.k // p.splits <= 4096
    w8 = api.plan("w8a16", 1, 4096, 4096, profile=caps)  # 8-bit codes: the rule keeps the register ring
    assert (w8.tiles.x_ring, w8.tiles.fold, w8.tiles.x_smem) == (1, 1, 0)
    assert api.plan("w4a16", 16, 4096, 4096, profile=caps).tiles.fold == 0
    assert api.plan("w4a16[group_size=32]", 1, 4096, 4096, profile=caps).tiles.fold == 0


def test_fold_refused_for_one_bit_codes_in_f16():
    """1-bit codes in f16 carry the magic offset 1024 over 2 levels: fold's fp32 sums lost too much on the H200
    (1.2e-3 relative error, scripts/fold_precision.py), so the default keeps the plain decode there and a forced
    fold is refused with the reason; 2-bit codes in f16 and 1-bit codes in bf16 (magic 128) keep fold."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.errors import ShapeError

    caps = api.resolve_profile("nvidia-a100")
    uint1 = humming.schemes.get("w2a16-zp").with_(weight="uint1")
    p = api.plan(uint1, 1, 512, 2048, profile=caps)
    assert p.path == "stream" and p.tiles.fold == 0
    t = p.tiles
    with pytest.raises(ShapeError, match="fold loses precision with 1-bit codes in f16"):
        plan_wna16(caps, p.layout, 1, "f16", scheme="w2a16-zp", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(t.bm, t.bn, t.bk, 2, 1, 1, t.warps_k, 1, 1))
    assert api.plan(uint1, 1, 512, 2048, profile=caps, act="bf16").tiles.fold >= 1
    assert api.plan("w2a16-zp", 1, 512, 2048, profile=caps).tiles.fold >= 1


def test_fold_tt_outer_needs_the_activation_ring():
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.errors import ShapeError

    caps = api.resolve_profile("nvidia-h200")
    base = api.plan("w4a16", 16, 1024, 4096, profile=caps)
    t = base.tiles
    with pytest.raises(ShapeError, match="needs x_ring"):
        plan_wna16(caps, base.layout, 16, "f16", scheme="w4a16", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(t.bm, t.bn, t.bk, 2, 1, 1, t.warps_k, 0, 2))


@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]"])
@pytest.mark.parametrize("m,fold", [(1, 1), (1, 2), (3, 0), (8, 1)])
def test_stream_x_smem_compiles(scheme, m, fold):
    """x_smem (the block's activations and table rows staged once in shared memory): the plan counts the staging in
    its shared memory and says so, the main loop reads no activations or tables from global memory, and the kernel
    compiles for the H200 (with PDL: tables before the wait, activations after it) and an Ampere profile, without
    spills for int4 codes."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.core.plan import with_pdl

    for name in ("nvidia-h200", "nvidia-a100"):
        caps = api.resolve_profile(name)
        base = api.plan(scheme, m, 1024, 4096, profile=caps)
        plain = plan_wna16(caps, base.layout, m, "f16", scheme=scheme, path="stream", splits=2,
                           tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, int(fold == 2), fold))  # fold 2 needs a ring
        p = with_pdl(caps, plan_wna16(caps, base.layout, m, "f16", scheme=scheme, path="stream", splits=2,
                                      tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, fold, x_smem=1)))
        assert p.tiles.x_smem and p.kernel_name != plain.kernel_name
        rows = 1 if m == 1 else 8  # one kernel per tuning bucket: M=1, or up to the token tile
        assert p.smem_bytes >= plain.smem_bytes + rows * 2048 * 2 and any(r.startswith("x_smem: ") for r in p.reasons)
        src = api.source(p)
        body = src[src.index("for (int i = 0; i < natoms; i += R)"):src.index("// fold the warps' partial sums")]
        assert "load_g32(" not in body and "load_g128_cached(" not in body
        assert ("lds_u4(" in body) == bool(p.layout.scale_group or p.layout.zero_group)  # w8a16: no group scales
        assert "stage_rows<XS_TOKENS, XS_K / 8>" in src and f"XS_TOKENS = {rows}, XS_K = 2048" in src
        head = src[src.index("uint32_t buf[R][CB][4];"):src.index("for (int i = 0; i < natoms; i += R)")]
        tables = head.count("stage_rows<")
        assert tables == 1 + bool(p.layout.scale_group) + bool(p.layout.zero_group), head
        if p.pdl and tables > 1:  # the weights' tables may be read before the previous kernel ends, activations after
            assert head.index("stage_rows<") < head.index("pdl_wait();") < head.index("stage_rows<XS_TOKENS")
        route = get_backend(caps).compile_route(caps)
        mod = compile_cuda(src, [p.kernel_name], route.arch, options=[*route.options, "--ptxas-options=-v"], cache=False)
        if "w8" not in scheme:
            assert " 0 bytes spill stores" in mod.log, mod.log


def test_stream_x_smem_refusals():
    """x_smem refuses what it cannot stage, with the reason: groups under 64 (a table row per k16 step), more than
    X_SMEM_MAX_COPIES copies per thread, and x_ring or bulk at the same time; fold=2 accepts it as its activations."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.sizing import X_SMEM_MAX_COPIES
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.errors import ShapeError

    caps = api.resolve_profile("nvidia-h200")
    g32 = api.plan("w4a16[group_size=32]", 1, 1024, 4096, profile=caps)
    with pytest.raises(ShapeError, match="groups of at least 64"):
        plan_wna16(caps, g32.layout, 1, "f16", scheme="w4a16", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 0, x_smem=1))
    base = api.plan("w4a16", 8, 1024, 16384, profile=caps)
    with pytest.raises(ShapeError, match=f"at most {X_SMEM_MAX_COPIES}"):  # 8 tokens x 16384 x 2 B over 128 threads
        plan_wna16(caps, base.layout, 8, "f16", scheme="w4a16", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 1, x_smem=1))
    with pytest.raises(ShapeError, match="excludes x_ring"):
        plan_wna16(caps, base.layout, 1, "f16", scheme="w4a16", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 1, 1, x_smem=1))
    p = plan_wna16(caps, base.layout, 1, "f16", scheme="w4a16", path="stream", splits=1,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 2, x_smem=1))
    assert p.tiles.fold == 2 and "float tmp[TOKEN_TILES][4];" in api.source(p)


def test_stream_x_smem_kernels_differ_by_staged_extent():
    """The x_smem kernel compiles its reserved token rows (1 for M=1, else the token tile) and a split's K range into
    its staging: plans that differ there must not share a kernel name (the runtime caches compiled kernels by name),
    while every M of one bucket (2-8) shares one kernel, as the plain stream kernel does."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles

    caps = api.resolve_profile("nvidia-h200")
    base = api.plan("w4a16", 1, 1024, 4096, profile=caps)
    names = {}
    for x_smem in (0, 1):
        for m, splits in ((1, 1), (1, 2), (2, 2)):
            p = plan_wna16(caps, base.layout, m, "f16", scheme="w4a16", path="stream", splits=splits,
                           tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 1, x_smem=x_smem))
            names.setdefault(x_smem, set()).add(p.kernel_name)
    assert len(names[0]) == 1 and len(names[1]) == 3
    bucket = {plan_wna16(caps, base.layout, m, "f16", scheme="w4a16", path="stream", splits=2,
                         tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 1, x_smem=1)).kernel_name for m in range(2, 9)}
    assert len(bucket) == 1
