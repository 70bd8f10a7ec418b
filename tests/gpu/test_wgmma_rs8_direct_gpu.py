"""The wide register-A W4A8 form's direct accumulation for per-channel scales (TileConfig.direct: the wgmmas
accumulate across every stage in the tensor core, the channel scale in the epilogue) against the reference and the
promoted form: e4m3 with HUMMING_WGMMA_FAST_ACCUM=1 and int8 by default (exact int32 sums), f16 and bf16, K 4096 (an
even stage count) and 384 (odd), M 512 and 470 (rows past M); also the narrow form and the wide form's tiles fitted
to M. Outputs NaN-poisoned before each launch, fresh random
data per case, and every case checks the plan it ran. The tolerance is the other W4A8 tests' (5e-3); each case also
runs the promoted form on the same activations and prints both errors (e4m3: ~2x the promoted form's at K=4096;
int8: the same)."""
import pytest
import torch

import humming
from humming.core.families.register_a8.planner import DIRECT_S8_ENV, FAST_ACCUM_ENV, PATH, WIDE_FROM_ENV

from .conftest import biased_weight, fresh_gemm, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


def _spec(qw, dtype, m: int, fast: bool):
    """The launch spec of M on the prepared register-A W4A8 handle (the fast-accumulation one or the other)."""
    return next(humming.api._registry[h].launches[m] for key, h in qw.__dict__["_humming_prepared"].items()
                if key[0] == "w4a8-wgmma-rs8" and key[1] == dtype and ("fast_accum" in key) == fast)


def _direct_and_promoted(qw, m: int, k: int, dtype, monkeypatch, env: str = FAST_ACCUM_ENV,
                         on: str = "1", off: str = "0", tokens: int = 256) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """(relative error of the direct-accumulation kernel, of the promoted kernel, their outputs) on the same fresh
    activations; ``env`` = ``on`` / ``off`` picks the form; the direct plan's token tile is ``tokens``."""
    fast = env == FAST_ACCUM_ENV
    monkeypatch.setenv(env, on)
    x, out = fresh_gemm(qw, m, k, dtype)
    p = _spec(qw, dtype, m, fast).plan
    assert p.path == PATH and p.tiles.direct == 1 and p.tiles.bm == tokens, p.explain()
    assert not torch.isnan(out).any()
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    monkeypatch.setenv(env, off)
    if not fast:  # the same prepared handle: its plans were made under ``on``
        for h in qw.__dict__["_humming_prepared"].values():
            humming.api._registry[h].plans.clear()
            humming.api._registry[h].launches.clear()
    promoted = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert _spec(qw, dtype, m, False).plan.tiles.direct == 0
    return rel_error(out, ref), rel_error(promoted, ref), out, promoted


def _fast_and_promoted(qw, m: int, k: int, dtype, monkeypatch) -> tuple[float, float]:
    fast, promoted, _, _ = _direct_and_promoted(qw, m, k, dtype, monkeypatch)
    return fast, promoted


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_fast_accumulation_matches_reference(dtype, k, monkeypatch):
    group = None  # (groups of 128 keep the promoted loop)
    _require_wgmma("e4m3")
    monkeypatch.setenv(WIDE_FROM_ENV, "256")
    monkeypatch.setattr(humming.api, "_POISON", True)
    n = 2048
    qw = biased_weight(_scheme("w4a8-fp8", group), n, k, dtype, n + k + (group or 1) + (dtype == torch.bfloat16))
    for m in (512, 470):
        fast, promoted = _fast_and_promoted(qw, m, k, dtype, monkeypatch)
        assert fast <= TOL, (m, fast, promoted)
        print(f"K={k} M={m} {dtype}: fast {fast:.2e}, promoted {promoted:.2e}")


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_int8_per_channel_int32_sums(dtype, k, monkeypatch):
    """Int8 activations with per-channel scales (the default: HUMMING_WGMMA_W4A8_RS_DIRECT unset): the int32 sums over
    every stage, exact, against the reference and the promoted kernel (which rounds each stage's partial into fp32):
    the same outputs up to the fp32 rounding of the promotion."""
    _require_wgmma("s8")
    monkeypatch.setenv(WIDE_FROM_ENV, "256")
    monkeypatch.setattr(humming.api, "_POISON", True)
    n = 2048
    qw = biased_weight(_scheme("w4a8-int8", None), n, k, dtype, n + k + 5 + (dtype == torch.bfloat16))
    for m in (512, 470):
        direct, promoted, out, other = _direct_and_promoted(qw, m, k, dtype, monkeypatch, DIRECT_S8_ENV, "1", "0")
        assert direct <= TOL and rel_error(out, other) <= 2e-3, (m, direct, promoted)
        print(f"int8 K={k} M={m} {dtype}: direct {direct:.2e}, promoted {promoted:.2e}")


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("form", ["narrow", "fitted"])
@pytest.mark.parametrize("name", ["w4a8-int8", "w4a8-fp8"])
def test_direct_accumulation_in_narrow_and_fitted_tiles(name, form, k, monkeypatch):
    """The narrow form (128 tokens, one 128-token chain a stage; M 128 / 200 / 470) and the wide form's tiles fitted
    to M (128 / 192 tokens in 64-token chains, forced from M 128; M 128 / 150 / 300, and 470 in 256-token tiles)
    accumulating across stages: int8 by default, e4m3 under HUMMING_WGMMA_FAST_ACCUM=1; against the reference and
    the promoted form on the same activations."""
    _require_wgmma("s8" if name == "w4a8-int8" else "e4m3")
    if form == "fitted":
        monkeypatch.setenv(WIDE_FROM_ENV, "128")
    monkeypatch.setattr(humming.api, "_POISON", True)
    n, dtype = 2048, torch.float16
    qw = biased_weight(_scheme(name, None), n, k, dtype, n + k + len(form) + len(name))
    env = (DIRECT_S8_ENV, "1", "0") if name == "w4a8-int8" else (FAST_ACCUM_ENV, "1", "0")
    tiles = {"narrow": {128: 128, 200: 128, 470: 128}, "fitted": {128: 128, 150: 192, 300: 192, 470: 256}}[form]
    for m, bm in tiles.items():
        direct, promoted, out, other = _direct_and_promoted(qw, m, k, dtype, monkeypatch, *env, tokens=bm)
        assert direct <= TOL, (m, direct, promoted)
        if name == "w4a8-int8":
            assert rel_error(out, other) <= 2e-3, (m, direct, promoted)
        print(f"{name} {form} K={k} M={m}: direct {direct:.2e}, promoted {promoted:.2e}")
