"""HUMMING_WGMMA_W4A8_RS_WIDENED: the wide register-A W4A8 form with its weights widened by three converter warps of
the producer warpgroup into 1 or 2 shared-memory slots of A fragments (TileConfig.widened) instead of by the consumer
warps. The plan says so and budgets the slots' shared memory (2 slots: 4 stages, 1 slot: 5), the consumers' stage loop
keeps no widening (no byte permutes: four 16-byte shared loads a lane instead) and still one wait and one release a
stage (the stage's FULL mbarrier completes with the converters' arrivals; they wait for the codes' own mbarrier and
for the release of the stage whose slot they refill), the converters widen with the same helper the consumers use,
each consumer lane's fragment lands where that lane loads it, and both slot counts compile without spills for FP8 and
INT8. Where the option does not apply (stream-K, the narrow form, PDL) the plan stays as it
was."""

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.families.register_a8.planner import (
    A_SLOT_BYTES,
    PDL_RS8_ENV,
    STREAMK_ENV,
    WIDENED_ENV,
    smem_bytes,
    widened_slots,
)


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(WIDENED_ENV, STREAMK_ENV, PDL_RS8_ENV)


def _consumer_loop(src: str) -> str:
    """The consumers' stage loop: from the widened stage head to the consumers' barrier after it."""
    start = src.index("const int s = kt % STAGES, u = kt % A_SLOTS;\n    mbar_wait(xbar0")
    return src[start:src.index("consumer_sync();", start)]


def test_unset_and_zero_leave_the_consumers_widening(monkeypatch):
    base = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert base.tiles.widened == widened_slots() == 0 and "cbar0" not in api.source(base)
    monkeypatch.setenv(WIDENED_ENV, "0")
    p = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert p.kernel_name == base.kernel_name


@pytest.mark.parametrize("bad", ["3", "-1", "two"])
def test_bad_slot_counts_are_refused(bad, monkeypatch):
    monkeypatch.setenv(WIDENED_ENV, bad)
    with pytest.raises(ValueError, match=WIDENED_ENV):
        humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("slots,stages", [(1, 5), (2, 4)])
def test_converters_widen_into_the_slots(scheme, slots, stages, monkeypatch, compiled_without_spills):
    monkeypatch.setenv(WIDENED_ENV, str(slots))
    p = humming.plan(scheme, 4096, 8192, 8192, profile="nvidia-h200")
    t = p.tiles
    assert (t.bm, t.widened, t.stages, t.streamk) == (256, slots, stages, 0), p.explain()
    assert p.smem_bytes == smem_bytes(stages, 256, False, True, slots) <= 227 * 1024
    assert smem_bytes(stages, 256, False, True, slots) - smem_bytes(stages, 256, False, True) == slots * A_SLOT_BYTES
    assert any("converter warps" in r for r in p.reasons) and f"u{slots}" in p.kernel_name
    src = api.source(p)
    loop = _consumer_loop(src)
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
    compiled_without_spills(p, resolve_profile("nvidia-h200"))


@pytest.mark.parametrize("env,value", [(STREAMK_ENV, "132"), (PDL_RS8_ENV, "1")])
def test_other_forms_keep_their_plans(env, value, monkeypatch):
    monkeypatch.setenv(env, value)
    before = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    monkeypatch.setenv(WIDENED_ENV, "2")
    after = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert after.tiles.widened == 0 and after.kernel_name == before.kernel_name


def test_narrow_and_fitted_tiles_keep_their_plans(monkeypatch):
    monkeypatch.setenv(WIDENED_ENV, "2")
    for m in (128, 300):  # a 128-token (narrow or wide at 128) and a 192-token fitted tile
        p = humming.plan("w4a8-fp8", m, 8192, 8192, profile="nvidia-h200")
        assert p.tiles.widened == 0, p.explain()
