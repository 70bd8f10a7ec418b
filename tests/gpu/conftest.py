import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine (GPU tests run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _poisoned_outputs(monkeypatch):
    """Every launch writes into a NaN-filled output (humming.core.runtime.layer), every activation quantization into
    0xFF-filled codes and scales (humming.core.actquant.runtime), every MoE gated activation into garbage: a kernel that leaves part of its output unwritten
    shows."""
    from humming.core.actquant import runtime as actquant_runtime
    from humming.core.moe import activation_kernel
    from humming.core.runtime import layer

    monkeypatch.setattr(layer, "POISON_OUTPUTS", True)
    monkeypatch.setattr(actquant_runtime, "_POISON", True)
    monkeypatch.setattr(activation_kernel, "_POISON", True)


@pytest.fixture
def native_8bit(monkeypatch):
    """Tests of the 8-bit kernels: keep W8A8 / W4A8 off the widened weight-only path
    (humming.core.routes.widened_ranges): for the rest of the test, humming.gemm and humming.plan given no options
    run with GemmOptions(act_widen=False), which the fixture's value is (pass
    ``dataclasses.replace(native_8bit, fast_accum=True)`` for other numerics)."""
    from humming import options

    native = options.GemmOptions(act_widen=False)
    monkeypatch.setattr(options, "DEFAULT", native)  # what humming.plan / gemm resolve options=None to
    return native


def biased_weight(scheme, n: int, k: int, dtype, seed: int):
    """A quantized random [n, k] weight (values ~0.05) with a random bias of ``dtype``, drawn after seeding torch with
    ``seed`` (the bias first, then the weight)."""
    import humming

    torch.manual_seed(seed)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    sch = humming.schemes.get(scheme) if isinstance(scheme, str) else scheme
    return humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)


def fresh_gemm(qw, m: int, k: int, dtype):
    """``humming.gemm`` on fresh random activations [m, k] of ``dtype``, synchronized: (activations, output)."""
    import humming

    x = torch.randn(m, k, device="cuda", dtype=dtype)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    return x, out


def layers_of(qw, dtype=None) -> list:
    """The prepared layers (humming.core.runtime.layer.Layer) of ``qw``, those for activations of ``dtype`` where
    given: one per (dtype, device, profile, options) it ran with."""
    from humming.core.runtime.layer import LAYERS

    return [LAYERS[h] for key, h in qw.__dict__.get("_humming_prepared", {}).items()
            if dtype is None or key[0] == dtype]


def launch_spec(qw, dtype, m: int):
    """The launch spec (plan, packed weights, how the activations arrive: spec.inputs) that ran M on ``qw`` with
    activations of ``dtype``."""
    specs = [lay.launches[m] for lay in layers_of(qw, dtype) if m in lay.launches]
    assert specs, f"M={m} never ran on this weight with {dtype}"
    return specs[-1]


def ran_plan(qw, m: int, dtype=None):
    """The plan that ran M on ``qw`` (the last prepared layer that ran it)."""
    return launch_spec(qw, dtype, m).plan


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def graph_replay_error(gemm, x: torch.Tensor, reference) -> float:
    """Capture ``gemm(static)`` in a CUDA graph on a copy of ``x``, copy fresh activations into the captured buffer,
    replay, and return the relative error of the replayed output against ``reference(new activations)``."""
    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gemm(static)
    fresh = torch.randn_like(static)
    static.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    return rel_error(out, reference(fresh))


def forced_repeats_and_replay(qw, handle: int, plan, x: torch.Tensor, tol: float, times: int = 20) -> None:
    """Force ``plan`` for x's M on the prepared ``handle``, launch it ``times`` times in a row (counters and slots
    must reset themselves) checking each output against the reference, then CUDA-graph replay with fresh
    activations; the handle's own plan comes back afterwards."""
    import humming
    from humming import api

    prep, m = api._registry[handle], x.shape[0]  # a humming.core.runtime.layer.Layer
    prep.plans[m], _ = plan, prep.launches.pop(m, None)
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    try:
        for _ in range(times):
            assert rel_error(api.gemm_prepared(x, handle), ref) <= tol, plan.kernel_name
        err = graph_replay_error(lambda xs: api.gemm_prepared(xs, handle), x,
                                 lambda fresh: humming.reference_gemm(fresh, qw, out_dtype=torch.float32))
        assert err <= tol, (plan.kernel_name, "graph replay", err)
    finally:
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)


def run_forced_plans(qw, dtype, ms, plans_for, tol: float) -> int:
    """Run ``qw`` at each M of ``ms`` with every plan that ``plans_for(prep, base_plan, m)`` yields forced on its
    prepared handle (fresh random activations per M; outputs NaN-poisoned by this conftest): each must write its
    whole output and match the reference within ``tol``. The handle's own plans come back afterwards. Returns how
    many plans ran."""
    import humming
    from humming import api

    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    ran = 0
    for m in ms:
        x = torch.randn(m, qw.shape[1], device="cuda", dtype=dtype)
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        for p in plans_for(prep, api.plan_for(handle, m), m):
            prep.plans[m], _ = p, prep.launches.pop(m, None)
            out = api.gemm_prepared(x, handle)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), (p.kernel_name, "output not fully written")
            err = rel_error(out, ref)
            assert err <= tol, f"{p.kernel_name} M={m} split {p.splits}: relative error {err:.2e}"
            ran += 1
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)
    return ran


def stream_plan(prep, base, m: int, wk: int, stages: int, fold: int, x_ring: int, x_smem: int, *, splits: int = 1,
                balance: int = 0, pdl: bool = False):
    """A stream-path plan of ``wk`` warps per slab for the prepared handle ``prep`` (token tile of its own plan
    ``base``), with the given options and programmatic dependent launch where ``pdl``."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.core.plan import with_pdl

    p = plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="stream", splits=splits,
                   tiles=MmaWnA16Tiles(base.tiles.bm, 64, 64 * wk, stages, 1, 1, wk, x_ring, fold, x_smem=x_smem,
                                       balance=balance))
    return with_pdl(prep.caps, p) if pdl else p
