"""MoE GEMM benchmark: humming's indexed MoE GEMM (W4A16) against torch's bf16 grouped GEMM (torch._grouped_mm,
cuBLAS / CUTLASS grouped) with the same routing, on the gate+up and down GEMMs of four models at T tokens.

Shapes (E, top_k, hidden H, intermediate I): DeepSeek-V3 (256, 8, 7168, 2048), Qwen3-30B-A3B (128, 8, 2048, 768),
Mixtral-8x7B (8, 2, 4096, 14336), gpt-oss-120b (128, 4, 2880, 2880; MXFP4 weights). Gate+up: N = 2I, K = H; down:
N = H, K = I. Routing: every token to top_k distinct experts drawn uniformly.

Method: each GEMM captured ``--calls`` times in a CUDA graph (the stacked weights are hundreds of MB to GB, far past
the L2, so no rotation is needed); humming's and torch's graphs replayed alternately for ``--rounds`` rounds, CUDA
events, the median per library. humming is timed with its routing made outside the graph (the layer reuses one
routing for both GEMMs; the routing's own time is a column); torch is given x already permuted by expert (its
gather is not timed). A second torch baseline, torch._scaled_grouped_mm (FP8 e4m3 x e4m3, row-wise scales: per
token, per expert channel; cuBLAS / CUTLASS), where it runs: x permuted and quantized outside the timed call. The bytes bound: the active experts' weight bytes (4-bit codes and scales), once, at the copy
bandwidth measured in the same run (a device-to-device copy of 1 GiB). Writes OUT/bench_moe.json and, with
matplotlib, OUT/bench_moe.png, naming the GPU.

    python bench/bench_moe.py --out OUTDIR [--tokens 1,8,32,128,512,2048,8192] [--models deepseek-v3,...] [--layer]
        [--scheme w4a8-fp8]
        [--knob moe.raster=0 ...] [--ab moe.wgmma_min_rows=null ...]

``--ab NAME=VALUE``: humming timed a second time, in the same rounds, with the plan chosen under those knob values
(e.g. the MoE tile kernel against the register-A kernel where the latter is the default); column humming_ab_us.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.core.moe.routing import route  # noqa: E402

MODELS = {  # name: (experts, top_k, hidden, intermediate, scheme)
    "deepseek-v3": (256, 8, 7168, 2048, "w4a16"),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "w4a16"),
    "mixtral-8x7b": (8, 2, 4096, 14336, "w4a16"),
    "gpt-oss-120b": (128, 4, 2880, 2880, "w4a16-mxfp4"),
}
TOKENS = [1, 8, 32, 128, 512, 2048, 8192]


def graph_of(fn, calls: int) -> torch.cuda.CUDAGraph:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def time_graphs(graphs: dict, calls: int, rounds: int) -> dict:
    """Median microseconds per call of each graph, the graphs replayed alternately."""
    samples = {name: [] for name in graphs}
    for r in range(rounds):
        order = list(graphs) if r % 2 == 0 else list(reversed(graphs))
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1000 / calls)
    return {name: statistics.median(v) for name, v in samples.items()}


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy (read + write)."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    g = graph_of(lambda: b.copy_(a), 5)
    us = time_graphs({"copy": g}, 5, 5)["copy"]
    return 2 * a.numel() / us / 1e3


def grouped_reference(x, w_t, ids, experts):
    """(a function running torch._grouped_mm on x permuted by expert, or None where it does not run, why)."""
    if not hasattr(torch, "_grouped_mm"):
        return None, "torch has no _grouped_mm"
    flat = ids.reshape(-1).long()
    order = flat.argsort(stable=True)
    xs = x[order // ids.shape[1]].contiguous()
    counts = torch.bincount(flat, minlength=experts)
    offs = counts.cumsum(0).to(torch.int32)
    try:
        torch._grouped_mm(xs, w_t, offs=offs)
    except Exception as exc:  # noqa: BLE001  (a build or GPU without it: reported in the JSON)
        return None, f"torch._grouped_mm: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return (lambda: torch._grouped_mm(xs, w_t, offs=offs)), ""


def fp8_grouped_weights(w_t, chunk: int = 8):
    """(the weights [E, K, N] as e4m3 codes, K contiguous per expert as torch._scaled_grouped_mm reads them, their
    row-wise scales [E, N]), made once per weight a few experts at a time (DeepSeek-V3's gate+up in fp32 at once
    would be 28 GiB)."""
    fp8, top = torch.float8_e4m3fn, torch.finfo(torch.float8_e4m3fn).max
    experts, k, n = w_t.shape
    codes = torch.empty(experts, n, k, device=w_t.device, dtype=fp8)
    scales = torch.empty(experts, n, device=w_t.device, dtype=torch.float32)
    for e0 in range(0, experts, chunk):
        w = w_t[e0:e0 + chunk].transpose(1, 2).float()  # [chunk, N, K]
        scales[e0:e0 + chunk] = (w.abs().amax(dim=2) / top).clamp(min=1e-12)
        codes[e0:e0 + chunk] = (w / scales[e0:e0 + chunk, :, None]).to(fp8)
    return codes.transpose(1, 2), scales


def scaled_grouped_reference(x, fp8_weights, ids, experts):
    """(a function running torch._scaled_grouped_mm, FP8 e4m3 x e4m3 with row-wise scales (activations per token,
    weights per expert channel: ``fp8_weights`` from fp8_grouped_weights), on x permuted by expert and quantized
    outside the timed call, or None where it does not run, why)."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        return None, "torch has no _scaled_grouped_mm"
    fp8, top = torch.float8_e4m3fn, torch.finfo(torch.float8_e4m3fn).max
    flat = ids.reshape(-1).long()
    order = flat.argsort(stable=True)
    xs = x[order // ids.shape[1]].float()
    scale_a = (xs.abs().amax(dim=1) / top).clamp(min=1e-12)
    xq = (xs / scale_a[:, None]).to(fp8)
    xs = None
    wq_t, scale_b = fp8_weights
    offs = torch.bincount(flat, minlength=experts).cumsum(0).to(torch.int32)

    def call():
        return torch._scaled_grouped_mm(xq, wq_t, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16,
                                        use_fast_accum=True)
    try:
        call()
    except Exception as exc:  # noqa: BLE001  (a build or GPU without it: reported in the JSON)
        return None, f"torch._scaled_grouped_mm: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return call, ""


def group_for(scheme: str, k: int) -> int | None:
    """The scheme's group size, or 32 where that does not divide K (gpt-oss's 2880, Qwen3's 768)."""
    ws = humming.schemes.get(scheme).weight_scale
    return 32 if ws.granularity == "group" and k % ws.group_size else None


def moe_call(x, qw, ids, routing, y):
    return lambda: humming.moe_gemm(x, qw, ids, routing=routing, out=y)


def ab_call(x, qw, ids, top_k, overrides):
    """(humming's GEMM with the plan chosen under the knob values ``overrides``, that plan's kernel name)."""
    from humming.core.registry import select
    from humming.moe import _launch

    layer = humming.moe.prepared(qw, x.dtype, x.device)
    with humming.tuning.override(overrides):
        plan = select(layer.problem(x.shape[0], top_k), layer.caps).plan
    routing = route(ids, layer.experts, plan.tiles.bm)
    y = torch.empty(x.shape[0], top_k, qw.shape[0], device=x.device, dtype=x.dtype)
    return (lambda: _launch(layer, x, routing, y, plan, top_k)), plan.kernel_name


def route_call(ids, experts, bm):
    return lambda: route(ids, experts, bm)


def bench_gemm(name, experts, top_k, n, k, scheme, tokens_list, calls, rounds, bw, rows, ab=None):
    torch.manual_seed(0)
    qw = humming.quantize(torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16) * 0.05, scheme,
                          group_size=group_for(scheme, k))
    w_t = qw.dequantize(torch.bfloat16).transpose(1, 2)  # [E, K, N] (column-major per expert, as _grouped_mm reads)
    fp8_weights = fp8_grouped_weights(w_t) if hasattr(torch, "_scaled_grouped_mm") else None
    bytes_per_expert = qw.nbytes / experts
    for tokens in tokens_list:
        ids = torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :top_k].to(torch.int32)
        x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
        bm = humming.moe.block_m(qw, tokens, top_k, torch.bfloat16)
        routing = route(ids, experts, bm)
        y = torch.empty(tokens, top_k, n, device="cuda", dtype=torch.bfloat16)
        graphs = {"humming": graph_of(moe_call(x, qw, ids, routing, y), calls),
                  "route": graph_of(route_call(ids, experts, bm), calls)}
        ref, why = grouped_reference(x, w_t, ids, experts)
        if ref is not None:
            graphs["torch_grouped_bf16"] = graph_of(ref, calls)
        fp8_ref, fp8_why = scaled_grouped_reference(x, fp8_weights, ids, experts)
        if fp8_ref is not None:
            graphs["torch_scaled_grouped_fp8"] = graph_of(fp8_ref, calls)
        ab_kernel = None
        if ab:
            fn, ab_kernel = ab_call(x, qw, ids, top_k, ab)
            graphs["humming_ab"] = graph_of(fn, calls)
        us = time_graphs(graphs, calls, rounds)
        active = int(torch.unique(ids).numel())
        bound_us = active * bytes_per_expert / bw / 1e3
        row = {"model": name, "gemm": "gate_up" if n != MODELS[name][2] else "down", "experts": experts,
               "top_k": top_k, "n": n, "k": k, "scheme": scheme, "tokens": tokens, "block_m": bm,
               "humming_us": us["humming"], "route_us": us["route"],
               "torch_grouped_bf16_us": us.get("torch_grouped_bf16"), "torch_note": why,
               "torch_scaled_grouped_fp8_us": us.get("torch_scaled_grouped_fp8"), "torch_fp8_note": fp8_why,
               "active_experts": active, "bytes_bound_us": bound_us,
               "bandwidth_fraction": bound_us / us["humming"],
               "kernel": humming.moe.prepared(qw, x.dtype, x.device).plan_for(tokens, top_k).kernel_name}
        if ab:
            row.update(humming_ab_us=us["humming_ab"], ab_kernel=ab_kernel)
        if row["torch_grouped_bf16_us"]:
            row["speedup_vs_torch"] = row["torch_grouped_bf16_us"] / us["humming"]
        if row["torch_scaled_grouped_fp8_us"]:
            row["speedup_vs_torch_fp8"] = row["torch_scaled_grouped_fp8_us"] / us["humming"]
        rows.append(row)
        print(f"{name:14} {row['gemm']:7} T={tokens:5} bm={bm:2}  humming {us['humming']:9.1f} us  route "
              f"{us['route']:6.1f} us  torch {row['torch_grouped_bf16_us'] or float('nan'):9.1f} us  "
              f"x{row.get('speedup_vs_torch', float('nan')):5.2f}  fp8 x{row.get('speedup_vs_torch_fp8', float('nan')):5.2f}"
              f"  bound {bound_us:8.1f} us "
              f"({100 * row['bandwidth_fraction']:.0f}%)"
              + (f"  A/B {us['humming_ab']:9.1f} us" if ab else ""), flush=True)
    qw = w_t = None
    torch.cuda.empty_cache()


def bench_layer(name, experts, top_k, hidden, inter, scheme, tokens_list, calls, rounds, rows):
    """The whole layer (routing, gate+up, activation, down with router weights, sum) against its two GEMMs alone
    (routing made outside their graph)."""
    torch.manual_seed(1)

    def stacked(n, k):
        return humming.quantize(torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16) * 0.05, scheme,
                                group_size=group_for(scheme, k))

    layer = humming.nn.QuantMoE(stacked(2 * inter, hidden), stacked(hidden, inter))
    for tokens in tokens_list:
        ids = torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :top_k].to(torch.int32)
        tw = torch.softmax(torch.randn(tokens, top_k, device="cuda"), dim=1)
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        bm = humming.moe.block_m(layer.w13, tokens, top_k, torch.bfloat16)
        routing = route(ids, experts, bm)
        h = torch.empty(tokens, top_k, 2 * inter, device="cuda", dtype=torch.bfloat16)
        a = torch.randn(tokens * top_k, inter, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(tokens, top_k, hidden, device="cuda", dtype=torch.bfloat16)

        def gemms(x=x, ids=ids, tw=tw, routing=routing, h=h, a=a, o=o):
            humming.moe_gemm(x, layer.w13, ids, routing=routing, out=h)
            humming.moe_gemm(a, layer.w2, ids, tw, routing=routing, out=o, gather=False)

        graphs = {"layer": graph_of(lambda x=x, ids=ids, tw=tw: layer(x, ids, tw), calls),
                  "gemms": graph_of(gemms, calls)}
        us = time_graphs(graphs, calls, rounds)
        rows.append({"model": name, "gemm": "layer", "tokens": tokens, "layer_us": us["layer"],
                     "two_gemms_us": us["gemms"], "layer_over_gemms": us["layer"] / us["gemms"]})
        print(f"{name:14} layer   T={tokens:5} bm={bm:3}  layer {us['layer']:9.1f} us  two GEMMs {us['gemms']:9.1f} us"
              f"  x{us['layer'] / us['gemms']:5.2f}", flush=True)
    layer = None
    torch.cuda.empty_cache()


def plot(rows, path, gpu):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = sorted({(r["model"], r["gemm"]) for r in rows if r["gemm"] != "layer"})
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        sel = [r for r in rows if (r["model"], r["gemm"]) == key and r.get("speedup_vs_torch")]
        ax.semilogx([r["tokens"] for r in sel], [r["speedup_vs_torch"] for r in sel], "o-")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_title(f"{key[0]} {key[1]}", fontsize=8)
        ax.set_xlabel("tokens")
    axes[0][0].set_ylabel("speedup vs torch bf16 grouped")
    fig.suptitle(f"humming MoE vs torch._grouped_mm bf16, {gpu}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--scheme", default="", help="every model's experts in this scheme (default: W4A16, gpt-oss MXFP4)")
    ap.add_argument("--layer", action="store_true", help="also time the whole QuantMoE layer against its two GEMMs")
    ap.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                    help="a tuning knob for the run (humming.tuning.override), e.g. moe.raster=0")
    ap.add_argument("--ab", action="append", default=[], metavar="NAME=VALUE",
                    help="also time humming with the plan chosen under these knob values (column humming_ab_us)")
    args = ap.parse_args()
    overrides, ab = _knob_values(args.knob), _knob_values(args.ab)
    with humming.tuning.override(overrides):
        run(args, overrides, ab)


def _knob_values(items: list[str]) -> dict:
    values = {}
    for item in items:
        name, _, value = item.partition("=")
        values[name] = json.loads(value)
    return values


def run(args, overrides: dict, ab: dict) -> None:
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print(f"{gpu}: copy bandwidth {bw:.0f} GB/s", flush=True)
    rows: list[dict] = []
    tokens = [int(t) for t in args.tokens.split(",")]

    def save() -> None:  # after every GEMM: a run cut short by its deadline keeps what it measured
        result = {"gpu": gpu, "torch": torch.__version__, "copy_bandwidth_gbs": bw, "knobs": overrides,
                  "ab_knobs": ab, "rows": rows}
        with open(os.path.join(args.out, "bench_moe.json"), "w") as f:
            json.dump(result, f, indent=1)

    for name in args.models.split(","):
        experts, top_k, hidden, inter, scheme = MODELS[name]
        scheme = args.scheme or scheme
        parts = [("gate_up", bench_gemm, (name, experts, top_k, 2 * inter, hidden, scheme, tokens, args.calls,
                                          args.rounds, bw, rows, ab)),
                 ("down", bench_gemm, (name, experts, top_k, hidden, inter, scheme, tokens, args.calls, args.rounds,
                                       bw, rows, ab))]
        if args.layer:
            parts.append(("layer", bench_layer, (name, experts, top_k, hidden, inter, scheme, tokens, args.calls,
                                                 args.rounds, rows)))
        for part, fn, fn_args in parts:
            try:
                fn(*fn_args)
            except torch.OutOfMemoryError as exc:  # a model too large for this GPU: said in the JSON, the rest runs
                rows.append({"model": name, "gemm": part, "error": f"out of memory: {str(exc).splitlines()[0]}"})
                print(f"{name:14} {part:7} out of memory on this GPU", flush=True)
                torch.cuda.empty_cache()
            save()
    plot([r for r in rows if "error" not in r], os.path.join(args.out, "bench_moe.png"), gpu)


if __name__ == "__main__":
    main()
