"""Timing candidate MoE plans on the live GPU: the measuring half of `python -m humming tune --moe`.

For one MoE GEMM shape (experts E, top_k, N, K, scheme) and each token count: the rules' plan and every candidate
(the tile kernel's token tiles x tile shapes x split-K, the register-A kernel's token tiles where the profile has it)
run on random weights and a uniform random routing, routed with the candidate's own token tile; each is checked
against the reference MoE GEMM (a wrong one is reported, never a winner) and timed by CUDA-graph replay over several
routings (consecutive calls reach different experts, as decode steps do, so the active experts' weights stream from
memory); the fastest few and the rules' plan are timed again in balanced rounds (humming.tuner.rerank). Nothing is recorded here.

    results = tune_moe("w4a16", 128, 8, 1536, 2048, [1, 64, 2048])     # -> list[TuneResult]
"""
from __future__ import annotations

from humming.tuner import (
    L2_BYTES,
    Timing,
    TuneResult,
    add_timing,
    graph_time_us,
    graph_timer,
    require_gpu,
    rerank,
    time_candidate,
)

__all__ = ["moe_candidates", "tune_moe"]

MAX_ROUTINGS = 16


def moe_candidates(problem, caps) -> tuple[object, list]:
    """(the rules' plan, every plan a tuner times: that one first, then the tile kernel's, the register-A kernel's
    and, for W4A8 / W8A8 experts, the 8-bit kernels' candidates) for an indexed MoE problem."""
    from humming.core.families.moe_mma_8bit.planner import plan_moe_mma_8bit
    from humming.core.families.moe_mma_8bit.planner import refusal as mma8_refusal
    from humming.core.families.moe_register_a.planner import plan_moe_register_a, token_tiles
    from humming.core.families.moe_register_a.planner import refusal as register_a_refusal
    from humming.core.families.moe_register_a8.planner import plan_moe_register_a8
    from humming.core.families.moe_register_a8.planner import refusal as rs8_refusal
    from humming.core.families.moe_wgmma_8bit.planner import plan_moe_wgmma_8bit
    from humming.core.families.moe_wgmma_8bit.planner import refusal as w8a8_refusal
    from humming.core.families.moe_wna16.planner import tile_candidates
    from humming.core.registry import select
    from humming.core.tuning.entries import rules_only

    with rules_only():
        default = select(problem, caps).plan
    args = (caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts, problem.top_k)
    plans = [default] + tile_candidates(*args)
    if not register_a_refusal(*args, measured=True):
        plans += [plan_moe_register_a(*args, token_tile=bt) for bt in token_tiles(caps, problem.act)]
    if not problem.act_order and not rs8_refusal(problem, caps, measured=True):
        plans.append(plan_moe_register_a8(*args))  # (8-bit activation codes: W4A8 experts)
    if not problem.act_order and not w8a8_refusal(problem, caps, measured=True):
        plans.append(plan_moe_wgmma_8bit(*args))  # (8-bit activation codes: W8A8 / MXFP4 W4A8 experts)
    if not problem.act_order and not mma8_refusal(problem, caps, measured=True):
        plans.append(plan_moe_mma_8bit(problem, caps))  # (8-bit activation codes on mma.sync)
    seen, unique = set(), []
    for p in plans:
        if (p.kernel_name, p.splits) not in seen:
            seen.add((p.kernel_name, p.splits))
            unique.append(p)
    return default, unique


def keyed(plan):
    """The winning plan as MoE entries store it: keyed by the tile kernel's layout of its weights, which every MoE
    family looks entries up by (humming.core.families.moe_wna16.tuned.entry_layout)."""
    import dataclasses

    from humming.core.families.moe_mma_8bit.planner import PATH as MMA8_PATH
    from humming.core.families.moe_register_a8.planner import PATH as RS8_PATH
    from humming.core.families.moe_wgmma_8bit.planner import PATH as W8A8_PATH
    from humming.core.families.moe_wna16.tuned import entry_layout
    from humming.core.problem import scheme_of

    if plan.path not in (RS8_PATH, W8A8_PATH, MMA8_PATH):  # (the tile and register-A kernels run the tile kernel's layout already)
        return plan
    return dataclasses.replace(plan, layout=entry_layout(scheme_of(plan.scheme), plan.n, plan.k, plan.act))


def tune_moe(scheme, experts: int, top_k: int, n: int, k: int, tokens_list, *, dtype: str = "bf16",
             group_size: int | None = None, reps: int = 10, retime_top: int = 4, progress=None,
             seed: int = 0) -> list[TuneResult]:
    """Time the rules' plan and every candidate for each token count (see the module docstring); ``progress(text)``
    gets one line per step. Returns one TuneResult per token count (its ``m``: the tokens), fastest first."""
    torch = require_gpu("`python -m humming tune --moe`")
    import humming
    from humming import moe
    from humming.core.moe.reference import reference_moe_gemm
    from humming.core.problem import scheme_of

    say = progress or (lambda text: None)
    torch.manual_seed(seed)
    sch = scheme_of(scheme)
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    device = torch.device("cuda", torch.cuda.current_device())
    qw = humming.quantize(torch.randn(experts, n, k, device=device) * 0.05, sch, group_size=group_size)
    layer = moe.prepared(qw, torch_dtype, device)
    name = torch.cuda.get_device_name()
    say(f"MoE {experts} experts top-{top_k} {n}x{k} {qw.scheme} {dtype} on {name} (profile {layer.caps.name})")
    results = []
    for tokens in (int(t) for t in tokens_list):
        active = min(experts, max(tokens, 1) * top_k)
        active_bytes = qw.nbytes * active / experts
        count = min(MAX_ROUTINGS, max(2, -(-2 * L2_BYTES // max(int(active_bytes), 1))))
        ids = [torch.rand(tokens, experts, device=device).argsort(dim=1)[:, :top_k].to(torch.int32)
               for _ in range(count)]
        x = torch.randn(tokens, k, device=device, dtype=torch_dtype)
        ref = reference_moe_gemm(x, qw, ids[0]).double()
        default, plans = moe_candidates(layer.problem(tokens, top_k), layer.caps)
        result = TuneResult(str(qw.scheme), n, k, tokens, Timing(default, None), device=name,
                            emulated=layer.run_arch is not None)
        say(f"  T={tokens}: {len(plans)} candidates, {count} routings of {active} active experts")
        timers = {}
        for p in plans:
            def time_it(p=p, x=x, ids=ids, timers=timers):
                calls = timers[id(p)] = _calls(moe, layer, x, ids, p, top_k, torch)
                return graph_time_us(calls, reps=reps)

            def wrong(p=p, x=x, ref=ref, ids0=ids[0], tokens=tokens):
                out = torch.empty(tokens, top_k, n, device=device, dtype=torch_dtype)
                moe._launch(layer, x, moe.route(ids0, experts, p.tiles.bm), out, p, top_k)
                err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)) if tokens else 0.0
                return "" if err <= 2e-2 else f"wrong result: relative error {err:.2e}"
            add_timing(result, time_candidate(p, time_it, wrong), default)
        if not result.timings:
            raise RuntimeError(f"MoE T={tokens}: every candidate failed; first error: {result.failed[0].error}")
        result.timings.sort(key=lambda t: t.us)
        if retime_top and len(result.timings) > 1:
            rerank(result, retime_top, lambda t, timers=timers: graph_timer(timers[id(t.plan)]))
        results.append(result)
    return results


def _calls(moe, layer, x, ids, plan, top_k: int, torch) -> list:
    """One launch per routing, each routed with the plan's token tile into its own output."""
    out = []
    for i in ids:
        routing = moe.route(i, layer.experts, plan.tiles.bm)
        y = torch.empty(x.shape[0], top_k, layer.n, device=x.device, dtype=x.dtype)
        out.append(lambda r=routing, y=y: moe._launch(layer, x, r, y, plan, top_k))
    return out
