"""The wide register-A W4A8 form quantizing its own activations (TileConfig.fusedq, HUMMING_WGMMA_W4A8_RS_FUSEDQ):
the plan says so and which schemes it takes; the generated kernel carries the activation quantizer's own rule (the
same generated functions as the quantizer kernel, so the same bits), the row queue, the producer's wait for its
tile's rows before its tensor copies (with the cross-proxy fence), coherent reads of the token scales written in the
kernel, the counters' reset by the grid's last warp; the PTX holds the queue's atomics; it compiles without spills."""
import pytest

import humming
from humming import api
from humming.actquant import activation_quant_source, plan_activation_quant
from humming.api import resolve_profile
from humming.core.planner_wgmma_rs8 import FUSEDQ_ENV, PDL_RS8_ENV, STREAMK_ENV, WIDENED_ENV, fusedq_refusal


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for env in (FUSEDQ_ENV, STREAMK_ENV, PDL_RS8_ENV, WIDENED_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("HUMMING_ACT_WIDEN", "0")


def _plan(m: int = 4096, scheme="w4a8-fp8", act: str = "f16", k: int = 8192):
    return humming.plan(scheme, m, 8192, k, act=act, profile="nvidia-h200")


def _function(src: str, head: str) -> str:
    """The text of the device function whose definition starts with ``head``, through its closing brace."""
    start = src.index(head)
    end = src.index("\n}\n", start)
    return src[start:end + 3]


def test_off_by_default_and_on_when_asked(monkeypatch):
    base = _plan()
    assert base.tiles.fusedq == 0 and "XSRC" not in api.source(base)
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    p = _plan()
    assert p.tiles.fusedq == 1 and p.tiles.l2next == 1 and p.kernel_name != base.kernel_name, p.explain()
    assert any("activations quantized in the kernel" in r and FUSEDQ_ENV in r for r in p.reasons)
    monkeypatch.setenv(FUSEDQ_ENV, "2048")  # from that M
    assert _plan(4096).tiles.fusedq == 1 and _plan(1024).tiles.fusedq == 0
    monkeypatch.setenv(FUSEDQ_ENV, "yes")
    with pytest.raises(ValueError, match=FUSEDQ_ENV):
        _plan()


def test_forms_and_schemes_it_is_not_written_for(monkeypatch):
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    for env, value in ((STREAMK_ENV, "132"), (PDL_RS8_ENV, "1"), (WIDENED_ENV, "2")):
        monkeypatch.setenv(env, value)
        p = _plan()
        assert p.tiles.fusedq == 0 and "XSRC" not in api.source(p), (env, p.explain())
        monkeypatch.delenv(env)
    static = humming.schemes.get("w4a8-fp8").with_(act_scale="static_tensor")
    assert fusedq_refusal(str(static), "f16") and _plan(scheme=static).tiles.fusedq == 0
    assert fusedq_refusal("w4a8-fp8", "f32") and fusedq_refusal("no-such-scheme", "f16")
    assert fusedq_refusal("w4a8-fp8", "bf16") is None and fusedq_refusal("w4a8-int8", "f16") is None
    channel = humming.schemes.get("w4a8-fp8").with_(granularity="channel", group_size=None)
    assert _plan(scheme=channel).tiles.fusedq == 1


@pytest.mark.parametrize("scheme,act", [("w4a8-fp8", "f16"), ("w4a8-fp8", "bf16"), ("w4a8-int8", "f16")])
def test_the_quantizer_rule_is_the_quantizer_kernels(scheme, act, monkeypatch):
    """The row function uses the quantizer kernel's generated scale rule, divisor and vector encoder, as they are."""
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    src = api.source(_plan(scheme=scheme, act=act))
    qsrc = activation_quant_source(plan_activation_quant(scheme, act, 8192, profile="nvidia-h200"),
                                   profile="nvidia-h200")
    for head in ("__device__ __forceinline__ float aq_scale(", "__device__ __forceinline__ aq_divisor aq_make_divisor(",
                 "__device__ __forceinline__ void encode_store_as(", "__device__ __forceinline__ uint32_t fold_abs_max(",
                 "__device__ __forceinline__ void load_vec("):
        assert _function(src, head) == _function(qsrc, head), head
    assert "namespace fq {" in src and "constexpr int K = 8192;" in src


def test_queue_waits_and_reset_in_the_source(monkeypatch):
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    src = api.source(_plan())
    producer = src[src.index("if (tid == THREADS) {"):src.index("} else if (warp == THREADS / 32 + 1)")]
    # the first stages' weights, then the wait for the tile's rows, then the tensor copies of their codes
    first, wait, copy = (producer.index(s) for s in ("for (int kt = 0; kt < min(ktiles, STAGES); ++kt)",
                                                    "fq_wait_rows(CNT + 2 + m0 / BT, min(BT, M - m0));",
                                                    "tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);"))
    assert first < wait < copy
    assert "fence.proxy.async.global" in _function(src, "__device__ __forceinline__ void fq_wait_rows(")
    assert "fq_load_f32(TS + tok)" in src and "load_f32(TS + tok)" not in src.replace("fq_load_f32(TS + tok)", "")
    assert src.count("fq::quantize_row<FQ_HELP_LOADS>") == 1 and src.count("fq::quantize_row<FQ_QUEUE_LOADS>") == 1
    assert src.count("fq_warp_exit(CNT, 2 + gridDim.x") == 2  # the producer warpgroup's warps and the consumers'
    assert src.rstrip().endswith("fq_warp_exit(CNT, 2 + gridDim.x, gridDim.x * gridDim.y * (BLOCK_THREADS / 32), "
                                 "lane);\n}")
    assert "const unsigned char* __restrict__ XSRC) {" in src and "unsigned char* A," in src


@pytest.mark.parametrize("scheme,m,act", [("w4a8-fp8", 4096, "f16"), ("w4a8-int8", 4096, "bf16"),
                                          ("w4a8-fp8", 300, "bf16")])
def test_compiles_without_spills(scheme, m, act, compiled_without_spills, monkeypatch):
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    p = _plan(m, scheme, act)
    assert p.tiles.fusedq == 1, p.explain()
    ptx = compiled_without_spills(p, resolve_profile("nvidia-h200")).ptx
    assert "atom.relaxed.gpu.global.add.s32" in ptx and "red.release.gpu.global.add.s32" in ptx
    assert "ld.acquire.gpu.global.s32" in ptx and "fence.proxy.async.global" in ptx
