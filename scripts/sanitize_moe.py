"""The MoE kernels once each on small random problems, checked against the reference: the program compute-sanitizer
runs (memcheck, racecheck, initcheck, synccheck) over the routing kernel, the MoE tile kernel (decode: split-K; a
64-row tile), the MoE register-A kernel (sm_90a), its W4A8 form, the wgmma 8-bit kernels (W8A8 per-channel and
128x128-block scales, MXFP4 W4A8) and the mma.sync 8-bit tile kernel (8-bit codes; their knobs set here), gathered and
per-slot activations, a padded K, skewed routing, act-order experts' row permutation, block-FP8 experts, and the
gated activation between a layer's GEMMs (both activations, both gate/up layouts).

    compute-sanitizer --tool memcheck --report-api-errors no python scripts/sanitize_moe.py
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.core.moe.activation_kernel import gated_activation_cuda  # noqa: E402
from humming.core.moe.reference import reference_activation, reference_moe_gemm  # noqa: E402

# (name, scheme, group, E, top_k, N, K, tokens): the tile kernel's split-K decode, its 64-row tile, the register-A
# kernel with a padded K and with W4A8 (per-token scales), act-order experts (the permutation kernel first), block FP8
CASES = [("tile-decode", "w4a16", 128, 16, 4, 256, 512, 3), ("tile-64", "w8a16", None, 8, 2, 192, 512, 300),
         ("register-a", "w4a16-zp", 64, 8, 2, 256, 2880, 300), ("register-a-w4a8", "w4a8-fp8", None, 8, 2, 256, 640, 400),
         ("act-order", "w4a16", 128, 8, 2, 256, 1024, 37), ("block-fp8", "w8a8-fp8-block", None, 8, 2, 256, 512, 33),
         ("register-a8", "w4a8-fp8", None, 8, 2, 256, 512, 300),
         ("wgmma-w8a8", "w8a8-int8", None, 8, 2, 208, 528, 300),
         ("wgmma-w8a8-block", "w8a8-fp8-block", None, 8, 2, 256, 512, 300),
         ("wgmma-w4a8-mxfp4", "w4a8-mxfp4", None, 8, 2, 208, 544, 300),
         ("mma-8bit", "w8a8-int8", None, 8, 2, 208, 528, 300), ("mma-8bit-w4a8", "w4a8-mxfp4", None, 8, 2, 208, 544, 300)]
# the cases whose kernel is off by default (tuning knobs set for them)
KNOBS = {"register-a8": {"moe.w4a8_min_rows": 16}, "wgmma-w8a8": {"moe.wgmma_8bit_min_rows": 16},
         "wgmma-w8a8-block": {"moe.wgmma_8bit_min_rows": 16}, "wgmma-w4a8-mxfp4": {"moe.wgmma_8bit_min_rows": 16},
         "mma-8bit": {"moe.mma_8bit_min_rows": 16}, "mma-8bit-w4a8": {"moe.mma_8bit_min_rows": 16}}


def main() -> int:
    bad = 0
    for name, scheme, group, e, top_k, n, k, tokens in CASES:
        with humming.tuning.override(KNOBS.get(name, {})):
            bad += run_case(name, scheme, group, e, top_k, n, k, tokens)
    bad += activations()
    torch.cuda.synchronize()
    return 1 if bad else 0


def run_case(name, scheme, group, e, top_k, n, k, tokens) -> int:
    """One MoE case under both routings; the number of wrong results."""
    bad = 0
    torch.manual_seed(len(name))
    qw = humming.quantize(torch.randn(e, n, k, device="cuda") * 0.05, scheme, group_size=group,
                          act_order=name == "act-order" or None)
    for skew in ("uniform", "one"):
        ids = (torch.rand(tokens, e, device="cuda").argsort(1)[:, :top_k] if skew == "uniform"
               else torch.ones(tokens, top_k, device="cuda", dtype=torch.long)).to(torch.int32)
        x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
        tw = torch.rand(tokens, top_k, device="cuda")
        plan = humming.moe.prepared(qw, x.dtype, x.device).plan_for(tokens, top_k)
        y = humming.moe_gemm(x, qw, ids, tw)
        ref = reference_moe_gemm(x, qw, ids, tw)
        err = (y.float() - ref.float()).abs().max().item() / max(ref.float().abs().max().item(), 1e-6)
        ok = err < 2e-2 and not torch.isnan(y).any()
        bad += not ok
        print(f"{name:16} {skew:8} {plan.kernel_name}: relative error {err:.2e} {'ok' if ok else 'WRONG'}")
    return bad


def activations() -> int:
    """The gated activation kernel's four forms; the number of wrong results."""
    bad = 0
    for activation in ("silu", "swiglu_clamped"):
        for interleaved in (False, True):
            h = torch.randn(37, 2 * 96, device="cuda", dtype=torch.float16) * 4
            a = gated_activation_cuda(h, activation, interleaved=interleaved)
            ref = reference_activation(h, activation, interleaved=interleaved)
            err = ((a.float() - ref).abs() / ref.abs().clamp(min=1)).max().item()
            ok = err < 2e-3
            bad += not ok
            print(f"activation {activation:14} {'pairs' if interleaved else 'halves':8}: relative error {err:.2e} "
                  f"{'ok' if ok else 'WRONG'}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
