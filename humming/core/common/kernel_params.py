"""The parameter list every 8-bit GEMM kernel is generated with (the same order as humming.core.runtime.launch)."""
from __future__ import annotations

# ---- CUDA text shared by the wgmma 8-bit kernels (W8A8, W4A8 lock-step and warp-specialised) and the tcgen05 W8A8
# kernel: the parameter list of the 8-bit mma.sync kernel, the m64nBN register epilogue, the W4A8 group promotion
_TS_DOC = "per-token activation scale [M] or null"


_S_DOC = "unused (group scales of W4A8)"


def eight_bit_params(kernel_name: str, b_doc: str = "weight codes [N, K] bytes, row-major (K-major)",
                     ts_doc: str = _TS_DOC, s_doc: str = _S_DOC, bias_doc: str = "[N] or null",
                     tensor_maps: tuple = (), block_threads: str = "cfg::THREADS",
                     ws_doc: str = "unused (no split-K)") -> str:
    """The kernel's signature line and the 8-bit mma.sync kernel's parameter list, through the opening brace (one
    launcher runs every kernel that takes it; the comments name what each kernel reads); ``tensor_maps`` (name, doc,
    name, doc, ...) appends TMA tensor maps as __grid_constant__ parameters; ``ws_doc``: what the workspace and tile
    counters hold."""
    gs_end = ") {      // a device scalar multiplying the output (per-tensor activation scale) or null"
    if tensor_maps:
        pairs = list(zip(tensor_maps[::2], tensor_maps[1::2]))
        gs_end = ",      // a device scalar multiplying the output (per-tensor activation scale) or null" + "".join(
            f"\n    const __grid_constant__ TmaMap {name}{') {' if i == len(pairs) - 1 else ','}  // {doc}"
            for i, (name, doc) in enumerate(pairs))
    return f"""extern "C" __global__ void __launch_bounds__({block_threads}, 1) {kernel_name}(
    const unsigned char* __restrict__ A,  // activation codes [M, K], row-major (K-major)
    const uint32_t* __restrict__ Bw,      // {b_doc}
    const float* __restrict__ TS,         // {ts_doc}
    const float* __restrict__ S,          // {s_doc}
    const float* __restrict__ CS,         // per-channel weight scale [N] or null
    const uint16_t* __restrict__ BIAS,    // {bias_doc}
    uint16_t* __restrict__ C,             // output [M, N]
    float* __restrict__ WS, int* __restrict__ CNT,   // {ws_doc}
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{gs_end}
"""
