"""CPU: the two-warpgroup register-A form's stream-K option (TileConfig.streamk): the schedule's arithmetic (a model of
the kernel's formulas covers every atom of every tile exactly once, a block's run meets at most two tiles, the
partial slots and the per-tile atom counters add up, also with fewer left-over atoms than blocks), the plan's grid,
workspace, shared memory and reasons, the refusals; the kernel compiles for sm_90a without serialized wgmmas and keeps
the other kernels' source unchanged."""
import re

import pytest

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.families.register_a.planner import BC, OUT_PAD, plan_wna16_wgmma_rs, smem_bytes
from humming.errors import ShapeError

H200 = "nvidia-h200"


def _layout(n=28672, k=8192, group=128, name="w4a16"):
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    return layout_for(sch, n, k, "f16", caps=api.resolve_profile(H200))


def _plan(m=128, bt=128, streamk=132, n=28672, k=8192, group=128, name="w4a16", **kw):
    return plan_wna16_wgmma_rs(api.resolve_profile(H200), _layout(n, k, group, name), m, "f16", scheme=name, bt=bt,
                               small=False, streamk=streamk, **kw)


def _segments(tiles: int, katoms: int, blocks: int):
    """The kernel's schedule (generator_wgmma_rs_streamk.SCHEDULE) in Python: per block, its (tile, kt0, ktiles)."""
    waves, dp = tiles // blocks, tiles // blocks * blocks
    sk_atoms = (tiles - dp) * katoms
    out = []
    for b in range(blocks):
        segs = [(w * blocks + b, 0, katoms) for w in range(waves)]
        ga, sk1 = sk_atoms * b // blocks, sk_atoms * (b + 1) // blocks
        while ga < sk1:
            t = ga // katoms
            kt0 = ga - t * katoms
            n = min(katoms - kt0, sk1 - ga)
            segs.append((dp + t, kt0, n))
            ga += n
        out.append(segs)
    return out, dp, sk_atoms


@pytest.mark.parametrize("tiles,katoms,blocks", [(224, 128, 132), (1024, 128, 132), (32, 224, 132), (8, 4, 7),
                                                 (133, 128, 132), (3584, 128, 132), (8, 64, 3), (1, 16, 132)])
def test_schedule_covers_every_atom_once(tiles, katoms, blocks):
    per_block, dp, sk_atoms = _segments(tiles, katoms, blocks)
    covered = {}
    for b, segs in enumerate(per_block):
        split = [s for s in segs if s[2] != katoms]
        assert len(split) <= 2  # a block's stream-K run meets at most two tiles
        for tile, kt0, n in segs:
            for kt in range(kt0, kt0 + n):
                assert (tile, kt) not in covered
                covered[(tile, kt)] = b
    assert len(covered) == tiles * katoms
    for tile in range(dp, tiles):  # the reader's block range and slot rule find every writer of a split tile
        t0 = (tile - dp) * katoms
        b_first, b_last = ((t0 + 1) * blocks - 1) // sk_atoms, ((t0 + katoms) * blocks - 1) // sk_atoms
        writers = sorted({covered[(tile, kt)] for kt in range(katoms)})
        if len(writers) == 1 and any(s == (tile, 0, katoms) for s in per_block[writers[0]]):
            continue
        assert writers == [b for b in range(b_first, b_last + 1) if sk_atoms * b // blocks < sk_atoms * (b + 1) // blocks]
        for b in writers:
            slot = 0 if sk_atoms * b // blocks >= t0 else 1
            first = next(s for s in per_block[b] if s[2] != katoms)
            assert (first[0] == tile) == (slot == 0)


@pytest.mark.parametrize("m,bt,stages", [(128, 128, 6), (256, 256, 4), (4096, 256, 4)])
def test_streamk_plan(m, bt, stages, monkeypatch):
    monkeypatch.setenv("HUMMING_WGMMA_RS_CLUSTER", "0")  # (the unpaired text; pairs: test_wgmma_rs_pair_cluster_compile)
    p = _plan(m=m, bt=bt, n=8192 if m == 4096 else 28672)
    assert p.grid == (1, 132, 1) and p.workspace_floats == 132 * bt * 128  # one slot per block (the hand-over)
    assert p.tiles.stages == stages and p.smem_bytes == smem_bytes(bt, stages, True)
    assert p.smem_bytes == stages * bt * 128 + 1024 + bt * (BC + OUT_PAD) * 2 <= 227 * 1024
    assert p.tiles.stagger == 0 and re.search(r"k132m?$", p.kernel_name.split("_")[-2])
    assert any("stream-K over 132 persistent blocks" in r for r in p.reasons)
    src = api.source(p)
    assert "StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)" in src
    # the block count and K's atoms are constants of the kernel (divisions by constants: uniform loop counters)
    assert "static constexpr int P = 132, katoms = 128;" in src and "gridDim.y" not in src.split("struct StreamK")[1]
    assert "constexpr int katoms = StreamK::katoms;" in src and "K / BK" not in src
    assert "tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0" in src
    assert "if (it >= STAGES) mbar_wait_polite(xbar0 + 8 * (STAGES + s)" in src
    assert "const uint32_t stg0 = x0 + STAGES * X_BYTES;" in src and "lds_128(r, stg0 + " in src
    assert "mbar_wait(xbar0 + 8 * ((unsigned)(it0 + kt) % STAGES), ((unsigned)(it0 + kt) / STAGES) & 1)" in src
    # split tiles handed over to the block of their first part
    assert "if (tid == 0) red_add_i32(counter, ktiles);" in src and "wait_count_i32(counter, katoms - ktiles);" in src
    assert "atomic_add_i32(" not in src.split("extern \"C\"")[1] and src.rstrip().endswith("it0 += ktiles;\n  }\n}")


@pytest.mark.parametrize("tiles,katoms,blocks", [(224, 128, 132), (32, 128, 132), (512, 128, 132), (200, 224, 132),
                                                 (133, 128, 132), (7, 3, 5), (11, 64, 4), (1, 16, 132)])
def test_streamk_handover_schedule(tiles, katoms, blocks):
    """The hand-over's premises (generator_wgmma_rs_streamk.HANDOVER): a split tile's later parts (kt0 > 0) are their
    blocks' first stream-K segments (one stored partial per block: the workspace's one slot); its first part (kt0 = 0)
    belongs to its lowest block, which waits only for higher blocks (no cycle); the parts cover the tile once."""
    segs, _, _ = _segments(tiles, katoms, blocks)
    parts: dict[int, list[tuple[int, int, int]]] = {}
    for b, ss in enumerate(segs):
        split = [(t, kt0, n) for t, kt0, n in ss if n != katoms]
        later = [s for s in split if s[1] > 0]
        assert len(later) <= 1 and all(s == split[0] for s in later)  # at most one stored partial: the first
        for t, kt0, n in split:
            parts.setdefault(t, []).append((b, kt0, n))
    for ps in parts.values():
        ps.sort(key=lambda p: p[1])
        assert ps[0][1] == 0 and ps[0][0] == min(b for b, _, _ in ps)  # the finisher: the first part, lowest block
        assert sum(n for _, _, n in ps) == katoms and [b for b, _, _ in ps] == sorted(b for b, _, _ in ps)


def test_early_ring_option(monkeypatch):
    """HUMMING_WGMMA_RS_SK_EARLY=1 (TileConfig.early, off by default): the weight ring declared before the segment loop,
    the next segment's first atoms loaded after a segment's last wgmmas and the consumers' barrier (not after a split
    tile's later part), the prologue skipped when they are in; its own kernel name; the generator refuses it without
    stream-K; the kernels compile without spills at 128 and 256 tokens."""
    from dataclasses import replace

    from humming.core.families.register_a.planner import EARLY_ENV

    off = _plan()
    assert off.tiles.early == 0 and "ring_ready" not in api.source(off)
    monkeypatch.setenv(EARLY_ENV, "1")
    on = _plan()
    assert on.tiles.early == 1 and on.kernel_name != off.kernel_name and re.search(r"k132em?_", on.kernel_name)
    assert any(EARLY_ENV in r for r in on.reasons)
    src = api.source(on)
    consumers = src.split("setmaxnreg_inc<232>();")[1]
    body = consumers.split("while (StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)) {")
    assert len(body) == 2 and "uint32_t wq[R][4];" in body[0] and "uint32_t wq[R][4];" not in body[1]
    assert "bool ring_ready = false;" in body[0] and "if (!ring_ready && s < ktiles) {" in body[1]
    early = body[1].index("ring_ready = kt0 == 0 && StreamK(M, N).next(blockIdx.y, wave_n, ga_n")
    assert body[1].index("consumer_sync();") < early < body[1].index("if (ktiles != katoms)")
    assert _plan(streamk=0).tiles.early == 0  # (stream-K plans only)
    plain = _plan(streamk=0)
    with pytest.raises(ValueError, match="stream-K option"):
        api.source(replace(plain, tiles=replace(plain.tiles, early=1)))


@pytest.mark.parametrize("m,bt", [(128, 128), (4096, 256)])
def test_early_ring_kernels_compile(m, bt, compiled_without_spills, monkeypatch):
    from humming.core.families.register_a.planner import EARLY_ENV

    monkeypatch.setenv(EARLY_ENV, "1")
    p = _plan(m=m, bt=bt, n=8192)
    assert p.tiles.early == 1
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log


def test_streamk_kernels_differ_by_k():
    """K is compiled into a stream-K kernel: two shapes of one tile configuration and different K get two kernels
    (a shared name ran the 8192x8192 kernel on 4096x14336: wrong results); the same K shares one."""
    a, b, c = (_plan(m=4096, bt=256, n=n, k=k) for n, k in ((8192, 8192), (4096, 14336), (28672, 8192)))
    assert a.kernel_name != b.kernel_name and a.kernel_name == c.kernel_name
    assert "katoms = 224;" in api.source(b) and "katoms = 128;" in api.source(a)
    plain = [_plan(m=4096, bt=256, n=n, k=k, streamk=0) for n, k in ((8192, 8192), (4096, 14336))]
    assert plain[0].kernel_name == plain[1].kernel_name  # without stream-K, K stays a launch argument


@pytest.mark.parametrize("kwargs,words", [
    (dict(tma=False), "producer warpgroup"),
    (dict(tail=92), "one or the other"),
    (dict(streamk=70000), "1..65535"),
])
def test_streamk_refusals(kwargs, words):
    with pytest.raises(ShapeError, match=words):
        _plan(**kwargs)


def test_streamk_small_form_refused():
    with pytest.raises(ShapeError, match="stream-K is an option of the two-warpgroup form"):
        plan_wna16_wgmma_rs(api.resolve_profile(H200), _layout(), 64, "f16", bt=64, small=True, streamk=132)


@pytest.mark.parametrize("m,bt,group,name", [(128, 128, 128, "w4a16"), (4096, 256, None, "w4a16-zp"),
                                             (2048, 256, 64, "w4a16")])
def test_streamk_kernels_compile(m, bt, group, name, compiled_without_spills):
    p = _plan(m=m, bt=bt, group=group, name=name, n=8192)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas
